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
use ferroshmem_runtime::config::{env_var, parse_size};
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

/// The NIC agent's sizing for the network path, from `FERROSHMEM_NIC_RING` and
/// `FERROSHMEM_NIC_CHUNK` (see [`agent_config_of`]).
///
/// # Errors
/// As [`agent_config_of`].
fn agent_config() -> Result<AgentConfig> {
    agent_config_of(
        env_var(&["FERROSHMEM_NIC_RING"])?.as_deref(),
        env_var(&["FERROSHMEM_NIC_CHUNK"])?.as_deref(),
    )
}

/// The NIC agent's sizing for the network path: `ring`, each ring's bytes (default 4 MiB),
/// and `chunk`, the largest piece of a write or read (default 256 KiB), as
/// `FERROSHMEM_SYMMETRIC_SIZE` takes sizes (`4M`, `256K`). Every PE of the job must use the
/// same: the agents check it when they start. Each PE holds two rings per PE of the job in
/// its host symmetric heap (pages are taken as the rings are used). The default ring is four
/// times what it was: more of a large write in flight doubles the put bandwidth at 1 MiB
/// across two hosts on the H200 machine (`scripts/compare-gpu-hosts`, rings of 1 MiB
/// against 4 MiB in one call: 0.41, 0.43 against 0.89, 0.77 GB/s; 16 MiB alike).
///
/// # Errors
/// [`Error::Config`] naming the variable, for a size that does not parse, a ring that is not
/// a whole number of 64-byte blocks, or a chunk whose record does not fit in half a ring.
fn agent_config_of(ring: Option<&str>, chunk: Option<&str>) -> Result<AgentConfig> {
    let size = |name: &str, text: Option<&str>, default: usize| -> Result<usize> {
        match text {
            Some(text) => {
                parse_size(text).map_err(|e| Error::Config(format!("{name}={text:?}: {e}")))
            }
            None => Ok(default),
        }
    };
    let ring = size("FERROSHMEM_NIC_RING", ring, 4 << 20)?;
    if ring % 64 != 0 {
        return Err(Error::Config(format!(
            "FERROSHMEM_NIC_RING={ring}: a ring is a whole number of 64-byte blocks"
        )));
    }
    let config = AgentConfig {
        ring_blocks: ring / 64,
        max_chunk: size("FERROSHMEM_NIC_CHUNK", chunk, 256 << 10)?,
        timeout: None,
    };
    config.check()?;
    Ok(config)
}

/// The `u64` words of host symmetric memory the network path of a job of `n_pes` needs.
///
/// # Errors
/// As the agent's sizing from the environment (`FERROSHMEM_NIC_RING`, `FERROSHMEM_NIC_CHUNK`).
pub fn ring_words(n_pes: usize) -> Result<usize> {
    Ok(agent_config()?.ring_words(n_pes))
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
        let mut heap = GpuHeap::new(
            &parts.service,
            parts.kernels,
            parts.heap_base,
            parts.heap_size,
        )?;
        // The rings are this PE's own host symmetric memory: mapped here, always.
        if let Some(host) = parts.host.ptr(parts.rings.all(), my_pe)? {
            heap.copy_from_ring(&parts.service, host as u64, parts.rings.len() * 8);
        }
        let agent = Agent::new(
            parts.host,
            parts.exchange.clone(),
            parts.rings,
            Arc::new(heap),
            agent_config()?,
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

#[cfg(test)]
mod tests {
    use super::agent_config_of;
    use ferroshmem_runtime::Error;

    #[test]
    fn the_agent_is_sized_from_the_environment_or_refuses_with_the_variable_named() {
        let default = agent_config_of(None, None).unwrap();
        assert_eq!((default.ring_blocks, default.max_chunk), (65536, 256 << 10));
        let set = agent_config_of(Some("1M"), Some("64K")).unwrap();
        assert_eq!((set.ring_blocks, set.max_chunk), (16384, 64 << 10));
        for (ring, chunk, says) in [
            (Some("4 apples"), None, "FERROSHMEM_NIC_RING"),
            (None, Some("lots"), "FERROSHMEM_NIC_CHUNK"),
            (Some("1000"), None, "64-byte blocks"),
            (Some("1M"), Some("1M"), "half a ring"),
            (Some("16M"), None, "fewer than"),
        ] {
            match agent_config_of(ring, chunk) {
                Err(Error::Config(text)) => assert!(text.contains(says), "{text}"),
                other => panic!("{ring:?} / {chunk:?}: {other:?}"),
            }
        }
    }
}
