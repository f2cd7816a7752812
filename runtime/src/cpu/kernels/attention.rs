//! Scaled dot-product attention, a query row at a time: scores, softmax, weighted values.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Attention per (batch, head), one query row at a time, so only a row of `lk` scores ever
/// exists (never the `[.., lq, lk]` matrix). Keys are transposed once per head so that a
/// score row is a sum of `d` contiguous axpys, and the output row a sum of `lk` axpys over
/// values: both vectorise.
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
        q,
        k,
        v,
        mask: mask.map(|(m, _)| m),
        mask_strides: sm.as_deref(),
        batch,
        sq: &sq,
        sk: &sk,
        sv: &sv,
        lq,
        lk,
        d,
        dv,
        scale,
        causal,
    };
    result.par_chunks_mut(lq * dv).enumerate().for_each(|(bi, head_out)| attention_head(head_out, bi, &head));
    Some(result)
}

/// What one attention head reads.
pub(super) struct Head<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    mask: Option<&'a [f32]>,
    mask_strides: Option<&'a [usize]>,
    batch: &'a [usize],
    sq: &'a [usize],
    sk: &'a [usize],
    sv: &'a [usize],
    lq: usize,
    lk: usize,
    d: usize,
    dv: usize,
    scale: f32,
    causal: bool,
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
    /// One (batch, head): rows of queries against all keys, a row of scores at a time.
    fn attention_head(head_out: &mut [f32], bi: usize, head: &Head<'_>) {
        let Head { q, k, v, mask, mask_strides, batch, sq, sk, sv, lq, lk, d, dv, scale, causal } = *head;
        let (qb, kb, vb) = (head.offset(bi, sq) * lq * d, head.offset(bi, sk) * lk * d, head.offset(bi, sv) * lk * dv);
        let kt = transposed_keys(&k[kb..], lk, d);
        let mut row = vec![0.0f32; lk];
        for i in 0..lq {
            scores_row(&mut row, &q[qb + i * d..qb + (i + 1) * d], &kt, scale);
            if let (Some(m), Some(st)) = (mask, mask_strides) {
                let base = head.offset(bi, &st[..batch.len()]) + i * st[batch.len()];
                let sj = st[batch.len() + 1];
                row.iter_mut().enumerate().for_each(|(j, x)| *x += m[base + j * sj]);
            }
            // Key j is visible to query i when j <= i + lk - lq.
            let visible = if causal { (i + lk + 1).saturating_sub(lq).min(lk) } else { lk };
            attend_row(&mut head_out[i * dv..(i + 1) * dv], &mut row, visible, &v[vb..]);
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
    result.par_chunks_mut(lq * dv).enumerate().for_each(|(bn, head_out)| cached_head(head_out, bn, filled, &cache));
    Some(result)
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
    fn cached_head(head_out: &mut [f32], bn: usize, filled: usize, c: &Cache<'_>) {
        let Cache { q, k, v, h, lq, lk, d, dv, scale, group, position } = *c;
        let (bi, n) = (bn / h, bn % h);
        let kvh = h / group;
        let g = bi * kvh + n / group;
        let (qb, kb, vb) = (bn * lq * d, g * lk * d, g * lk * dv);
        let mut row = vec![0.0f32; filled];
        if lq <= DIRECT_QUERIES {
            // A decode step: a score is one contiguous dot product per key, cheaper than
            // transposing the keys for so few queries.
            for i in 0..lq {
                let qi = &q[qb + i * d..qb + (i + 1) * d];
                for (j, r) in row.iter_mut().enumerate() {
                    *r = dot(qi, &k[kb + j * d..kb + (j + 1) * d]) * scale;
                }
                attend_row(&mut head_out[i * dv..(i + 1) * dv], &mut row, position + i + 1, &v[vb..]);
            }
            return;
        }
        let kt = transposed_keys(&k[kb..], filled, d);
        for i in 0..lq {
            scores_row(&mut row, &q[qb + i * d..qb + (i + 1) * d], &kt, scale);
            attend_row(&mut head_out[i * dv..(i + 1) * dv], &mut row, position + i + 1, &v[vb..]);
        }
    }
}

/// Queries at or below which cached attention takes scores as per-key dot products.
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

/// The first `rows` keys of a head (`[rows, d]` at the start of `k`) transposed to
/// `[d, rows]`, so that a row of scores is a sum of `d` contiguous axpys.
#[inline(always)]
fn transposed_keys(k: &[f32], rows: usize, d: usize) -> Vec<f32> {
    let mut kt = vec![0.0f32; d * rows];
    for j in 0..rows {
        for t in 0..d {
            kt[t * rows + j] = k[j * d + t];
        }
    }
    kt
}

/// One query's output from its scores: keys from `visible` on hidden, softmax, and the
/// weighted sum of the visible rows of `v` (the head's values, `dv = out.len()` wide).
#[inline(always)]
fn attend_row(out: &mut [f32], row: &mut [f32], visible: usize, v: &[f32]) {
    row[visible..].fill(f32::NEG_INFINITY);
    softmax_in_place(row);
    let dv = out.len();
    weighted_rows(out, &row[..visible], &v[..visible * dv]);
}

/// Register blocking for the attention loops. A score block of `WIDE` lanes keeps four
/// 16-lane accumulators in flight (independent FMA chains hide the FMA latency); the value
/// sum keeps four partial sums per 16-lane block for the same reason.
pub(super) const LANES: usize = 16;

pub(super) const WIDE: usize = 4 * LANES;

/// `row[j] = scale * sum_t q[t] * kt[t][j]` with `kt` the keys transposed (`d x lk`).
#[inline(always)]
pub(super) fn scores_row(row: &mut [f32], q: &[f32], kt: &[f32], scale: f32) {
    let lk = row.len();
    let mut j = 0;
    while j + WIDE <= lk {
        score_block::<WIDE>(row, q, kt, scale, j);
        j += WIDE;
    }
    while j + LANES <= lk {
        score_block::<LANES>(row, q, kt, scale, j);
        j += LANES;
    }
    for (jj, r) in row.iter_mut().enumerate().skip(j) {
        *r = q.iter().enumerate().map(|(t, &qt)| qt * kt[t * lk + jj]).sum::<f32>() * scale;
    }
}

#[inline(always)]
pub(super) fn score_block<const N: usize>(row: &mut [f32], q: &[f32], kt: &[f32], scale: f32, j: usize) {
    let lk = row.len();
    let mut acc = [0.0f32; N];
    for (t, &qt) in q.iter().enumerate() {
        let k = &kt[t * lk + j..t * lk + j + N];
        for u in 0..N {
            acc[u] = qt.mul_add(k[u], acc[u]);
        }
    }
    for u in 0..N {
        row[j + u] = acc[u] * scale;
    }
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
