//! The `/metrics` HTTP endpoint: a small HTTP/1.1 server on a thread of its own (with its own
//! single-threaded tokio runtime, so that it outlives the application's runtimes). Each
//! `GET /metrics` sums the PEs' traffic counters and renders the exposition
//! ([`Exporter::render`]): counts are exact at scrape time. It answers one request per
//! connection and closes it.
//!
//! It holds at most [`MAX_CONNECTIONS`] connections at once, gives each [`REQUEST_TIMEOUT`]
//! to send its request and [`REPLY_TIMEOUT`] to take its reply, and makes room for a new
//! connection by closing the oldest one that has not sent its request yet: slow or idle
//! clients can never take the descriptors or the memory the PEs need, and a scraper, which
//! sends its request at once, is served even while they keep coming.
//!
//! The exporter crate's own listener is not used because it offers no hook to run before it
//! renders, and the traffic counters are only summed then.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::AbortHandle;

use crate::exporter::Exporter;

/// How long a client has to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a client has to take its reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections the endpoint serves at once.
pub const MAX_CONNECTIONS: usize = 16;
/// Largest request head accepted.
const MAX_REQUEST: usize = 16 << 10;
/// How often histogram samples are drained into buckets between scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Serves `listener` from a new thread for the rest of the process's life.
pub(crate) fn spawn(listener: TcpListener, exporter: &'static Exporter) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    std::thread::Builder::new()
        .name("ferroshmem-metrics".into())
        .spawn(move || {
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!("metrics endpoint cannot start: {e}");
                        return;
                    }
                };
                let mut upkeep = tokio::time::interval(UPKEEP_EVERY);
                let served = Served::default();
                loop {
                    tokio::select! {
                        accepted = listener.accept() => match accepted {
                            Ok((stream, _)) => served.admit(stream, exporter),
                            Err(e) => {
                                tracing::warn!("metrics endpoint: accept failed: {e}");
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                        },
                        _ = upkeep.tick() => exporter.upkeep(),
                    }
                }
            })
        })?;
    Ok(())
}

/// The connections being served, by arrival: each with the handle that ends it while it
/// still waits for its request (`None` once it has sent it).
#[derive(Default)]
struct Connections {
    open: BTreeMap<u64, Option<AbortHandle>>,
    /// The next connection's number.
    next: u64,
}

#[derive(Default, Clone)]
struct Served(Rc<RefCell<Connections>>);

impl Served {
    /// Serves a new connection, making room for it first when [`MAX_CONNECTIONS`] are open:
    /// the oldest connection that has not yet sent its request is closed (a client that
    /// scrapes sends its request at once), or, when every one has, the new one.
    fn admit(&self, stream: TcpStream, exporter: &'static Exporter) {
        let mut served = self.0.borrow_mut();
        if served.open.len() >= MAX_CONNECTIONS {
            let idle = served
                .open
                .iter()
                .find_map(|(&id, h)| h.as_ref().map(|_| id));
            match idle.and_then(|id| served.open.remove(&id)).flatten() {
                Some(oldest) => oldest.abort(),
                None => return,
            }
        }
        let id = served.next;
        served.next += 1;
        let place = Place {
            served: self.clone(),
            id,
        };
        let task = tokio::task::spawn_local(serve(stream, exporter, place));
        served.open.insert(id, Some(task.abort_handle()));
    }
}

/// A connection's place among the served ones, given back when its task ends or is
/// aborted.
struct Place {
    served: Served,
    id: u64,
}

impl Place {
    /// The request has come: the connection is no longer the first to close for a new one.
    fn requested(&self) {
        if let Some(entry) = self.served.0.borrow_mut().open.get_mut(&self.id) {
            *entry = None;
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.served.0.borrow_mut().open.remove(&self.id);
    }
}

/// The response to a request whose head is `head`.
fn respond(head: &str, exporter: &Exporter) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    let mut words = head.split_whitespace();
    match (words.next(), words.next()) {
        (Some("GET"), Some(path)) => match path.split('?').next() {
            Some("/metrics") => (
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                exporter.render(),
            ),
            Some("/") => ("200 OK", TEXT, "ferroshmem: metrics at /metrics\n".into()),
            _ => ("404 Not Found", TEXT, "not found: try /metrics\n".into()),
        },
        (Some(_), Some(_)) => ("405 Method Not Allowed", TEXT, "only GET\n".into()),
        _ => ("400 Bad Request", TEXT, "bad request\n".into()),
    }
}

/// Reads a request head (through the blank line), or `None` if the client is too slow,
/// too long-winded or gone.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::with_capacity(1024);
    let read = async {
        let mut buf = [0u8; 2048];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 || head.len() + n > MAX_REQUEST {
                return None;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Some(())
    };
    tokio::time::timeout(REQUEST_TIMEOUT, read).await.ok()??;
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// Serves one connection, holding its `place` until it ends.
async fn serve(mut stream: TcpStream, exporter: &'static Exporter, place: Place) {
    let Some(head) = read_head(&mut stream).await else {
        return;
    };
    place.requested();
    let (status, content_type, body) = respond(&head, exporter);
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let reply = async {
        stream.write_all(reply.as_bytes()).await?;
        stream.shutdown().await
    };
    match tokio::time::timeout(REPLY_TIMEOUT, reply).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!("metrics endpoint: reply failed: {e}"),
        Err(_) => tracing::debug!("metrics endpoint: a client took no reply in {REPLY_TIMEOUT:?}"),
    }
}
