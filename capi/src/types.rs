//! The C types of OpenSHMEM's type tables that Rust has no name for, and the layout this
//! library assumes of the rest (checked at compile time: an LP64 target).

use std::ffi::{c_int, c_long, c_longlong};

/// C's `long double` (x86-64's 80-bit extended precision in 16 bytes; moved as 16 bytes on
/// any target, reduced on x86-64 only).
pub use ferroshmem_runtime::LongDouble;

const _: () = assert!(std::mem::size_of::<c_int>() == 4);
const _: () = assert!(std::mem::size_of::<c_long>() == 8);
const _: () = assert!(std::mem::size_of::<c_longlong>() == 8);
const _: () = assert!(std::mem::size_of::<usize>() == 8);
