//! The PE actor: one tokio task per PE that owns the PE's symmetric-heap allocator and its
//! end of the control plane. It serves the control messages of its [`crate::Pe`] handles
//! (collective allocation, finalize) and the root's messages (allgather results, lost peers).
//! Data-plane operations never pass through it.

use std::collections::HashMap;
use std::sync::Arc;

use ferroshmem_runtime::heap::{AllocRequest, HeapAllocator, HeapCall};
use ferroshmem_runtime::{Allocation, DataPlane, Error, Result};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;

use crate::control::wire::{Contribution, FromPe, ToPe};
use crate::control::Link;

/// What the root answered an allgather: every member's payload, or why it failed.
type Gathered<'a> = std::result::Result<&'a [Vec<u8>], String>;

/// How long a finalizing PE waits for its goodbye to reach the root's connection.
const GOODBYE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A control request from a PE handle to its actor.
#[derive(Debug)]
pub(crate) enum Command {
    /// Collective allocation.
    Alloc {
        request: AllocRequest,
        zero: bool,
        reply: oneshot::Sender<Result<Allocation>>,
    },
    /// Collective free.
    Free {
        alloc: Allocation,
        /// Why this PE's operations failed to complete before the free, if they did: the
        /// free is then refused inside the agreement.
        unfinished: Option<Error>,
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
    /// The PE has begun to finalize: the root learns that it makes no more collective calls.
    Finalizing,
    /// Clean end of the PE (after its final barrier).
    Finalize { reply: oneshot::Sender<Result<()>> },
    /// The PE ends the job with `status`: `answered` hears when the root says the other PEs
    /// have left (a std channel: the caller waits on it outside any runtime).
    GlobalExit {
        status: i32,
        answered: std::sync::mpsc::Sender<()>,
    },
}

enum Pending {
    Exchange {
        reply: oneshot::Sender<Result<Vec<Vec<u8>>>>,
        /// Why this PE refused its own call (its group was told), if it did.
        refused: Option<Error>,
    },
    Alloc {
        call: HeapCall,
        local: Result<usize>,
        reply: oneshot::Sender<Result<Allocation>>,
    },
    Free {
        /// `None` for a refused free: of another heap's allocation, or after operations
        /// that failed to complete (`unfinished`).
        call: Option<HeapCall>,
        unfinished: Option<Error>,
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
    /// Who hears the root's answer to this PE's global exit: every thread that asked (the
    /// root is asked once).
    pub global_exit: Vec<std::sync::mpsc::Sender<()>>,
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
                            self.complete(p, Ok(&payloads));
                        }
                    }
                    Some(ToPe::GatherFailed { group, seq, reason }) => {
                        if let Some(p) = pending.remove(&(group, seq)) {
                            self.complete(p, Err(reason));
                        }
                    }
                    Some(ToPe::PeerLost { pe, reason }) => {
                        self.data.metrics().peer_lost();
                        let lost = self.data.loss(pe as usize, reason);
                        self.fail(lost, &mut pending);
                    }
                    Some(ToPe::Refused { reason }) => {
                        self.fail(Error::Bootstrap(reason), &mut pending);
                    }
                    Some(ToPe::GlobalExit { pe, status }) => self.global_exit(pe as usize, status).await,
                    Some(ToPe::Finished { pe }) => {
                        self.data.health().mark_finished(pe as usize);
                        self.data.wake_local_waiters();
                    }
                    Some(_) => {}
                    None => {
                        let reason = format!("the control connection to the root at {} closed", self.link.root_address);
                        let lost = self.data.loss(self.link.root_pe.unwrap_or(0), reason);
                        self.fail(lost, &mut pending);
                    }
                },
            }
        }
    }

    /// PE `pe` ended the job with `status`. This PE's threads that asked hear it (and exit);
    /// a PE that did not ask exits now, without its process's exit handlers
    /// ([`crate::exit::exit_now`]), once the root it hosts, if it hosts it, has answered the PE
    /// that asked: it says goodbye so that the root does not wait for it, and waits for the
    /// root to end (bounded), lest the root's messages to the other PEs go with the process.
    async fn global_exit(&mut self, pe: usize, status: i32) {
        if pe == self.rank && !self.global_exit.is_empty() {
            for answered in self.global_exit.drain(..) {
                let _ = answered.send(());
            }
            return;
        }
        crate::exit::begin();
        tracing::info!(
            pe = self.rank,
            status,
            "PE {pe} ended the job with global_exit"
        );
        if let Some(root) = self.hosted_root.take() {
            let _ = self.link.to_root.send(FromPe::Goodbye);
            let _ = tokio::time::timeout(crate::exit::GLOBAL_EXIT_ANSWER_TIMEOUT, root).await;
        }
        crate::exit::exit_now(status)
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
                Pending::Exchange { reply, .. } => {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }

    /// Sends this PE's part of the next allgather of `group`, as member `index` of `size`,
    /// and returns its key. When those cannot name a member of a group of this job, it sends
    /// a refusal instead (a contribution of size 0 whose payload says why), so that the other
    /// members fail instead of waiting, and returns why too.
    fn contribute(
        &mut self,
        group: u64,
        index: usize,
        size: usize,
        payload: Vec<u8>,
    ) -> ((u64, u64), Option<String>) {
        let (index, size, payload, refused) = match member_of(index, size, self.data.n_pes()) {
            Ok((index, size)) => (index, size, payload, None),
            Err(why) => (0, 0, why.clone().into_bytes(), Some(why)),
        };
        let next = self.seqs.entry(group).or_insert(0);
        let seq = *next;
        *next += 1;
        let _ = self.link.to_root.send(FromPe::Contribute(Contribution {
            group,
            seq,
            index,
            size,
            payload,
        }));
        ((group, seq), refused)
    }

    /// A heap call's member and group are this PE and the world, always valid.
    fn contribute_heap_call(&mut self, payload: Vec<u8>) -> (u64, u64) {
        self.contribute(0, self.rank, self.data.n_pes(), payload).0
    }

    fn command(&mut self, cmd: Command, pending: &mut HashMap<(u64, u64), Pending>) {
        match cmd {
            Command::Alloc {
                request,
                zero,
                reply,
            } => {
                if let Err(e) = self.data.health().check() {
                    let _ = reply.send(Err(e));
                    return;
                }
                // A refused request still makes the collective call, as one that failed.
                let mut local = request
                    .checked()
                    .and_then(|(bytes, align)| self.heap.alloc(bytes, align));
                if let (Ok(offset), true) = (&local, zero) {
                    let offset = *offset;
                    if let Err(e) = self.data.zero_local(offset, request.bytes()) {
                        let _ = self.heap.free(offset);
                        local = Err(e);
                    }
                }
                let call = HeapCall::alloc(
                    request.bytes(),
                    request.align(),
                    local.as_ref().ok().copied(),
                );
                let key = self.contribute_heap_call(call.encode());
                pending.insert(key, Pending::Alloc { call, local, reply });
            }
            Command::Free {
                alloc,
                unfinished,
                reply,
            } => {
                if let Err(e) = self.data.health().check() {
                    let _ = reply.send(Err((e, alloc)));
                    return;
                }
                // An allocation of another heap, or a free after operations that failed to
                // complete, is refused after the collective call, so that the other PEs are
                // not left waiting (they see a mismatch) and nothing is freed.
                let call = (alloc.heap() == self.data.heap_id() && unfinished.is_none())
                    .then(|| HeapCall::free(alloc.bytes(), alloc.offset()));
                let refused = || HeapCall::refused_free(unfinished.is_some());
                let key = self.contribute_heap_call(call.unwrap_or_else(refused).encode());
                let free = Pending::Free {
                    call,
                    unfinished,
                    alloc,
                    reply,
                };
                pending.insert(key, free);
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
                let (key, refused) = self.contribute(group, index, size, payload);
                let refused = refused.map(Error::InvalidArgument);
                pending.insert(key, Pending::Exchange { reply, refused });
            }
            Command::HeapUsage { reply } => {
                let _ = reply.send((self.heap.used(), self.heap.size()));
            }
            Command::Finalizing => {
                let next = self
                    .seqs
                    .iter()
                    .map(|(&group, &seq)| (group, seq))
                    .collect();
                let _ = self.link.to_root.send(FromPe::Finalizing { next });
            }
            Command::GlobalExit { status, answered } => {
                if self.global_exit.is_empty() {
                    let _ = self.link.to_root.send(FromPe::GlobalExit { status });
                }
                self.global_exit.push(answered);
            }
            Command::Finalize { .. } => unreachable!("handled by the loop"),
        }
    }

    /// How the PEs' collective heap calls differ, if they do (or why the root failed it).
    fn heap_mismatch(&self, call: &HeapCall, gathered: &Gathered<'_>) -> Option<String> {
        match gathered {
            Ok(payloads) => call.mismatch(self.rank, payloads),
            Err(reason) => Some(reason.clone()),
        }
    }

    fn undo_alloc(&mut self, call: &HeapCall, local: &Result<usize>) {
        if call.is_alloc() {
            if let Ok(offset) = local {
                let _ = self.heap.free(*offset);
            }
        }
    }

    fn complete(&mut self, pending: Pending, gathered: Gathered<'_>) {
        match pending {
            Pending::Exchange { reply, refused } => {
                let outcome = match (refused, gathered) {
                    (Some(e), _) => Err(e),
                    (None, Err(detail)) => Err(Error::CollectiveMismatch {
                        operation: "exchange",
                        detail,
                    }),
                    (None, Ok(payloads)) => Ok(payloads.to_vec()),
                };
                let _ = reply.send(outcome);
            }
            Pending::Alloc { call, local, reply } => {
                // A PE whose own step failed reports why; the others, the mismatch.
                let outcome = match (local, self.heap_mismatch(&call, &gathered)) {
                    (Err(own), _) => Err(own),
                    (Ok(offset), Some(detail)) => {
                        tracing::warn!(pe = self.rank, "collective malloc mismatch: {detail}");
                        let _ = self.heap.free(offset);
                        Err(Error::CollectiveMismatch {
                            operation: "malloc",
                            detail,
                        })
                    }
                    (Ok(offset), None) => {
                        Ok(Allocation::new(self.data.heap_id(), offset, call.bytes()))
                    }
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
            Pending::Free {
                call: None,
                unfinished,
                alloc,
                reply,
            } => {
                tracing::debug!(pe = self.rank, ?unfinished, "free refused");
                let _ = reply.send(Err((unfinished.unwrap_or(Error::NotSymmetric), alloc)));
            }
            Pending::Free {
                call: Some(call),
                alloc,
                reply,
                ..
            } => {
                let outcome = match self.heap_mismatch(&call, &gathered) {
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

/// Checks that `index` and `size` name a member of a group of a job of `n_pes` PEs, and
/// gives them in the control plane's 32-bit form.
fn member_of(index: usize, size: usize, n_pes: usize) -> std::result::Result<(u32, u32), String> {
    if index >= size {
        return Err(format!(
            "exchange index {index} is not below its group size {size}"
        ));
    }
    if size > n_pes {
        return Err(format!(
            "an exchange among {size} PEs does not fit a job of {n_pes} PEs"
        ));
    }
    match (u32::try_from(index), u32::try_from(size)) {
        (Ok(index), Ok(size)) => Ok((index, size)),
        _ => Err(format!(
            "an exchange among {size} PEs is beyond the control plane's 32-bit numbering"
        )),
    }
}
