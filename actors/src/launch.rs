//! Starting a job: [`run_local`] (n PEs as tasks of this process), [`init`] (this process is
//! one PE of a launched job), and [`run`] (whichever applies, with the same program code).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroshmem_net::FabricRemote;
use ferroshmem_runtime::config::{
    bind_from_env, machine_place, node_key, spin_from_env, symmetric_size_from_env, Bind,
};
use ferroshmem_runtime::heap::HeapAllocator;
use ferroshmem_runtime::{DataPlane, DataPlaneParts, Error, Health, HeapId, Result, Segment};
use std::collections::HashMap;
use tokio::sync::mpsc::unbounded_channel;
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;

use crate::actor::PeActor;
use crate::control::wire::{Contribution, FromPe, Hello, ToPe};
use crate::control::{local_job, HubReport, Link};
use crate::launch_env::{bootstrap_timeout, random_bytes, LaunchEnv};
use crate::pe::Pe;
use crate::rendezvous;
use crate::routes::{self, PeerRoutes};
use crate::segment_exchange::{fetch, SegmentServer};
use crate::team::JoinOptions;

/// Settings every PE of a job shares.
#[derive(Debug, Clone)]
struct JobSettings {
    heap_size: usize,
    spin: Duration,
    timeout: Duration,
    /// The predefined teams' `dest_ready` (see [`JoinOptions`]).
    dest_ready: bool,
}

impl JobSettings {
    fn from_env() -> Result<Self> {
        Ok(JobSettings {
            heap_size: symmetric_size_from_env()?,
            spin: spin_from_env()?,
            timeout: bootstrap_timeout()?,
            dest_ready: false,
        })
    }
}

/// Builds a PE's data plane and starts its actor.
fn start_pe(
    rank: usize,
    job: u64,
    peers: PeerRoutes,
    settings: &JobSettings,
    link: Link,
    next_seq: u64,
    hosted_root: Option<JoinHandle<Result<HubReport>>>,
) -> Result<Pe> {
    let data = Arc::new(DataPlane::new(DataPlaneParts {
        my_pe: rank,
        heap: HeapId(job),
        routes: peers.routes,
        remote: peers.remote,
        nodes: peers.nodes,
        machine_pes: peers.machine_pes,
        health: Arc::new(Health::new()),
        spin: settings.spin,
    })?);
    let (mailbox_tx, mailbox) = unbounded_channel();
    let actor = PeActor {
        rank,
        data: data.clone(),
        // The top of the heap is the team pool (teams' control regions), outside `malloc`'s
        // reach.
        heap: HeapAllocator::new(data.user_heap_bytes(), data.heap_alignment()),
        link,
        mailbox,
        seqs: HashMap::from([(0, next_seq)]),
        hosted_root,
        global_exit: Vec::new(),
    };
    data.metrics().heap(actor.heap.used(), actor.heap.size());
    let pe = Pe::new(data, mailbox_tx, settings.dest_ready)?;
    tokio::spawn(actor.run());
    Ok(pe)
}

/// Starts this process's metrics endpoint when `FERROSHMEM_METRICS_ADDR` asks for one, at
/// its port plus `local_rank` (see `ferroshmem_observability::start_from_env`).
fn start_metrics(local_rank: usize) -> Result<()> {
    ferroshmem_observability::start_from_env(local_rank)
        .map(|_| ())
        .map_err(|e| Error::Config(e.to_string()))
}

fn hello(secret: &[u8], rank: usize, size: usize, node: String) -> Hello {
    Hello {
        secret: secret.to_vec(),
        rank: rank as u32,
        size: size as u32,
        node,
        pid: std::process::id(),
    }
}

/// Runs `f` on `n_pes` PEs inside this process (the embedded default: no launcher, host
/// memory). Each PE is a tokio task with its own actor and heap segment. Returns every PE's
/// result in PE order, or the job's first failure: a PE that panics fails the job, and the
/// other PEs' waits and barriers return [`Error::PeerLost`] instead of hanging.
///
/// A PE whose `f` returns (with whatever value: an `Err` of the program's is a value here)
/// finalizes, which is a world barrier: where the other PEs go on to calls it never makes,
/// those fail with [`Error::CollectiveMismatch`] naming it, and that is the job's failure,
/// the returned `Err` of the PE's own `f` being dropped with the results. A PE that must not
/// go on fails the job instead: it panics (the job then fails with [`Error::Panicked`]
/// naming it), or the program returns only once every PE has made the same calls.
///
/// ```no_run
/// # async fn f() -> ferroshmem_runtime::Result<()> {
/// let sums = ferroshmem_actors::run_local(4, |pe| async move { pe.my_pe() * 10 }).await?;
/// assert_eq!(sums, vec![0, 10, 20, 30]);
/// # Ok(()) }
/// ```
pub async fn run_local<F, Fut, R>(n_pes: usize, f: F) -> Result<Vec<R>>
where
    F: Fn(Pe) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    if n_pes == 0 {
        return Err(Error::InvalidArgument("a job needs at least one PE".into()));
    }
    let InProcessJob {
        settings,
        secret,
        segments,
        links,
        hub,
    } = InProcessJob::new(n_pes)?;
    let f = Arc::new(f);
    let mut tasks = JoinSet::new();
    let mut ranks = HashMap::new();
    let mut fail_links = Vec::with_capacity(n_pes);
    for (rank, mut link) in links.into_iter().enumerate() {
        fail_links.push(link.to_root.clone());
        let (f, segments, settings, secret) = (
            f.clone(),
            segments.clone(),
            settings.clone(),
            secret.clone(),
        );
        let span = tracing::info_span!("pe", pe = rank, n_pes);
        let task = tasks.spawn(
            async move {
                let started = Instant::now();
                let welcome = link
                    .join(
                        hello(&secret, rank, n_pes, "in-process".into()),
                        settings.timeout,
                    )
                    .await?;
                let peers = PeerRoutes::mapped(segments);
                let pe = start_pe(rank, welcome.job, peers, &settings, link, 0, None)?;
                pe.metrics().bootstrap(started.elapsed());
                tracing::debug!(took = ?started.elapsed(), "PE joined its in-process job");
                let out = f(pe.clone()).await;
                pe.finalize().await?;
                Ok::<_, Error>(out)
            }
            .instrument(span),
        );
        ranks.insert(task.id(), rank);
    }
    drop(segments);
    let mut results: Vec<Option<R>> = (0..n_pes).map(|_| None).collect();
    let mut failure: Option<Error> = None;
    while let Some(done) = tasks.join_next_with_id().await {
        let (rank, outcome) = match done {
            Ok((id, outcome)) => (ranks[&id], outcome),
            Err(join) => {
                let rank = ranks[&join.id()];
                let message = panic_message(join);
                let _ = fail_links[rank].send(FromPe::Fail {
                    reason: format!("it panicked: {message}"),
                });
                (rank, Err(Error::Panicked { pe: rank, message }))
            }
        };
        match outcome {
            Ok(out) => results[rank] = Some(out),
            Err(e) => keep_root_cause(&mut failure, e),
        }
    }
    drop(fail_links);
    let _ = hub.await;
    match failure {
        Some(e) => Err(e),
        None => Ok(results.into_iter().flatten().collect()),
    }
}

/// Records PE failure `e` in `failure`, the job's failure so far: the first failure stays,
/// except that a root cause outranks the [`Error::PeerLost`] of the peers that lost it.
fn keep_root_cause(failure: &mut Option<Error>, e: Error) {
    let better = match failure {
        None => true,
        Some(Error::PeerLost { .. }) => !matches!(e, Error::PeerLost { .. }),
        Some(_) => false,
    };
    if better {
        *failure = Some(e);
    }
}

fn panic_message(join: tokio::task::JoinError) -> String {
    match join.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string panic payload".into()),
        Err(join) => join.to_string(),
    }
}

/// Runs one allgather on a link during bootstrap (before the actor owns it).
async fn bootstrap_allgather(
    link: &mut Link,
    rank: usize,
    n_pes: usize,
    seq: u64,
    payload: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<Vec<u8>>> {
    link.to_root
        .send(FromPe::Contribute(Contribution {
            group: 0,
            seq,
            index: rank as u32,
            size: n_pes as u32,
            payload,
        }))
        .map_err(|_| {
            Error::Bootstrap(format!(
                "PE {rank}: the root at {} is gone",
                link.root_address
            ))
        })?;
    let wait = async {
        loop {
            match link.from_root.recv().await {
                Some(ToPe::Gathered {
                    group: 0,
                    seq: s,
                    payloads,
                }) if s == seq => return Ok(payloads),
                Some(ToPe::GatherFailed {
                    group: 0,
                    seq: s,
                    reason,
                }) if s == seq => return Err(Error::Bootstrap(reason)),
                Some(ToPe::PeerLost { pe, reason }) => {
                    return Err(Error::PeerLost {
                        pe: pe as usize,
                        reason,
                    })
                }
                Some(ToPe::Refused { reason }) => return Err(Error::Bootstrap(reason)),
                Some(_) => {}
                None => {
                    return Err(Error::Bootstrap(format!(
                        "PE {rank}: the root at {} closed the connection",
                        link.root_address
                    )))
                }
            }
        }
    };
    tokio::time::timeout(timeout, wait)
        .await
        .map_err(|_| Error::Timeout {
            operation: "bootstrap",
            after: timeout,
        })?
}

/// Joins the job this process was launched into, as one PE, and returns its handle. Call
/// [`Pe::finalize`] at the end; a PE whose process ends without it is reported lost to the
/// others.
///
/// # Errors
/// [`Error::Config`] when no launcher started this process (use [`run_local`] or [`run`]);
/// [`Error::Bootstrap`] / [`Error::Timeout`] naming the PE and address that failed.
pub async fn init() -> Result<Pe> {
    init_with(JoinOptions::default()).await
}

/// [`init`], with `options` (which every PE of the job passes alike).
///
/// # Errors
/// As [`init`].
pub async fn init_with(options: JoinOptions) -> Result<Pe> {
    let env = LaunchEnv::detect()?.ok_or_else(|| {
        Error::Config(
            "this process was not started by a launcher (ferroshmem run, mpirun, srun): use run_local or run".into(),
        )
    })?;
    init_launched(env, options).await
}

/// Joins a job of this one process as its only PE, where no launcher started it: how a
/// program started directly runs (the singleton mode of OpenSHMEM implementations; the C
/// library's `shmem_init` takes it where no launcher is detected). The PE hosts the job's
/// root itself.
///
/// # Errors
/// As [`run_local`]'s set-up: the environment's settings, the heap's segment.
pub async fn init_alone() -> Result<Pe> {
    init_alone_with(JoinOptions::default()).await
}

/// [`init_alone`], with `options`.
///
/// # Errors
/// As [`init_alone`].
pub async fn init_alone_with(options: JoinOptions) -> Result<Pe> {
    let job = InProcessJob::new(1)?;
    let mut link = job
        .links
        .into_iter()
        .next()
        .ok_or_else(|| Error::Bootstrap("a job of one PE made no link".into()))?;
    let settings = JobSettings {
        dest_ready: options.dest_ready,
        ..job.settings
    };
    let welcome = link
        .join(
            hello(&job.secret, 0, 1, "in-process".into()),
            settings.timeout,
        )
        .await?;
    let peers = PeerRoutes::mapped(job.segments);
    start_pe(0, welcome.job, peers, &settings, link, 0, Some(job.hub))
}

/// What an in-process job starts from: the environment's settings, the job's secret, each
/// PE's heap segment, each PE's link to the job's root, and the root's task.
struct InProcessJob {
    settings: JobSettings,
    secret: Vec<u8>,
    segments: Vec<Arc<Segment>>,
    links: Vec<Link>,
    hub: JoinHandle<Result<HubReport>>,
}

impl InProcessJob {
    /// A job of `n_pes` PEs of this process, with metrics served where the environment
    /// asks for them.
    fn new(n_pes: usize) -> Result<InProcessJob> {
        let settings = JobSettings::from_env()?;
        start_metrics(0)?;
        let job = u64::from_le_bytes(random_bytes()?);
        let secret = random_bytes::<32>()?.to_vec();
        let segments = (0..n_pes)
            .map(|rank| Segment::create(rank, settings.heap_size).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        let (links, hub) = local_job(n_pes, job, secret.clone(), settings.timeout);
        Ok(InProcessJob {
            settings,
            secret,
            segments,
            links,
            hub,
        })
    }
}

async fn init_launched(env: LaunchEnv, options: JoinOptions) -> Result<Pe> {
    let span = tracing::info_span!(
        "bootstrap",
        pe = env.rank,
        n_pes = env.size,
        launcher = env.launcher
    );
    bootstrap(env, options).instrument(span).await
}

/// Maps the segments of this node's PEs (`local`), exchanged over Unix sockets between two
/// job-wide allgathers (numbers 0 and 1); `None` for the PEs of other nodes.
async fn map_node_segments(
    link: &mut Link,
    (rank, n_pes): (usize, usize),
    job: u64,
    own: Arc<Segment>,
    local: &[bool],
    secret: &[u8],
    settings: &JobSettings,
) -> Result<Vec<Option<Arc<Segment>>>> {
    let server = SegmentServer::start(job, rank, own.clone(), secret.to_vec())?;
    let timeout = settings.timeout;
    bootstrap_allgather(link, rank, n_pes, 0, b"serving".to_vec(), timeout).await?;
    let fetches = (0..n_pes).filter(|&r| r != rank && local[r]).map(|r| {
        let (secret, heap_size) = (secret.to_vec(), settings.heap_size);
        async move {
            fetch(job, r, secret, heap_size, timeout)
                .await
                .map(|s| (r, s))
        }
    });
    let mut segments: Vec<Option<Arc<Segment>>> = vec![None; n_pes];
    for fetched in futures::future::join_all(fetches).await {
        let (r, s) = fetched?;
        segments[r] = Some(Arc::new(s));
    }
    segments[rank] = Some(own);
    bootstrap_allgather(link, rank, n_pes, 1, b"mapped".to_vec(), timeout).await?;
    drop(server);
    tracing::debug!("this node's segments mapped");
    Ok(segments)
}

/// Reaches the PEs of other nodes through the fabric `joining` opened, from everyone's
/// contacts (allgather number 2); returns the transport and the next allgather's number.
async fn reach_other_nodes(
    link: &mut Link,
    (rank, n_pes): (usize, usize),
    joining: Option<routes::Joining>,
    local: &[bool],
    timeout: Duration,
) -> Result<(Option<Arc<FabricRemote>>, u64)> {
    let Some(joining) = joining else {
        return Ok((None, 2));
    };
    let contact = joining.contact().encode();
    let contacts = bootstrap_allgather(link, rank, n_pes, 2, contact, timeout).await?;
    let remote = joining.connect(&contacts, local)?;
    tracing::debug!(provider = %remote.fabric().provider(), "the other nodes reached through the fabric");
    Ok((Some(remote), 3))
}

/// Pins this PE's threads to one CPU where `FERROSHMEM_BIND=core` asks: before the PE's
/// segment records the CPUs it may use.
fn pin_to_a_core(env: &LaunchEnv, bind: Bind) -> Result<()> {
    if bind == Bind::Core {
        let cpu = ferroshmem_runtime::cpus::bind_to_core(env.local_rank)?;
        tracing::info!(
            cpu,
            local_rank = env.local_rank,
            "this PE's threads run on one CPU"
        );
    }
    Ok(())
}

/// Binds this PE's threads to its share of the machine's CPUs where `bind` is
/// [`Bind::Share`] (asked for by `FERROSHMEM_BIND`, or the launcher's default, which leaves
/// some PEs alone: [`ferroshmem_runtime::cpus::bind_to_share`]): the job's PEs on this
/// machine (`nodes`: every PE's node key) are those on the same kernel, network namespaces
/// with host names of their own included, since they run on the same CPUs. Where the PEs
/// had one CPU list (the default binds only PEs that may use the whole machine, and CPUs are
/// dealt only over the whole machine), the shares together cover it (a block each, or one
/// CPU each where they outnumber the CPUs), so the node is crowded after exactly when it was
/// before, and the CPUs its segments recorded before binding still give the right verdict
/// ([`ferroshmem_runtime::cpus`]). A failure is an error where
/// `FERROSHMEM_BIND` asked for the share, a warning where it is the default (the threads
/// keep the CPUs they had).
fn take_machine_share((bind, asked): (Bind, bool), nodes: &[String], rank: usize) -> Result<()> {
    if bind != Bind::Share {
        return Ok(());
    }
    let Some(place) = machine_place(nodes, rank) else {
        return Ok(());
    };
    match ferroshmem_runtime::cpus::bind_to_share(place, asked) {
        Ok(Some(cpus)) => tracing::info!(?cpus, ?place, "this PE's share of the machine's CPUs"),
        Ok(None) => {}
        Err(e) if asked => return Err(e),
        Err(e) => tracing::warn!(%e, "this PE's threads keep the CPUs they had"),
    }
    Ok(())
}

async fn bootstrap(env: LaunchEnv, options: JoinOptions) -> Result<Pe> {
    let started = Instant::now();
    start_metrics(env.local_rank)?;
    let settings = JobSettings {
        timeout: env.timeout,
        dest_ready: options.dest_ready,
        ..JobSettings::from_env()?
    };
    let asked = bind_from_env()?;
    let bind = asked.unwrap_or(env.default_bind);
    pin_to_a_core(&env, bind)?;
    let (rank, n_pes) = (env.rank, env.size);
    let own = Arc::new(Segment::create(rank, settings.heap_size)?);
    let mut root = rendezvous::reach_root(&env).await?;
    let hello = hello(&root.secret, rank, n_pes, node_key());
    let welcome = match root.link.join(hello, settings.timeout).await {
        Ok(welcome) => welcome,
        Err(e) => return Err(root.failed(e).await),
    };
    root.formed();
    take_machine_share((bind, asked.is_some()), &welcome.nodes, rank)?;
    own.record_bound_cpu(ferroshmem_runtime::cpus::the_one_cpu());
    let machine_pes = machine_place(&welcome.nodes, rank).map_or(1, |place| place.pes);
    let rendezvous = root.rendezvous;
    tracing::debug!(job = welcome.job, root = %root.link.root_address, "job formed");
    let rendezvous::Root {
        mut link,
        secret,
        hosted,
        ..
    } = root;
    // PEs of this node share segments; the others are reached through the fabric.
    let local: Vec<bool> = welcome
        .nodes
        .iter()
        .map(|n| *n == welcome.nodes[rank])
        .collect();
    let joining = if local.iter().all(|&l| l) {
        None
    } else {
        Some(routes::Joining::open(&own, link.root_address.parse().ok())?)
    };
    let segments = map_node_segments(
        &mut link,
        (rank, n_pes),
        welcome.job,
        own,
        &local,
        &secret,
        &settings,
    )
    .await?;
    let (remote, next_seq) =
        reach_other_nodes(&mut link, (rank, n_pes), joining, &local, settings.timeout).await?;
    let pe = start_pe(
        rank,
        welcome.job,
        PeerRoutes::new(
            segments,
            remote,
            routes::node_numbers(&welcome.nodes),
            machine_pes,
        ),
        &settings,
        link,
        next_seq,
        hosted,
    )?;
    pe.metrics().bootstrap(started.elapsed());
    tracing::info!(took = ?started.elapsed(), ?rendezvous, "PE joined its job");
    Ok(pe)
}

/// Runs `body` as a task of the current tokio runtime, where there is one, and returns its
/// output; a panic in it goes on in the caller. A PE's body then runs on a runtime worker,
/// the thread that sleeps in the runtime's event loop: where it waits for the fabric and
/// drives it itself (`ferroshmem_runtime::route::Remote::drive`), an arrival wakes that very
/// thread, whereas the thread of a `block_on` would be woken by the worker in turn.
async fn on_a_worker<R: Send + 'static>(body: impl Future<Output = R> + Send + 'static) -> R {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return body.await;
    };
    match runtime.spawn(body).await {
        Ok(out) => out,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Cancelled only when the runtime shuts down, which ends the caller as well.
            Err(e) => panic!("a PE's task was cancelled: {e}"),
        },
    }
}

/// Runs `f` as every PE of the job, whichever way the program was started: as one PE of a
/// launched job (`ferroshmem run`, `mpirun`, `srun`) when a launcher is detected, otherwise
/// as `local_pes` PEs inside this process. Returns the results of the PEs of this process.
/// As [`run_local`], a PE whose `f` returns finalizes, whatever its value.
pub async fn run<F, Fut, R>(local_pes: usize, f: F) -> Result<Vec<R>>
where
    F: Fn(Pe) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    match LaunchEnv::detect()? {
        None => run_local(local_pes, f).await,
        Some(env) => {
            let pe = init_launched(env, JoinOptions::default()).await?;
            let out = on_a_worker(f(pe.clone())).await;
            pe.finalize().await?;
            Ok(vec![out])
        }
    }
}
