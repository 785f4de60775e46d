//! The root of the control plane: it admits the job's PEs, completes allgathers (or fails
//! them on every member when the members disagree), and tells every PE when one is lost. The
//! same hub runs inside one process (PEs as tasks) and behind the TCP root server (PEs as
//! processes, the root in the launcher or in PE 0's process).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ferroshmem_runtime::{Error, Result};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;

use super::outbox::{hosting_pe_last, Outbox};
use super::wire::{Contribution, FromPe, Hello, ToPe, Welcome};

/// An event delivered to the hub by the links it serves.
#[derive(Debug)]
pub enum HubEvent {
    /// A PE introduced itself; `outbox` reaches it.
    Join {
        /// What the PE said.
        hello: Hello,
        /// Where to send its messages.
        outbox: Outbox,
    },
    /// As `Join`, for a link that must not speak for the PE until the hub has taken it (a TCP
    /// connection, which any process that knows the secret may open): `admitted` hears
    /// whether it was. A link the hub refused must forward no message and no disconnection,
    /// for they would be taken as those of the PE that holds the rank.
    Admit {
        /// What the PE said.
        hello: Hello,
        /// Where to send its messages.
        outbox: Outbox,
        /// Told `true` when the PE joined, `false` when it was refused.
        admitted: oneshot::Sender<bool>,
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

/// What the hub has learnt of the job's end so far, for whoever hosts it: the PEs it has
/// lost, in the order it lost them (the launcher names the first PE to fail by them), and the
/// global exit a PE asked for.
#[derive(Debug, Default)]
pub struct HubNews {
    lost: Mutex<Vec<usize>>,
    global_exit: Mutex<Option<(usize, i32)>>,
}

impl HubNews {
    /// The first PE lost, if any.
    pub fn first_lost(&self) -> Option<usize> {
        lock(&self.lost).first().copied()
    }

    /// The PE that ended the job with `global_exit`, and the status it gave, if one did.
    pub fn global_exit(&self) -> Option<(usize, i32)> {
        *lock(&self.global_exit)
    }

    fn lost(&self, pe: usize) {
        lock(&self.lost).push(pe);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
    /// Where the hub records the PEs it loses, as it loses them, and a global exit.
    pub news: Arc<HubNews>,
}

enum Member {
    Absent,
    Joined(Outbox),
    Finished,
    Lost,
}

/// An allgather in progress, or one that failed and still hears from late members.
struct Gather {
    /// The group size named by the first contribution.
    size: u32,
    /// Each index's contributor and payload; allocated once the size is known to be valid.
    slots: Vec<Option<(usize, Vec<u8>)>>,
    /// Every contributor so far.
    members: Vec<usize>,
    /// Why the allgather failed, once it has.
    failed: Option<String>,
}

/// Runs the hub until every PE has finished or been lost.
pub async fn run_hub(
    config: HubConfig,
    mut events: UnboundedReceiver<HubEvent>,
) -> Result<HubReport> {
    let n = config.n_pes;
    let mut members: Vec<Member> = (0..n).map(|_| Member::Absent).collect();
    let mut hellos: Vec<Option<Hello>> = vec![None; n];
    let deadline = super::deadline_after(config.join_timeout);
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
                let reason = not_joined(&hellos, &config);
                refuse_all(&members, &reason);
                return Err(Error::Bootstrap(reason));
            }
        };
        let (hello, outbox, admitted) = match event.joining() {
            Ok(joining) => joining,
            Err(HubEvent::Disconnected { rank, reason }) => {
                if rank < n && hellos[rank].is_some() {
                    let reason = format!("PE {rank} left during bootstrap ({reason})");
                    refuse_all(&members, &reason);
                    let heard = hellos.iter().map(Option::is_some).collect();
                    refuse_the_rest(&mut events, deadline, heard, &reason).await;
                    return Err(Error::Bootstrap(reason));
                }
                continue;
            }
            Err(_) => continue,
        };
        let rank = hello.rank as usize;
        if let Some(reason) = refusal(&hello, &config, &hellos) {
            tracing::warn!(rank, "bootstrap root refused a PE: {reason}");
            let _ = outbox.send(ToPe::Refused { reason });
            answer(admitted, false);
            continue;
        }
        tracing::debug!(rank, pid = hello.pid, node = %hello.node, "PE joined");
        members[rank] = Member::Joined(outbox);
        hellos[rank] = Some(hello);
        joined += 1;
        answer(admitted, true);
    }
    let hellos: Vec<Hello> = hellos.into_iter().map(|h| h.expect("all joined")).collect();
    let welcome = Welcome {
        job: config.job,
        nodes: hellos.iter().map(|h| h.node.clone()).collect(),
        pids: hellos.iter().map(|h| h.pid).collect(),
    };
    tell_joined(&members, None, || ToPe::Welcome(welcome.clone()));
    tracing::info!(n_pes = n, "job formed");
    serve(members, events, &config.news).await
}

/// Why the hub refuses `hello` (a PE asking to join the job of `config`, where `hellos`
/// holds the PEs joined so far), or `None` when it may join.
fn refusal(hello: &Hello, config: &HubConfig, hellos: &[Option<Hello>]) -> Option<String> {
    let (rank, n) = (hello.rank as usize, config.n_pes);
    if hello.secret != config.secret {
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
    }
}

/// A global exit under way: the PE that asked, its status, until when the hub waits for the
/// others to leave before it answers that PE, and whether it has. The hub ends once that PE
/// has left too: its answer has then been written.
#[derive(Debug, Clone, Copy)]
struct Exiting {
    pe: usize,
    status: i32,
    deadline: tokio::time::Instant,
    answered: bool,
}

async fn serve(
    mut members: Vec<Member>,
    mut events: UnboundedReceiver<HubEvent>,
    news: &HubNews,
) -> Result<HubReport> {
    let mut gathers = Gathers::default();
    let mut report = HubReport { lost: Vec::new() };
    let mut exiting: Option<Exiting> = None;
    let alive = |members: &[Member]| members.iter().any(|m| matches!(m, Member::Joined(_)));
    while alive(&members) {
        let Some(event) = next_event(&mut events, exiting).await else {
            match exiting.as_mut() {
                Some(x) if !x.answered => answer_global_exit(&mut members, x),
                _ => break,
            }
            continue;
        };
        let (rank, lost_reason) = match event {
            HubEvent::Join { outbox, .. } => {
                refuse_late(&outbox);
                continue;
            }
            HubEvent::Admit {
                outbox, admitted, ..
            } => {
                refuse_late(&outbox);
                answer(Some(admitted), false);
                continue;
            }
            HubEvent::Message {
                rank,
                msg: FromPe::Contribute(c),
            } => {
                gathers.contribute(&members, rank, c);
                continue;
            }
            HubEvent::Message {
                rank,
                msg: FromPe::Finalizing { next },
            } => {
                gathers.finalizing(&members, rank, next);
                continue;
            }
            HubEvent::Message {
                rank,
                msg: FromPe::Goodbye,
            } => {
                goodbye(&mut members, rank, &mut exiting);
                continue;
            }
            HubEvent::Message {
                rank,
                msg: FromPe::GlobalExit { status },
            } => {
                if exiting.is_none() && matches!(members.get(rank), Some(Member::Joined(_))) {
                    exiting = Some(begin_global_exit(&members, rank, status, news));
                    answer_if_alone(&mut members, &mut exiting);
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
        left(
            &mut members,
            (rank, lost_reason),
            &mut exiting,
            news,
            &mut report,
        );
    }
    Ok(report)
}

/// The next event from the links; `None` once they have all closed or, during global exit
/// `exiting` not yet answered, once its wait is over.
async fn next_event(
    events: &mut UnboundedReceiver<HubEvent>,
    exiting: Option<Exiting>,
) -> Option<HubEvent> {
    match exiting {
        Some(x) if !x.answered => tokio::time::timeout_at(x.deadline, events.recv())
            .await
            .ok()
            .flatten(),
        _ => events.recv().await,
    }
}

/// PE `rank` left the job for `reason` (it failed, or its link closed): lost, and every other
/// PE told so; or, during global exit `exiting`, simply gone, the PE that asked answered once
/// it is the last one left.
fn left(
    members: &mut [Member],
    (rank, reason): (usize, String),
    exiting: &mut Option<Exiting>,
    news: &HubNews,
    report: &mut HubReport,
) {
    if !matches!(members.get(rank), Some(Member::Joined(_))) {
        return;
    }
    if exiting.is_some() {
        finished(members, rank, exiting);
        return;
    }
    tracing::error!(pe = rank, "PE lost: {reason}");
    members[rank] = Member::Lost;
    tell_joined(members, None, || ToPe::PeerLost {
        pe: rank as u32,
        reason: reason.clone(),
    });
    news.lost(rank);
    report.lost.push((rank, reason));
}

/// PE `pe` asked to end the job with `status`: records it and tells every other PE, which
/// then exits. The PE that asked hears last ([`answer_global_exit`]).
fn begin_global_exit(members: &[Member], pe: usize, status: i32, news: &HubNews) -> Exiting {
    tracing::info!(pe, status, "global exit");
    *lock(&news.global_exit) = Some((pe, status));
    tell_joined(members, Some(pe), || ToPe::GlobalExit {
        pe: pe as u32,
        status,
    });
    Exiting {
        pe,
        status,
        deadline: tokio::time::Instant::now() + crate::exit::GLOBAL_EXIT_WAIT,
        answered: false,
    }
}

/// Why the job did not form in time: the PEs of `hellos` that did not join.
fn not_joined(hellos: &[Option<Hello>], config: &HubConfig) -> String {
    let missing: Vec<String> = (0..hellos.len())
        .filter(|&r| hellos[r].is_none())
        .map(|r| r.to_string())
        .collect();
    if missing.len() == hellos.len() {
        // A program that does not use ferroshmem runs on, as its own.
        return format!(
            "no PE joined the bootstrap root at {} within {:?}: the program does not use \
             ferroshmem, or every PE is still before its initialization",
            config.address, config.join_timeout
        );
    }
    format!(
        "PE(s) {} did not join the bootstrap root at {} within {:?}",
        missing.join(", "),
        config.address,
        config.join_timeout
    )
}

/// PE `rank` said goodbye: outside a global exit, the other PEs learn that it has left
/// ([`ToPe::Finished`]), so that a wait for something of it ends; then it is gone.
fn goodbye(members: &mut [Member], rank: usize, exiting: &mut Option<Exiting>) {
    if exiting.is_none() && matches!(members.get(rank), Some(Member::Joined(_))) {
        tell_joined(members, Some(rank), || ToPe::Finished { pe: rank as u32 });
    }
    finished(members, rank, exiting);
}

/// PE `rank` is gone without loss (it said goodbye, or left during a global exit): during
/// global exit `exiting`, one PE fewer to wait for.
fn finished(members: &mut [Member], rank: usize, exiting: &mut Option<Exiting>) {
    if matches!(members[rank], Member::Joined(_)) {
        members[rank] = Member::Finished;
    }
    answer_if_alone(members, exiting);
}

/// During global exit `exiting`, answers the PE that asked once no other PE is left.
fn answer_if_alone(members: &mut [Member], exiting: &mut Option<Exiting>) {
    let Some(x) = exiting.as_mut().filter(|x| !x.answered) else {
        return;
    };
    let others_left =
        (0..members.len()).all(|j| j == x.pe || !matches!(members[j], Member::Joined(_)));
    if others_left {
        answer_global_exit(members, x);
    }
}

/// Tells the PE that asked for global exit `x` that the others are gone (or were waited for
/// long enough: those still there are let go), so that it exits too; the hub ends when it
/// has left.
fn answer_global_exit(members: &mut [Member], x: &mut Exiting) {
    if let Member::Joined(out) = &members[x.pe] {
        let _ = out.send(ToPe::GlobalExit {
            pe: x.pe as u32,
            status: x.status,
        });
    }
    for (j, m) in members.iter_mut().enumerate() {
        if j != x.pe && matches!(m, Member::Joined(_)) {
            *m = Member::Finished;
        }
    }
    x.answered = true;
}

/// After the job failed to form for `reason`: refuses the PEs that had not joined yet as
/// they come (`heard` marks the ranks that have), until every rank has been heard from or
/// the join deadline passes. A PE started late then learns of the failure at once, instead
/// of waiting its whole bootstrap timeout for a root that would be gone: the process that
/// hosts the root waits for this before it gives up.
async fn refuse_the_rest(
    events: &mut UnboundedReceiver<HubEvent>,
    deadline: tokio::time::Instant,
    mut heard: Vec<bool>,
    reason: &str,
) {
    while heard.contains(&false) {
        let Ok(Some(event)) = tokio::time::timeout_at(deadline, events.recv()).await else {
            return;
        };
        let Ok((hello, outbox, admitted)) = event.joining() else {
            continue;
        };
        let _ = outbox.send(ToPe::Refused {
            reason: reason.to_string(),
        });
        answer(admitted, false);
        if let Some(h) = heard.get_mut(hello.rank as usize) {
            *h = true;
        }
    }
}

/// What a PE that asks to join brings: its hello, its outbox, and where to answer whether it
/// was admitted (for links that wait for that).
type Joining = (Hello, Outbox, Option<oneshot::Sender<bool>>);

impl HubEvent {
    /// The join this event asks for, or the event itself when it is something else.
    fn joining(self) -> std::result::Result<Joining, HubEvent> {
        match self {
            HubEvent::Join { hello, outbox } => Ok((hello, outbox, None)),
            HubEvent::Admit {
                hello,
                outbox,
                admitted,
            } => Ok((hello, outbox, Some(admitted))),
            other => Err(other),
        }
    }
}

/// Refuses every PE that has joined, with `reason`.
fn refuse_all(members: &[Member], reason: &str) {
    tell_joined(members, None, || ToPe::Refused {
        reason: reason.to_string(),
    });
}

/// Sends `message()` to every PE that has joined, but PE `skip`.
fn tell_joined(members: &[Member], skip: Option<usize>, message: impl Fn() -> ToPe) {
    for j in host_last(members, 0..members.len()) {
        if let (Some(Member::Joined(out)), false) = (members.get(j), skip == Some(j)) {
            let _ = out.send(message());
        }
    }
}

/// `ranks` in the order to tell them: a PE that runs in the root's own process last.
fn host_last(members: &[Member], ranks: impl IntoIterator<Item = usize>) -> Vec<usize> {
    hosting_pe_last(
        ranks,
        |r| matches!(members.get(r), Some(Member::Joined(out)) if out.hosts_root()),
    )
}

/// Tells a link that asked to be admitted whether it was.
fn answer(admitted: Option<oneshot::Sender<bool>>, joined: bool) {
    if let Some(admitted) = admitted {
        let _ = admitted.send(joined);
    }
}

/// Refuses a PE that comes after the job has formed.
fn refuse_late(outbox: &Outbox) {
    let _ = outbox.send(ToPe::Refused {
        reason: "the job has already formed".into(),
    });
}

/// What is wrong with `rank`'s contribution `c` to `g` in a job of `n` PEs, if anything. A
/// contribution of size 0 is a PE refusing its own call, its payload saying why.
fn fault(g: &Gather, n: usize, rank: usize, c: &Contribution) -> Option<String> {
    let index = c.index as usize;
    if c.size == 0 {
        Some(format!(
            "PE {rank} refused its own call: {}",
            String::from_utf8_lossy(&c.payload)
        ))
    } else if c.size as usize > n {
        Some(format!(
            "PE {rank} named a group of {} PEs in a job of {n}",
            c.size
        ))
    } else if c.size != g.size {
        Some(format!(
            "PE {rank} named a group of {} PEs, PE {} one of {}",
            c.size, g.members[0], g.size
        ))
    } else if index >= c.size as usize {
        Some(format!(
            "PE {rank} named index {index} of a group of {} PEs",
            c.size
        ))
    } else if let Some((other, _)) = g.slots.get(index).and_then(Option::as_ref) {
        Some(format!(
            "PE {rank} contributed index {index}, which PE {other} already did"
        ))
    } else {
        None
    }
}

/// The allgathers in progress, and what the hub knows of the PEs that have begun to
/// finalize.
#[derive(Default)]
struct Gathers {
    open: HashMap<(u64, u64), Gather>,
    /// For each PE that has begun to finalize, the next sequence number of each group it has
    /// made calls in: it will never make that call, nor any later one.
    finalized: HashMap<usize, HashMap<u64, u64>>,
}

/// Sends `r` the outcome of allgather `key`, if `r` is still in the job.
fn tell(members: &[Member], r: usize, key: (u64, u64), gathered: Gathered) {
    if let Some(Member::Joined(out)) = members.get(r) {
        let (group, seq) = key;
        let _ = out.send(match gathered {
            Ok(payloads) => ToPe::Gathered {
                group,
                seq,
                payloads,
            },
            Err(reason) => ToPe::GatherFailed { group, seq, reason },
        });
    }
}

type Gathered = std::result::Result<Vec<Vec<u8>>, String>;

impl Gathers {
    /// Why allgather `key` of `size` members can never complete because a PE that has not
    /// contributed to it has begun to finalize, if one has. Only a group as large as the job
    /// surely counts every PE among its members; of smaller groups the hub does not know
    /// who belongs (team calls watch the members' call records for that).
    fn abandoned(
        &self,
        key: (u64, u64),
        size: usize,
        n: usize,
        contributors: &[usize],
    ) -> Option<String> {
        if size != n {
            return None;
        }
        let (group, seq) = key;
        self.finalized.iter().find_map(|(&pe, next)| {
            let next = next.get(&group).copied().unwrap_or(0);
            (seq >= next && !contributors.contains(&pe)).then(|| {
                format!(
                    "PE {pe} has finalized without making this call: it makes no more \
                     collective calls"
                )
            })
        })
    }

    /// PE `rank` has begun to finalize: every allgather it will never contribute to fails.
    fn finalizing(&mut self, members: &[Member], rank: usize, next: Vec<(u64, u64)>) {
        self.finalized.insert(rank, next.into_iter().collect());
        let n = members.len();
        let keys: Vec<(u64, u64)> = self.open.keys().copied().collect();
        for key in keys {
            let g = &self.open[&key];
            if g.failed.is_some() {
                continue;
            }
            if let Some(reason) = self.abandoned(key, g.size as usize, n, &g.members) {
                self.fail(members, key, rank, reason);
            }
        }
    }

    /// Fails allgather `key` on every member that contributed so far (and, as they come, on
    /// the others), because of `rank`.
    fn fail(&mut self, members: &[Member], key: (u64, u64), rank: usize, detail: String) {
        let detail = format!("group {}, call {}: {detail}", key.0, key.1);
        tracing::warn!(rank, "collective call failed: {detail}");
        let Some(g) = self.open.get_mut(&key) else {
            return;
        };
        g.slots = Vec::new();
        for r in host_last(members, g.members.iter().copied()) {
            tell(members, r, key, Err(detail.clone()));
        }
        g.failed = Some(detail);
        self.forget_once_told(key, members.len());
    }

    /// Forgets failed allgather `key` once as many PEs as it expected have been told.
    fn forget_once_told(&mut self, key: (u64, u64), n: usize) {
        let Some(g) = self.open.get(&key) else {
            return;
        };
        let expected = match g.size as usize {
            s @ 1.. if s <= n => s,
            _ => n,
        };
        if g.members.len() >= expected {
            self.open.remove(&key);
        }
    }

    fn contribute(&mut self, members: &[Member], rank: usize, c: Contribution) {
        let n = members.len();
        let key = (c.group, c.seq);
        let g = self.open.entry(key).or_insert_with(|| Gather {
            size: c.size,
            slots: Vec::new(),
            members: Vec::new(),
            failed: None,
        });
        if let Some(detail) = &g.failed {
            tell(members, rank, key, Err(detail.clone()));
            g.members.push(rank);
            self.forget_once_told(key, n);
            return;
        }
        let fault = fault(g, n, rank, &c);
        g.members.push(rank);
        let fault =
            fault.or_else(|| self.abandoned(key, c.size as usize, n, &self.open[&key].members));
        if let Some(detail) = fault {
            self.fail(members, key, rank, detail);
            return;
        }
        let g = self.open.get_mut(&key).expect("present");
        if g.slots.is_empty() {
            g.slots = vec![None; g.size as usize];
        }
        g.slots[c.index as usize] = Some((rank, c.payload));
        if g.slots.iter().all(Option::is_some) {
            let g = self.open.remove(&key).expect("present");
            let payloads: Vec<Vec<u8>> = g.slots.into_iter().flatten().map(|(_, p)| p).collect();
            for r in host_last(members, g.members) {
                tell(members, r, key, Ok(payloads.clone()));
            }
        }
    }
}
