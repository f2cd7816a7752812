//! Broadcast indexing for f32 kernels: each operand is read through strides in the output's
//! index space (0 along broadcast dims), and kernels work a row (the output's last axis) at a
//! time, where an operand row is either a contiguous slice or a repeated scalar. Row-wise
//! loops over slices are what the compiler vectorises.

/// One operand's view of a row of the output.
#[derive(Clone, Copy)]
pub enum Row<'a> {
    /// A contiguous row as long as the output row.
    Slice(&'a [f32]),
    /// One value repeated along the row.
    Scalar(f32),
}

impl Row<'_> {
    /// Element `i`.
    #[inline]
    pub fn at(&self, i: usize) -> f32 {
        match self {
            Row::Slice(s) => s[i],
            Row::Scalar(x) => *x,
        }
    }
}

/// Strides of an operand of shape `shape` read at output shape `out` (numpy alignment).
pub fn strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let offset = out.len() - shape.len();
    let mut contiguous = vec![0usize; shape.len()];
    let mut acc = 1;
    for i in (0..shape.len()).rev() {
        contiguous[i] = acc;
        acc *= shape[i];
    }
    (0..out.len()).map(|i| if i < offset || shape[i - offset] == 1 { 0 } else { contiguous[i - offset] }).collect()
}

/// Call `f(row_index, operand_rows)` for each output row (its last axis) in `range`, giving
/// each operand's view of that row; blocks of rows can run in parallel.
pub fn for_rows_in<'a>(
    out: &[usize],
    operands: &[(&'a [f32], &[usize])],
    range: std::ops::Range<usize>,
    mut f: impl FnMut(usize, &[Row<'a>]),
) {
    let width = out.last().copied().unwrap_or(1);
    let all: Vec<Vec<usize>> = operands.iter().map(|(_, s)| strides(s, out)).collect();
    let mut views: Vec<Row<'a>> = Vec::with_capacity(operands.len());
    for_row_bases(out, &all, range, |r, bases| {
        views.clear();
        for (((data, _), st), &base) in operands.iter().zip(&all).zip(bases) {
            let inner = st.last().copied().unwrap_or(0);
            views.push(if inner == 0 || width == 1 {
                Row::Scalar(data[base])
            } else {
                Row::Slice(&data[base..base + width])
            });
        }
        f(r, &views);
    });
}

/// Call `f(row_index, bases)` for each output row in `range`, where `bases[i]` is the offset
/// of operand `i`'s first element of that row (operand `i` read through `strides[i]`).
pub fn for_row_bases(
    out: &[usize],
    strides: &[Vec<usize>],
    range: std::ops::Range<usize>,
    mut f: impl FnMut(usize, &[usize]),
) {
    if out.contains(&0) {
        return;
    }
    let outer = out.len().saturating_sub(1);
    let mut index = vec![0usize; outer];
    let mut rem = range.start;
    for d in (0..outer).rev() {
        index[d] = rem % out[d];
        rem /= out[d];
    }
    let mut bases = vec![0usize; strides.len()];
    for r in range {
        for (b, st) in bases.iter_mut().zip(strides) {
            *b = index.iter().zip(st).map(|(i, s)| i * s).sum();
        }
        f(r, &bases);
        for d in (0..outer).rev() {
            index[d] += 1;
            if index[d] < out[d] {
                break;
            }
            index[d] = 0;
        }
    }
}
