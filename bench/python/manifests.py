"""What every Python-side bench manifest shares: timing statistics computed as bench/src/stats.rs
computes them, and the machine and build they ran on (schemas/bench-manifest.schema.json)."""
import math, os, platform, statistics, subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Student's t(0.975, df), df 1..30, as in bench/src/stats.rs.
T975 = [12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
        2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
        2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272]

def t975(df):
    if 1 <= df <= 30:
        return T975[df - 1]
    z = 1.959963984540054
    v = float(df)
    return z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v * v) \
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)

def summary(xs):
    n = len(xs); mean = sum(xs) / n; s = sorted(xs)
    med = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    std = statistics.stdev(xs) if n > 1 else 0.0
    half = t975(n - 1) * std / math.sqrt(n) if n > 1 else 0.0
    return dict(n=n, mean_ms=mean, median_ms=med, std_ms=std, ci95_ms=[mean - half, mean + half], min_ms=s[0], max_ms=s[-1])

def cpu_id():
    """Vendor, family, model and stepping (and the Zen generation), as runtime/src/provenance.rs
    writes them: a VM's model name alone (AMD EPYC) does not tell a Zen 1 from a Zen 3."""
    fields = {}
    for l in open("/proc/cpuinfo"):
        if ":" in l:
            k, v = (s.strip() for s in l.split(":", 1))
            fields.setdefault(k, v)
    vendor, family, model = fields.get("vendor_id"), fields.get("cpu family"), fields.get("model")
    if not (vendor and family and model):
        return ""
    s = f"{vendor} family {family} model {model} stepping {fields.get('stepping', '?')}"
    arch = None
    if vendor == "AuthenticAMD" and family.isdigit() and model.isdigit():
        f, m = int(family), int(model)
        if f == 23:
            arch = "Zen/Zen+" if m < 0x30 else "Zen 2"
        elif f == 25:
            arch = "Zen 3" if m < 0x10 or 0x20 <= m < 0x60 else "Zen 4"
        elif f == 26:
            arch = "Zen 5"
    return f"{s} ({arch})" if arch else s

def machine(label="eager"):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    mem = next((int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
    os_name = next((l.split("=", 1)[1].strip().strip('"') for l in open("/etc/os-release") if l.startswith("PRETTY_NAME")), platform.system())
    flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
    # The same names as Rustral's own list (runtime/src/cpu/simd.rs, cpu_features).
    names = {"sse4_2": "sse4.2", "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c", "avx512f": "avx512f",
             "avx512dq": "avx512dq", "avx512vl": "avx512vl", "avx512bw": "avx512bw", "avx512_vnni": "avx512vnni",
             "avx512_bf16": "avx512bf16"}
    listed = [names[f] for f in names if f in flags]
    hidden = [f for f in listed if not cpuid_reports(f)]
    m = dict(cpu_model=cpu, cpu_id=cpu_id(), cores=os.cpu_count() or 1, memory_bytes=mem, os=os_name,
             cpu_features=[f for f in listed if f not in hidden], cpu_kernels=peer_kernels(label))
    if hidden:
        m["cpuid_hidden"] = hidden
    return m

def cpuid_reports(feature):
    """Whether CPUID, as this process sees it, reports a feature /proc/cpuinfo lists: not so under
    bench/cpuid/avx2_only.c, which hides AVX-512 (Rustral's manifests record the same as cpuid_hidden).
    numpy asks CPUID itself; without numpy, trust /proc/cpuinfo."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as seen
    except ImportError:
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as seen
        except ImportError:
            return True
    key = {"sse4.2": "SSE42", "fma": "FMA3"}.get(feature, feature.upper())
    # An AVX-512 feature this numpy does not know is hidden when AVX512F is.
    default = seen.get("AVX512F", True) if key.startswith("AVX512") else True
    return seen.get(key, default)

def peer_kernels(label):
    """The peer's own kernel capability: PyTorch's ATen CPU capability (ATEN_CPU_CAPABILITY narrows it;
    MKL_ENABLE_INSTRUCTIONS and ONEDNN_MAX_CPU_ISA, where set, cap its GEMMs and convolutions);
    ONNX Runtime's MLAS picks its kernels by the CPU's features and says nothing of it."""
    if label in ("onnxruntime", "llama.cpp"):
        return f"{label} (its own choice by cpu_features)"
    try:
        import torch
        caps = [f"{v}={os.environ[v]}" for v in ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA") if os.environ.get(v)]
        return "torch " + torch.backends.cpu.get_cpu_capability().lower() + (f" ({', '.join(caps)})" if caps else "")
    except Exception:
        return "unknown"

def build(crates):
    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except Exception:
            return None
    return dict(git_sha=git("rev-parse", "HEAD") or "unknown", git_dirty=bool(git("status", "--porcelain", "--untracked-files=no")),
                rustc="n/a (Python)", crates={**crates, "python": platform.python_version()})

