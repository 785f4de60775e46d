//! ferroshmem's actors.
