//! A GPU PE's network path, for peers on other nodes (IBGDA with the `cpu` NIC handler):
//! the send queues its kernels post mlx5 WQEs to ([`queues`]), the handler thread that
//! performs them ([`Handler`]), and the NIC agent that carries them to the peer, which lands
//! them in its own GPU heap ([`memory`]: the heap's copies and atomics). Set up collectively
//! by [`GpuPe::init`](crate::GpuPe::init) when the job spans nodes.
//!
//! # Handlers
//! `FERROSHMEM_IBGDA_NIC_HANDLER` picks who services the queues: `cpu` (this module),
//! `auto` (the same here: no ConnectX NIC is driven directly yet), `gpu` is refused at init
//! with [`Error::Config`] saying what it would need.

mod host_ops;
mod memory;
mod queues;

use std::sync::{Arc, PoisonError};

use cudarc::driver::CudaContext;
use ferroshmem_runtime::{DataPlane, Error, Exchange, Result, SymBuffer};

use crate::module::GpuModule;
use crate::nic::{Agent, AgentConfig, Failure, Handler};
use memory::{GpuHeap, LocalCopies};
use queues::Queues;

/// The network path of one GPU PE; see the module documentation.
pub(crate) struct Network {
    // Field order is drop order: the handler thread stops before the queues go.
    _handler: Handler,
    queues: Queues,
    agent: Arc<Agent>,
    failure: Failure,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network").finish_non_exhaustive()
    }
}

/// What the network path is built from.
pub(crate) struct NetworkParts {
    /// The PE's context.
    pub ctx: Arc<CudaContext>,
    /// Internal kernels loaded for the agent's atomics.
    pub kernels: GpuModule,
    /// The PE's GPU heap (its whole allocation) as peers address it.
    pub heap_base: u64,
    /// Its size.
    pub heap_size: usize,
    /// Per PE: whether it lives on another node.
    pub remote: Vec<bool>,
    /// The host data plane and control plane the agent runs over.
    pub host: Arc<DataPlane>,
    /// The control plane.
    pub exchange: Arc<dyn Exchange>,
    /// The agent's rings in the host symmetric heap ([`ring_words`] words).
    pub rings: SymBuffer<u64>,
}

/// The NIC agent's sizing for the network path: rings of 1 MiB (16 384 blocks) and chunks of
/// 256 KiB, four times the agent's default, so that more of a large write is in flight (on
/// the CPU machine across two namespace hosts, `nic_agent_latency --bw-mib 64`: write
/// bandwidth 0.32–0.34 GB/s against 0.20–0.21 GB/s with the default rings, latency the
/// same). Each PE then holds 2 MiB of host symmetric heap per PE of the job.
fn agent_config() -> AgentConfig {
    AgentConfig {
        ring_blocks: 16 * 1024,
        max_chunk: 256 * 1024,
        timeout: None,
    }
}

/// The `u64` words of host symmetric memory the network path of a job of `n_pes` needs.
pub fn ring_words(n_pes: usize) -> usize {
    agent_config().ring_words(n_pes)
}

/// Which NIC handler `FERROSHMEM_IBGDA_NIC_HANDLER` asks for: `Ok` for `cpu` and `auto` (or
/// unset), a configuration error otherwise.
fn check_handler_choice() -> Result<()> {
    match std::env::var("FERROSHMEM_IBGDA_NIC_HANDLER").as_deref() {
        Err(_) | Ok("auto") | Ok("cpu") | Ok("") => Ok(()),
        Ok("gpu") => Err(Error::Config(
            "FERROSHMEM_IBGDA_NIC_HANDLER=gpu needs a ConnectX NIC driven through rdma-core's mlx5 direct verbs, which this build does not drive yet: use cpu (or auto)".into(),
        )),
        Ok(other) => Err(Error::Config(format!(
            "FERROSHMEM_IBGDA_NIC_HANDLER={other}: expected auto, cpu or gpu"
        ))),
    }
}

impl Network {
    /// Sets the network path up. Collective: every PE of the job calls it (the agents
    /// exchange their heaps and keys).
    pub async fn start(parts: NetworkParts) -> Result<Network> {
        check_handler_choice()?;
        let my_pe = parts.host.my_pe();
        let heap = GpuHeap::new(&parts.ctx, parts.kernels, parts.heap_base, parts.heap_size)?;
        let agent = Agent::new(
            parts.host,
            parts.exchange,
            parts.rings,
            Arc::new(heap),
            agent_config(),
        )
        .await?;
        let peers: Vec<_> = (0..agent.n_pes()).filter_map(|pe| agent.peer(pe)).collect();
        let mut queues = Queues::new(&parts.ctx, &parts.remote, &peers, agent.heap().rkey)?;
        let agent = Arc::new(agent);
        let failure: Failure = Arc::default();
        let handler = Handler::start(
            my_pe,
            std::mem::take(&mut queues.consumers),
            agent.clone(),
            Arc::new(LocalCopies::new(&parts.ctx)?),
            failure.clone(),
        )?;
        Ok(Network {
            _handler: handler,
            queues,
            agent,
            failure,
        })
    }

    /// Where the queues' descriptors lie on the GPU (`fsh_state.net`).
    pub fn device_addr(&self) -> u64 {
        self.queues.device_addr()
    }

    /// The agent (host-initiated operations on peers of other nodes go through it).
    pub fn agent(&self) -> &Arc<Agent> {
        &self.agent
    }

    /// The first failure the handler met since the last call (a refused request, a lost
    /// peer), if any.
    pub fn take_failure(&self) -> Option<Error> {
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}
