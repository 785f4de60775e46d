//! The PE actor: one tokio task per PE that owns the PE's symmetric-heap allocator and its
//! end of the control plane. It serves the control messages of its [`crate::Pe`] handles
//! (collective allocation, finalize) and the root's messages (allgather results, lost peers).
//! Data-plane operations never pass through it.

use std::collections::HashMap;
use std::sync::Arc;

use ferroshmem_runtime::heap::{HeapAllocator, HeapCall};
use ferroshmem_runtime::{Allocation, DataPlane, Error, Result};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;

use crate::control::wire::{Contribution, FromPe, ToPe};
use crate::control::Link;

/// How long a finalizing PE waits for its goodbye to reach the root's connection.
const GOODBYE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A control request from a PE handle to its actor.
#[derive(Debug)]
pub(crate) enum Command {
    /// Collective allocation.
    Alloc {
        bytes: usize,
        align: usize,
        zero: bool,
        reply: oneshot::Sender<Result<Allocation>>,
    },
    /// Collective free.
    Free {
        alloc: Allocation,
        reply: oneshot::Sender<Result<(), (Error, Allocation)>>,
    },
    /// An allgather among the `size` PEs of `group` (0 is the world), this PE at `index`.
    Exchange {
        group: u64,
        index: usize,
        size: usize,
        payload: Vec<u8>,
        reply: oneshot::Sender<Result<Vec<Vec<u8>>>>,
    },
    /// Heap usage: (used, size).
    HeapUsage {
        reply: oneshot::Sender<(usize, usize)>,
    },
    /// Clean end of the PE (after its final barrier).
    Finalize { reply: oneshot::Sender<Result<()>> },
}

enum Pending {
    Exchange {
        reply: oneshot::Sender<Result<Vec<Vec<u8>>>>,
    },
    Alloc {
        call: HeapCall,
        local: Result<usize>,
        reply: oneshot::Sender<Result<Allocation>>,
    },
    Free {
        call: HeapCall,
        alloc: Allocation,
        reply: oneshot::Sender<Result<(), (Error, Allocation)>>,
    },
}

pub(crate) struct PeActor {
    pub rank: usize,
    pub data: Arc<DataPlane>,
    pub heap: HeapAllocator,
    pub link: Link,
    pub mailbox: UnboundedReceiver<Command>,
    /// Next collective sequence number of each group (0 is the world).
    pub seqs: HashMap<u64, u64>,
    /// The bootstrap root's task, when this PE's process hosts it: the PE waits for it to see
    /// every other PE leave before its own process may exit.
    pub hosted_root: Option<tokio::task::JoinHandle<Result<crate::control::HubReport>>>,
}

impl PeActor {
    pub async fn run(mut self) {
        let mut pending: HashMap<(u64, u64), Pending> = HashMap::new();
        loop {
            tokio::select! {
                cmd = self.mailbox.recv() => match cmd {
                    Some(Command::Finalize { reply }) => {
                        let _ = self.link.to_root.send(FromPe::Goodbye);
                        if let Some(written) = self.link.goodbye_written.take() {
                            let _ = tokio::time::timeout(GOODBYE_TIMEOUT, written).await;
                        }
                        if let Some(root) = self.hosted_root.take() {
                            let _ = root.await;
                        }
                        let _ = reply.send(self.data.health().check());
                        return;
                    }
                    Some(cmd) => self.command(cmd, &mut pending),
                    None => {
                        let _ = self.link.to_root.send(FromPe::Fail {
                            reason: "every handle of the PE was dropped before it finalized".into(),
                        });
                        return;
                    }
                },
                msg = self.link.from_root.recv() => match msg {
                    Some(ToPe::Gathered { group, seq, payloads }) => {
                        if let Some(p) = pending.remove(&(group, seq)) {
                            self.complete(p, &payloads);
                        }
                    }
                    Some(ToPe::PeerLost { pe, reason }) => {
                        self.data.metrics().peer_lost();
                        self.fail(Error::PeerLost { pe: pe as usize, reason }, &mut pending);
                    }
                    Some(ToPe::Refused { reason }) => {
                        self.fail(Error::Bootstrap(reason), &mut pending);
                    }
                    Some(_) => {}
                    None => {
                        let reason = format!("the control connection to the root at {} closed", self.link.root_address);
                        self.fail(Error::PeerLost { pe: self.link.root_pe.unwrap_or(0), reason }, &mut pending);
                    }
                },
            }
        }
    }

    fn fail(&mut self, error: Error, pending: &mut HashMap<(u64, u64), Pending>) {
        if self.data.health().check().is_ok() {
            tracing::error!(pe = self.rank, "job failed: {error}");
        }
        self.data.health().fail(error.clone());
        self.data.wake_local_waiters();
        for (_, p) in pending.drain() {
            match p {
                Pending::Alloc { call, local, reply } => {
                    self.undo_alloc(&call, &local);
                    let _ = reply.send(Err(error.clone()));
                }
                Pending::Free { alloc, reply, .. } => {
                    let _ = reply.send(Err((error.clone(), alloc)));
                }
                Pending::Exchange { reply } => {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }

    /// Sends this PE's part of the next allgather of `group`; returns its key.
    fn contribute(
        &mut self,
        group: u64,
        index: usize,
        size: usize,
        payload: Vec<u8>,
    ) -> (u64, u64) {
        let next = self.seqs.entry(group).or_insert(0);
        let seq = *next;
        *next += 1;
        let _ = self.link.to_root.send(FromPe::Contribute(Contribution {
            group,
            seq,
            index: index as u32,
            size: size as u32,
            payload,
        }));
        (group, seq)
    }

    fn contribute_heap_call(&mut self, call: HeapCall) -> (u64, u64) {
        self.contribute(0, self.rank, self.data.n_pes(), call.encode())
    }

    fn command(&mut self, cmd: Command, pending: &mut HashMap<(u64, u64), Pending>) {
        match cmd {
            Command::Alloc {
                bytes,
                align,
                zero,
                reply,
            } => {
                if let Err(e) = self.data.health().check() {
                    let _ = reply.send(Err(e));
                    return;
                }
                let local = self.heap.alloc(bytes, align);
                if let (Ok(offset), true) = (&local, zero) {
                    self.data.zero_local(*offset, bytes);
                }
                let call = HeapCall::alloc(bytes, align, local.as_ref().ok().copied());
                let key = self.contribute_heap_call(call);
                pending.insert(key, Pending::Alloc { call, local, reply });
            }
            Command::Free { alloc, reply } => {
                if let Err(e) = self.data.health().check() {
                    let _ = reply.send(Err((e, alloc)));
                    return;
                }
                let call = HeapCall::free(alloc.bytes(), alloc.offset());
                let key = self.contribute_heap_call(call);
                pending.insert(key, Pending::Free { call, alloc, reply });
            }
            Command::Exchange {
                group,
                index,
                size,
                payload,
                reply,
            } => {
                if let Err(e) = self.data.health().check() {
                    let _ = reply.send(Err(e));
                    return;
                }
                if index >= size {
                    let _ = reply.send(Err(Error::InvalidArgument(format!(
                        "exchange index {index} is not below its group size {size}"
                    ))));
                    return;
                }
                let key = self.contribute(group, index, size, payload);
                pending.insert(key, Pending::Exchange { reply });
            }
            Command::HeapUsage { reply } => {
                let _ = reply.send((self.heap.used(), self.heap.size()));
            }
            Command::Finalize { .. } => unreachable!("handled by the loop"),
        }
    }

    fn undo_alloc(&mut self, call: &HeapCall, local: &Result<usize>) {
        if call.is_alloc() {
            if let Ok(offset) = local {
                let _ = self.heap.free(*offset);
            }
        }
    }

    fn complete(&mut self, pending: Pending, payloads: &[Vec<u8>]) {
        match pending {
            Pending::Exchange { reply } => {
                let _ = reply.send(Ok(payloads.to_vec()));
            }
            Pending::Alloc { call, local, reply } => {
                let outcome = match call.mismatch(self.rank, payloads) {
                    Some(detail) => {
                        tracing::warn!(pe = self.rank, "collective malloc mismatch: {detail}");
                        self.undo_alloc(&call, &local);
                        Err(Error::CollectiveMismatch {
                            operation: "malloc",
                            detail,
                        })
                    }
                    None => local
                        .map(|offset| Allocation::new(self.data.heap_id(), offset, call.bytes())),
                };
                let offset = outcome.as_ref().map(Allocation::offset);
                tracing::debug!(
                    pe = self.rank,
                    bytes = call.bytes(),
                    ?offset,
                    "collective malloc"
                );
                let _ = reply.send(outcome);
            }
            Pending::Free { call, alloc, reply } => {
                let outcome = match call.mismatch(self.rank, payloads) {
                    Some(detail) => Err((
                        Error::CollectiveMismatch {
                            operation: "free",
                            detail,
                        },
                        alloc,
                    )),
                    None => match self.heap.free(alloc.offset()) {
                        Ok(()) => Ok(()),
                        Err(e) => Err((e, alloc)),
                    },
                };
                tracing::debug!(
                    pe = self.rank,
                    offset = call.offset(),
                    ok = outcome.is_ok(),
                    "collective free"
                );
                let _ = reply.send(outcome);
            }
        }
        self.data.metrics().heap(self.heap.used(), self.heap.size());
    }
}
