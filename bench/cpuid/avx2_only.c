/* An AVX2 machine on an AVX-512 one: a preload library that hides AVX-512 from CPUID.
 *
 *     cc -O2 -shared -fPIC -o avx2_only.so bench/cpuid/avx2_only.c
 *     LD_PRELOAD=$PWD/avx2_only.so GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F,... COMMAND
 *
 * `bench/python/rounds.py --isa avx2` builds and uses it. Every library in the process then
 * picks its kernels the way it would on a CPU with AVX2 and FMA and no AVX-512: Rustral's
 * own detection, the `gemm` crate, PyTorch's ATen and inductor, MKL, oneDNN, and ONNX
 * Runtime's MLAS, which has no switch of its own to cap it. A stand-in, not an AVX2 machine:
 * the cores, caches and clocks are still the AVX-512 machine's.
 *
 * How: Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID, where /proc/cpuinfo lists
 * `cpuid_fault`) turns each CPUID instruction into a SIGSEGV. The handler below runs the real
 * CPUID with faulting briefly off, clears the AVX-512 and AMX bits of leaf 7, and resumes after
 * the instruction. The setting is per thread and inherited by threads and forks, so it is made
 * in a constructor, before the program starts any. Programs that install their own SIGSEGV
 * handler (GCC's cc1plus, which torch.compile runs; Rust's stack-overflow guard) would take
 * the CPUID faults from it: this library's `sigaction` and `signal` keep its handler in place,
 * remember theirs, and pass every other fault on to it. glibc chose its own string functions before
 * any constructor ran: GLIBC_TUNABLES caps those. Where CPUID faulting is missing the library
 * exits with status 97 rather than let a run pass for an AVX2 one. */
#define _GNU_SOURCE
#include <cpuid.h>
#include <dlfcn.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define ARCH_SET_CPUID 0x1012
#define BIT(n) (1u << (n))

/* The SIGSEGV handler the program asked for: where a fault that is not CPUID goes. */
static struct sigaction program;

static int real_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    static int (*next)(int, const struct sigaction *, struct sigaction *);
    if (!next) next = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
    return next(sig, act, old);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (sig != SIGSEGV) return real_sigaction(sig, act, old);
    if (old) *old = program;
    if (act) program = *act;
    return 0;
}

sighandler_t signal(int sig, sighandler_t handler) {
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    act.sa_flags = SA_RESTART;
    sigemptyset(&act.sa_mask);
    return sigaction(sig, &act, &old) == 0 ? old.sa_handler : SIG_ERR;
}

/* Leaf 7 sub-leaf 0. EBX: AVX512F, DQ, IFMA, PF, ER, CD, BW, VL. ECX: VBMI, VBMI2, VNNI,
 * BITALG, VPOPCNTDQ. EDX: 4VNNIW, 4FMAPS, VP2INTERSECT, AMX-BF16, AVX512-FP16, AMX-TILE,
 * AMX-INT8. Sub-leaf 1, EAX: AVX512-BF16. */
static void hide(unsigned leaf, unsigned sub, unsigned *a, unsigned *b, unsigned *c, unsigned *d) {
    if (leaf == 7 && sub == 0) {
        *b &= ~(BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31));
        *c &= ~(BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14));
        *d &= ~(BIT(2) | BIT(3) | BIT(8) | BIT(22) | BIT(23) | BIT(24) | BIT(25));
    } else if (leaf == 7 && sub == 1) {
        *a &= ~BIT(5);
    }
}

static void on_fault(int sig, siginfo_t *info, void *context) {
    greg_t *r = ((ucontext_t *)context)->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)r[REG_RIP];
    /* A CPUID fault comes from the kernel (#GP, SI_KERNEL) at a readable instruction; check
     * the cause before reading the bytes, which a jump to an unmapped address could not. */
    if (info->si_code != SI_KERNEL || ip[0] != 0x0f || ip[1] != 0xa2) {
        /* Not CPUID: a real fault, the program's to handle. With no handler of its own, put the
         * default back; the instruction faults again and ends the process as it would have. */
        struct sigaction theirs = program;
        int handled = theirs.sa_handler != SIG_DFL && theirs.sa_handler != SIG_IGN;
        if (theirs.sa_flags & SA_RESETHAND) program.sa_handler = SIG_DFL, program.sa_flags = 0;
        if (handled && (theirs.sa_flags & SA_SIGINFO)) {
            theirs.sa_sigaction(sig, info, context);
        } else if (handled) {
            theirs.sa_handler(sig);
        } else {
            struct sigaction dfl;
            memset(&dfl, 0, sizeof dfl);
            dfl.sa_handler = SIG_DFL;
            real_sigaction(SIGSEGV, &dfl, 0);
            /* A SIGSEGV sent by kill or raise does not come back by itself: send it again. */
            if (info->si_code <= 0) raise(SIGSEGV);
        }
        return;
    }
    unsigned leaf = (unsigned)r[REG_RAX], sub = (unsigned)r[REG_RCX], a, b, c, d;
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
    __cpuid_count(leaf, sub, a, b, c, d);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
    hide(leaf, sub, &a, &b, &c, &d);
    r[REG_RAX] = a, r[REG_RBX] = b, r[REG_RCX] = c, r[REG_RDX] = d;
    r[REG_RIP] += 2;
}

__attribute__((constructor)) static void start(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    /* NODEFER: a CPUID in a handler run from this one (a crash reporter) faults again, and a
     * blocked forced signal would kill the process. The mask keeps other handlers from running
     * while faulting is briefly off. */
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigfillset(&sa.sa_mask);
    sigdelset(&sa.sa_mask, SIGSEGV);
    if (real_sigaction(SIGSEGV, &sa, &program) != 0 || syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
        static const char msg[] = "avx2_only: this kernel or CPU has no CPUID faulting (cpuid_fault)\n";
        (void)!write(2, msg, sizeof msg - 1);
        _exit(97);
    }
}
