//! The call records of members on other nodes, for the checks of `calls.rs`.
//!
//! A sleeping waiter reads a mapped member's records with loads, inside its stall check. A
//! member on another node can only be read through the remote transport, which takes a round
//! trip, so the check uses the latest [`Snapshot`] of that member and starts the next read
//! (three remote gets, in order: the records, the member's header words, the records again)
//! when none is in flight and the latest is older than [`REFRESH_EVERY`]. Records only move
//! forward (a call's record, once given up, stays given up; `finalizing` is set once), so an
//! old snapshot errs on the side of waiting, never of a wrong verdict.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferroshmem_observability::Op;

use super::calls::{RECORD_BYTES, RING};
use super::Team;
use crate::error::Result;
use crate::route::RemoteOp;
use crate::segment::Segment;

/// How often a member on another node is read at most while a waiter sleeps.
const REFRESH_EVERY: Duration = Duration::from_millis(10);

/// One read of a member's records and header words.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot {
    /// Each record: its word as first read, its descriptor, its word as read again.
    pub records: [(u64, u64, u64); RING],
    /// How many world barriers the member has begun.
    pub barriers_begun: u64,
    /// Its final barrier's number once it has begun to finalize, else 0.
    pub finalizing: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Member {
    latest: Option<Snapshot>,
    reading: bool,
    started: Option<Instant>,
}

/// The snapshots of a team's members (those on this node stay empty).
#[derive(Debug)]
pub(crate) struct RemoteRecords {
    members: Mutex<Vec<Member>>,
}

impl RemoteRecords {
    /// Room for `n` members.
    pub fn new(n: usize) -> RemoteRecords {
        RemoteRecords {
            members: Mutex::new(vec![Member::default(); n]),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Vec<Member>) -> R) -> R {
        f(&mut self
            .members
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

impl Team {
    /// The latest snapshot of member `j` (on another node), if any; starts the next read
    /// when it is due and a tokio runtime runs this code.
    pub(crate) fn remote_snapshot(&self, j: usize) -> Option<Snapshot> {
        let records = &self.inner.remote_records;
        let now = Instant::now();
        let (latest, due) = records.with(|m| {
            let member = &mut m[j];
            let due = !member.reading
                && member
                    .started
                    .is_none_or(|t| now.duration_since(t) >= REFRESH_EVERY);
            if due {
                member.reading = true;
                member.started = Some(now);
            }
            (member.latest, due)
        });
        if due {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let team = self.clone();
                    runtime.spawn(async move {
                        let read = team.read_remote(j).await;
                        team.inner.remote_records.with(|m| {
                            m[j].reading = false;
                            if let Ok(snapshot) = read {
                                m[j].latest = Some(snapshot);
                            }
                        });
                    });
                }
                Err(_) => records.with(|m| m[j].reading = false),
            }
        }
        latest
    }

    /// Reads member `j`'s records, its header words, and its records again.
    async fn read_remote(&self, j: usize) -> Result<Snapshot> {
        let dp = self.dp();
        let pe = self.pe(j);
        let ring = self.view::<u64>(self.inner.layout.call(0), RING * RECORD_BYTES / 8);
        let mut first = [0u64; RING * 2];
        dp.get(&mut first, ring, pe).await?;
        let at = Segment::BARRIERS_BEGUN_OFFSET;
        let header = dp.remote(Op::Get, pe, 16, at, || RemoteOp::Get(16)).await?;
        let mut again = [0u64; RING * 2];
        dp.get(&mut again, ring, pe).await?;
        let word = |bytes: &[u8], i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(bytes.get(i * 8..i * 8 + 8).unwrap_or(&[0; 8]));
            u64::from_le_bytes(w)
        };
        Ok(Snapshot {
            records: std::array::from_fn(|k| (first[2 * k], first[2 * k + 1], again[2 * k])),
            barriers_begun: word(&header, 0),
            finalizing: word(&header, 1),
        })
    }
}
