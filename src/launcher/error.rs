//! The launcher's error type, [`LaunchError`], and the exit code each error maps to.

use std::io;

/// Why a job could not be launched. A job that started and then failed is not an error: it
/// is an [`Outcome`](super::Outcome).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The PE program could not be started (not found, not executable, out of processes).
    /// PEs already started were killed.
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        /// The program, as given.
        program: String,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
    /// Setting the job up failed: bad options, the bootstrap root, the signal handlers.
    #[error(transparent)]
    Setup(#[from] crate::Error),
}

impl LaunchError {
    /// The launcher's exit code for this error, following the shell: 127 when the program
    /// was not found, 126 when it may not be executed, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            LaunchError::Spawn { source, .. } if source.kind() == io::ErrorKind::NotFound => 127,
            LaunchError::Spawn { source, .. }
                if source.kind() == io::ErrorKind::PermissionDenied =>
            {
                126
            }
            _ => 1,
        }
    }
}
