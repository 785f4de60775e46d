//! What the traffic counters are keyed by: the one-sided operation ([`Op`], the `op` label)
//! and the kind of a failed call's error ([`ErrorKind`], the `kind` label).

/// A one-sided operation, as the `op` label names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum Op {
    /// `put`, `p`, `put_nbi`.
    Put,
    /// `get`, `g`, `get_nbi`.
    Get,
    /// Strided put.
    Iput,
    /// Strided get.
    Iget,
    /// Any atomic memory operation.
    Amo,
    /// Put-with-signal (data and signal).
    PutSignal,
    /// A signal update alone.
    Signal,
}

impl Op {
    /// Every operation, in index order.
    pub const ALL: [Op; 7] = [
        Op::Put,
        Op::Get,
        Op::Iput,
        Op::Iget,
        Op::Amo,
        Op::PutSignal,
        Op::Signal,
    ];

    /// The `op` label value.
    pub fn label(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::Iput => "iput",
            Op::Iget => "iget",
            Op::Amo => "amo",
            Op::PutSignal => "put_signal",
            Op::Signal => "signal",
        }
    }
}

/// What an error must tell the metrics: its kind, the `kind` label of
/// `ferroshmem_errors_total` (`ferroshmem::Error::kind()`).
pub trait ErrorKind {
    /// A short stable name of the error's kind.
    fn kind(&self) -> &'static str;
}
