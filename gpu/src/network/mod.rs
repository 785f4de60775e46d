//! A GPU PE's network path, for peers on other nodes (IBGDA with the `cpu` NIC handler):
//! the send queues its kernels post mlx5 WQEs to ([`queues`]), the handler thread that
//! performs them ([`Handler`]), and the NIC agent that carries them to the peer, which lands
//! them in its own GPU heap ([`memory`]: the heap's copies and atomics). Set up collectively
//! by [`GpuPe::init`](crate::GpuPe::init) when the job spans nodes.
//!
//! # Handlers
//! `FERROSHMEM_IBGDA_NIC_HANDLER` picks who services the queues ([`choice`]): `cpu` (the
//! queues of [`queues`] in pinned host memory, the handler thread and the agent), `gpu` (a
//! ConnectX NIC reads queues in GPU memory itself: [`nic_queues`]; where it cannot run, init
//! fails with [`Error::Config`] saying what is missing), `auto` (`gpu` where every PE can,
//! else `cpu`). Host-initiated operations on peers of other nodes go through the agent
//! under either handler.

mod choice;
mod coalesce;
mod host_ops;
mod memory;
mod nic_queues;
mod queues;
mod staged;

use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::CudaContext;
use ferroshmem_runtime::{DataPlane, Error, Exchange, Result, SymBuffer};

use crate::module::GpuModule;
use crate::nic::{Agent, AgentConfig, Failure, Handler};
use memory::{GpuHeap, LocalCopies};
use nic_queues::{NicParts, NicQueues};
use queues::Queues;

/// The network path of one GPU PE; see the module documentation.
pub(crate) struct Network {
    service: Service,
    agent: Arc<Agent>,
    failure: Failure,
    /// Host-initiated `_nbi` operations on remote PEs, completed by `quiet`.
    pending: Mutex<Vec<host_ops::Pending>>,
}

/// Who services the device library's queues.
enum Service {
    /// The `cpu` handler.
    Cpu {
        // Field order is drop order: the handler thread stops before the queues go.
        _handler: Handler,
        queues: Queues,
    },
    /// The `gpu` handler: the NIC itself.
    Gpu(NicQueues),
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
    /// The context the agent's and the handler's GPU work runs in (see
    /// `driver::service_context`).
    pub service: Arc<CudaContext>,
    /// Internal kernels loaded into `service` for the agent's atomics.
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

impl Network {
    /// Sets the network path up. Collective: every PE of the job calls it (the agents
    /// exchange their heaps and keys).
    pub async fn start(parts: NetworkParts) -> Result<Network> {
        let wanted = choice::wanted()?;
        let my_pe = parts.host.my_pe();
        let n_pes = parts.remote.len();
        // Every PE joins the agreement, even one whose own `gpu` failed (its error goes
        // first): none is left waiting in it for a PE that gave up.
        let local = choice::choose(wanted, nic_queues::probe);
        let can = matches!(local, Ok(Some(_)));
        let agreed = choice::agree(wanted, can, &*parts.exchange, my_pe, n_pes).await;
        let nic = local?;
        let use_gpu = agreed?;
        tracing::info!(
            pe = my_pe,
            handler = if use_gpu { "gpu" } else { "cpu" },
            "network path: NIC handler chosen"
        );
        let heap = GpuHeap::new(
            &parts.service,
            parts.kernels,
            parts.heap_base,
            parts.heap_size,
        )?;
        let agent = Agent::new(
            parts.host,
            parts.exchange.clone(),
            parts.rings,
            Arc::new(heap),
            agent_config(),
        )
        .await?;
        let agent = Arc::new(agent);
        let failure: Failure = Arc::default();
        let service = match nic.filter(|_| use_gpu) {
            Some(nic) => Service::Gpu(
                NicQueues::new(
                    nic,
                    NicParts {
                        ctx: &parts.ctx,
                        remote: &parts.remote,
                        heap_base: parts.heap_base,
                        heap_size: parts.heap_size,
                        exchange: &*parts.exchange,
                        me: my_pe,
                    },
                )
                .await?,
            ),
            None => Self::cpu_service(
                &parts.ctx,
                &parts.service,
                &parts.remote,
                my_pe,
                &agent,
                &failure,
            )?,
        };
        Ok(Network {
            service,
            agent,
            failure,
            pending: Mutex::default(),
        })
    }

    /// The `cpu` handler's queues, in the PE's own context `ctx`, and its thread, whose copies
    /// run in the services' context `service`.
    fn cpu_service(
        ctx: &Arc<CudaContext>,
        service: &Arc<CudaContext>,
        remote: &[bool],
        my_pe: usize,
        agent: &Arc<Agent>,
        failure: &Failure,
    ) -> Result<Service> {
        let peers: Vec<_> = (0..agent.n_pes()).filter_map(|pe| agent.peer(pe)).collect();
        let mut queues = Queues::new(ctx, remote, &peers, agent.heap().rkey)?;
        let handler = Handler::start(
            my_pe,
            std::mem::take(&mut queues.consumers),
            agent.clone(),
            Arc::new(LocalCopies::new(service, queues.result_slots.clone())?),
            failure.clone(),
        )?;
        Ok(Service::Cpu {
            _handler: handler,
            queues,
        })
    }

    /// Where the queues' descriptors lie on the GPU (`fsh_state.net`).
    pub fn device_addr(&self) -> u64 {
        match &self.service {
            Service::Cpu { queues, .. } => queues.device_addr(),
            Service::Gpu(queues) => queues.device_addr(),
        }
    }

    /// The agent (host-initiated operations on peers of other nodes go through it).
    pub fn agent(&self) -> &Arc<Agent> {
        &self.agent
    }

    /// Keeps a host-initiated `_nbi` operation until `quiet` completes it.
    pub fn defer(&self, op: host_ops::Pending) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(op);
    }

    /// The `_nbi` operations started since the last call.
    pub fn take_pending(&self) -> Vec<host_ops::Pending> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner))
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

/// A context of `pe`'s services (see `driver::service_context`), or, where none can be made
/// (under MPS each context takes connections from a pool the clients share, and
/// `CUDA_DEVICE_MAX_CONNECTIONS=32` left none for it on an H200), the PE's own context, with
/// a warning: the network path then works, but its copies can wait behind what the program
/// queues after a kernel that waits for them.
pub(crate) fn service_context_or_own(pe: &crate::GpuPe) -> Arc<CudaContext> {
    match crate::driver::service_context(pe.device().ordinal()) {
        Ok(service) => service,
        Err(error) => {
            tracing::warn!(
                pe = pe.my_pe(),
                %error,
                "no CUDA context for the network path's services: their copies run in the PE's own context, where work queued behind a kernel waiting for them can hold them back"
            );
            pe.context().clone()
        }
    }
}
