//! What the runtime's integration tests share.

pub mod loopback;
