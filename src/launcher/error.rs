//! The launcher's error type, [`LaunchError`] (also that of the compiler wrappers), and the
//! exit code each error maps to.

use std::io;
use std::path::PathBuf;

/// Why a job could not be launched, or a compiler wrapper could not run the compiler. A job
/// that started and then failed is not an error: it is an [`Outcome`](super::Outcome).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The PE program (or the compiler) could not be started (not found, not executable, out
    /// of processes). PEs already started were killed.
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        /// The program, as given.
        program: String,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
    /// `ferroshmem cc` or `ferroshmem c++` did not find a part of the C API (its headers or
    /// its library) where it looks.
    #[error(
        "{what} not found in {}: build it with `cargo build -p ferroshmem-c` (with --release \
         for a release ferroshmem), or set {variable} to where it is",
        path.display()
    )]
    CapiMissing {
        /// What is missing.
        what: &'static str,
        /// The directory it was looked for in.
        path: PathBuf,
        /// The environment variable that names that directory instead.
        variable: &'static str,
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
