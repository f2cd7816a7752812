"""Rustral O2 against PyTorch (eager, torch.compile) and ONNX Runtime in interleaved rounds.

A shared 2-vCPU VM drifts by 20% or more over minutes, so a peer timed a few minutes after
Rustral can look 20% faster or slower than it is. Here each round times Rustral's O2 pipeline
(`rustral-bench ablate --sets O2`) and the peers (`torch_bench.py`) on the same workloads one
after the other, alternating which goes first, and a ratio is taken within each round
(peer median / Rustral median); the table gives the median of those ratios over the rounds and
their range. Every round's manifests are kept under OUT/round{r}.

    python3 bench/python/rounds.py --threads 1,2 --rounds 3 [--repeats 10] [--models a,b] \
        [--out bench/results/rounds] [--isa avx2]

`--isa avx2` measures on an AVX-512 machine what an AVX2 machine would run. Where Linux has CPUID
faulting (`cpuid_fault` in /proc/cpuinfo), every process runs under bench/cpuid/avx2_only.c, which
hides AVX-512 from CPUID: each library then picks its kernels as on a CPU with AVX2 and FMA only,
Rustral and the `gemm` crate, PyTorch (ATen, inductor, MKL, oneDNN) and ONNX Runtime's MLAS alike,
and the manifests record what was hidden (`cpuid_hidden`). Elsewhere it falls back to switches:
RUSTRAL_CPU_KERNELS=avx2 for Rustral, ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS and
ONEDNN_MAX_CPU_ISA for PyTorch; ONNX Runtime has none, runs its widest, and the table says so.
Either way it is a stand-in for an AVX2 machine, not one: the cores, caches and clocks are the
AVX-512 one's.

Writes OUT/rounds.md and OUT/rounds.json (every round's medians, the machine, the build).
Needs what torch_bench.py needs; builds rustral-bench (release) first.
"""
import argparse, glob, json, os, statistics, subprocess, sys

ap = argparse.ArgumentParser()
ap.add_argument("--threads", default="1,2")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--repeats", type=int, default=10)
ap.add_argument("--models", default="layer_norm,softmax,gelu_tanh,attention,elementwise_chain,gemm_1024,"
                "gpt2_block,minilm_l6,resnet18,vit_b16")
ap.add_argument("--out", default="bench/results/rounds")
ap.add_argument("--no-build", action="store_true")
ap.add_argument("--isa", choices=["widest", "avx2"], default="widest",
                help="avx2: cap Rustral's and PyTorch's kernels at AVX2 (see above)")
ap.add_argument("--tables-only", action="store_true",
                help="time nothing: write the tables from the rounds already under OUT (a run cut short)")
args = ap.parse_args()

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.chdir(root)
if not args.no_build and not args.tables_only:
    subprocess.run(["cargo", "build", "--release", "--locked", "-p", "rustral-bench"], check=True)
bench = os.path.join("target", "release", "rustral-bench")

def avx2_by_cpuid():
    """The environment that runs a process under bench/cpuid/avx2_only.c, or None where the
    library cannot be built or this kernel has no CPUID faulting."""
    lib = os.path.abspath(os.path.join("target", "cpuid", "avx2_only.so"))
    os.makedirs(os.path.dirname(lib), exist_ok=True)
    try:
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", lib, "bench/cpuid/avx2_only.c"], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"--isa avx2: cannot build bench/cpuid/avx2_only.c ({e})", file=sys.stderr)
        return None
    # glibc picked its string functions before the library loads: its own tunable caps them.
    env = {"LD_PRELOAD": lib, "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F,-AVX512CD,-AVX512BW,-AVX512DQ,-AVX512VL"}
    if subprocess.run(["true"], env={**os.environ, **env}).returncode != 0:
        print("--isa avx2: no CPUID faulting here; capping by environment variables instead", file=sys.stderr)
        return None
    return env

CAPS = {"widest": ({}, {})}
# With --tables-only nothing runs, so how the rounds were capped is read from their manifests
# below (whether they record `cpuid_hidden`), not from what this machine can do now.
by_cpuid = args.isa == "avx2" and not args.tables_only and avx2_by_cpuid()
if by_cpuid:
    CAPS["avx2"] = (by_cpuid, by_cpuid)
else:
    # MKL's cap on Rustral's side too, for a run with RUSTRAL_BLAS naming MKL (another vendor
    # BLAS is not capped: leave RUSTRAL_BLAS unset for a stand-in).
    CAPS["avx2"] = ({"RUSTRAL_CPU_KERNELS": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
                    {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"})
ours_env, peers_env = ({**os.environ, **caps} for caps in CAPS[args.isa])

def rustral(t, out):
    subprocess.run([bench, "ablate", "--sets", "O2", "--threads", str(t), "--repeats", str(args.repeats),
                    "--models", args.models, "-o", out], check=True, env=ours_env)

def peers(t, out):
    subprocess.run([sys.executable, "bench/python/torch_bench.py", "--threads", str(t), "--repeats",
                    str(args.repeats), "--only", args.models, "--out", out], check=True, env=peers_env)

threads = [int(t) for t in args.threads.split(",")]
for r in range(0 if args.tables_only else args.rounds):
    out = os.path.join(args.out, f"round{r}")
    for t in threads:
        # Alternate the order, so that a drift within a round favours neither side.
        for side in ([rustral, peers] if r % 2 == 0 else [peers, rustral]):
            print(f"round {r + 1}/{args.rounds}, {t} thread(s): {side.__name__}", flush=True)
            side(t, out)

# medians[(workload, threads, target)] = [median of round 0, of round 1, ...]
medians, machine, build, peer_kernels = {}, None, None, {}
hidden_in = []  # per manifest: whether its process had AVX-512 hidden from CPUID
for r in range(args.rounds):
    for path in sorted(glob.glob(os.path.join(args.out, f"round{r}", "*.json"))):
        m = json.load(open(path))
        target = m["target"] if m["target"] != "cpu" else "rustral"
        if target == "rustral" and m["pipeline"]["label"] != "O2":
            continue
        hidden_in.append((path, bool(m["machine"].get("cpuid_hidden"))))
        key = (m["workload"]["name"], m["threads"], target)
        medians.setdefault(key, []).append(statistics.median(m["timings_ms"]))
        if target == "rustral":
            machine, build = m["machine"], m["build"]
        else:
            peer_kernels[target] = m["machine"].get("cpu_kernels", "")

if not medians:
    sys.exit(f"no manifests under {args.out}/round*/")
visible = [p for p, h in hidden_in if not h]
if args.tables_only and args.isa == "avx2":
    by_cpuid = len(visible) < len(hidden_in)  # some manifest had AVX-512 hidden: then all must
if by_cpuid and visible:
    sys.exit(f"{visible[0]}: ran with AVX-512 visible, though these rounds hide it from CPUID")

rows = []
for (w, t, target), ms in sorted(medians.items()):
    ours = medians.get((w, t, "rustral"))
    if target == "rustral" or not ours or len(ours) != len(ms):
        continue
    ratios = [p / o for p, o in zip(ms, ours)]
    rows.append(dict(workload=w, threads=t, peer=target, rustral_ms=statistics.median(ours),
                     peer_ms=statistics.median(ms), ratio=statistics.median(ratios), low=min(ratios),
                     high=max(ratios), rounds=len(ratios)))

name = machine["cpu_model"] + (f" [{machine['cpu_id']}]" if machine.get("cpu_id") else "")
md = [f"# Rustral O2 against its peers, interleaved rounds\n",
      f"Machine: {name} ({machine['cores']} logical cores), {machine['os']}. CPU features: "
      f"{' '.join(machine.get('cpu_features', []))}; Rustral's kernels: {machine.get('cpu_kernels', '')}"
      f"{', GEMMs by ' + machine['gemm'] if machine.get('gemm') else ''}. "
      f"Build: git {build['git_sha'][:10]}{' (dirty)' if build['git_dirty'] else ''}, {build['rustc']}. "
      f"Peers' kernels: {'; '.join(f'{p}: {k}' for p, k in sorted(peer_kernels.items()))}.\n",
      *([] if args.isa == "widest" else [
          ("Capped at AVX2 (`--isa avx2`) on a machine that has AVX-512, by hiding "
           f"{' '.join(machine.get('cpuid_hidden', []))} from CPUID (bench/cpuid/avx2_only.c): every "
           "library, ONNX Runtime's included, chose its kernels as on an AVX2 machine."
           if by_cpuid else
           "Capped at AVX2 (`--isa avx2`) on a machine that has AVX-512, by environment variables: Rustral "
           "and PyTorch ran their AVX2 kernels; ONNX Runtime cannot be capped that way and ran its widest.")
          + " A stand-in for an AVX2 machine, not one.\n"]),
      f"Measured by `python3 bench/python/rounds.py --threads {args.threads} --rounds {args.rounds} "
      f"--repeats {args.repeats}{'' if args.isa == 'widest' else ' --isa ' + args.isa}`: in each round Rustral's O2 and the peers ran one after the other on "
      "the same workloads (the order alternating), and a ratio is the peer's median over Rustral's within "
      "one round. `peer / Rustral` is the median of the rounds' ratios (above 1.00x: Rustral is faster), "
      "`range` the lowest and highest round. The ms columns are medians over the rounds.\n",
      "| workload | threads | Rustral O2 ms | peer | peer ms | peer / Rustral | range |",
      "|---|---|---|---|---|---|---|"]
for x in rows:
    md.append(f"| {x['workload']} | {x['threads']} | {x['rustral_ms']:.3f} | {x['peer']} | {x['peer_ms']:.3f} | "
              f"{x['ratio']:.2f}x | {x['low']:.2f}-{x['high']:.2f} |")
behind = [x for x in rows if x["ratio"] < 1.0]
md.append("")
md.append("Rustral at or ahead of every peer on every row." if not behind else
          "Rows where a peer is ahead: " + ", ".join(f"{x['workload']} {x['threads']}t {x['peer']} "
                                                    f"({x['ratio']:.2f}x)" for x in behind) + ".")
with open(os.path.join(args.out, "rounds.md"), "w") as f:
    f.write("\n".join(md) + "\n")
with open(os.path.join(args.out, "rounds.json"), "w") as f:
    json.dump(dict(machine=machine, build=build, isa=args.isa, isa_by=None if args.isa == "widest" else ("cpuid" if by_cpuid else "env"), peer_kernels=peer_kernels, rounds=args.rounds, repeats=args.repeats, rows=rows,
                   medians={"|".join(map(str, k)): v for k, v in sorted(medians.items())}), f, indent=2)
    f.write("\n")
print("\n".join(md))
