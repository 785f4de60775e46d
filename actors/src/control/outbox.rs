//! Where the hub sends a PE's messages: a channel to a PE of the same process, or the PE's
//! TCP connection to the root.
//!
//! # Written by the sender
//! A message to a connection goes to the kernel from the hub's own step, not from a task
//! woken later: when the hub answers an allgather, every member's answer is on its way before
//! the hub takes its next event. The root may run in a PE's process (`mpirun`, `srun`), and
//! that PE may exit as soon as it has its own answer (a program that fails its next call and
//! exits without finalizing). Had the answers of the other members still waited for their
//! writer tasks, they would have gone with the process, and those members would have read the
//! connection's end instead of their answer.
//!
//! Only what the socket does not take at once (its buffer full) waits for a task, which
//! writes it, in order, once the socket is writable again. Dropping the outbox lets that
//! task write what is left, then close the connection's sending side, as the writer task
//! that closed with its channel did.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Notify;

use super::wire::{frame, ToPe};

/// The hub's way to one PE.
#[derive(Debug)]
pub enum Outbox {
    /// A PE of this process, reading a channel.
    Channel(UnboundedSender<ToPe>),
    /// A PE behind a TCP connection, written to by the sender.
    Socket(SocketOutbox),
}

/// The PE is gone: its channel or connection closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl Outbox {
    /// Sends `msg`: queued in order behind every message sent before it, and, on a
    /// connection, handed to the kernel at once where the socket takes it.
    pub fn send(&self, msg: ToPe) -> Result<(), Closed> {
        match self {
            Outbox::Channel(tx) => tx.send(msg).map_err(|_| Closed),
            Outbox::Socket(socket) => socket.send(&frame(&msg.encode())),
        }
    }
}

/// A connection's sending side, written by whoever sends, with a task that writes what the
/// socket did not take at once (see the module's doc).
#[derive(Debug)]
pub struct SocketOutbox {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    socket: OwnedWriteHalf,
    backlog: Mutex<Backlog>,
    /// Wakes the task: bytes were left, or the outbox was dropped.
    more: Notify,
}

/// Bytes sent but not yet taken by the socket, oldest first.
#[derive(Debug, Default)]
struct Backlog {
    bytes: Vec<u8>,
    /// Where the unwritten part of `bytes` begins.
    written: usize,
    /// A write failed: nothing more reaches the PE.
    failed: bool,
    /// The outbox was dropped: the task writes what is left, then ends.
    dropped: bool,
}

impl Backlog {
    fn unwritten(&self) -> &[u8] {
        &self.bytes[self.written..]
    }

    /// Records that the socket took `n` more bytes.
    fn took(&mut self, n: usize) {
        self.written += n;
        if self.written == self.bytes.len() {
            self.bytes.clear();
            self.written = 0;
        }
    }
}

fn lock(m: &Mutex<Backlog>) -> std::sync::MutexGuard<'_, Backlog> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SocketOutbox {
    /// Wraps `socket`, spawning the task that writes what it does not take at once; must be
    /// called within a Tokio runtime.
    pub fn spawn(socket: OwnedWriteHalf) -> Self {
        let shared = Arc::new(Shared {
            socket,
            backlog: Mutex::default(),
            more: Notify::new(),
        });
        tokio::spawn(write_backlog(shared.clone()));
        SocketOutbox { shared }
    }

    /// Writes `frame` now as far as the socket takes it, behind any backlog; leaves the rest
    /// to the task.
    fn send(&self, frame: &[u8]) -> Result<(), Closed> {
        let mut backlog = lock(&self.shared.backlog);
        if backlog.failed {
            return Err(Closed);
        }
        let mut taken = 0;
        if backlog.unwritten().is_empty() {
            match self.shared.socket.try_write(frame) {
                Ok(n) => taken = n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    backlog.failed = true;
                    return Err(Closed);
                }
            }
        }
        if taken < frame.len() {
            backlog.bytes.extend_from_slice(&frame[taken..]);
            self.shared.more.notify_one();
        }
        Ok(())
    }
}

impl Drop for SocketOutbox {
    fn drop(&mut self) {
        lock(&self.shared.backlog).dropped = true;
        self.shared.more.notify_one();
    }
}

/// The task of a [`SocketOutbox`]: writes its backlog whenever there is one and the socket
/// is writable; ends on a failed write, or once the outbox is dropped and its backlog
/// written (closing the sending side).
async fn write_backlog(shared: Arc<Shared>) {
    loop {
        shared.more.notified().await;
        loop {
            let blocked = {
                let mut backlog = lock(&shared.backlog);
                if backlog.unwritten().is_empty() {
                    if backlog.dropped {
                        return;
                    }
                    break;
                }
                match shared.socket.try_write(backlog.unwritten()) {
                    Ok(n) => {
                        backlog.took(n);
                        false
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
                    Err(_) => {
                        backlog.failed = true;
                        return;
                    }
                }
            };
            if blocked && shared.socket.writable().await.is_err() {
                lock(&shared.backlog).failed = true;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::wire::read_frame;

    /// A connected pair: the root's sending side, spawned on `rt`, and the PE's end.
    fn pair(rt: &tokio::runtime::Runtime) -> (SocketOutbox, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let pe = std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("pe");
        let (root, _) = listener.accept().expect("accept");
        root.set_nonblocking(true).expect("nonblocking");
        let outbox = rt.block_on(async {
            let root = tokio::net::TcpStream::from_std(root).expect("register");
            root.writable().await.expect("writable");
            SocketOutbox::spawn(root.into_split().1)
        });
        (outbox, pe)
    }

    fn read_all(pe: std::net::TcpStream) -> Vec<ToPe> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            pe.set_nonblocking(true).expect("nonblocking");
            let mut pe = tokio::net::TcpStream::from_std(pe).expect("register");
            let mut got = Vec::new();
            while let Some(f) = read_frame(&mut pe, 1 << 20).await.expect("a whole frame") {
                got.push(ToPe::decode(&f).expect("a message"));
            }
            got
        })
    }

    #[test]
    fn a_message_sent_reaches_the_pe_though_the_runtime_never_runs_again() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (outbox, pe) = pair(&rt);
        let sent = ToPe::Finished { pe: 3 };
        assert_eq!(Outbox::Socket(outbox).send(sent.clone()), Ok(()));
        // As a process that exits: its tasks never run again, its sockets close.
        rt.shutdown_background();
        assert_eq!(read_all(pe), vec![sent]);
    }

    #[test]
    fn what_the_socket_does_not_take_at_once_follows_in_order_then_the_connection_closes() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (outbox, pe) = pair(&rt);
        let outbox = Outbox::Socket(outbox);
        let big = |i: u32| ToPe::GatherFailed {
            group: u64::from(i),
            seq: 7,
            reason: "x".repeat(256 << 10),
        };
        let sent: Vec<ToPe> = (0..40).map(big).collect();
        for m in &sent {
            assert_eq!(outbox.send(m.clone()), Ok(()));
        }
        drop(outbox);
        assert_eq!(read_all(pe), sent);
    }
}
