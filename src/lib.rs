//! ferroshmem.
