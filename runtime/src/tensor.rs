//! `HostTensor`: a typed tensor in host memory, the currency of the reference interpreter and
//! of tests. Values are held as f64 whatever the dtype, rounded to the dtype after every op,
//! so one simple code path serves every dtype while results keep the dtype's precision.

use ndarray::{ArrayD, IxDyn};
use rustral_ir::DType;

/// A value count that does not match the shape it was given for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{values} values do not fill shape {shape:?} ({} elements)", shape.iter().product::<usize>())]
pub struct ValuesDoNotFit {
    /// The shape asked for.
    pub shape: Vec<usize>,
    /// How many values were given.
    pub values: usize,
}

/// A host tensor: dtype plus an f64 array whose values are representable in that dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Element type.
    pub dtype: DType,
    /// Values, already rounded to `dtype`.
    pub data: ArrayD<f64>,
}

impl HostTensor {
    /// Build from f64 values in row-major order, rounding each to `dtype`.
    pub fn new(dtype: DType, shape: &[usize], values: Vec<f64>) -> Result<HostTensor, ValuesDoNotFit> {
        let len = values.len();
        let data = ArrayD::from_shape_vec(IxDyn(shape), values)
            .map_err(|_| ValuesDoNotFit { shape: shape.to_vec(), values: len })?;
        Ok(HostTensor::from_array(dtype, data))
    }

    /// Wrap an array, rounding each value to `dtype`.
    pub fn from_array(dtype: DType, mut data: ArrayD<f64>) -> HostTensor {
        // In place: parameters pass through here at bind time, and a copy of each would
        // double the peak memory of loading a checkpoint.
        if dtype != DType::F64 {
            data.mapv_inplace(|x| round_to(dtype, x));
        }
        HostTensor { dtype, data }
    }

    /// An f32 tensor from f32 values.
    pub fn f32(shape: &[usize], values: &[f32]) -> Result<HostTensor, ValuesDoNotFit> {
        HostTensor::new(DType::F32, shape, values.iter().map(|&v| f64::from(v)).collect())
    }

    /// An i64 tensor (token ids, positions).
    pub fn i64(shape: &[usize], values: &[i64]) -> Result<HostTensor, ValuesDoNotFit> {
        HostTensor::new(DType::I64, shape, values.iter().map(|&v| v as f64).collect())
    }

    /// A scalar.
    pub fn scalar(dtype: DType, value: f64) -> HostTensor {
        HostTensor::from_array(dtype, ArrayD::from_elem(IxDyn(&[]), value))
    }

    /// The concrete shape.
    pub fn shape(&self) -> &[usize] {
        self.data.shape()
    }

    /// Values in row-major order.
    pub fn to_vec(&self) -> Vec<f64> {
        self.data.iter().copied().collect()
    }

    /// Values in row-major order as f32.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        self.data.iter().map(|&x| x as f32).collect()
    }
}

/// Round `x` to the nearest value of `dtype`: floats round to nearest even, integers truncate
/// toward zero (i32 wraps, NaN becomes 0), bool is `x != 0`.
pub fn round_to(dtype: DType, x: f64) -> f64 {
    dtype.round(x)
}

/// `n` deterministic pseudo-random values in `[-1, 1)` (xorshift64 from `seed`), the same on
/// every platform: seeded inputs for examples, tests and benchmarks.
pub fn seeded_values(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}
