//! Scaled dot-product attention, a block of queries at a time: the block's scores are one
//! GEMM against the keys, its softmax runs on rows that stay in cache, and its output is one
//! GEMM against the values, so the inner products run at GEMM speed and only a block of
//! scores ever exists (never the `[.., lq, lk]` matrix).

#[allow(clippy::wildcard_imports)]
use super::*;

/// Attention per (batch, head), the heads in parallel; `None` (the reference runs) when an
/// operand is not f32 or does not hold the shapes' values.
pub(super) fn attention(args: &[&Storage], scale: f32, causal: bool, out: &[usize]) -> Option<Vec<f32>> {
    let (q, qs) = (args[0].f32()?, args[0].shape());
    let (k, ks) = (args[1].f32()?, args[1].shape());
    let (v, vs) = (args[2].f32()?, args[2].shape());
    let mask = match args.get(3) {
        Some(m) => Some((m.f32()?, m.shape())),
        None => None,
    };
    let r = out.len();
    let (lq, dv) = (out[r - 2], out[r - 1]);
    let (lk, d) = (ks[ks.len() - 2], qs[qs.len() - 1]);
    let batch = &out[..r - 2];
    let (sq, sk, sv) =
        (strides(&qs[..qs.len() - 2], batch), strides(&ks[..ks.len() - 2], batch), strides(&vs[..vs.len() - 2], batch));
    let mut score_shape = batch.to_vec();
    score_shape.extend([lq, lk]);
    let sm = mask.map(|(_, s)| strides(s, &score_shape));
    let mut result = vec![0.0f32; out.iter().product()];
    if dv == 0 || lq == 0 {
        return Some(result);
    }
    let head = Head {
        all: OneHead { q, k, v, lq, lk, d, dv, scale, causal },
        mask: mask.map(|(m, _)| m),
        mask_strides: sm.as_deref(),
        batch,
        sq: &sq,
        sk: &sk,
        sv: &sv,
    };
    let fits = result.par_chunks_mut(lq * dv).enumerate().all(|(bi, head_out)| attention_head(head_out, bi, &head));
    fits.then_some(result)
}

/// What one attention head reads: the whole tensors (`all`, each head's operands found by
/// the batch strides) and the mask.
pub(super) struct Head<'a> {
    all: OneHead<'a>,
    mask: Option<&'a [f32]>,
    mask_strides: Option<&'a [usize]>,
    batch: &'a [usize],
    sq: &'a [usize],
    sk: &'a [usize],
    sv: &'a [usize],
}

impl Head<'_> {
    /// Offset of batch index `index` under strides `st` (in units of whole matrices).
    #[inline(always)]
    fn offset(&self, index: usize, st: &[usize]) -> usize {
        let mut rem = index;
        let mut off = 0;
        for dd in (0..self.batch.len()).rev() {
            off += (rem % self.batch[dd]) * st[dd];
            rem /= self.batch[dd];
        }
        off
    }
}

simd::multiversion! {
    /// One (batch, head) in query blocks, its mask row added to each block's scores.
    fn attention_head(head_out: &mut [f32], bi: usize, head: &Head<'_>) -> bool {
        let Head { all, mask, mask_strides, batch, sq, sk, sv } = *head;
        let OneHead { q, k, v, lq, lk, d, dv, .. } = all;
        let (qb, kb, vb) = (head.offset(bi, sq) * lq * d, head.offset(bi, sk) * lk * d, head.offset(bi, sv) * lk * dv);
        let (Some(q), Some(k), Some(v)) = (q.get(qb..), k.get(kb..), v.get(vb..)) else { return false };
        let one = OneHead { q, k, v, ..all };
        match (mask, mask_strides) {
            (Some(m), Some(st)) => {
                let (base, si, sj) = (head.offset(bi, &st[..batch.len()]), st[batch.len()], st[batch.len() + 1]);
                attend_blocks::<FMA>(head_out, &one, |i, row| {
                    let at = base + i * si;
                    match m.get(at..at + row.len()) {
                        // A mask laid out along the keys (`[.., lk]`, the usual padding
                        // mask): one vectorised add.
                        Some(mask_row) if sj == 1 => row.iter_mut().zip(mask_row).for_each(|(x, &mm)| *x += mm),
                        _ => row.iter_mut().enumerate().for_each(|(j, x)| *x += m[at + j * sj]),
                    }
                })
            }
            _ => attend_blocks::<FMA>(head_out, &one, |_, _| {}),
        }
    }
}

/// Attention over a KV cache (`Op::CachedAttention`): per (batch, query head), only the
/// cache's first `position + lq` rows are read, so a decode step costs what the filled part
/// of the cache costs, not its capacity. None (the reference runs) when the position is out of
/// range, so that the reference reports it.
pub(super) fn cached_attention(args: &[&Storage], scale: f32, out: &[usize]) -> Option<Vec<f32>> {
    let (q, k, v) = (args[0].f32()?, args[1].f32()?, args[2].f32()?);
    let (ks, vs) = (args[1].shape(), args[2].shape());
    let position = args[3].scalar_index()?;
    let [b, h, lq, dv] = *out else { return None };
    let (kvh, lk, d) = (ks[1], ks[2], ks[3]);
    if position + lq > lk || kvh == 0 || vs[2] != lk {
        return None;
    }
    let group = h / kvh;
    let filled = position + lq;
    let mut result = vec![0.0f32; b * h * lq * dv];
    if dv == 0 || lq == 0 {
        return Some(result);
    }
    let cache = Cache { q, k, v, h, lq, lk, d, dv, scale, group, position };
    let fits =
        result.par_chunks_mut(lq * dv).enumerate().all(|(bn, head_out)| cached_head(head_out, bn, filled, &cache));
    fits.then_some(result)
}

/// What one cached-attention head reads.
struct Cache<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    h: usize,
    lq: usize,
    lk: usize,
    d: usize,
    dv: usize,
    scale: f32,
    group: usize,
    position: usize,
}

simd::multiversion! {
    /// One (batch, query head) over the filled rows of its key/value head.
    fn cached_head(head_out: &mut [f32], bn: usize, filled: usize, c: &Cache<'_>) -> bool {
        let Cache { q, k, v, h, lq, lk, d, dv, scale, group, position } = *c;
        let (bi, n) = (bn / h, bn % h);
        let kvh = h / group;
        let g = bi * kvh + n / group;
        let (qb, kb, vb) = (bn * lq * d, g * lk * d, g * lk * dv);
        if lq <= DIRECT_QUERIES {
            let mut row = vec![0.0f32; filled];
            // A decode step: a score is one contiguous dot product per key, cheaper than
            // transposing the keys for so few queries.
            for i in 0..lq {
                let qi = &q[qb + i * d..qb + (i + 1) * d];
                for (j, r) in row.iter_mut().enumerate() {
                    *r = dot(qi, &k[kb + j * d..kb + (j + 1) * d]) * scale;
                }
                attend_row::<FMA>(&mut head_out[i * dv..(i + 1) * dv], &mut row, position + i + 1, &v[vb..]);
            }
            return true;
        }
        // Prefill: the queries sit at the cache's last `lq` filled rows, so this is causal
        // attention over the filled rows.
        let (Some(q), Some(k), Some(v)) = (q.get(qb..), k.get(kb..), v.get(vb..)) else { return false };
        let one = OneHead { q, k, v, lq, lk: filled, d, dv, scale, causal: true };
        attend_blocks::<FMA>(head_out, &one, |_, _| {})
    }
}

/// Queries at or below which cached attention takes scores as per-key dot products (a GEMM
/// of so few rows would cost more in packing than it saves).
const DIRECT_QUERIES: usize = 4;

/// `a . b` in eight lanes (so that it vectorises).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// One query's output from its scores: keys from `visible` on hidden, softmax, and the
/// weighted sum of the visible rows of `v` (the head's values, `dv = out.len()` wide).
#[inline(always)]
fn attend_row<const FMA: bool>(out: &mut [f32], row: &mut [f32], visible: usize, v: &[f32]) {
    row[visible..].fill(f32::NEG_INFINITY);
    softmax_in_place::<FMA>(row);
    let dv = out.len();
    weighted_rows(out, &row[..visible], &v[..visible * dv]);
}

/// Value lanes per accumulator block in `weighted_rows`; four partial sums per block keep
/// independent FMA chains in flight.
const LANES: usize = 16;

/// Query rows per block in `attend_blocks`: enough rows that a GEMM's packing pays off, few
/// enough that the block's scores (`QUERY_BLOCK x lk`) stay in L2 between the two products.
const QUERY_BLOCK: usize = 64;

/// Query rows per block under a causal mask: the scores of a block are computed up to its
/// last row's keys, so smaller blocks compute less of the hidden triangle (32 against 64 rows:
/// 62.5% against 75% of the scores at 128 keys). Measured on a Zen 1 core at [8,12,128,64]:
/// 12.4 against 13.2 ms; without the mask 64 rows stay faster (10.5 against 11.4 ms at d=32).
const CAUSAL_QUERY_BLOCK: usize = 32;

/// One head's operands, row-major at the start of each slice: queries `[lq, d]`, keys
/// `[lk, d]`, values `[lk, dv]`.
#[derive(Clone, Copy)]
struct OneHead<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    lq: usize,
    lk: usize,
    d: usize,
    dv: usize,
    scale: f32,
    causal: bool,
}

/// `out = softmax(scale q k^T + mask) v` for one head, a block of queries at a time;
/// `add_mask(i, row)` adds query `i`'s mask to its scores. Under `causal`, key `j` is visible
/// to query `i` when `j <= i + lk - lq`: a block's scores are computed only up to its last
/// row's visible keys, and hidden keys are left out of the sum altogether (as the reference
/// does), so a hidden value that is not finite never reaches an output. False when an
/// operand is shorter than its shape says.
#[inline(always)]
fn attend_blocks<const FMA: bool>(out: &mut [f32], h: &OneHead<'_>, add_mask: impl Fn(usize, &mut [f32])) -> bool {
    let OneHead { q, k, v, lq, lk, d, dv, scale, causal } = *h;
    let visible = |i: usize| if causal { (i + lk + 1).saturating_sub(lq).min(lk) } else { lk };
    let block = if causal { CAUSAL_QUERY_BLOCK } else { QUERY_BLOCK };
    // Whether every value is finite, checked once per head (a branch-free fold, so that it
    // vectorises) rather than per block: only causal blocks have keys some rows do not see.
    let finite_values = causal && v.get(..lk * dv).is_some_and(all_finite);
    let mut scores = vec![0.0f32; block.min(lq) * lk];
    for i0 in (0..lq).step_by(block) {
        let rows = block.min(lq - i0);
        let width = visible(i0 + rows - 1);
        let Some(block_out) = out.get_mut(i0 * dv..(i0 + rows) * dv) else { return false };
        let s = &mut scores[..rows * width];
        let Some(qs) = q.get(i0 * d..) else { return false };
        let qv = View { data: qs, rows, cols: d, rs: d, cs: 1 };
        let kt = View { data: k, rows: d, cols: width, rs: 1, cs: d };
        if !gemm_into(s, width, qv, kt, scale, false, gemm::Parallelism::None) {
            return false;
        }
        for r in 0..rows {
            let row = &mut s[r * width..(r + 1) * width];
            add_mask(i0 + r, row);
            let seen = visible(i0 + r);
            softmax_in_place::<FMA>(&mut row[..seen]);
            row[seen..].fill(0.0);
        }
        // Every row sees the block's first row's keys. The keys only some rows see have a
        // probability of exactly 0 for the others, which adds nothing to a sum as long as
        // the value is finite: then one product covers the block's whole width; otherwise
        // the keys past the first row's go row by row over what each row sees.
        let first = visible(i0);
        if v.len() < width * dv {
            return false;
        }
        let w = if finite_values { width } else { first };
        let pv = View { data: s, rows, cols: w, rs: width, cs: 1 };
        let vv = View { data: v, rows: w, cols: dv, rs: dv, cs: 1 };
        if !gemm_into(block_out, dv, pv, vv, 1.0, false, gemm::Parallelism::None) {
            return false;
        }
        if w < width {
            for r in 0..rows {
                let seen = visible(i0 + r);
                let o = &mut block_out[r * dv..(r + 1) * dv];
                for j in w..seen {
                    let p = s[r * width + j];
                    o.iter_mut().zip(&v[j * dv..(j + 1) * dv]).for_each(|(x, &vj)| *x = p.mul_add(vj, *x));
                }
            }
        }
    }
    true
}

/// Whether no value is infinite or NaN, without an early exit (so that the loop vectorises).
#[inline(always)]
fn all_finite(xs: &[f32]) -> bool {
    const EXPONENT: u32 = 0x7f80_0000;
    xs.iter().fold(0u32, |any, x| any | u32::from(x.to_bits() & EXPONENT == EXPONENT)) == 0
}

/// `out = sum_j p[j] * v[j]` over value rows of `out.len()`.
#[inline(always)]
pub(super) fn weighted_rows(out: &mut [f32], p: &[f32], v: &[f32]) {
    let dv = out.len();
    let mut c = 0;
    while c + LANES <= dv {
        let mut acc = [[0.0f32; LANES]; 4];
        let quads = p.len() / 4;
        for q4 in 0..quads {
            for (lane, a) in acc.iter_mut().enumerate() {
                let j = q4 * 4 + lane;
                let (pj, x) = (p[j], &v[j * dv + c..j * dv + c + LANES]);
                for u in 0..LANES {
                    a[u] = pj.mul_add(x[u], a[u]);
                }
            }
        }
        for j in quads * 4..p.len() {
            let x = &v[j * dv + c..j * dv + c + LANES];
            for u in 0..LANES {
                acc[0][u] = p[j].mul_add(x[u], acc[0][u]);
            }
        }
        for u in 0..LANES {
            out[c + u] = (acc[0][u] + acc[1][u]) + (acc[2][u] + acc[3][u]);
        }
        c += LANES;
    }
    for (cc, o) in out.iter_mut().enumerate().skip(c) {
        *o = p.iter().enumerate().map(|(j, &pj)| pj * v[j * dv + cc]).sum();
    }
}
