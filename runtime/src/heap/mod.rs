//! The symmetric heap: the allocator that keeps offsets equal on every PE, and the typed
//! handles that name symmetric memory.

mod allocator;
mod heap_call;
mod symmetric;

pub use allocator::{HeapAllocator, MIN_ALIGN};
pub use heap_call::{AllocRequest, HeapCall};
pub use symmetric::{Allocation, Area, HeapId, Span, SymBuffer, SymSlice};
