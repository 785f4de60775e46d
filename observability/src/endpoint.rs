//! The `/metrics` HTTP endpoint: a small HTTP/1.1 server on a thread of its own (with its own
//! single-threaded tokio runtime, so that it outlives the application's runtimes). Each
//! `GET /metrics` sums the PEs' traffic counters and renders the exposition
//! ([`Exporter::render`]): counts are exact at scrape time. It answers one request per
//! connection and closes it.
//!
//! The exporter crate's own listener is not used because it offers no hook to run before it
//! renders, and the traffic counters are only summed then.

use std::net::TcpListener;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::exporter::Exporter;

/// How long a client has to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
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
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!("metrics endpoint cannot start: {e}");
                        return;
                    }
                };
                let mut upkeep = tokio::time::interval(UPKEEP_EVERY);
                loop {
                    tokio::select! {
                        accepted = listener.accept() => match accepted {
                            Ok((stream, _)) => {
                                tokio::spawn(serve(stream, exporter));
                            }
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

async fn serve(mut stream: TcpStream, exporter: &'static Exporter) {
    let Some(head) = read_head(&mut stream).await else {
        return;
    };
    let (status, content_type, body) = respond(&head, exporter);
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if let Err(e) = stream.write_all(reply.as_bytes()).await {
        tracing::debug!("metrics endpoint: reply failed: {e}");
    }
    let _ = stream.shutdown().await;
}
