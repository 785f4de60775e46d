//! # ferroshmem-c
//!
//! OpenSHMEM 1.5's C API over ferroshmem, as a shared and a static library
//! (`libferroshmem_c.so`, `libferroshmem_c.a`) with `shmem.h` and `shmemx.h` (in `include/`),
//! so that existing OpenSHMEM programs build and run on ferroshmem with their names changed
//! only (`ferroshmem cc`, `ferroshmem run -np N`).
//!
//! ## Layout
//!
//! One module per family of routines, each exporting the C symbols of its family; the typed
//! families are generated per type from OpenSHMEM's type tables (a module per type). Every
//! routine is a thin body over the Rust API: [`state`] holds this process's PE, turns the C
//! caller's pointers into symmetric views, and runs each operation to its end, and `raw`
//! is the one module that reads the caller's memory through raw pointers.
//!
//! ## Errors
//!
//! OpenSHMEM's C routines return no errors. Where the specification leaves an outcome
//! undefined (an address outside the symmetric heap, a PE out of range, a lost peer, a
//! call before `shmem_init`), the routine prints its name, the error and the PE, then ends
//! the job with a non-zero status: never a silent corruption, never a hang.

mod active_set;
pub mod amo;
pub mod amo_deprecated;
pub mod collectives;
pub mod ctx;
#[cfg(target_env = "gnu")]
mod exit;
pub mod extras;
pub mod locks;
pub mod memory;
mod raw;
pub mod rma;
pub mod setup;
pub mod signals;
pub mod state;
mod static_data;
pub mod teams;
pub mod types;
pub mod waits;

#[cfg(test)]
mod tests {
    use ferroshmem_runtime::{LIBRARY_NAME, SPEC_VERSION};

    /// `shmem.h` as shipped.
    const HEADER: &str = include_str!("../include/shmem.h");

    /// The value of `#define NAME VALUE` in the header.
    fn define(name: &str) -> Option<&'static str> {
        HEADER.lines().find_map(|line| {
            let rest = line.strip_prefix("#define ")?.strip_prefix(name)?;
            rest.starts_with(' ').then(|| rest.trim())
        })
    }

    #[test]
    fn the_header_names_the_library_and_version_the_runtime_reports() {
        assert_eq!(
            define("SHMEM_VENDOR_STRING"),
            Some(format!("\"{LIBRARY_NAME}\"").as_str())
        );
        assert_eq!(
            define("SHMEM_MAJOR_VERSION"),
            Some(SPEC_VERSION.0.to_string().as_str())
        );
        assert_eq!(
            define("SHMEM_MINOR_VERSION"),
            Some(SPEC_VERSION.1.to_string().as_str())
        );
        let max_name: usize = define("SHMEM_MAX_NAME_LEN")
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert_eq!(max_name, crate::setup::MAX_NAME_LEN);
    }

    #[test]
    fn the_headers_handles_and_codes_are_the_librarys() {
        for (name, value) in [
            ("SHMEM_TEAM_WORLD", "((shmem_team_t)1)"),
            ("SHMEM_TEAM_SHARED", "((shmem_team_t)2)"),
            ("SHMEM_CTX_DEFAULT", "((shmem_ctx_t)1)"),
            ("SHMEM_CMP_EQ", "0"),
            ("SHMEM_CMP_LE", "5"),
            ("SHMEM_SIGNAL_SET", "0"),
            ("SHMEM_SIGNAL_ADD", "1"),
            ("SHMEM_THREAD_MULTIPLE", "3"),
            ("SHMEM_CTX_NOSTORE", "4L"),
        ] {
            assert_eq!(define(name), Some(value), "{name}");
        }
    }
}
