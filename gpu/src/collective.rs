//! The control-plane group of the GPU layer: GPU set-up and GPU heap calls (checked with
//! [`ferroshmem_runtime::heap::HeapCall`]) run their allgathers in it.

/// The control-plane group number of GPU set-up and GPU heap calls.
pub(crate) const GPU_GROUP: u64 = 0x4750_5553_0000_0001;
