//! The `ferroshmem run` launcher (placeholder until its issue lands).
