//! The `cpu` NIC handler end to end without a GPU: each PE posts mlx5 WQEs with a Rust
//! producer into host-memory send queues (what a kernel does in GPU memory's place), its
//! handler decodes and performs them through its agent on the next PE's heap, and the CQEs
//! come back: inline and gathered writes, a read, fetch-add, compare-swap and a 4-byte masked
//! fetch-add with the old values landing in local memory, then a write under a wrong key,
//! which must end in a REMOTE_ACCESS error CQE and a kept failure while the peer stays whole.

use std::sync::{Arc, Mutex};

use ferroshmem::gpu::ibgda::{
    AtomicOp, Consumer, Producer, QueueLayout, QueueMemory, Syndrome, Width, WorkRequest, WqeError,
    WqeFlags,
};
use ferroshmem::gpu::nic::{Failure, Handler, HeapMemory, HostMemory, LocalMemory};

use super::{make, Check, Ctx, PATIENCE};
use ferroshmem::gpu::nic::AgentConfig;

/// Where each PE's local buffers claim to be.
pub const LOCAL_BASE: u64 = 0x6000_0000_0000;
const LOCAL: usize = 1 << 16;

/// Local buffers in host memory, as the handler reaches them; a deferred write lands only
/// when flushed (as a GPU's queued copies), so a CQE written before its bytes have landed is
/// caught by the checks that follow it.
pub struct Local {
    memory: HostMemory,
    deferred: Mutex<Vec<(u64, Vec<u8>)>>,
}

impl Local {
    pub fn new(memory: HostMemory) -> Local {
        Local {
            memory,
            deferred: Mutex::default(),
        }
    }
}

impl LocalMemory for Local {
    fn read(&self, addr: u64, len: usize) -> ferroshmem::Result<Vec<u8>> {
        let mut out = vec![0; len];
        self.memory.read(addr, &mut out)?;
        Ok(out)
    }

    fn write(&self, addr: u64, data: &[u8]) -> ferroshmem::Result<()> {
        self.memory.write(addr, data)
    }

    fn write_deferred(&self, addr: u64, data: &[u8]) -> ferroshmem::Result<()> {
        let mut deferred = self.deferred.lock().expect("not poisoned");
        deferred.push((addr, data.to_vec()));
        Ok(())
    }

    fn flush(&self) -> ferroshmem::Result<()> {
        let deferred = std::mem::take(&mut *self.deferred.lock().expect("not poisoned"));
        for (addr, data) in deferred {
            self.memory.write(addr, &data)?;
        }
        Ok(())
    }
}

fn fail(what: impl std::fmt::Display) -> String {
    what.to_string()
}

/// The WQEs of one round: PE `me` writes, reads and updates its region `region` of the next
/// PE's heap (key `rkey`) from and into its local buffers at `l`.
fn round(me: usize, region: u64, rkey: u32, l: u64) -> [WorkRequest; 6] {
    [
        WorkRequest::WriteInline {
            data: vec![me as u8 + 1; 8],
            remote: region,
            rkey,
        },
        WorkRequest::Write {
            local: l,
            lkey: 1,
            remote: region + 64,
            rkey,
            len: 4096,
        },
        WorkRequest::Atomic {
            op: AtomicOp::FetchAdd { add: 5 },
            width: Width::W8,
            remote: region + 8192,
            rkey,
            result: l + 8192,
            lkey: 1,
        },
        WorkRequest::Atomic {
            op: AtomicOp::CompareSwap {
                compare: 5,
                swap: 9,
            },
            width: Width::W8,
            remote: region + 8192,
            rkey,
            result: l + 8200,
            lkey: 1,
        },
        WorkRequest::Atomic {
            op: AtomicOp::MaskedFetchAdd {
                add: 3,
                field_boundary: 0,
            },
            width: Width::W4,
            remote: region + 8208,
            rkey,
            result: l + 8216,
            lkey: 1,
        },
        WorkRequest::Read {
            local: l + 16384,
            lkey: 1,
            remote: region + 64,
            rkey,
            len: 4096,
        },
    ]
}
/// Runs the handler scenario on this PE (every PE of the job at once).
pub async fn handler(pe: &ferroshmem::Pe, config: AgentConfig) -> Check {
    let Ctx { agent, memory, .. } = make(pe, config).await.map_err(fail)?;
    let agent = Arc::new(agent);
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let next = (me + 1) % n;
    let local = Arc::new(Local::new(
        HostMemory::new(LOCAL_BASE + ((me as u64) << 32), LOCAL).map_err(fail)?,
    ));
    // A small ring, so that 16-bit indices and the ring's end are crossed.
    let layout = QueueLayout::new(16, 32).map_err(fail)?;
    let queue = QueueMemory::host(layout, next as u32 + 1).map_err(fail)?;
    let producer = Producer::new(queue.clone(), PATIENCE);
    let failure = Failure::default();
    let handler = Handler::start(
        me,
        vec![(next, Consumer::new(queue))],
        agent.clone(),
        local.clone(),
        failure.clone(),
    )
    .map_err(fail)?;
    let there = agent.peer(next).ok_or("no next PE")?;
    let region = there.base + me as u64 * super::REGION;
    let l = LOCAL_BASE + ((me as u64) << 32);
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + me as u32) as u8).collect();
    local.write(l, &pattern).map_err(fail)?;
    let posts = round(me, region, there.rkey, l);
    let producer = Arc::new(producer);
    let posting = producer.clone();
    tokio::task::spawn_blocking(move || {
        // Three rounds: more WQEBBs than the ring holds.
        for _ in 0..3 {
            for p in &posts {
                posting.post(p, WqeFlags::default())?;
            }
            posting.quiet()?;
        }
        Ok::<_, WqeError>(())
    })
    .await
    .map_err(fail)?
    .map_err(fail)?;
    let got = local.read(l + 16384, 4096).map_err(fail)?;
    if got != pattern {
        return Err(format!(
            "PE {me}: the read did not bring back what the write put"
        ));
    }
    let word = |at: u64, len: usize| -> Result<u64, String> {
        let b = local.read(at, len).map_err(fail)?;
        let mut w = [0u8; 8];
        w[..len].copy_from_slice(&b);
        Ok(u64::from_le_bytes(w))
    };
    // Round 1 takes the word 0 → 5 → 9 (the compare-swap hits); rounds 2 and 3 add 5 and
    // miss: the third round fetches 14, then 19. The 4-byte word goes 0 → 3 → 6 → 9.
    let fetched = (word(l + 8192, 8)?, word(l + 8200, 8)?, word(l + 8216, 4)?);
    if fetched != (14, 19, 6) {
        return Err(format!(
            "PE {me}: fetched (add, compare-swap, masked add) {fetched:?}, expected (14, 19, 6)"
        ));
    }
    pe.barrier_all().await.map_err(fail)?;
    let prev = (me + n - 1) % n;
    let mine = agent.heap().base + prev as u64 * super::REGION;
    let mut landed = vec![0u8; 8];
    memory.read(mine, &mut landed).map_err(fail)?;
    let mut amo = [0u8; 8];
    memory.read(mine + 8192, &mut amo).map_err(fail)?;
    let mut small = [0u8; 4];
    memory.read(mine + 8208, &mut small).map_err(fail)?;
    let seen = (
        landed[0],
        u64::from_le_bytes(amo),
        u32::from_le_bytes(small),
    );
    if seen != (prev as u8 + 1, 19, 9) {
        return Err(format!(
            "PE {me}: landed from PE {prev} {seen:?}, expected ({}, 19, 9)",
            prev + 1
        ));
    }
    pe.barrier_all().await.map_err(fail)?;
    wrong_key(producer, region, there.rkey ^ 0x10, &failure).await?;
    drop(handler);
    pe.barrier_all().await.map_err(fail)?;
    println!("PE {me}: the NIC handler scenario passed");
    Ok(())
}

/// A write under a key that is not the peer's: an error CQE with REMOTE_ACCESS_ERR, and the
/// handler keeps the failure for the host.
async fn wrong_key(producer: Arc<Producer>, at: u64, rkey: u32, failure: &Failure) -> Check {
    let ended = tokio::task::spawn_blocking(move || {
        producer.post(
            &WorkRequest::WriteInline {
                data: vec![0xEE; 8],
                remote: at,
                rkey,
            },
            WqeFlags::default(),
        )?;
        producer.quiet()
    })
    .await
    .map_err(fail)?;
    match ended {
        Err(WqeError::Completion { syndrome, .. }) if syndrome == Syndrome::RemoteAccess.code() => {
        }
        other => return Err(format!("a write under a wrong key ended {other:?}")),
    }
    if failure.lock().map_err(fail)?.is_none() {
        return Err("the handler kept no failure for the refused write".into());
    }
    Ok(())
}
