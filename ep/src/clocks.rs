//! Kernel clocks: how long a PE's low-latency kernels ran on the GPU, read from the GPU's own
//! timer inside them, as a profiler's kernel times are (DeepEP reports its low-latency figures
//! so), apart from what the host's launches and the stream's events add around them.
//!
//! While a buffer's clocks are on ([`Buffer::clock_kernels`]), each low-latency kernel keeps
//! the earliest start and the latest end of its blocks (their first threads', on
//! `%globaltimer`, in nanoseconds) since the last reading; [`Buffer::take_kernel_clocks`]
//! reads them once the buffer's stream has run the kernels, and starts over. A kernel that
//! ran more than once between two readings shows its first start and its last end.

use ferroshmem_runtime::Result;

use crate::Buffer;

/// Kernels with a clock: the dispatch's wait for the last in-place combine to be read, send,
/// receive hook and gather; the combine's send-back and reduce (`EP_CLOCK_*` in
/// low_latency.cu, in this order).
pub(crate) const KERNELS: usize = 6;
/// The dispatch's kernels among them, then the combine's.
const DISPATCH: std::ops::Range<usize> = 0..4;
const COMBINE: std::ops::Range<usize> = 4..6;

/// The low-latency kernels' clocks since the last reading: per kernel that ran, its first
/// block's start and its last block's end on the GPU's timer, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelClocks {
    spans: [Option<(u64, u64)>; KERNELS],
}

impl KernelClocks {
    /// The clocks of the kernel words the GPU kept (two per kernel: start, end).
    fn from_words(words: &[u64]) -> KernelClocks {
        let mut spans = [None; KERNELS];
        for (k, span) in spans.iter_mut().enumerate() {
            if let (Some(&start), Some(&end)) = (words.get(2 * k), words.get(2 * k + 1)) {
                // Never reset (a fresh module's zeros) or not run since: no span.
                *span = (start != u64::MAX && end != 0 && end >= start).then_some((start, end));
            }
        }
        KernelClocks { spans }
    }

    /// Nanoseconds from the first start to the last end of the dispatch's kernels that ran
    /// (send, and the receive hook, its wait and its gather where they ran), or `None`.
    pub fn dispatch_ns(&self) -> Option<u64> {
        self.span_of(DISPATCH)
    }

    /// Nanoseconds from the first start to the last end of the combine's kernels that ran
    /// (send-back and reduce), or `None`.
    pub fn combine_ns(&self) -> Option<u64> {
        self.span_of(COMBINE)
    }

    fn span_of(&self, kernels: std::ops::Range<usize>) -> Option<u64> {
        let ran = self.spans[kernels].iter().flatten();
        let start = ran.clone().map(|&(s, _)| s).min()?;
        let end = ran.map(|&(_, e)| e).max()?;
        Some(end - start)
    }
}

impl Buffer {
    /// Turns this PE's low-latency kernel clocks on (or off), for the kernels queued on the
    /// buffer's stream from now on, and starts them over. Off by default; on, each kernel's
    /// first threads of each block make one atomic each at their start and end.
    ///
    /// # Errors
    /// A driver error.
    pub fn clock_kernels(&mut self, on: bool) -> Result<()> {
        self.kernels.set_clocks(&self.stream, on)
    }

    /// The low-latency kernels' clocks since the last reading (or since they were turned
    /// on), once the buffer's stream has run what was queued on it: this waits for the stream.
    /// Then they start over.
    ///
    /// # Errors
    /// A driver error.
    pub fn take_kernel_clocks(&mut self) -> Result<KernelClocks> {
        let words = self.kernels.take_clocks(&self.stream)?;
        Ok(KernelClocks::from_words(&words))
    }
}

#[cfg(test)]
mod tests {
    use super::KernelClocks;

    #[test]
    fn spans_run_from_the_first_start_to_the_last_end_of_the_kernels_that_ran() {
        let mut words = vec![
            u64::MAX,
            0,
            100,
            180,
            170,
            260,
            u64::MAX,
            0,
            500,
            540,
            530,
            700,
        ];
        let clocks = KernelClocks::from_words(&words);
        assert_eq!(clocks.dispatch_ns(), Some(160));
        assert_eq!(clocks.combine_ns(), Some(200));
        words[8..].copy_from_slice(&[u64::MAX, 0, u64::MAX, 0]);
        assert_eq!(KernelClocks::from_words(&words).combine_ns(), None);
        assert_eq!(KernelClocks::from_words(&[]), KernelClocks::default());
        assert_eq!(KernelClocks::from_words(&[0; 12]), KernelClocks::default());
    }
}
