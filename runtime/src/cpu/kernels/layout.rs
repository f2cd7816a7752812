//! Layout kernels: permutes (tiled transposes), slices, concatenation, row gathers.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Rows of a table (f32 values, or quantized blocks) picked by integer ids (embedding lookup).
pub(super) fn gather_rows<T: Copy>(table: (&[T], &[usize]), ids: &Storage) -> Option<Vec<T>> {
    let Storage::Wide(ids) = ids else { return None };
    let rows = *table.1.first()?;
    let width: usize = table.1[1..].iter().product();
    let mut out = Vec::with_capacity(ids.data.len() * width);
    for &i in ids.data.iter() {
        if i < 0.0 || i >= rows as f64 {
            return None; // the reference path reports the bad index
        }
        let i = i as usize;
        out.extend_from_slice(&table.0[i * width..(i + 1) * width]);
    }
    Some(out)
}

/// Values a permute task copies at least (smaller tasks cost more in scheduling than in work).
const PERMUTE_TASK: usize = 16 * 1024;

/// `out[idx] = x[idx permuted back]`, an output row at a time (planes of rows in parallel).
pub(super) fn permute(x: (&[f32], &[usize]), perm: &[usize], out: &[usize]) -> Vec<f32> {
    let mut contiguous = vec![1usize; x.1.len()];
    for i in (0..x.1.len().saturating_sub(1)).rev() {
        contiguous[i] = contiguous[i + 1] * x.1[i + 1];
    }
    let st: Vec<usize> = perm.iter().map(|&p| contiguous[p]).collect();
    let total: usize = out.iter().product();
    let rank = out.len();
    if rank == 0 || out[rank - 1] == 0 || total == 0 {
        return x.0.iter().take(total).copied().collect();
    }
    let swaps_last_two = rank >= 2
        && perm[rank - 1] == rank - 2
        && perm[rank - 2] == rank - 1
        && perm[..rank - 2].iter().enumerate().all(|(i, &p)| i == p);
    if swaps_last_two {
        return transpose_last_two(x.0, x.1[rank - 2], x.1[rank - 1]);
    }
    // One output row (the last axis) at a time: a contiguous copy when the last axis stays
    // last, else a gather with the input stride of the axis that lands there. Tasks are
    // planes of the last two output axes, so that the input offset is found by division once
    // per plane and then stepped along the plane's rows (a head split `[b, s, h, d] -> [b, h,
    // s, d]` copies rows of `d` values).
    let width = out[rank - 1];
    let step = st[rank - 1];
    let (height, row_step) = if rank >= 2 { (out[rank - 2], st[rank - 2]) } else { (1, 0) };
    let mut result = vec![0.0f32; total];
    let outer = &out[..rank.saturating_sub(2)];
    // A large plane is split further (a `[1, rows, d]` permute has one plane).
    let rows_per_task = (PERMUTE_TASK / width).max(1);
    result.par_chunks_mut(height * width).enumerate().for_each(|(plane, dst)| {
        let (mut rem, mut base) = (plane, 0);
        for dd in (0..outer.len()).rev() {
            base += (rem % outer[dd]) * st[dd];
            rem /= outer[dd];
        }
        dst.par_chunks_mut(rows_per_task * width).enumerate().for_each(|(task, dst)| {
            for (r, dst) in dst.chunks_exact_mut(width).enumerate() {
                let at = base + (task * rows_per_task + r) * row_step;
                if step == 1 {
                    dst.copy_from_slice(&x.0[at..at + width]);
                } else {
                    for (j, d) in dst.iter_mut().enumerate() {
                        *d = x.0[at + j * step];
                    }
                }
            }
        });
    });
    result
}

/// `out[b][c][r] = x[b][r][c]` for matrices of `rows x cols`, in square tiles so that both
/// the reads and the writes stay in cache (a weight gradient's transpose: a row-at-a-time
/// gather reads one element per cache line). Tasks are a batch's bands of output rows.
pub(super) fn transpose_last_two(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    const TILE: usize = 16;
    let matrix = rows * cols;
    let mut out = vec![0.0f32; x.len()];
    if matrix == 0 {
        return out;
    }
    out.par_chunks_mut(matrix).zip(x.par_chunks(matrix)).for_each(|(dst, src)| {
        dst.par_chunks_mut(TILE * rows).enumerate().for_each(|(band, dst)| {
            let c0 = band * TILE;
            let width = dst.len() / rows;
            // A tile is read a source row at a time into `tile`, then written an output row at a
            // time: both sides contiguous (strided stores 4 KiB apart alias in L1).
            let mut tile = [[0.0f32; TILE]; TILE];
            for r0 in (0..rows).step_by(TILE) {
                let height = TILE.min(rows - r0);
                for (r, t) in tile.iter_mut().enumerate().take(height) {
                    let at = (r0 + r) * cols + c0;
                    t[..width].copy_from_slice(&src[at..at + width]);
                }
                for c in 0..width {
                    let row = &mut dst[c * rows + r0..c * rows + r0 + height];
                    for (r, d) in row.iter_mut().enumerate() {
                        *d = tile[r][c];
                    }
                }
            }
        });
    });
    out
}

/// Elements `start..start + out[axis]` along `axis`, copied a contiguous run at a time.
pub(super) fn slice(x: (&[f32], &[usize]), axis: usize, start: usize, out: &[usize]) -> Vec<f32> {
    let inner: usize = x.1[axis + 1..].iter().product();
    let outer: usize = x.1[..axis].iter().product();
    let (len_in, len_out) = (x.1[axis] * inner, out[axis] * inner);
    let mut result = Vec::with_capacity(outer * len_out);
    for o in 0..outer {
        let base = o * len_in + start * inner;
        result.extend_from_slice(&x.0[base..base + len_out]);
    }
    result
}

/// Parts joined along `axis`, a contiguous run of each part at a time.
pub(super) fn concat(parts: &[(&[f32], &[usize])], axis: usize, out: &[usize]) -> Vec<f32> {
    let inner: usize = out[axis + 1..].iter().product();
    let outer: usize = out[..axis].iter().product();
    let mut result = Vec::with_capacity(out.iter().product());
    for o in 0..outer {
        for (data, shape) in parts {
            let run = shape[axis] * inner;
            result.extend_from_slice(&data[o * run..(o + 1) * run]);
        }
    }
    result
}
