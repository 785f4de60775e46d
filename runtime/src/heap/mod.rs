//! The symmetric heap: the allocator that keeps offsets equal on every PE, and the typed
//! handles that name symmetric memory.

mod allocator;
mod symmetric;

pub use allocator::{HeapAllocator, MIN_ALIGN};
pub use symmetric::{Allocation, HeapId, Span, SymBuffer, SymSlice};
