//! [`Layout`]: where a PE's tokens go (DeepEP's `get_dispatch_layout`): tokens per PE, tokens
//! per expert, and which PEs each token visits. [`Layout::compute`] works it out on the host
//! (the reference the GPU's layout kernel is checked against); [`Buffer::layout`] on the GPU.
//!
//! [`Buffer::layout`]: crate::Buffer::layout

use ferroshmem_runtime::{Error, Result};

/// Where the tokens of one PE go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// PEs of the team.
    pub n_pes: usize,
    /// Tokens routed.
    pub tokens: usize,
    /// Per PE: tokens with at least one of their experts there (each such token is sent to
    /// that PE once).
    pub tokens_per_pe: Vec<usize>,
    /// Per expert: the (token, top-k slot) pairs routed to it.
    pub tokens_per_expert: Vec<usize>,
    /// `tokens × n_pes`, row-major: whether token `t` goes to PE `p`.
    pub is_token_in_pe: Vec<bool>,
}

impl Layout {
    /// The layout of `tokens` tokens whose experts are `topk_idx` (`tokens × top_k`,
    /// row-major; -1 is an empty slot), among `num_experts` experts spread evenly over
    /// `n_pes` PEs.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `topk_idx` is not `tokens × top_k` long, the experts
    /// do not divide among the PEs, or an index is below -1 or at least `num_experts` (the
    /// message names the first such token and its value).
    pub fn compute(
        topk_idx: &[i64],
        top_k: usize,
        num_experts: usize,
        n_pes: usize,
    ) -> Result<Layout> {
        if top_k == 0 || topk_idx.len() % top_k != 0 {
            return Err(Error::InvalidArgument(format!(
                "{} top-k indices are not whole rows of {top_k}",
                topk_idx.len()
            )));
        }
        if n_pes == 0 || num_experts % n_pes != 0 {
            return Err(Error::InvalidArgument(format!(
                "{num_experts} experts do not divide among {n_pes} PEs"
            )));
        }
        let tokens = topk_idx.len() / top_k;
        let local = num_experts / n_pes;
        let mut layout = Layout {
            n_pes,
            tokens,
            tokens_per_pe: vec![0; n_pes],
            tokens_per_expert: vec![0; num_experts],
            is_token_in_pe: vec![false; tokens * n_pes],
        };
        for (t, row) in topk_idx.chunks(top_k).enumerate() {
            for &e in row {
                if e == -1 {
                    continue;
                }
                let expert = usize::try_from(e)
                    .ok()
                    .filter(|&x| x < num_experts)
                    .ok_or_else(|| bad_expert(t, e, num_experts))?;
                layout.tokens_per_expert[expert] += 1;
                layout.is_token_in_pe[t * n_pes + expert / local] = true;
            }
        }
        for t in 0..tokens {
            for p in 0..n_pes {
                layout.tokens_per_pe[p] += usize::from(layout.is_token_in_pe[t * n_pes + p]);
            }
        }
        Ok(layout)
    }

    /// Whether token `t` goes to PE `pe`.
    pub fn is_in(&self, t: usize, pe: usize) -> bool {
        self.is_token_in_pe[t * self.n_pes + pe]
    }
}

/// The error of a top-k index outside the experts.
pub(crate) fn bad_expert(token: usize, value: i64, num_experts: usize) -> Error {
    Error::InvalidArgument(format!(
        "token {token} is routed to expert {value}, outside 0..{num_experts} (-1 marks an empty slot)"
    ))
}

#[cfg(test)]
mod tests {
    use super::Layout;

    #[test]
    fn counts_tokens_per_pe_once_and_per_expert_per_slot() {
        // 4 experts on 2 PEs (0, 1 | 2, 3); top-2.
        let topk = [0, 1, 1, 2, -1, 3, 3, -1];
        let l = Layout::compute(&topk, 2, 4, 2).unwrap();
        assert_eq!(l.tokens, 4);
        assert_eq!(l.tokens_per_pe, vec![2, 3]);
        assert_eq!(l.tokens_per_expert, vec![1, 2, 1, 2]);
        assert!(l.is_in(0, 0) && !l.is_in(0, 1));
        assert!(l.is_in(1, 0) && l.is_in(1, 1));
        assert!(!l.is_in(2, 0) && l.is_in(2, 1));
    }

    #[test]
    fn bad_indices_and_shapes_are_named() {
        let e = Layout::compute(&[0, 1, 4, 0], 2, 4, 2).unwrap_err();
        assert!(
            e.to_string().contains("token 1 is routed to expert 4"),
            "{e}"
        );
        let e = Layout::compute(&[0, -2], 2, 4, 2).unwrap_err();
        assert!(e.to_string().contains("expert -2"), "{e}");
        assert!(Layout::compute(&[0, 1, 2], 2, 4, 2).is_err());
        assert!(Layout::compute(&[0, 1], 2, 5, 2).is_err());
    }
}
