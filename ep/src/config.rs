//! [`Config`]: the shape a [`Buffer`](crate::Buffer) is sized for (tokens per PE, hidden size,
//! top-k, experts), its checks, and where each part of the symmetric region lies
//! ([`Regions`]).

use std::time::Duration;

use ferroshmem_runtime::{Error, Result};

use crate::bf16::Bf16;

/// The most PEs a buffer's team may have (the kernels keep a row pointer per PE).
pub const MAX_PES: usize = 64;
/// The most experts a buffer may route to (the layout kernel counts them in shared memory).
pub const MAX_EXPERTS: usize = 1024;
/// The most experts one token may be routed to.
pub const MAX_TOP_K: usize = 32;
/// The largest hidden size (elements of a token row): the kernels take it as a 32-bit
/// integer and index rows of it by 32-bit thread counts.
pub const MAX_HIDDEN: usize = 1 << 20;
/// The most blocks a buffer's kernels may be launched with (a grid far above any GPU's
/// multiprocessors, well below CUDA's limit).
pub const MAX_BLOCKS: u32 = 1 << 16;
/// Words at the head of each PE's row of a dispatch table: status, first bad token, its value.
pub(crate) const ROW_HEAD: usize = 3;
/// The hidden size above which [`LowLatencyCombine::Auto`] pulls: on one H200 with 8 PEs,
/// 128 tokens a PE, top-8 (`scripts/compare-moe`, since dispatches into two areas no longer
/// wait for the last combine's readers): the combine's kernel time 34.0 → 28.0 µs pulling at
/// 2048 and 49.3 → 37.8 at 4096, the dispatch level; at 128 pushing was 7 µs a round faster.
/// Sizes between 1024 and 2048 were not measured.
pub const PULL_ABOVE_HIDDEN: usize = 1024;

/// How a low-latency combine in place (the experts' results left in the received rows) gets
/// each row to its token's PE on the same node. Rows for PEs on other nodes are always sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LowLatencyCombine {
    /// [`Pull`](LowLatencyCombine::Pull) above [`PULL_ABOVE_HIDDEN`], else
    /// [`Push`](LowLatencyCombine::Push).
    #[default]
    Auto,
    /// The expert's PE writes each row into its token's PE (DeepEP's way), which then sums
    /// them: each row is read twice and written once more.
    Push,
    /// Each token's PE reads its rows where they lie and sums them: a third of the traffic, for
    /// a second area of packed rows (the next dispatch writes the other one; a captured round,
    /// which writes one area at every replay, first waits until every PE of the node has read
    /// the last replay's rows).
    Pull,
}

/// What a [`Buffer`](crate::Buffer) is sized for, the same on every PE (DeepEP's
/// `num_max_dispatch_tokens_per_rank`, `hidden`, `num_topk`, `num_experts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The most tokens one PE dispatches in one call.
    pub max_tokens: usize,
    /// Elements per token row (a multiple of 8: rows move in 16-byte pieces).
    pub hidden: usize,
    /// Experts per token (top-k).
    pub top_k: usize,
    /// Experts in all; PE `p` owns experts `p * E / n .. (p + 1) * E / n`.
    pub num_experts: usize,
    /// How long a call waits for the other PEs before it fails with
    /// [`Error::Timeout`] (the buffer is unusable afterwards).
    pub timeout: Duration,
    /// Thread blocks of the copy kernels per PE; `None` shares the GPU's multiprocessors
    /// among the PEs that use it (two blocks per multiprocessor of a PE's share; the
    /// low-latency kernels then take a block per 16 units of their work, up to four per
    /// multiprocessor for the send and eight for the combine).
    pub blocks: Option<u32>,
    /// Whether the buffer also serves the low-latency mode (its packed region takes
    /// `experts/PE × PEs × max_tokens` rows more).
    pub low_latency: bool,
    /// How a low-latency combine in place gets its rows back within a node.
    pub low_latency_combine: LowLatencyCombine,
}

impl Config {
    /// A configuration with the default timeout (60 s) and block count.
    pub fn new(max_tokens: usize, hidden: usize, top_k: usize, num_experts: usize) -> Config {
        Config {
            max_tokens,
            hidden,
            top_k,
            num_experts,
            timeout: Duration::from_secs(60),
            blocks: None,
            low_latency: false,
            low_latency_combine: LowLatencyCombine::Auto,
        }
    }

    /// As [`Config::new`], serving the low-latency mode too (DeepEP's
    /// `low_latency_mode=True`; `max_tokens` is its `num_max_dispatch_tokens_per_rank`).
    pub fn low_latency(
        max_tokens: usize,
        hidden: usize,
        top_k: usize,
        num_experts: usize,
    ) -> Config {
        Config {
            low_latency: true,
            ..Config::new(max_tokens, hidden, top_k, num_experts)
        }
    }

    /// Whether low-latency combines in place pull (see [`LowLatencyCombine`]).
    pub fn pulls(&self) -> bool {
        match self.low_latency_combine {
            LowLatencyCombine::Auto => self.hidden > PULL_ABOVE_HIDDEN,
            LowLatencyCombine::Push => false,
            LowLatencyCombine::Pull => true,
        }
    }

    /// Experts each PE owns in a team of `n_pes`.
    pub fn local_experts(&self, n_pes: usize) -> usize {
        self.num_experts / n_pes.max(1)
    }

    /// Checks the configuration for a team of `n_pes`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] saying what cannot be used.
    pub fn check(&self, n_pes: usize) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidArgument(format!("ep buffer: {what}")));
        if n_pes == 0 || n_pes > MAX_PES {
            return bad(format!("{n_pes} PEs (1 to {MAX_PES} are supported)"));
        }
        if self.max_tokens == 0 || self.max_tokens > i32::MAX as usize / n_pes {
            return bad(format!("max_tokens {} (1 to 2^31 / PEs)", self.max_tokens));
        }
        if self.hidden == 0 || self.hidden % 8 != 0 || self.hidden > MAX_HIDDEN {
            return bad(format!(
                "hidden {} (a positive multiple of 8, at most {MAX_HIDDEN})",
                self.hidden
            ));
        }
        if self.num_experts == 0 || self.num_experts > MAX_EXPERTS {
            return bad(format!("{} experts (1 to {MAX_EXPERTS})", self.num_experts));
        }
        if self.num_experts % n_pes != 0 {
            return bad(format!(
                "{} experts do not divide among {n_pes} PEs",
                self.num_experts
            ));
        }
        if self.top_k == 0 || self.top_k > self.num_experts.min(MAX_TOP_K) {
            return bad(format!(
                "top_k {} (1 to {})",
                self.top_k,
                self.num_experts.min(MAX_TOP_K)
            ));
        }
        if let Some(blocks) = self.blocks.filter(|&b| b == 0 || b > MAX_BLOCKS) {
            return bad(format!("{blocks} blocks (1 to {MAX_BLOCKS})"));
        }
        Regions::new(self, n_pes, false).map(|_| ())
    }
}

/// Byte offsets of the parts of a buffer's symmetric region (the same on every PE), each
/// aligned to 256 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Regions {
    /// Four counters, each a 64-bit word per source PE that the source sets to its call
    /// number: notified, dispatched, combine-ready, combined; then the low-latency mode's
    /// signals, if any (all zeroed at creation).
    pub counters: usize,
    /// Bytes of the counters and signals.
    pub counter_bytes: usize,
    /// The dispatch table: a row of `dispatch_width` `i32` per PE.
    pub dispatch_table: usize,
    /// The combine table: a row of [`ROW_HEAD`] `i32` per PE.
    pub combine_table: usize,
    /// Received token rows (`n * max_tokens` rows of `hidden` [`Bf16`]); combine's input.
    pub recv_x: usize,
    /// Each received FP8 row's scales (`hidden / 128` `f32` a row).
    pub recv_scales: usize,
    /// Each received row's index on its source PE (`i32`).
    pub recv_src: usize,
    /// Each received row's top-k experts, local to this PE or -1 (`i64`, `top_k` a row).
    pub recv_topk_idx: usize,
    /// Each received row's top-k weights (`f32`, `top_k` a row; 0 where the index is -1).
    pub recv_topk_weights: usize,
    /// The low-latency mode's parts, if the buffer serves it.
    pub low_latency: Option<LowLatencyRegions>,
    /// Where transfers to and from other nodes are staged, if the job spans nodes.
    pub network: Option<NetworkRegions>,
    /// Bytes in all.
    pub bytes: usize,
    /// `i32` words in one row of the dispatch table: head, tokens to each PE, tokens to
    /// each expert.
    pub dispatch_width: usize,
}

/// Byte offsets of the low-latency mode's parts of the region (`L` local experts, `n` PEs,
/// `T` tokens at most per PE). Signals and place counters lie among the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LowLatencyRegions {
    /// Dispatch signals, `L × n` words: (call << 32) | rows from each source per expert.
    pub signals: usize,
    /// Combine signals, `n` words: the last call whose rows each PE sent back.
    pub combine_signals: usize,
    /// Place counters, `L` `u32`: senders take each row's place among an expert's rows here.
    pub places: usize,
    /// Reduced signals, `n` words where combines pull: how much of the rows this PE's
    /// combines left in place each PE of this node has read (counted by its reduce).
    pub reduced: usize,
    /// Rows packed per local expert: `L × (n × T)` rows, in the order senders took places.
    /// Two areas where combines pull (a dispatch writes the area its predecessor did not,
    /// so that none overwrites rows the other PEs may still be reading), else one, twice.
    pub packed: [usize; 2],
    /// The packed rows cast to FP8 by an FP8 dispatch: `L × (n × T)` rows of `hidden` bytes.
    pub packed_fp8: usize,
    /// Their scales: `hidden / 128` `f32` a row.
    pub packed_scales: usize,
    /// Each packed row's source PE (`i32`).
    pub packed_pe: usize,
    /// Each packed row's (token × top_k + slot) on its source (`i32`).
    pub packed_slot: usize,
    /// Rows sent back to this PE by combine: `T × top_k` rows, by (token, slot).
    pub back: usize,
}

/// Warps of the normal-mode combine's grid where the job spans nodes: each has a staging
/// slot of `min(top_k, n)` rows for the rows it fetches from other nodes.
pub(crate) const NETWORK_COMBINE_WARPS: usize = 128;

/// Byte offsets of the network path's staging parts (a job that spans nodes): a put to
/// another node reads its source, and a get writes its destination, through this PE's
/// symmetric heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NetworkRegions {
    /// The exchange's row (`dispatch_width` `i32`).
    pub exchange_row: usize,
    /// A record per token: its row (BF16, or FP8 with its scales after it), 16-byte aligned.
    pub rows: usize,
    /// `top_k` records per token: its local top-k (`i64`) then weights (`f32`) for one receiver.
    pub meta: usize,
    /// The combine's fetched rows: [`NETWORK_COMBINE_WARPS`] × `min(top_k, n)` BF16 rows.
    pub fetched: usize,
    /// Low-latency mode's parts.
    pub low_latency: Option<NetworkLowLatency>,
}

/// Byte offsets of the low-latency mode's network parts (`L` local experts, `n` PEs, `T`
/// tokens at most per PE). Rows for another node's experts land in records of their own, a
/// part per (local expert, source), rather than among the packed rows: the places there
/// would be taken by atomics on the receiver (see `low_latency.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NetworkLowLatency {
    /// A BF16 row (or its FP8 cast and scales) per (token, slot) pair, staged to be put.
    pub pairs: usize,
    /// `L × n × T` records of a BF16 row's size: the rows from each source on another node,
    /// as its puts landed (an FP8 row is followed by its scales).
    pub landing: usize,
    /// Each landing record's (token × top_k + slot) on its source (`i32`).
    pub landing_slot: usize,
    /// Per (local expert, source): where its landed rows go among the expert's packed rows,
    /// and how many (two `i32`), as the receive hook found them.
    pub landed: usize,
}

impl NetworkRegions {
    /// Lays the staging parts out with `part` (which returns each part's offset).
    fn new(
        config: &Config,
        n: usize,
        dispatch_width: usize,
        part: &mut impl FnMut(Option<usize>) -> Result<usize>,
    ) -> Result<NetworkRegions> {
        let row_bytes = config.hidden.checked_mul(2);
        let record = row_bytes
            .and_then(|b| b.checked_add(config.hidden / 128 * 4))
            .and_then(|b| b.checked_next_multiple_of(16));
        let meta = (config.top_k * 12).next_multiple_of(16);
        let pairs = config.max_tokens.checked_mul(config.top_k);
        let fetch_rows = NETWORK_COMBINE_WARPS * config.top_k.min(n);
        let exchange_row = part(dispatch_width.checked_mul(4))?;
        let rows = part(record.and_then(|r| r.checked_mul(config.max_tokens)))?;
        let meta = part(pairs.and_then(|p| p.checked_mul(meta)))?;
        let fetched = part(row_bytes.and_then(|b| b.checked_mul(fetch_rows)))?;
        let low_latency = match config.low_latency {
            false => None,
            true => {
                let parts = (config.num_experts / n.max(1)).checked_mul(n);
                let records = parts.and_then(|p| p.checked_mul(config.max_tokens));
                Some(NetworkLowLatency {
                    pairs: part(pairs.zip(row_bytes).and_then(|(p, b)| p.checked_mul(b)))?,
                    landing: part(records.zip(row_bytes).and_then(|(r, b)| r.checked_mul(b)))?,
                    landing_slot: part(records.and_then(|r| r.checked_mul(4)))?,
                    landed: part(parts.and_then(|p| p.checked_mul(8)))?,
                })
            }
        };
        Ok(NetworkRegions {
            exchange_row,
            rows,
            meta,
            fetched,
            low_latency,
        })
    }
}

/// Counter indices within [`Regions::counters`].
pub(crate) mod counter {
    /// Rows of the dispatch table arrived.
    pub const NOTIFIED: usize = 0;
    /// Token rows of a dispatch arrived.
    pub const DISPATCHED: usize = 1;
    /// Rows of the combine table arrived (every PE's combine input is in place).
    pub const COMBINE_READY: usize = 2;
    /// Every PE has read this PE's combine input.
    pub const COMBINED: usize = 3;
}

impl Regions {
    /// Lays the region out for `config` on a team of `n` PEs.
    pub fn new(config: &Config, n: usize, spans_nodes: bool) -> Result<Regions> {
        let overflow = || Error::InvalidArgument("ep buffer: its size overflows".into());
        let rows = n.checked_mul(config.max_tokens).ok_or_else(overflow)?;
        let dispatch_width = ROW_HEAD + n + config.num_experts;
        let mut at = 0usize;
        let mut part = |bytes: Option<usize>| -> Result<usize> {
            let start = at;
            let bytes = bytes.ok_or_else(overflow)?;
            at = start
                .checked_add(bytes)
                .and_then(|end| end.checked_next_multiple_of(256))
                .ok_or_else(overflow)?;
            Ok(start)
        };
        let local = config.num_experts / n.max(1);
        // Four counters of n words; low latency: dispatch signals (L × n), combine signals
        // (n), place counters (L u64), reduced signals (n).
        let counter_words = match config.low_latency {
            true => local
                .checked_mul(n)
                .and_then(|w| w.checked_add(4 * n + n + local + n)),
            false => Some(4 * n),
        };
        let counters = part(counter_words.and_then(|w| w.checked_mul(8)))?;
        let dispatch_table = part(n.checked_mul(dispatch_width * 4))?;
        let combine_table = part(Some(n * ROW_HEAD * 4))?;
        let row_bytes = config.hidden.checked_mul(std::mem::size_of::<Bf16>());
        let recv_x = part(row_bytes.and_then(|b| b.checked_mul(rows)))?;
        let recv_scales = part(rows.checked_mul(config.hidden / 128 * 4))?;
        let recv_src = part(rows.checked_mul(4))?;
        let per_row = |width: usize| config.top_k.checked_mul(width)?.checked_mul(rows);
        let recv_topk_idx = part(per_row(8))?;
        let recv_topk_weights = part(per_row(4))?;
        let low_latency = match config.low_latency {
            false => None,
            true => {
                let staged = local.checked_mul(rows).ok_or_else(overflow)?;
                let rows_of = |count: usize| row_bytes.and_then(|b| b.checked_mul(count));
                Some(LowLatencyRegions {
                    signals: counters + 4 * n * 8,
                    combine_signals: counters + (4 * n + local * n) * 8,
                    places: counters + (4 * n + local * n + n) * 8,
                    reduced: counters + (4 * n + local * n + n + local) * 8,
                    packed: {
                        let first = part(rows_of(staged))?;
                        match config.pulls() {
                            true => [first, part(rows_of(staged))?],
                            false => [first; 2],
                        }
                    },
                    packed_fp8: part(staged.checked_mul(config.hidden))?,
                    packed_scales: part(staged.checked_mul(config.hidden / 128 * 4))?,
                    packed_pe: part(staged.checked_mul(4))?,
                    packed_slot: part(staged.checked_mul(4))?,
                    back: part(rows_of(config.max_tokens * config.top_k))?,
                })
            }
        };
        let network = match spans_nodes {
            true => Some(NetworkRegions::new(config, n, dispatch_width, &mut part)?),
            false => None,
        };
        Ok(Regions {
            low_latency,
            network,
            counter_bytes: dispatch_table - counters,
            counters,
            dispatch_table,
            combine_table,
            recv_x,
            recv_scales,
            recv_src,
            recv_topk_idx,
            recv_topk_weights,
            bytes: at,
            dispatch_width,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deepseek_shapes_are_accepted_and_sized() {
        let c = Config::new(4096, 7168, 8, 256);
        c.check(8).unwrap();
        let r = Regions::new(&c, 8, false).unwrap();
        assert_eq!(r.dispatch_width, 3 + 8 + 256);
        // 8 × 4096 rows of 7168 bf16 dominate: 448 MiB, and 7 MiB of FP8 scales among the rest.
        assert!(r.bytes > 8 * 4096 * 7168 * 2 && r.bytes < 8 * 4096 * 7168 * 2 + (16 << 20));
        for part in [r.counters, r.dispatch_table, r.recv_x, r.recv_topk_idx] {
            assert_eq!(part % 256, 0);
        }
    }

    #[test]
    fn a_job_across_nodes_gets_staging_after_the_rest() {
        let c = Config::new(4096, 7168, 8, 256);
        let one_node = Regions::new(&c, 8, false).unwrap();
        let r = Regions::new(&c, 8, true).unwrap();
        let net = r.network.unwrap();
        assert!(one_node.network.is_none());
        assert_eq!(net.exchange_row, one_node.bytes);
        // A record per token (row and scales), 8 metadata records per token, 128 warps × 8
        // fetched rows; no low-latency pairs on a normal buffer.
        assert_eq!(net.meta - net.rows, 4096 * (7168 * 2 + 56 * 4));
        assert_eq!(net.fetched - net.meta, 4096 * 8 * 96);
        assert_eq!(r.bytes - net.fetched, 128 * 8 * 7168 * 2);
        assert!(net.low_latency.is_none());
        let ll = Config::low_latency(128, 7168, 8, 256);
        let r = Regions::new(&ll, 8, true).unwrap();
        let net = r.network.unwrap().low_latency.unwrap();
        // 128 × 8 staged pairs; 32 experts × 8 sources × 128 landing records and their
        // slots; a (place, rows) pair per (expert, source).
        assert_eq!(net.landing - net.pairs, 128 * 8 * 7168 * 2);
        assert_eq!(net.landing_slot - net.landing, 32 * 8 * 128 * 7168 * 2);
        assert_eq!(net.landed - net.landing_slot, 32 * 8 * 128 * 4);
        assert_eq!(r.bytes - net.landed, 32 * 8 * 8);
    }

    #[test]
    fn sizes_the_kernels_cannot_take_are_refused() {
        let ok = Config::new(128, 1024, 4, 16);
        let wide = Config {
            hidden: 1 << 31,
            ..ok.clone()
        };
        let err = wide.check(4).unwrap_err().to_string();
        assert!(err.contains("hidden 2147483648"), "{err}");
        for (blocks, says) in [(u32::MAX, "4294967295 blocks"), (0, "0 blocks")] {
            let c = Config {
                blocks: Some(blocks),
                ..ok.clone()
            };
            let err = c.check(4).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
        let most = Config {
            hidden: MAX_HIDDEN,
            blocks: Some(MAX_BLOCKS),
            ..ok.clone()
        };
        assert!(most.check(4).is_ok());
    }

    #[test]
    fn bad_shapes_are_refused_with_what_is_wrong() {
        let ok = Config::new(128, 1024, 4, 16);
        let cases: Vec<(Config, usize, &str)> = vec![
            (
                Config {
                    hidden: 100,
                    ..ok.clone()
                },
                4,
                "hidden 100",
            ),
            (
                Config {
                    num_experts: 18,
                    ..ok.clone()
                },
                4,
                "do not divide",
            ),
            (
                Config {
                    top_k: 0,
                    ..ok.clone()
                },
                4,
                "top_k 0",
            ),
            (
                Config {
                    top_k: 17,
                    ..ok.clone()
                },
                4,
                "top_k 17",
            ),
            (
                Config {
                    max_tokens: 0,
                    ..ok.clone()
                },
                4,
                "max_tokens 0",
            ),
            (
                Config {
                    num_experts: 2048,
                    ..ok.clone()
                },
                4,
                "2048 experts",
            ),
            (
                Config {
                    blocks: Some(0),
                    ..ok.clone()
                },
                4,
                "0 blocks",
            ),
            (ok.clone(), 65, "65 PEs"),
            (
                Config {
                    max_tokens: usize::MAX / 2,
                    ..ok.clone()
                },
                4,
                "max_tokens",
            ),
        ];
        for (config, n, says) in cases {
            let err = config.check(n).unwrap_err().to_string();
            assert!(err.contains(says), "{err:?} should say {says:?}");
        }
        ok.check(4).unwrap();
    }

    #[test]
    fn a_pulling_buffer_gets_two_areas_of_packed_rows_and_a_pushing_one_one() {
        let row_bytes = 7168 * 2;
        let rows = 32 * 8 * 128;
        let pulling = Config::low_latency(128, 7168, 8, 256);
        assert!(pulling.pulls());
        let pushing = Config {
            low_latency_combine: LowLatencyCombine::Push,
            ..pulling.clone()
        };
        let two = Regions::new(&pulling, 8, false).unwrap();
        let one = Regions::new(&pushing, 8, false).unwrap();
        let [a, b] = two.low_latency.unwrap().packed;
        assert!(b >= a + rows * row_bytes, "the areas overlap: {a} and {b}");
        let [c, d] = one.low_latency.unwrap().packed;
        assert_eq!(c, d);
        assert_eq!(two.bytes - one.bytes, rows * row_bytes);
    }
}
