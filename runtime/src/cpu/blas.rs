//! A vendor BLAS for the CPU target's GEMMs, opened at run time.
//!
//! The `gemm` crate runs every GEMM by default. On an Intel core with AVX-512 MKL's `sgemm`
//! is a third faster than it (137-150 against 100-106 GFLOP/s on an Emerald Rapids core, where
//! OpenBLAS runs at the `gemm` crate's speed), and PyTorch and ONNX Runtime run on MKL and
//! oneDNN there. `RUSTRAL_BLAS=/path/to/libmkl_rt.so.3` (or any LP64 CBLAS: OpenBLAS,
//! `scipy_openblas`, BLIS) makes the CPU target call that library's `cblas_sgemm` instead.
//! The library is opened with `dlopen`, so the build links no system library and a machine
//! without one runs as before; `scripts/fetch-mkl.sh` fetches MKL from PyPI.
//!
//! The library runs on one thread per call: the pool splits a product between its threads
//! (see `matmul::blas_gemm`), so a program's thread count holds for every kernel and no
//! second pool of BLAS threads spins beside rayon's.

use std::sync::OnceLock;

/// `cblas_sgemm`'s C signature for LP64 (32-bit integer) interfaces.
type Sgemm = unsafe extern "C" fn(
    layout: i32,
    trans_a: i32,
    trans_b: i32,
    m: i32,
    n: i32,
    k: i32,
    alpha: f32,
    a: *const f32,
    lda: i32,
    b: *const f32,
    ldb: i32,
    beta: f32,
    c: *mut f32,
    ldc: i32,
);

/// CBLAS's constants.
const ROW_MAJOR: i32 = 101;
const NO_TRANS: i32 = 111;
const TRANS: i32 = 112;

/// The environment variable that names the library.
pub const BLAS_ENV: &str = "RUSTRAL_BLAS";

/// An opened CBLAS library.
pub struct Blas {
    sgemm: Sgemm,
    /// The path it was opened from and the symbol used, for manifests.
    pub name: String,
    /// Kept open for the process: `sgemm` points into it.
    _lib: libloading::Library,
}

/// One GEMM operand: the matrix at `ptr`, row-major with leading dimension `ld`, used as is
/// or transposed.
#[derive(Clone, Copy)]
pub(crate) struct Operand {
    pub ptr: *const f32,
    pub trans: bool,
    pub ld: usize,
}

// SAFETY: an operand is read only, and the tasks that share one (`matmul::blas_gemm`) run
// while the slice it points into is borrowed.
unsafe impl Send for Operand {}
// SAFETY: as above.
unsafe impl Sync for Operand {}

impl Blas {
    /// Open `path` and find its `cblas_sgemm`; ask it for one thread per call; check it on a
    /// product with a known answer (an ILP64 library or a broken one would answer wrongly).
    pub(crate) fn open(path: &str) -> Result<Blas, String> {
        // SAFETY: opening a library runs its initialisers; a CBLAS library's do no more than
        // set up its own state. The user named it.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
        // SAFETY: each symbol is looked up by name with the C signature these libraries
        // document; a symbol that is absent is skipped.
        unsafe {
            // MKL: the sequential threading layer and the LP64 interface, before any other
            // call (both are no-ops once MKL has run).
            if let Ok(f) = lib.get::<unsafe extern "C" fn(i32) -> i32>(b"MKL_Set_Threading_Layer\0") {
                f(1);
            }
            if let Ok(f) = lib.get::<unsafe extern "C" fn(i32) -> i32>(b"MKL_Set_Interface_Layer\0") {
                f(0);
            }
            for name in [
                &b"openblas_set_num_threads\0"[..],
                b"scipy_openblas_set_num_threads\0",
                b"bli_thread_set_num_threads\0",
            ] {
                if let Ok(f) = lib.get::<unsafe extern "C" fn(i32)>(name) {
                    f(1);
                }
            }
        }
        let symbols: [&[u8]; 2] = [b"cblas_sgemm\0", b"scipy_cblas_sgemm\0"];
        let (sgemm, symbol) = symbols
            .iter()
            // SAFETY: as above.
            .find_map(|name| unsafe { lib.get::<Sgemm>(name) }.ok().map(|f| (*f, name)))
            .ok_or_else(|| "it has no cblas_sgemm (nor scipy_cblas_sgemm)".to_string())?;
        let symbol = String::from_utf8_lossy(&symbol[..symbol.len() - 1]).into_owned();
        let blas = Blas { sgemm, name: format!("{path} ({symbol}, one thread per call)"), _lib: lib };
        blas.check()?;
        Ok(blas)
    }

    /// A 2x3 by 3x2 product (`b` transposed, accumulating onto `c`) against its hand-computed
    /// answer.
    fn check(&self) -> Result<(), String> {
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        // b^T stored as [2, 3]: b = [[1, 0], [0, 1], [1, 1]].
        let bt = [1.0f32, 0.0, 1.0, 0.0, 1.0, 1.0];
        let mut c = [1.0f32, 1.0, 1.0, 1.0];
        let (a_op, b_op) =
            (Operand { ptr: a.as_ptr(), trans: false, ld: 3 }, Operand { ptr: bt.as_ptr(), trans: true, ld: 3 });
        // SAFETY: the operands hold 2x3 and 3x2 values at their leading dimensions, `c` 2x2.
        unsafe { self.sgemm(2, 2, 3, 2.0, a_op, b_op, 1.0, c.as_mut_ptr(), 2) };
        // 2 * [[4, 5], [10, 11]] + 1
        let want = [9.0f32, 11.0, 21.0, 23.0];
        if c == want {
            Ok(())
        } else {
            Err(format!("its cblas_sgemm answered {c:?} for {want:?} (is it an ILP64 build? an LP64 one is needed)"))
        }
    }

    /// `c = alpha a.b + beta c` for `a` `[m, k]`, `b` `[k, n]` and `c` `[m, n]` (row-major,
    /// leading dimension `ldc`); false (nothing done) when a size does not fit the library's
    /// 32-bit integers.
    ///
    /// # Safety
    /// Every element the operands and `c` address must lie in memory the caller owns, and no
    /// other thread may write the elements of `c` this call writes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn sgemm(
        &self,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: Operand,
        b: Operand,
        beta: f32,
        c: *mut f32,
        ldc: usize,
    ) -> bool {
        let int = |v: usize| i32::try_from(v).ok();
        let (Some(m), Some(n), Some(k), Some(lda), Some(ldb), Some(ldc)) =
            (int(m), int(n), int(k), int(a.ld), int(b.ld), int(ldc))
        else {
            return false;
        };
        let t = |trans: bool| if trans { TRANS } else { NO_TRANS };
        // SAFETY: the caller's contract.
        unsafe {
            (self.sgemm)(ROW_MAJOR, t(a.trans), t(b.trans), m, n, k, alpha, a.ptr, lda, b.ptr, ldb, beta, c, ldc)
        };
        true
    }
}

/// The library `RUSTRAL_BLAS` names, opened once: `Ok(None)` when it is unset or empty, the
/// reason when it cannot be opened or answers wrongly.
pub fn blas() -> Result<Option<&'static Blas>, &'static str> {
    static BLAS: OnceLock<Result<Option<Blas>, String>> = OnceLock::new();
    let opened = BLAS.get_or_init(|| match std::env::var(BLAS_ENV) {
        Ok(path) if !path.is_empty() => {
            Blas::open(&path).map(Some).map_err(|e| format!("{BLAS_ENV}={path}: cannot use it: {e}"))
        }
        _ => Ok(None),
    });
    match opened {
        Ok(b) => Ok(b.as_ref()),
        Err(e) => Err(e.as_str()),
    }
}

/// What runs the CPU target's GEMMs in this process, for manifests: the `gemm` crate, or the
/// library `RUSTRAL_BLAS` names.
pub fn gemm_library() -> String {
    match blas() {
        Ok(Some(b)) => b.name.clone(),
        Ok(None) => gemm_crate(),
        Err(e) => format!("{} ({e})", gemm_crate()),
    }
}

/// The `gemm` crate, with the narrower kernels it runs on when `RUSTRAL_CPU_KERNELS` narrows
/// the path (`sgemm.rs`).
fn gemm_crate() -> String {
    match super::kernels::gemm_kernels() {
        "widest" => "gemm crate".to_string(),
        k => format!("gemm crate, {k} kernels"),
    }
}

/// The CBLAS library the tests run against (`RUSTRAL_TEST_BLAS`, which `scripts/test.sh` sets
/// to OpenBLAS from PyPI); None outside CI when it is unset, a panic in CI.
#[cfg(test)]
pub(crate) fn test_library() -> Option<String> {
    match std::env::var("RUSTRAL_TEST_BLAS") {
        Ok(p) if !p.is_empty() => Some(p),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI runs the BLAS tests: set RUSTRAL_TEST_BLAS (scripts/test.sh does)")
        }
        _ => {
            eprintln!("RUSTRAL_TEST_BLAS is unset: the BLAS path is not tested (scripts/test.sh sets it)");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_that_is_missing_or_has_no_sgemm_is_an_error_naming_it() {
        let missing = Blas::open("/nonexistent/libblas.so").err().expect("no such file");
        assert!(missing.contains("/nonexistent/libblas.so"), "{missing}");
        // The C math library opens but has no CBLAS.
        let libm = Blas::open("libm.so.6").err().expect("libm has no cblas_sgemm");
        assert!(libm.contains("no cblas_sgemm"), "{libm}");
    }

    #[test]
    fn a_cblas_library_opens_and_passes_its_check() {
        let Some(path) = test_library() else { return };
        let blas = Blas::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(blas.name.starts_with(&path) && blas.name.contains("cblas_sgemm"), "{}", blas.name);
    }
}
