//! Forwarding the PEs' output: every line a PE writes to stdout or stderr is written by the
//! launcher to the same stream, prefixed with `[pe i] `. Lines are written whole, so lines of
//! different PEs never mix.
//!
//! Bytes pass through unchanged (output need not be UTF-8). A last line without a newline
//! gets one; a line longer than [`MAX_LINE`] bytes is cut into several prefixed lines. Each
//! stream has one writer on a blocking thread, fed through a bounded queue: a slow reader of
//! the launcher's output slows the PEs down instead of filling memory.
//!
//! The launcher's own lines ([`status`]) and both writers write under one process-wide lock,
//! each a whole line (or batch of whole lines) at a time, so that lines stay whole even when
//! stdout and stderr are one file (`2>&1`).

use std::io::Write;
use std::sync::{Mutex, PoisonError};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc::{channel, Receiver, Sender};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

/// Longest piece of a line forwarded as one line.
const MAX_LINE: usize = 64 * 1024;

/// Lines queued per stream before the PEs' readers wait.
const QUEUE: usize = 1024;

/// Bytes of queued lines written at once.
const BATCH: usize = 64 * 1024;

/// Held by whoever writes to the launcher's stdout or stderr.
static OUTPUT: Mutex<()> = Mutex::new(());

/// Writes `bytes` to `stream` whole, under the output lock.
fn write_whole(stream: Stream, bytes: &[u8]) -> std::io::Result<()> {
    let _whole = OUTPUT.lock().unwrap_or_else(PoisonError::into_inner);
    match stream {
        Stream::Stdout => std::io::stdout().lock().write_all(bytes),
        Stream::Stderr => std::io::stderr().lock().write_all(bytes),
    }
}

/// Prints one of the launcher's own lines on stderr, `ferroshmem: ` first, whole.
pub(crate) fn status(line: std::fmt::Arguments<'_>) {
    let _ = write_whole(Stream::Stderr, format!("ferroshmem: {line}\n").as_bytes());
}

/// One of the launcher's two output streams.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// Where forwarded lines go; cloned into every PE's readers.
#[derive(Debug, Clone)]
pub(crate) struct Sinks {
    stdout: Sender<Vec<u8>>,
    stderr: Sender<Vec<u8>>,
}

/// The two writer threads; [`Writers::finish`] waits until every queued line is written.
#[derive(Debug)]
pub(crate) struct Writers(Vec<JoinHandle<()>>);

/// Starts the writers.
pub(crate) fn start() -> (Sinks, Writers) {
    let (stdout, out_rx) = channel(QUEUE);
    let (stderr, err_rx) = channel(QUEUE);
    let writers = vec![
        tokio::task::spawn_blocking(move || write_lines(out_rx, Stream::Stdout)),
        tokio::task::spawn_blocking(move || write_lines(err_rx, Stream::Stderr)),
    ];
    (Sinks { stdout, stderr }, Writers(writers))
}

impl Writers {
    /// Waits for the writers to drain their queues; every [`Sinks`] must be dropped first.
    pub(crate) async fn finish(self) {
        for writer in self.0 {
            let _ = writer.await;
        }
    }
}

fn write_lines(mut lines: Receiver<Vec<u8>>, stream: Stream) {
    // After a write error (the reader went away) lines are still taken off the queue and
    // dropped, so that the PEs never block on output nobody reads.
    let mut broken = false;
    let mut batch = Vec::new();
    while let Some(line) = lines.blocking_recv() {
        // Whole lines queued meanwhile go out in the same write.
        batch.extend_from_slice(&line);
        while batch.len() < BATCH {
            match lines.try_recv() {
                Ok(line) => batch.extend_from_slice(&line),
                Err(_) => break,
            }
        }
        if !broken {
            broken = write_whole(stream, &batch).is_err();
        }
        batch.clear();
    }
    let _ = match stream {
        Stream::Stdout => std::io::stdout().flush(),
        Stream::Stderr => std::io::stderr().flush(),
    };
}

/// Forwards `pipe` line by line to `stream`, each line prefixed with `[pe rank] `, until the
/// pipe closes or fails, or until the instant `give_up` comes to hold passes while the pipe
/// is still open (processes the PE started hold it). Returns whether it gave up. Time spent
/// waiting for the launcher's own output to drain never counts against `give_up`.
pub(crate) async fn forward<R: AsyncRead + Unpin>(
    pipe: R,
    rank: usize,
    stream: Stream,
    sinks: Sinks,
    mut give_up: watch::Receiver<Option<Instant>>,
) -> bool {
    let sink = match stream {
        Stream::Stdout => sinks.stdout,
        Stream::Stderr => sinks.stderr,
    };
    let prefix = format!("[pe {rank}] ").into_bytes();
    let mut pipe = BufReader::new(pipe);
    loop {
        let mut line = prefix.clone();
        let read = tokio::select! {
            read = read_line(&mut pipe, &mut line, prefix.len() + MAX_LINE) => read,
            () = deadline(&mut give_up) => return true,
        };
        match read {
            Ok(0) | Err(_) => return false,
            Ok(_) => {
                if line.last() != Some(&b'\n') {
                    line.push(b'\n');
                }
                if sink.send(line).await.is_err() {
                    return false;
                }
            }
        }
    }
}

/// Waits until `give_up` holds an instant, then until that instant.
async fn deadline(give_up: &mut watch::Receiver<Option<Instant>>) {
    let at = match give_up.wait_for(Option::is_some).await {
        Ok(at) => *at,
        Err(_) => None,
    };
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Appends bytes to `line` up to and including the next newline, or until `line` is `limit`
/// bytes long, or to the end of the input; returns how many bytes it appended.
async fn read_line<R: AsyncRead + Unpin>(
    pipe: &mut BufReader<R>,
    line: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<usize> {
    let mut appended = 0;
    loop {
        let available = pipe.fill_buf().await?;
        if available.is_empty() {
            return Ok(appended);
        }
        let end = available
            .iter()
            .position(|&b| b == b'\n')
            .map_or(available.len(), |i| i + 1)
            .min(limit - line.len());
        line.extend_from_slice(&available[..end]);
        pipe.consume(end);
        appended += end;
        if line.last() == Some(&b'\n') || line.len() == limit {
            return Ok(appended);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], limit: usize) -> Vec<Vec<u8>> {
        let mut pipe = BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        loop {
            let mut line = Vec::new();
            if read_line(&mut pipe, &mut line, limit).await.unwrap() == 0 {
                return out;
            }
            out.push(line);
        }
    }

    #[tokio::test]
    async fn lines_split_at_newlines_limits_and_the_end() {
        assert_eq!(
            lines(b"ab\n\xff\ncdefghij", 5).await,
            vec![
                b"ab\n".to_vec(),
                b"\xff\n".to_vec(),
                b"cdefg".to_vec(),
                b"hij".to_vec()
            ]
        );
        assert!(lines(b"", 5).await.is_empty());
    }
}
