//! Buffer storage: f32 values in a plain `Vec<f32>` (the fast path every f32 kernel uses) and
//! any other dtype in the reference interpreter's representation (f64 values rounded to the
//! dtype), which the generic path computes on.

use crate::tensor::HostTensor;
use ndarray::{ArrayD, IxDyn};
use rustral_ir::DType;
use std::sync::Arc;

/// One buffer's contents.
#[derive(Clone, Debug)]
pub enum Storage {
    /// f32 values, row-major, with their shape. The values are shared, so a reshape is a new
    /// shape over the same values rather than a copy.
    F32(Arc<Vec<f32>>, Vec<usize>),
    /// Any dtype, as the reference holds it.
    Wide(HostTensor),
    /// `u8` blocks of quantized weights, row-major, shared like f32 values.
    Bytes(Arc<Vec<u8>>, Vec<usize>),
}

impl Storage {
    /// As `from_host`, converting without taking (or copying) the host tensor first.
    pub fn from_host_ref(t: &HostTensor) -> Storage {
        if t.dtype == DType::F32 {
            Storage::F32(Arc::new(t.data.iter().map(|&v| v as f32).collect()), t.shape().to_vec())
        } else if t.dtype == DType::U8 {
            Storage::Bytes(Arc::new(t.data.iter().map(|&v| v as u8).collect()), t.shape().to_vec())
        } else {
            Storage::Wide(t.clone())
        }
    }

    /// From a host tensor, choosing the fast representation for f32.
    pub fn from_host(t: HostTensor) -> Storage {
        if t.dtype == DType::F32 {
            let shape = t.shape().to_vec();
            Storage::F32(Arc::new(t.data.iter().map(|&v| v as f32).collect()), shape)
        } else if t.dtype == DType::U8 {
            Storage::from_host_ref(&t)
        } else {
            Storage::Wide(t)
        }
    }

    /// To a host tensor (exact: f32 values are f64-representable).
    pub fn to_host(&self) -> HostTensor {
        match self {
            Storage::F32(v, shape) => HostTensor {
                dtype: DType::F32,
                data: ArrayD::from_shape_vec(IxDyn(shape), v.iter().map(|&x| f64::from(x)).collect())
                    .expect("storage shape matches its values"),
            },
            Storage::Wide(t) => t.clone(),
            Storage::Bytes(v, shape) => HostTensor {
                dtype: DType::U8,
                data: ArrayD::from_shape_vec(IxDyn(shape), v.iter().map(|&x| f64::from(x)).collect())
                    .expect("storage shape matches its values"),
            },
        }
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Storage::F32(..) => DType::F32,
            Storage::Wide(t) => t.dtype,
            Storage::Bytes(..) => DType::U8,
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            Storage::F32(_, s) | Storage::Bytes(_, s) => s,
            Storage::Wide(t) => t.shape(),
        }
    }

    /// The value of an integer scalar (a position) as an index, as the reference reads it;
    /// None for anything else.
    pub fn scalar_index(&self) -> Option<usize> {
        match self {
            Storage::Wide(t) if t.shape().is_empty() && !t.dtype.is_float() => crate::reference::scalar_index(t).ok(),
            _ => None,
        }
    }

    /// f32 storage owning `values`.
    pub fn f32_values(values: Vec<f32>, shape: Vec<usize>) -> Storage {
        Storage::F32(Arc::new(values), shape)
    }

    /// The same values under another shape of equal element count (None otherwise): f32
    /// values are shared, other dtypes (ids, labels: small) copied.
    pub fn reshaped(&self, shape: &[usize]) -> Option<Storage> {
        if self.shape().iter().product::<usize>() != shape.iter().product::<usize>() {
            return None;
        }
        match self {
            Storage::F32(v, _) => Some(Storage::F32(Arc::clone(v), shape.to_vec())),
            Storage::Bytes(v, _) => Some(Storage::Bytes(Arc::clone(v), shape.to_vec())),
            Storage::Wide(t) => {
                let data = t.data.as_standard_layout().into_owned().into_shape_with_order(IxDyn(shape)).ok()?;
                Some(Storage::Wide(HostTensor { dtype: t.dtype, data }))
            }
        }
    }

    /// The f32 values, if this is f32 storage.
    pub fn f32(&self) -> Option<&[f32]> {
        match self {
            Storage::F32(v, _) => Some(v),
            _ => None,
        }
    }

    /// The bytes, if this is u8 storage.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Storage::Bytes(v, _) => Some(v),
            _ => None,
        }
    }
}
