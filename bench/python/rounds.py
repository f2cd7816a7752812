"""Rustral O2 against PyTorch (eager, torch.compile) and ONNX Runtime in interleaved rounds.

A shared 2-vCPU VM drifts by 20% or more over minutes, so a peer timed a few minutes after
Rustral can look 20% faster or slower than it is. Here each round times Rustral's O2 pipeline
(`rustral-bench ablate --sets O2`) and the peers (`torch_bench.py`) on the same workloads one
after the other, alternating which goes first, and a ratio is taken within each round
(peer median / Rustral median); the table gives the median of those ratios over the rounds and
their range. Every round's manifests are kept under OUT/round{r}.

    python3 bench/python/rounds.py --threads 1,2 --rounds 3 [--repeats 10] [--models a,b] \
        [--out bench/results/rounds] [--isa avx2]

`--isa avx2` measures on an AVX-512 machine what an AVX2 machine would run: Rustral with
RUSTRAL_CPU_KERNELS=avx2 (its loops and the `gemm` crate's GEMMs), PyTorch with its ATen, MKL and
oneDNN kernels capped at AVX2 (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA).
ONNX Runtime has no such switch: its MLAS still takes the widest kernels, and the table says so.
It is a stand-in for an AVX2 machine, not one: the cores, caches and clocks are the AVX-512 one's.

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

CAPS = {"widest": ({}, {}),
        # MKL's cap on Rustral's side too, for a run with RUSTRAL_BLAS naming MKL (another vendor
        # BLAS is not capped: leave RUSTRAL_BLAS unset for a stand-in).
        "avx2": ({"RUSTRAL_CPU_KERNELS": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
                 {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"})}
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
for r in range(args.rounds):
    for path in sorted(glob.glob(os.path.join(args.out, f"round{r}", "*.json"))):
        m = json.load(open(path))
        target = m["target"] if m["target"] != "cpu" else "rustral"
        if target == "rustral" and m["pipeline"]["label"] != "O2":
            continue
        key = (m["workload"]["name"], m["threads"], target)
        medians.setdefault(key, []).append(statistics.median(m["timings_ms"]))
        if target == "rustral":
            machine, build = m["machine"], m["build"]
        else:
            peer_kernels[target] = m["machine"].get("cpu_kernels", "")

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
          "Capped at AVX2 (`--isa avx2`) on a machine that has AVX-512: Rustral and PyTorch ran their AVX2 "
          "kernels; ONNX Runtime cannot be capped and ran its widest. A stand-in for an AVX2 machine, not one.\n"]),
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
    json.dump(dict(machine=machine, build=build, isa=args.isa, peer_kernels=peer_kernels, rounds=args.rounds, repeats=args.repeats, rows=rows,
                   medians={"|".join(map(str, k)): v for k, v in sorted(medians.items())}), f, indent=2)
    f.write("\n")
print("\n".join(md))
