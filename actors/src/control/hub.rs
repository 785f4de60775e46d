//! The root of the control plane: it admits the job's PEs, completes allgathers, and tells
//! every PE when one is lost. The same hub runs inside one process (PEs as tasks) and behind
//! the TCP root server (PEs as processes, the root in the launcher or in PE 0's process).

use std::collections::HashMap;
use std::time::Duration;

use ferroshmem_runtime::{Error, Result};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::wire::{Contribution, FromPe, Hello, ToPe, Welcome};

/// An event delivered to the hub by the links it serves.
#[derive(Debug)]
pub enum HubEvent {
    /// A PE introduced itself; `outbox` reaches it.
    Join {
        /// What the PE said.
        hello: Hello,
        /// Where to send its messages.
        outbox: UnboundedSender<ToPe>,
    },
    /// A PE sent a message.
    Message {
        /// The PE.
        rank: usize,
        /// The message.
        msg: FromPe,
    },
    /// A PE's link closed.
    Disconnected {
        /// The PE.
        rank: usize,
        /// Why, as far as the link knows.
        reason: String,
    },
}

/// How the job ended, from the hub's side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubReport {
    /// PEs lost, with the reason, in the order they were lost.
    pub lost: Vec<(usize, String)>,
}

/// What the hub needs to know.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// Number of PEs.
    pub n_pes: usize,
    /// The job's random identity.
    pub job: u64,
    /// The job's secret, checked again on every join.
    pub secret: Vec<u8>,
    /// How long PEs have to join.
    pub join_timeout: Duration,
    /// Where PEs reach the root, for messages.
    pub address: String,
}

enum Member {
    Absent,
    Joined(UnboundedSender<ToPe>),
    Finished,
    Lost,
}

struct Gather {
    size: u32,
    payloads: Vec<Option<Vec<u8>>>,
    ranks: Vec<usize>,
}

/// Runs the hub until every PE has finished or been lost.
pub async fn run_hub(
    config: HubConfig,
    mut events: UnboundedReceiver<HubEvent>,
) -> Result<HubReport> {
    let n = config.n_pes;
    let mut members: Vec<Member> = (0..n).map(|_| Member::Absent).collect();
    let mut hellos: Vec<Option<Hello>> = vec![None; n];
    let deadline = tokio::time::Instant::now() + config.join_timeout;
    let mut joined = 0;
    while joined < n {
        let event = match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(e)) => e,
            Ok(None) => {
                return Err(Error::Bootstrap(
                    "the bootstrap root's links all closed".into(),
                ))
            }
            Err(_) => {
                let missing: Vec<String> = (0..n)
                    .filter(|&r| hellos[r].is_none())
                    .map(|r| r.to_string())
                    .collect();
                let reason = format!(
                    "PE(s) {} did not join the bootstrap root at {} within {:?}",
                    missing.join(", "),
                    config.address,
                    config.join_timeout
                );
                for m in &members {
                    if let Member::Joined(out) = m {
                        let _ = out.send(ToPe::Refused {
                            reason: reason.clone(),
                        });
                    }
                }
                return Err(Error::Bootstrap(reason));
            }
        };
        match event {
            HubEvent::Join { hello, outbox } => {
                let rank = hello.rank as usize;
                let refusal = if hello.secret != config.secret {
                    Some("wrong job secret".to_string())
                } else if hello.size as usize != n || rank >= n {
                    Some(format!(
                        "PE {rank} of {} does not fit a job of {n} PEs",
                        hello.size
                    ))
                } else if hellos[rank].is_some() {
                    Some(format!("PE {rank} joined twice"))
                } else {
                    None
                };
                if let Some(reason) = refusal {
                    tracing::warn!(rank, "bootstrap root refused a PE: {reason}");
                    let _ = outbox.send(ToPe::Refused { reason });
                    continue;
                }
                tracing::debug!(rank, pid = hello.pid, node = %hello.node, "PE joined");
                members[rank] = Member::Joined(outbox);
                hellos[rank] = Some(hello);
                joined += 1;
            }
            HubEvent::Disconnected { rank, reason } => {
                if rank < n && hellos[rank].is_some() {
                    let reason = format!("PE {rank} left during bootstrap ({reason})");
                    for m in &members {
                        if let Member::Joined(out) = m {
                            let _ = out.send(ToPe::Refused {
                                reason: reason.clone(),
                            });
                        }
                    }
                    return Err(Error::Bootstrap(reason));
                }
            }
            HubEvent::Message { .. } => {}
        }
    }
    let hellos: Vec<Hello> = hellos.into_iter().map(|h| h.expect("all joined")).collect();
    let welcome = Welcome {
        job: config.job,
        nodes: hellos.iter().map(|h| h.node.clone()).collect(),
        pids: hellos.iter().map(|h| h.pid).collect(),
    };
    for m in &members {
        if let Member::Joined(out) = m {
            let _ = out.send(ToPe::Welcome(welcome.clone()));
        }
    }
    tracing::info!(n_pes = n, "job formed");
    serve(members, events).await
}

async fn serve(
    mut members: Vec<Member>,
    mut events: UnboundedReceiver<HubEvent>,
) -> Result<HubReport> {
    let mut gathers: HashMap<(u64, u64), Gather> = HashMap::new();
    let mut report = HubReport { lost: Vec::new() };
    let alive = |members: &[Member]| members.iter().any(|m| matches!(m, Member::Joined(_)));
    while alive(&members) {
        let Some(event) = events.recv().await else {
            break;
        };
        let (rank, lost_reason) = match event {
            HubEvent::Join { outbox, .. } => {
                let _ = outbox.send(ToPe::Refused {
                    reason: "the job has already formed".into(),
                });
                continue;
            }
            HubEvent::Message {
                rank,
                msg: FromPe::Contribute(c),
            } => {
                contribute(&members, &mut gathers, rank, c);
                continue;
            }
            HubEvent::Message {
                rank,
                msg: FromPe::Goodbye,
            } => {
                if matches!(members[rank], Member::Joined(_)) {
                    members[rank] = Member::Finished;
                }
                continue;
            }
            HubEvent::Message {
                rank,
                msg: FromPe::Fail { reason },
            } => (rank, reason),
            HubEvent::Message {
                rank,
                msg: FromPe::Hello(_),
            } => (rank, "sent a second hello".to_string()),
            HubEvent::Disconnected { rank, reason } => (rank, reason),
        };
        if !matches!(members.get(rank), Some(Member::Joined(_))) {
            continue;
        }
        tracing::error!(pe = rank, "PE lost: {lost_reason}");
        members[rank] = Member::Lost;
        for m in &members {
            if let Member::Joined(out) = m {
                let _ = out.send(ToPe::PeerLost {
                    pe: rank as u32,
                    reason: lost_reason.clone(),
                });
            }
        }
        report.lost.push((rank, lost_reason));
    }
    Ok(report)
}

fn contribute(
    members: &[Member],
    gathers: &mut HashMap<(u64, u64), Gather>,
    rank: usize,
    c: Contribution,
) {
    let key = (c.group, c.seq);
    let g = gathers.entry(key).or_insert_with(|| Gather {
        size: c.size,
        payloads: vec![None; c.size as usize],
        ranks: Vec::new(),
    });
    let index = c.index as usize;
    if c.size != g.size || index >= g.payloads.len() || g.payloads[index].is_some() {
        tracing::warn!(
            rank,
            group = c.group,
            seq = c.seq,
            "inconsistent allgather contribution ignored"
        );
        return;
    }
    g.payloads[index] = Some(c.payload);
    g.ranks.push(rank);
    if g.payloads.iter().all(Option::is_some) {
        let g = gathers.remove(&key).expect("present");
        let payloads: Vec<Vec<u8>> = g.payloads.into_iter().map(|p| p.expect("all")).collect();
        for r in g.ranks {
            if let Member::Joined(out) = &members[r] {
                let _ = out.send(ToPe::Gathered {
                    group: key.0,
                    seq: key.1,
                    payloads: payloads.clone(),
                });
            }
        }
    }
}
