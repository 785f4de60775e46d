//! The C types of OpenSHMEM's type tables that Rust has no name for, and the layout this
//! library assumes of the rest (checked at compile time: an LP64 target).

use std::ffi::{c_int, c_long, c_longlong};

use bytemuck::{Pod, Zeroable};

/// C's `long double` on x86-64 (80-bit extended precision in 16 bytes), moved as bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct LongDouble(pub [u64; 2]);

const _: () = assert!(std::mem::size_of::<c_int>() == 4);
const _: () = assert!(std::mem::size_of::<c_long>() == 8);
const _: () = assert!(std::mem::size_of::<c_longlong>() == 8);
const _: () = assert!(std::mem::size_of::<usize>() == 8);
