//! The memory plan. Intermediates are assigned to slots by liveness: a slot is free again
//! once the last kernel reading its value has run, and the next intermediate takes a free
//! slot instead of new storage. Sizes are symbolic, so a slot's size is the largest of its
//! buffers under the binding of the run; `report` gives the planned peak next to the sum of
//! all intermediate sizes.

use crate::program::{Buffer, BufferKind, Kernel};
use serde::Serialize;
use std::collections::BTreeMap;

/// Slot of each intermediate buffer.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MemoryPlan {
    /// Buffer id to slot, for intermediates.
    pub slot_of: BTreeMap<usize, usize>,
    /// Number of slots.
    pub slots: usize,
    /// For each kernel (schedule position), the buffers whose last use it is.
    pub frees_after: Vec<Vec<usize>>,
}

/// Planned memory under a binding.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanReport {
    /// Bytes of all slots (what the run allocates for intermediates).
    pub planned_peak_bytes: usize,
    /// Bytes if every intermediate had its own storage.
    pub unplanned_bytes: usize,
}

impl MemoryPlan {
    /// Plan `kernels` (in schedule order); outputs stay live to the end.
    pub fn new(buffers: &[Buffer], kernels: &[Kernel], outputs: &[(String, usize)]) -> MemoryPlan {
        let mut last_use: BTreeMap<usize, usize> = BTreeMap::new();
        for (k, kernel) in kernels.iter().enumerate() {
            for &b in &kernel.inputs {
                last_use.insert(b, k);
            }
        }
        for (_, b) in outputs {
            last_use.insert(*b, usize::MAX);
        }
        let mut frees_after = vec![Vec::new(); kernels.len()];
        for (&b, &k) in &last_use {
            if k != usize::MAX && buffers[b].kind == BufferKind::Intermediate {
                frees_after[k].push(b);
            }
        }
        let mut slot_of = BTreeMap::new();
        let mut free: Vec<usize> = Vec::new();
        let mut slots = 0;
        for (k, kernel) in kernels.iter().enumerate() {
            let slot = free.pop().unwrap_or_else(|| {
                slots += 1;
                slots - 1
            });
            slot_of.insert(kernel.output, slot);
            // A kernel's own output is never freed by its own inputs' release below.
            for b in &frees_after[k] {
                if let Some(&s) = slot_of.get(b) {
                    free.push(s);
                }
            }
        }
        MemoryPlan { slot_of, slots, frees_after }
    }

    /// Bytes planned and unplanned under `binding` (unbound symbols count as 1).
    pub fn report(&self, buffers: &[Buffer], binding: &BTreeMap<String, usize>) -> PlanReport {
        let bytes = |b: usize| {
            let t = &buffers[b].ty;
            // Saturating: a binding too large to count is too large to allocate, and a memory
            // check against the report must see that, not a wrapped small number.
            let dims = t.shape.resolve(|s| binding.get(s).copied().unwrap_or(1));
            dims.iter().try_fold(t.dtype.size_bytes(), |n, &d| n.checked_mul(d)).unwrap_or(usize::MAX)
        };
        let mut slot_bytes = vec![0usize; self.slots];
        let mut unplanned = 0;
        for (&b, &s) in &self.slot_of {
            let n = bytes(b);
            unplanned = n.saturating_add(unplanned);
            slot_bytes[s] = slot_bytes[s].max(n);
        }
        PlanReport {
            planned_peak_bytes: slot_bytes.iter().fold(0, |a, &b| a.saturating_add(b)),
            unplanned_bytes: unplanned,
        }
    }
}
