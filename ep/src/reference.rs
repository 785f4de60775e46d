//! The host reference of a whole team's dispatch and combine: what every PE receives and
//! what every PE gets back, computed from every PE's inputs in one place. Tests and the
//! `moe_layer` example check the GPU's results against it value for value.
//!
//! It follows the order the kernels keep: a PE receives the rows of PE 0 first, then of PE
//! 1, …, each PE's rows in token order; combine adds the contributions of PEs in PE order
//! in `f32` and rounds once to [`Bf16`].

use ferroshmem_runtime::{Error, Result};

use crate::bf16::Bf16;
use crate::layout::Layout;

/// One PE's dispatch input: `tokens × hidden` rows, `tokens × top_k` experts and weights.
#[derive(Debug, Clone, Copy)]
pub struct PeInput<'a> {
    /// Token rows.
    pub x: &'a [Bf16],
    /// Experts of each token (-1: empty slot).
    pub topk_idx: &'a [i64],
    /// Weights of each token's experts.
    pub topk_weights: &'a [f32],
}

/// What one PE receives from a dispatch.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    /// Rows received (`rows × hidden`).
    pub x: Vec<Bf16>,
    /// Per row: the source PE.
    pub src_pe: Vec<usize>,
    /// Per row: the token's index on its source PE.
    pub src_idx: Vec<i32>,
    /// Per row, `top_k` wide: the token's experts local to this PE, -1 for the others.
    pub topk_idx: Vec<i64>,
    /// Per row, `top_k` wide: their weights, 0 where the index is -1.
    pub topk_weights: Vec<f32>,
    /// Per local expert: (token, slot) pairs received for it.
    pub tokens_per_expert: Vec<usize>,
    /// Per source PE: rows received from it.
    pub rows_from: Vec<usize>,
}

impl Received {
    /// Rows received.
    pub fn rows(&self) -> usize {
        self.src_idx.len()
    }
}

/// What each PE of a team of `inputs.len()` receives when each dispatches its input.
///
/// # Errors
/// [`Error::InvalidArgument`] for inputs of the wrong lengths or experts out of range.
pub fn dispatch(
    inputs: &[PeInput<'_>],
    hidden: usize,
    top_k: usize,
    num_experts: usize,
) -> Result<Vec<Received>> {
    let n = inputs.len();
    if n == 0 {
        return Err(Error::InvalidArgument(
            "a dispatch needs the inputs of at least one PE".into(),
        ));
    }
    let layouts = inputs
        .iter()
        .map(|i| Layout::compute(i.topk_idx, top_k, num_experts, n))
        .collect::<Result<Vec<_>>>()?;
    let local = num_experts / n;
    let mut out: Vec<Received> = (0..n)
        .map(|_| Received {
            x: Vec::new(),
            src_pe: Vec::new(),
            src_idx: Vec::new(),
            topk_idx: Vec::new(),
            topk_weights: Vec::new(),
            tokens_per_expert: vec![0; local],
            rows_from: vec![0; n],
        })
        .collect();
    for (s, (input, layout)) in inputs.iter().zip(&layouts).enumerate() {
        check_lengths(input, layout.tokens, hidden, top_k)?;
        for t in 0..layout.tokens {
            for (r, received) in out.iter_mut().enumerate() {
                if !layout.is_in(t, r) {
                    continue;
                }
                received
                    .x
                    .extend_from_slice(&input.x[t * hidden..(t + 1) * hidden]);
                received.src_pe.push(s);
                received.src_idx.push(t as i32);
                received.rows_from[s] += 1;
                let lo = (r * local) as i64;
                for k in 0..top_k {
                    let e = input.topk_idx[t * top_k + k];
                    let here = e >= lo && e < lo + local as i64;
                    received.topk_idx.push(if here { e - lo } else { -1 });
                    received.topk_weights.push(if here {
                        input.topk_weights[t * top_k + k]
                    } else {
                        0.0
                    });
                    if here {
                        received.tokens_per_expert[(e - lo) as usize] += 1;
                    }
                }
            }
        }
    }
    Ok(out)
}

fn check_lengths(input: &PeInput<'_>, tokens: usize, hidden: usize, top_k: usize) -> Result<()> {
    if input.x.len() != tokens * hidden || input.topk_weights.len() != tokens * top_k {
        return Err(Error::InvalidArgument(format!(
            "{tokens} tokens need {} row elements and {} weights, not {} and {}",
            tokens * hidden,
            tokens * top_k,
            input.x.len(),
            input.topk_weights.len()
        )));
    }
    Ok(())
}

/// What each PE gets back from a combine: PE `s`'s token `t` is the sum, over the PEs that
/// received it in PE order, of the row each gave back for it (`y[r]`, one row per row of
/// `received[r]`). `tokens[s]`: PE `s`'s token count.
///
/// # Errors
/// [`Error::InvalidArgument`] for a hidden size of 0, when a `y` does not match its PE's
/// received rows, or when a received row names a PE or token that `tokens` does not have.
pub fn combine(
    tokens: &[usize],
    received: &[Received],
    y: &[Vec<Bf16>],
    hidden: usize,
) -> Result<Vec<Vec<Bf16>>> {
    let bad = |what: String| Error::InvalidArgument(format!("reference combine: {what}"));
    if hidden == 0 {
        return Err(bad("hidden 0".into()));
    }
    let mut sums: Vec<Vec<f32>> = tokens.iter().map(|&t| vec![0.0; t * hidden]).collect();
    for (r, (got, rows)) in received.iter().zip(y).enumerate() {
        if rows.len() != got.rows() * hidden || got.src_pe.len() != got.rows() {
            return Err(bad(format!(
                "PE {r} gives back {} elements for {} rows (from {} source PEs)",
                rows.len(),
                got.rows(),
                got.src_pe.len()
            )));
        }
        for (i, row) in rows.chunks(hidden).enumerate() {
            let (s, t) = (got.src_pe[i], got.src_idx[i]);
            let sum = usize::try_from(t)
                .ok()
                .filter(|&t| tokens.get(s).is_some_and(|&n| t < n))
                .and_then(|t| sums.get_mut(s)?.get_mut(t * hidden..(t + 1) * hidden))
                .ok_or_else(|| bad(format!("PE {r}'s row {i} is of PE {s}'s token {t}")))?;
            for (acc, v) in sum.iter_mut().zip(row) {
                *acc += v.to_f32();
            }
        }
    }
    Ok(sums
        .into_iter()
        .map(|s| s.into_iter().map(Bf16::from_f32).collect())
        .collect())
}

/// What one local expert of a PE receives from a low-latency dispatch, its rows ordered by
/// (source PE, `src_slot`). The GPU's order is the order in which senders took places, so a
/// comparison sorts the GPU's rows the same way first.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertRows {
    /// Rows (`rows × hidden`).
    pub x: Vec<Bf16>,
    /// Per row: its source PE.
    pub src_pe: Vec<i32>,
    /// Per row: its (token × top_k + slot) on the source PE.
    pub src_slot: Vec<i32>,
    /// Per source PE: rows from it.
    pub rows_from: Vec<usize>,
}

/// What each local expert of each PE receives from a low-latency dispatch of `inputs`
/// (`[pe][local expert]`).
///
/// # Errors
/// [`Error::InvalidArgument`] for inputs of the wrong lengths, experts out of range or a
/// token naming an expert twice.
pub fn low_latency_dispatch(
    inputs: &[PeInput<'_>],
    hidden: usize,
    top_k: usize,
    num_experts: usize,
) -> Result<Vec<Vec<ExpertRows>>> {
    let n = inputs.len();
    let local = num_experts / n.max(1);
    let mut out: Vec<Vec<ExpertRows>> = (0..n)
        .map(|_| {
            (0..local)
                .map(|_| ExpertRows {
                    x: Vec::new(),
                    src_pe: Vec::new(),
                    src_slot: Vec::new(),
                    rows_from: vec![0; n],
                })
                .collect()
        })
        .collect();
    for (s, input) in inputs.iter().enumerate() {
        let layout = Layout::compute(input.topk_idx, top_k, num_experts, n)?;
        check_lengths(input, layout.tokens, hidden, top_k)?;
        for (p, &e) in input.topk_idx.iter().enumerate() {
            if e < 0 {
                continue;
            }
            let (t, e) = (p / top_k, e as usize);
            let row = &input.topk_idx[t * top_k..(t + 1) * top_k];
            if row.iter().filter(|&&other| other == e as i64).count() > 1 {
                return Err(Error::InvalidArgument(format!(
                    "token {t} of PE {s} names expert {e} twice"
                )));
            }
            let rows = &mut out[e / local][e % local];
            rows.x
                .extend_from_slice(&input.x[t * hidden..(t + 1) * hidden]);
            rows.src_pe.push(s as i32);
            rows.src_slot.push(p as i32);
            rows.rows_from[s] += 1;
        }
    }
    Ok(out)
}

/// What a low-latency combine gives back for token `t` of `input` when expert `e` turned its
/// row into `expert(e, row)`: the sum over the token's slots of weight × that row, in `f32`
/// in slot order (multiply, then add), rounded once to [`Bf16`].
pub fn low_latency_combine_token(
    input: &PeInput<'_>,
    t: usize,
    hidden: usize,
    top_k: usize,
    expert: impl Fn(usize, &[Bf16]) -> Vec<Bf16>,
) -> Vec<Bf16> {
    let mut sum = vec![0.0f32; hidden];
    let row = &input.x[t * hidden..(t + 1) * hidden];
    for j in 0..top_k {
        let e = input.topk_idx[t * top_k + j];
        if e < 0 {
            continue;
        }
        let w = input.topk_weights[t * top_k + j];
        for (acc, v) in sum.iter_mut().zip(expert(e as usize, row)) {
            *acc += w * v.to_f32();
        }
    }
    sum.into_iter().map(Bf16::from_f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: f32, hidden: usize) -> Vec<Bf16> {
        vec![Bf16::from_f32(v); hidden]
    }

    /// The rows of [`two_pes`]: PE 0's two tokens (1s, 2s), PE 1's one (3s).
    fn two_pes_rows() -> (Vec<Bf16>, Vec<Bf16>) {
        ([row(1.0, 2), row(2.0, 2)].concat(), row(3.0, 2))
    }

    /// 2 PEs, 4 experts (PE 0: 0, 1; PE 1: 2, 3), top-2, hidden 2.
    fn two_pes<'a>(x0: &'a [Bf16], x1: &'a [Bf16]) -> [PeInput<'a>; 2] {
        [
            PeInput {
                x: x0,
                topk_idx: &[0, 2, 1, -1],
                topk_weights: &[0.5, 0.25, 1.0, 0.0],
            },
            PeInput {
                x: x1,
                topk_idx: &[3, 0],
                topk_weights: &[0.75, 0.125],
            },
        ]
    }

    #[test]
    fn rows_arrive_in_pe_then_token_order_and_combine_sums_them() {
        let (x0, x1) = two_pes_rows();
        let inputs = two_pes(&x0, &x1);
        let got = dispatch(&inputs, 2, 2, 4).unwrap();
        assert_eq!(got[0].src_pe, vec![0, 0, 1]);
        assert_eq!(got[0].src_idx, vec![0, 1, 0]);
        assert_eq!(got[0].topk_idx, vec![0, -1, 1, -1, -1, 0]);
        assert_eq!(got[0].topk_weights, vec![0.5, 0.0, 1.0, 0.0, 0.0, 0.125]);
        assert_eq!(got[0].tokens_per_expert, vec![2, 1]);
        assert_eq!(got[0].rows_from, vec![2, 1]);
        assert_eq!(got[1].src_pe, vec![0, 1]);
        assert_eq!(got[1].topk_idx, vec![-1, 0, 1, -1]);
        assert_eq!(got[1].x, [row(1.0, 2), row(3.0, 2)].concat());
        // Each PE gives back its received rows doubled: token 0 of PE 0 went to both PEs.
        let y: Vec<Vec<Bf16>> = got
            .iter()
            .map(|r| {
                r.x.iter()
                    .map(|v| Bf16::from_f32(2.0 * v.to_f32()))
                    .collect()
            })
            .collect();
        let back = combine(&[2, 1], &got, &y, 2).unwrap();
        assert_eq!(back[0], [row(4.0, 2), row(4.0, 2)].concat());
        assert_eq!(back[1], row(12.0, 2));
        // What no PE could have sent back is refused, never a panic.
        assert!(combine(&[2, 1], &got, &y, 0).is_err(), "hidden 0");
        assert!(combine(&[2], &got, &y, 2).is_err(), "no PE 1");
        assert!(combine(&[1, 1], &got, &y, 2).is_err(), "no token 1 of PE 0");
        let mut short = got.clone();
        short[0].src_pe.pop();
        assert!(combine(&[2, 1], &short, &y, 2).is_err(), "a row of no PE");
        assert!(dispatch(&[], 2, 2, 4).is_err(), "no PEs");
    }

    #[test]
    fn low_latency_rows_go_per_expert_by_source_and_come_back_weighted() {
        let (x0, x1) = two_pes_rows();
        let inputs = two_pes(&x0, &x1);
        let got = low_latency_dispatch(&inputs, 2, 2, 4).unwrap();
        // PE 0's expert 0: token 0 of PE 0 (slot 0), token 0 of PE 1 (slot 1).
        assert_eq!(got[0][0].src_pe, vec![0, 1]);
        assert_eq!(got[0][0].src_slot, vec![0, 1]);
        assert_eq!(got[0][0].rows_from, vec![1, 1]);
        assert_eq!(got[0][0].x, [row(1.0, 2), row(3.0, 2)].concat());
        assert_eq!(got[0][1].src_slot, vec![2]);
        assert_eq!(got[1][1].src_pe, vec![1]);
        // Expert e doubles (e + 1) times: token 0 of PE 0 = 0.5·1·1 + 0.25·3·1 = 1.25.
        let scale = |e: usize, r: &[Bf16]| -> Vec<Bf16> {
            r.iter()
                .map(|v| Bf16::from_f32(v.to_f32() * (e + 1) as f32))
                .collect()
        };
        let back = low_latency_combine_token(&inputs[0], 0, 2, 2, scale);
        assert_eq!(back, row(1.25, 2));
        let twice = [PeInput {
            x: &x1,
            topk_idx: &[3, 3],
            topk_weights: &[1.0, 1.0],
        }];
        assert!(low_latency_dispatch(&twice, 2, 2, 4).is_err());
    }

    #[test]
    fn a_bad_expert_or_length_is_an_error() {
        let x = row(1.0, 2);
        let bad = [PeInput {
            x: &x,
            topk_idx: &[4],
            topk_weights: &[1.0],
        }];
        assert!(dispatch(&bad, 2, 1, 4).is_err());
        let short = [PeInput {
            x: &x[..1],
            topk_idx: &[0],
            topk_weights: &[1.0],
        }];
        assert!(dispatch(&short, 2, 1, 4).is_err());
    }
}
