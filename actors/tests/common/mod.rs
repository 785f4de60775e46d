//! Helpers shared by the control-plane tests.

use ferroshmem_actors::control::wire::Hello;

/// The hello of PE `rank` of a job of `size` with `secret`, from this process.
pub fn hello(secret: &[u8], rank: u32, size: u32) -> Hello {
    Hello {
        secret: secret.to_vec(),
        rank,
        size,
        node: "test-node".into(),
        pid: std::process::id(),
    }
}
