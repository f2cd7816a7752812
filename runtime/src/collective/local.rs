//! Ranks as threads of one process: a [`Transport`] over shared memory, so data-parallel code
//! runs and is tested without a launcher. Sums add the ranks' values in rank order, as MPI's
//! reduction of two ranks does.

use super::{Collective, CollectiveError, Transport};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

struct Shared {
    slots: Mutex<Vec<Vec<f64>>>,
    barrier: Barrier,
}

struct Local {
    rank: usize,
    world: usize,
    shared: Arc<Shared>,
}

impl Local {
    /// Deposit `data`, wait for every rank, combine the slots with `f`, and wait again so no
    /// rank overwrites its slot before all have read.
    fn exchange(
        &mut self,
        data: &mut [f64],
        f: impl Fn(&[Vec<f64>], &mut [f64]) -> Result<(), String>,
    ) -> Result<(), String> {
        let poisoned = |_| "a rank panicked".to_string();
        self.shared.slots.lock().map_err(poisoned)?[self.rank] = data.to_vec();
        self.shared.barrier.wait();
        let r = f(&self.shared.slots.lock().map_err(poisoned)?, data);
        self.shared.barrier.wait();
        r
    }
}

impl Transport for Local {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world(&self) -> usize {
        self.world
    }

    fn sum(&mut self, data: &mut [f64]) -> Result<(), String> {
        self.exchange(data, |slots, out| {
            if let Some(bad) = slots.iter().position(|s| s.len() != out.len()) {
                return Err(format!("rank {bad} passed {} values, this rank {}", slots[bad].len(), out.len()));
            }
            for (i, o) in out.iter_mut().enumerate() {
                let mut acc = slots[0][i];
                for s in &slots[1..] {
                    acc += s[i];
                }
                *o = acc;
            }
            Ok(())
        })
    }

    fn broadcast(&mut self, data: &mut [f64], root: usize) -> Result<(), String> {
        self.exchange(data, |slots, out| {
            let src = slots.get(root).ok_or_else(|| format!("no rank {root}"))?;
            if src.len() != out.len() {
                return Err(format!("rank {root} passed {} values, this rank {}", src.len(), out.len()));
            }
            out.copy_from_slice(src);
            Ok(())
        })
    }
}

/// `world` ranks in this process, one handle each (hand each to its own thread).
pub fn local_group(world: usize, timeout: Duration) -> Result<Vec<Collective>, CollectiveError> {
    if world == 0 {
        return Err(CollectiveError::Setup {
            backend: "local".into(),
            message: "a group needs at least one rank".into(),
        });
    }
    let shared = Arc::new(Shared { slots: Mutex::new(vec![Vec::new(); world]), barrier: Barrier::new(world) });
    (0..world)
        .map(|rank| {
            let shared = shared.clone();
            Collective::spawn("local", timeout, move || {
                Ok(Box::new(Local { rank, world, shared }) as Box<dyn Transport>)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_sum_and_broadcast() {
        let group = local_group(3, Duration::from_secs(10)).unwrap();
        let handles: Vec<_> = group
            .into_iter()
            .map(|c| {
                std::thread::spawn(move || {
                    let r = c.rank() as f64;
                    let s = c.sum("s", vec![r, 10.0 * r]).unwrap();
                    let b = c.broadcast("b", vec![r + 1.0], 2).unwrap();
                    (s, b)
                })
            })
            .collect();
        for h in handles {
            let (s, b) = h.join().unwrap();
            assert_eq!(s, vec![3.0, 30.0]);
            assert_eq!(b, vec![3.0]);
        }
    }

    #[test]
    fn a_missing_rank_times_out_with_the_collective_named() {
        let mut group = local_group(2, Duration::from_millis(200)).unwrap();
        let _silent = group.pop().unwrap();
        let err = group[0].sum("all_reduce.0", vec![1.0]).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, CollectiveError::Timeout { rank: 0, world: 2, .. }), "{text}");
        assert!(text.contains("`all_reduce.0` timed out"), "{text}");
        // Out of step now: the next collective fails at once instead of pairing with the
        // other rank's next call.
        let start = std::time::Instant::now();
        let err = group[0].sum("all_reduce.1", vec![1.0]).unwrap_err().to_string();
        assert!(start.elapsed() < Duration::from_millis(150), "{err}");
        assert!(err.contains("out of step with the others: `all_reduce.0` timed out"), "{err}");
    }

    #[test]
    fn differing_hashes_fail_on_every_rank() {
        let group = local_group(2, Duration::from_secs(10)).unwrap();
        let handles: Vec<_> = group
            .into_iter()
            .map(|c| std::thread::spawn(move || c.check_same("program hash", &[7, c.rank() as u32])))
            .collect();
        for h in handles {
            let err = h.join().unwrap().unwrap_err().to_string();
            assert!(err.contains("program hash differs on 1 rank(s)"), "{err}");
        }
        let group = local_group(2, Duration::from_secs(10)).unwrap();
        let handles: Vec<_> =
            group.into_iter().map(|c| std::thread::spawn(move || c.check_same("h", &[7, 8]))).collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
    }
}
