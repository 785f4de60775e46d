//! The control plane over TCP: the root server (in the launcher, or in PE 0's process under
//! `mpirun`/`srun`) and the PE's connection to it. Every connection must open with a hello
//! carrying the job's secret; others are refused and logged. Only a connection the hub
//! admitted speaks for its PE: the messages and the end of a refused one are ignored.
//!
//! Until its hello has shown the secret, a connection costs the root little and not for
//! long: its first frame may hold at most [`MAX_HELLO`] bytes, it has [`HELLO_TIMEOUT`] to
//! send it, and at most [`MAX_UNAUTHENTICATED`] such connections are open at once (the
//! root closes any beyond at once). Only an admitted PE may send larger frames.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferroshmem_runtime::{Error, Result};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::hub::{run_hub, HubConfig, HubEvent, HubNews, HubReport};
use super::link::Link;
use super::outbox::{Backlogs, Outbox, SocketOutbox};
use super::wire::{read_frame, write_frame, FromPe, Hello, ToPe, MAX_FRAME};
use crate::launch_env::{peer_timeout, DEFAULT_PEER_TIMEOUT};

/// How long a new connection has to present its hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest first frame (the hello) the root reads from a connection that has not yet shown
/// the job's secret.
pub const MAX_HELLO: usize = 4096;
/// Connections that have not yet shown the job's secret the root keeps open at once.
pub const MAX_UNAUTHENTICATED: usize = 64;

/// A bound, not yet serving, root.
#[derive(Debug)]
pub struct RootServer {
    listener: TcpListener,
    address: SocketAddr,
    news: Arc<HubNews>,
    host: Option<usize>,
}

impl RootServer {
    /// Binds the root's listening socket (`127.0.0.1:0` picks a free loopback port).
    pub async fn bind(addr: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind(addr).await.map_err(|e| {
            Error::Bootstrap(format!(
                "cannot listen on {addr} for the bootstrap root: {e}"
            ))
        })?;
        let address = listener
            .local_addr()
            .map_err(|e| Error::os("bootstrap root address", e))?;
        Ok(RootServer {
            listener,
            address,
            news: Arc::default(),
            host: None,
        })
    }

    /// Says that PE `pe` runs in this process: the root tells it last of the members it
    /// answers at once, and holds its messages while another PE's connection has bytes
    /// waiting, so that it cannot end the process before the others' answers are on their
    /// way (see [`super::outbox`]).
    pub fn hosted_by(self, pe: usize) -> Self {
        RootServer {
            host: Some(pe),
            ..self
        }
    }

    /// Where PEs reach it.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// What the root will have learnt of the job's end: the PEs it loses, in the order it
    /// loses them, and a global exit.
    pub fn news(&self) -> Arc<HubNews> {
        self.news.clone()
    }

    /// Serves the job until every PE finished or was lost.
    pub fn spawn(
        self,
        n_pes: usize,
        job: u64,
        secret: Vec<u8>,
        join_timeout: Duration,
    ) -> JoinHandle<Result<HubReport>> {
        let (events_tx, events_rx) = unbounded_channel();
        let hub = tokio::spawn(run_hub(
            HubConfig {
                n_pes,
                job,
                secret: secret.clone(),
                join_timeout,
                address: self.address.to_string(),
                news: self.news,
            },
            events_rx,
        ));
        let host = Hosting {
            pe: self.host,
            backlogs: Arc::default(),
        };
        let acceptor = tokio::spawn(accept_loop(self.listener, events_tx, secret, host));
        tokio::spawn(async move {
            let report = hub.await;
            acceptor.abort();
            report.unwrap_or_else(|e| {
                Err(Error::Bootstrap(format!("the bootstrap root failed: {e}")))
            })
        })
    }
}

/// What every connection of one root shares about the PE in the root's process.
#[derive(Debug, Clone)]
struct Hosting {
    /// The PE whose process hosts the root, if one does.
    pe: Option<usize>,
    /// The backlogs of the root's other connections, which that PE's messages wait for (see
    /// [`super::outbox`]); counted even where no PE waits.
    backlogs: Arc<Backlogs>,
}

/// Accepts connections to the root; `host` says which PE, if any, runs in its process.
async fn accept_loop(
    listener: TcpListener,
    events: UnboundedSender<HubEvent>,
    secret: Vec<u8>,
    host: Hosting,
) {
    let unauthenticated = Arc::new(Semaphore::new(MAX_UNAUTHENTICATED));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("bootstrap root: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(permit) = unauthenticated.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "bootstrap root refused a connection: {MAX_UNAUTHENTICATED} others have not yet shown the job's secret");
            continue;
        };
        let _ = stream.set_nodelay(true);
        heartbeat(&stream);
        tokio::spawn(serve_connection(
            stream,
            (peer, host.clone()),
            events.clone(),
            secret.clone(),
            permit,
        ));
    }
}

/// Reads a connection's hello, bounded in size and time; `Err` says why it was refused.
async fn authenticate(
    reader: &mut OwnedReadHalf,
    secret: &[u8],
) -> std::result::Result<Hello, String> {
    let frame = match tokio::time::timeout(HELLO_TIMEOUT, read_frame(reader, MAX_HELLO)).await {
        Ok(Ok(Some(frame))) => frame,
        Ok(Ok(None)) => return Err("it closed before its hello".into()),
        Ok(Err(e)) => return Err(format!("no hello: {e}")),
        Err(_) => return Err(format!("no hello within {HELLO_TIMEOUT:?}")),
    };
    match FromPe::decode(&frame) {
        Ok(FromPe::Hello(h)) if same_secret(&h.secret, secret) => Ok(h),
        _ => Err("no hello with the job's secret".into()),
    }
}

/// Compares secrets in time that depends on their lengths only.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y)) == 0
}

/// Serves one connection from `peer` (whose process hosts the root if its PE is `host.pe`).
async fn serve_connection(
    stream: TcpStream,
    (peer, host): (SocketAddr, Hosting),
    events: UnboundedSender<HubEvent>,
    secret: Vec<u8>,
    unauthenticated: OwnedSemaphorePermit,
) {
    let (mut reader, writer) = stream.into_split();
    let hello = match authenticate(&mut reader, &secret).await {
        Ok(hello) => hello,
        Err(why) => {
            tracing::warn!(%peer, "bootstrap root refused a connection: {why}");
            return;
        }
    };
    drop(unauthenticated);
    let rank = hello.rank as usize;
    let hosts_root = host.pe == Some(rank);
    let outbox = Outbox::Socket(SocketOutbox::spawn(writer, hosts_root, host.backlogs));
    // Nothing from the connection counts as the PE's before the hub has taken it: a refused
    // one (a duplicate or restarted process with a member's rank) must not speak or leave
    // in that member's name.
    let (admitted_tx, admitted) = oneshot::channel();
    let admit = HubEvent::Admit {
        hello,
        outbox,
        admitted: admitted_tx,
    };
    if events.send(admit).is_err() || admitted.await != Ok(true) {
        drain(&mut reader).await;
        return;
    }
    let reason = loop {
        match read_frame(&mut reader, MAX_FRAME).await {
            Ok(Some(frame)) => match FromPe::decode(&frame) {
                Ok(msg) => {
                    if events.send(HubEvent::Message { rank, msg }).is_err() {
                        return;
                    }
                }
                Err(e) => break format!("sent a malformed message: {e}"),
            },
            Ok(None) => break "its process exited or closed the connection".to_string(),
            Err(e) => break format!("its connection failed: {e}"),
        }
    };
    let _ = events.send(HubEvent::Disconnected { rank, reason });
}

/// Reads and drops what a refused connection still sends, until it closes (for at most
/// [`HELLO_TIMEOUT`]), so that closing it does not reset it before it has read its refusal.
async fn drain(reader: &mut OwnedReadHalf) {
    use tokio::io::AsyncReadExt;
    let mut sink = [0u8; 4096];
    let ignore = async { while matches!(reader.read(&mut sink).await, Ok(1..)) {} };
    let _ = tokio::time::timeout(HELLO_TIMEOUT, ignore).await;
}

/// Connects PE `rank` to the root at `address`, retrying until `timeout` (the root may not be
/// listening yet). `root_pe` is the PE whose process hosts the root, if any.
pub async fn connect(
    address: SocketAddr,
    rank: usize,
    root_pe: Option<usize>,
    timeout: Duration,
) -> Result<Link> {
    let deadline = super::deadline_after(timeout);
    let stream = loop {
        match TcpStream::connect(address).await {
            Ok(s) => break s,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(Error::Bootstrap(format!(
                    "PE {rank} could not reach the bootstrap root at {address} within {timeout:?}: {e}"
                )))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    Ok(link_over(stream, address.to_string(), root_pe))
}

/// Has the kernel check a control connection that carries nothing (TCP keepalive), and fail
/// one whose data stays unacknowledged, within `FERROSHMEM_PEER_TIMEOUT`: a host whose link
/// is cut then ends its connections to the root with an error, and its PEs count as lost,
/// instead of waiting forever on a silent peer. Best effort: a setting the kernel refuses
/// is logged.
fn heartbeat(stream: &TcpStream) {
    use rustix::net::sockopt;
    let timeout = peer_timeout().unwrap_or(DEFAULT_PEER_TIMEOUT);
    let idle = (timeout / 2).max(Duration::from_secs(1));
    let interval = (timeout / 6).max(Duration::from_secs(1));
    let set = sockopt::set_socket_keepalive(stream, true)
        .and_then(|()| sockopt::set_tcp_keepidle(stream, idle))
        .and_then(|()| sockopt::set_tcp_keepintvl(stream, interval))
        .and_then(|()| sockopt::set_tcp_keepcnt(stream, 3))
        .and_then(|()| {
            let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
            sockopt::set_tcp_user_timeout(stream, ms)
        });
    if let Err(e) = set {
        tracing::warn!("control connection heartbeat: {e}");
    }
}

/// Wraps a connected stream in a [`Link`].
fn link_over(stream: TcpStream, root_address: String, root_pe: Option<usize>) -> Link {
    let _ = stream.set_nodelay(true);
    heartbeat(&stream);
    let (mut reader, mut writer) = stream.into_split();
    let (to_root, mut outgoing) = unbounded_channel::<FromPe>();
    let (incoming, from_root) = unbounded_channel::<ToPe>();
    let (written, goodbye_written) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut written = Some(written);
        while let Some(msg) = outgoing.recv().await {
            if write_frame(&mut writer, &msg.encode()).await.is_err() {
                return;
            }
            if msg == FromPe::Goodbye {
                if let Some(w) = written.take() {
                    let _ = w.send(());
                }
            }
        }
    });
    let address = root_address.clone();
    tokio::spawn(async move {
        let reason = loop {
            match read_frame(&mut reader, MAX_FRAME).await {
                Ok(Some(frame)) => match ToPe::decode(&frame) {
                    Ok(msg) => {
                        if incoming.send(msg).is_err() {
                            return;
                        }
                    }
                    Err(e) => break e.to_string(),
                },
                Ok(None) => break "it closed the connection".to_string(),
                Err(e) => break e.to_string(),
            }
        };
        let reason = format!("lost the control connection to the root at {address}: {reason}");
        let _ = incoming.send(match root_pe {
            Some(pe) => ToPe::PeerLost {
                pe: pe as u32,
                reason,
            },
            None => ToPe::Refused { reason },
        });
    });
    Link {
        to_root,
        from_root,
        root_pe,
        root_address,
        goodbye_written: Some(goodbye_written),
    }
}
