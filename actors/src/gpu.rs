//! GPU PEs: a [`Pe`] takes its GPU with [`Pe::init_gpu`], which sets up the GPU layer's
//! [`GpuPe`] over this PE's control plane (allgathers through the job's root) and host data
//! plane (for the host-side `barrier_all`).

use std::sync::Arc;

use ferroshmem_gpu::GpuPe;
use ferroshmem_runtime::{Exchange, ExchangeFuture, Result};

use crate::pe::Pe;

/// The PE's control plane, as the layers below the actors take it (the GPU layer's set-up,
/// the NIC agent's): its allgathers through the job's root.
impl Exchange for Pe {
    fn exchange(
        &self,
        group: u64,
        index: usize,
        size: usize,
        payload: Vec<u8>,
    ) -> ExchangeFuture<'_> {
        Box::pin(Pe::exchange(self, group, index, size, payload))
    }
}

impl Pe {
    /// Sets this PE up on its GPU (the GPU of its node-local rank; PEs beyond the node's GPU
    /// count share GPUs, see [`ferroshmem_gpu::GpuSharing`]) and returns the handle of its
    /// GPU side: the symmetric GPU heap,
    /// host-initiated and on-stream operations, and kernels with the device library.
    /// Collective: every PE of the job calls it once.
    ///
    /// # Errors
    /// [`ferroshmem_runtime::GpuError::NoGpu`] on every PE when any PE has no usable GPU (a
    /// normal answer on machines without CUDA); [`ferroshmem_runtime::GpuError::Unreachable`] when two
    /// GPUs cannot reach each other peer-to-peer or the driver fails.
    pub async fn init_gpu(&self) -> Result<GpuPe> {
        let dp = self.data_plane();
        // A job that spans nodes reaches the GPU heaps of other nodes through the network
        // path, which runs over rings in the host symmetric heap.
        let spans_nodes = dp.nodes().iter().any(|n| *n != dp.nodes()[0]);
        let rings = match spans_nodes {
            true => Some(
                self.malloc::<u64>(GpuPe::network_ring_words(self.n_pes())?)
                    .await?,
            ),
            false => None,
        };
        GpuPe::init(dp, Arc::new(self.clone()), rings).await
    }
}
