//! The error type of ferroshmem: every fallible call of the runtime, the actors and the GPU
//! layer returns [`Error`]. Errors of one kind of cause are variants (a PE out of range, a
//! lost peer, a team in the wrong state), so that callers can match them; the GPU layer's own
//! causes are grouped in [`GpuError`], one variant of [`Error`]. (The launcher's errors, which
//! no PE sees, are the facade's `LaunchError`.)

use std::time::Duration;

/// Result alias used throughout ferroshmem.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong. Bad input never panics: it comes back as one of these variants, and the
/// operation that reported it has changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A PE number at or beyond the number of PEs in the job (or team).
    #[error("PE {pe} is out of range: the job has {n_pes} PEs")]
    PeOutOfRange {
        /// The PE asked for.
        pe: usize,
        /// The number of PEs.
        n_pes: usize,
    },
    /// A symmetric handle that does not belong to this job's symmetric heap (another job's or
    /// world's handle, or one built from an address that was never allocated symmetrically).
    #[error("address is outside this job's symmetric heap")]
    NotSymmetric,
    /// An access past the end of a symmetric allocation or a local buffer.
    #[error("out of bounds: {what} needs {needed} elements but has {available}")]
    OutOfBounds {
        /// Which operand overflowed.
        what: &'static str,
        /// Elements the operation needs.
        needed: usize,
        /// Elements available.
        available: usize,
    },
    /// An atomic or signal operation on an address that is not aligned to its width.
    #[error("misaligned atomic: offset {offset} is not a multiple of {align}")]
    MisalignedAtomic {
        /// Byte offset in the symmetric heap.
        offset: usize,
        /// Required alignment in bytes.
        align: usize,
    },
    /// An alignment that is zero or not a power of two.
    #[error("invalid alignment {0}: it must be a power of two")]
    InvalidAlignment(usize),
    /// A power-of-two alignment larger than the heap's addresses are aligned: the host heap
    /// aligns to its size rounded up to a power of two (at most 1 GiB), a GPU heap to 64 KiB.
    #[error("alignment {align} is larger than this symmetric heap can give: its addresses are aligned to {max} bytes")]
    AlignmentTooLarge {
        /// The alignment asked for, in bytes.
        align: usize,
        /// The largest alignment the heap gives, in bytes.
        max: usize,
    },
    /// The symmetric heap has no free range large enough.
    #[error("symmetric heap exhausted: {requested} bytes requested, largest free range is {available} bytes (heap size {heap_size}; raise FERROSHMEM_SYMMETRIC_SIZE)")]
    HeapExhausted {
        /// Bytes requested (after rounding).
        requested: usize,
        /// The largest contiguous free range.
        available: usize,
        /// The whole heap's usable size.
        heap_size: usize,
    },
    /// A collective call that PEs made with different arguments or in a different order.
    #[error("collective mismatch in {operation}: {detail}")]
    CollectiveMismatch {
        /// The collective call.
        operation: &'static str,
        /// What differed, naming the PEs involved.
        detail: String,
    },
    /// The job could not start: names the PE and address where it failed.
    #[error("bootstrap failed: {0}")]
    Bootstrap(String),
    /// A peer PE exited or crashed; the job cannot continue.
    #[error("PE {pe} was lost: {reason}")]
    PeerLost {
        /// The PE that was lost.
        pe: usize,
        /// What is known about why.
        reason: String,
    },
    /// A wait, barrier or bootstrap step ran past its deadline.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        /// What timed out.
        operation: &'static str,
        /// How long it waited.
        after: Duration,
    },
    /// A configuration variable that cannot be used.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// An argument that cannot be used (a zero stride, mismatched lengths, …).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The runtime has shut down (the PE finished or the job ended).
    #[error("the PE has shut down")]
    Shutdown,
    /// An operating-system call failed.
    #[error("{context}: {message}")]
    Os {
        /// What was being done.
        context: &'static str,
        /// The OS error text.
        message: String,
    },
    /// The GPU layer failed (`ferroshmem-gpu`): no GPU, a driver call, a kernel's source.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// `set_lock`/`test_lock` on a lock this PE already holds or waits for (from another
    /// task).
    #[error("this PE already holds this lock or is waiting for it")]
    LockHeld,
    /// `clear_lock` on a lock this PE does not hold.
    #[error("this PE does not hold the lock it was asked to release")]
    LockNotHeld,
    /// A collective called on a team while another collective of this PE runs on it.
    #[error("another collective is already running on this team on this PE")]
    TeamBusy,
    /// A team or this PE's world barrier after one of its calls was given up midway (its
    /// future dropped): its members no longer agree on where they are, so it cannot be used.
    #[error("a call on {what} was given up midway, so its PEs no longer agree: it cannot be used")]
    Desynchronized {
        /// What cannot be used: `this team` or `this PE's world barrier`.
        what: &'static str,
    },
    /// A team used after [`destroy`](crate::Team::destroy).
    #[error("the team has been destroyed")]
    TeamDestroyed,
    /// A PE on another node that this PE has no transport to (a data plane built without
    /// one, or a transport that lacks that PE).
    #[error("PE {pe} is on another node and this PE has no transport to it")]
    NotMapped {
        /// The PE.
        pe: usize,
    },
    /// An operation's future polled again after it had completed.
    #[error("an operation's future was polled after it completed")]
    Polled,
    /// A PE's task panicked.
    #[error("PE {pe} panicked: {message}")]
    Panicked {
        /// The PE whose task panicked.
        pe: usize,
        /// The panic message.
        message: String,
    },
}

/// What went wrong in the GPU layer: the [`Error::Gpu`] variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// No GPU, or no usable CUDA driver or NVRTC library, where one was required: a normal
    /// answer on machines without one.
    #[error("no GPU: {0}")]
    NoGpu(String),
    /// A CUDA driver call failed: what was being done and the driver's answer.
    #[error("CUDA: {0}")]
    Driver(String),
    /// NVRTC refused a kernel's source.
    #[error("NVRTC compilation failed:\n{log}")]
    Compile {
        /// NVRTC's log.
        log: String,
    },
    /// Two PEs' GPUs that must reach each other peer to peer cannot.
    #[error("GPU {gpu} of PE {pe} cannot reach GPU {peer_gpu} of PE {peer}: {why}")]
    Unreachable {
        /// The PE that found out.
        pe: usize,
        /// Its GPU's ordinal.
        gpu: usize,
        /// The PE it cannot reach.
        peer: usize,
        /// That PE's GPU's ordinal.
        peer_gpu: usize,
        /// What is missing.
        why: &'static str,
    },
    /// A kernel compiled with the device library's checks (`FERROSHMEM_DEVICE_DEBUG=1`)
    /// reported a bad call: the operation, PE, address, block and thread.
    #[error("device check failed: {0}")]
    DeviceCheck(String),
    /// A module compiled without the device library's network path (by a PE of a job on one
    /// node) was loaded on a PE whose job spans nodes, where its device functions would take
    /// every peer for a mapped one.
    #[error("PE {pe}: the module was compiled without the network path, which this job (spanning nodes) needs: compile it with GpuPe::compile on a PE of this job")]
    NoNetworkPath {
        /// The PE that refused it.
        pe: usize,
    },
}

impl GpuError {
    /// A short stable name of the variant, used as a metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            GpuError::NoGpu(_) => "no_gpu",
            GpuError::Driver(_) => "cuda",
            GpuError::Compile { .. } => "compile",
            GpuError::Unreachable { .. } => "gpu_unreachable",
            GpuError::DeviceCheck(_) => "device_check",
            GpuError::NoNetworkPath { .. } => "no_network_path",
        }
    }
}

impl Error {
    /// [`GpuError::NoGpu`], saying why.
    pub fn no_gpu(why: impl Into<String>) -> Self {
        Error::Gpu(GpuError::NoGpu(why.into()))
    }

    /// [`GpuError::Driver`], saying what failed.
    pub fn cuda(what: impl Into<String>) -> Self {
        Error::Gpu(GpuError::Driver(what.into()))
    }

    /// Wraps an OS error with what was being done.
    pub fn os(context: &'static str, err: impl std::fmt::Display) -> Self {
        Error::Os {
            context,
            message: err.to_string(),
        }
    }

    /// A short stable name of the variant, used as a metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::PeOutOfRange { .. } => "pe_out_of_range",
            Error::NotSymmetric => "not_symmetric",
            Error::OutOfBounds { .. } => "out_of_bounds",
            Error::MisalignedAtomic { .. } => "misaligned_atomic",
            Error::InvalidAlignment(_) => "invalid_alignment",
            Error::AlignmentTooLarge { .. } => "alignment_too_large",
            Error::HeapExhausted { .. } => "heap_exhausted",
            Error::CollectiveMismatch { .. } => "collective_mismatch",
            Error::Bootstrap(_) => "bootstrap",
            Error::PeerLost { .. } => "peer_lost",
            Error::Timeout { .. } => "timeout",
            Error::Config(_) => "config",
            Error::InvalidArgument(_) => "invalid_argument",
            Error::Shutdown => "shutdown",
            Error::Os { .. } => "os",
            Error::Gpu(gpu) => gpu.kind(),
            Error::LockHeld => "lock_held",
            Error::LockNotHeld => "lock_not_held",
            Error::TeamBusy => "team_busy",
            Error::Desynchronized { .. } => "desynchronized",
            Error::TeamDestroyed => "team_destroyed",
            Error::NotMapped { .. } => "not_mapped",
            Error::Polled => "polled",
            Error::Panicked { .. } => "panicked",
        }
    }
}

impl ferroshmem_observability::ErrorKind for Error {
    fn kind(&self) -> &'static str {
        Error::kind(self)
    }
}
