//! Gradients against central finite differences of the loss, computed on the reference
//! interpreter with the graph promoted to f64: what `rustral-compile --grad --check` and the
//! tests use to check the grad pass end to end.

use crate::Result;
use rustral_ir::{DType, Graph};
use rustral_passes::grad::promote_f64;
use rustral_runtime::HostTensor;
use rustral_runtime::reference::evaluate;
use std::collections::HashMap;

/// One checked element.
#[derive(Clone, Debug)]
pub struct Checked {
    /// Parameter or input name.
    pub name: String,
    /// Row-major element index.
    pub index: usize,
    /// The gradient under test.
    pub gradient: f64,
    /// The central difference.
    pub finite_difference: f64,
}

/// Up to `per_tensor` elements of each named gradient (first, last and evenly spaced between)
/// against central differences of output `loss` of `forward` at `feeds` (inputs and
/// parameters; the named ones are perturbed by `h * max(1, |x|)`).
pub fn check(
    forward: &Graph,
    loss: &str,
    feeds: &HashMap<String, HostTensor>,
    gradients: &[(String, HostTensor)],
    per_tensor: usize,
    h: f64,
) -> Result<Vec<Checked>> {
    let g = promote_f64(forward)?;
    let widen = |t: &HostTensor| {
        let dtype = if t.dtype.is_float() { DType::F64 } else { t.dtype };
        HostTensor::new(dtype, t.shape(), t.to_vec()).expect("same shape and values")
    };
    let base: HashMap<String, HostTensor> = feeds.iter().map(|(n, t)| (n.clone(), widen(t))).collect();
    let loss_at = |f: &HashMap<String, HostTensor>| -> Result<f64> {
        let out = evaluate(&g, f)?;
        Ok(out.iter().find(|(n, _)| n == loss).map_or(f64::NAN, |(_, t)| t.to_vec()[0]))
    };
    let mut checked = Vec::new();
    for (name, grad) in gradients {
        let x = &base[name];
        let values = x.to_vec();
        let n = values.len();
        let picks: Vec<usize> = if n <= per_tensor {
            (0..n).collect()
        } else {
            let mut p: Vec<usize> = (0..per_tensor).map(|k| k * (n - 1) / (per_tensor - 1).max(1)).collect();
            p.dedup();
            p
        };
        let g = grad.to_vec();
        for i in picks {
            let step = h * values[i].abs().max(1.0);
            let mut f = base.clone();
            let mut v = values.clone();
            v[i] += step;
            f.insert(name.clone(), HostTensor::new(DType::F64, x.shape(), v.clone()).expect("same shape"));
            let up = loss_at(&f)?;
            v[i] -= 2.0 * step;
            f.insert(name.clone(), HostTensor::new(DType::F64, x.shape(), v).expect("same shape"));
            let down = loss_at(&f)?;
            checked.push(Checked {
                name: name.clone(),
                index: i,
                gradient: g[i],
                finite_difference: (up - down) / (2.0 * step),
            });
        }
    }
    Ok(checked)
}
