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
//! connection's end instead of their answer. The hub tells that PE last of the members it
//! tells at once ([`Outbox::hosts_root`]), so its answer cannot come before the others' are
//! written.
//!
//! Only what the socket does not take at once (its buffer full) waits for a task, which
//! writes it, in order, once the socket is writable again: a process that ends meanwhile
//! still loses that part. Dropping the outbox lets the task write what is left, then close
//! the connection's sending side.

use std::io::IoSlice;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Notify;

use super::wire::ToPe;

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
            Outbox::Socket(socket) => socket.send(&msg.encode()),
        }
    }

    /// Whether the PE it reaches runs in the root's own process: the hub tells it last.
    pub fn hosts_root(&self) -> bool {
        matches!(self, Outbox::Socket(socket) if socket.hosts_root)
    }
}

/// `ranks` in their order, but those for which `hosts_root` holds last: a PE that runs in the
/// root's own process, told first, could end that process before the others' messages are
/// written (see the module's doc).
pub fn hosting_pe_last(
    ranks: impl IntoIterator<Item = usize>,
    hosts_root: impl Fn(usize) -> bool,
) -> Vec<usize> {
    let (host, mut others): (Vec<usize>, Vec<usize>) =
        ranks.into_iter().partition(|&r| hosts_root(r));
    others.extend(host);
    others
}

/// A connection's sending side, written by whoever sends, with a task that writes what the
/// socket did not take at once (see the module's doc).
#[derive(Debug)]
pub struct SocketOutbox {
    shared: Arc<Shared>,
    /// Whether the PE runs in the root's own process.
    hosts_root: bool,
}

#[derive(Debug)]
struct Shared {
    socket: OwnedWriteHalf,
    backlog: Mutex<Backlog>,
    /// Wakes the task: bytes were left, or the outbox was dropped.
    more: Notify,
}

/// The backlog's capacity kept once it is empty: what a few answers take.
const KEPT_CAPACITY: usize = 64 << 10;

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

    /// Records that the socket took `n` more bytes: the written part is dropped once it is
    /// half the backlog, and a large buffer left empty is given back.
    fn took(&mut self, n: usize) {
        self.written += n;
        if self.written == self.bytes.len() {
            self.bytes.clear();
            self.bytes.shrink_to(KEPT_CAPACITY);
            self.written = 0;
        } else if self.written >= self.bytes.len() / 2 {
            self.bytes.drain(..self.written);
            self.written = 0;
        }
    }
}

fn lock(m: &Mutex<Backlog>) -> std::sync::MutexGuard<'_, Backlog> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SocketOutbox {
    /// Wraps `socket`, spawning the task that writes what it does not take at once; must be
    /// called within a Tokio runtime. `hosts_root`: the PE runs in the root's own process.
    pub fn spawn(socket: OwnedWriteHalf, hosts_root: bool) -> Self {
        let shared = Arc::new(Shared {
            socket,
            backlog: Mutex::default(),
            more: Notify::new(),
        });
        tokio::spawn(write_backlog(shared.clone()));
        SocketOutbox { shared, hosts_root }
    }

    /// Writes the frame of `body` (its length, then itself) now as far as the socket takes
    /// it, behind any backlog; leaves the rest to the task.
    fn send(&self, body: &[u8]) -> Result<(), Closed> {
        let length = (body.len() as u32).to_le_bytes();
        let mut backlog = lock(&self.shared.backlog);
        if backlog.failed {
            return Err(Closed);
        }
        let mut taken = 0;
        if backlog.unwritten().is_empty() {
            let parts = [IoSlice::new(&length), IoSlice::new(body)];
            match self.shared.socket.try_write_vectored(&parts) {
                Ok(n) => taken = n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    backlog.failed = true;
                    return Err(Closed);
                }
            }
        }
        if taken < length.len() + body.len() {
            backlog
                .bytes
                .extend_from_slice(&length[taken.min(length.len())..]);
            backlog
                .bytes
                .extend_from_slice(&body[taken.saturating_sub(length.len())..]);
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
    use std::time::Duration;

    use super::*;
    use crate::control::wire::read_frame;

    /// Longest a test waits to read what was sent: reaching it means a hang.
    const BOUND: Duration = Duration::from_secs(20);

    /// A connected pair: the root's sending side, spawned on `rt`, and the PE's end, each
    /// with a socket buffer of about `buffer` bytes.
    fn pair(rt: &tokio::runtime::Runtime, buffer: usize) -> (SocketOutbox, std::net::TcpStream) {
        use rustix::net::sockopt;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let pe = std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("pe");
        let (root, _) = listener.accept().expect("accept");
        sockopt::set_socket_send_buffer_size(&root, buffer).expect("send buffer");
        sockopt::set_socket_recv_buffer_size(&pe, buffer).expect("receive buffer");
        root.set_nonblocking(true).expect("nonblocking");
        let outbox = rt.block_on(async {
            let root = tokio::net::TcpStream::from_std(root).expect("register");
            root.writable().await.expect("writable");
            SocketOutbox::spawn(root.into_split().1, false)
        });
        (outbox, pe)
    }

    /// Every message that reaches `pe` until its connection closes.
    fn read_all(pe: std::net::TcpStream) -> Vec<ToPe> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            pe.set_nonblocking(true).expect("nonblocking");
            let mut pe = tokio::net::TcpStream::from_std(pe).expect("register");
            let mut got = Vec::new();
            let read = async {
                while let Some(f) = read_frame(&mut pe, 1 << 20).await.expect("a whole frame") {
                    got.push(ToPe::decode(&f).expect("a message"));
                }
            };
            tokio::time::timeout(BOUND, read)
                .await
                .expect("the connection closed");
            got
        })
    }

    #[test]
    fn a_message_sent_reaches_the_pe_though_the_runtime_never_runs_again() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (outbox, pe) = pair(&rt, 64 << 10);
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
        let (outbox, pe) = pair(&rt, 16 << 10);
        let big = |i: u32| ToPe::GatherFailed {
            group: u64::from(i),
            seq: 7,
            reason: "x".repeat(64 << 10),
        };
        let sent: Vec<ToPe> = (0..40).map(big).collect();
        for m in &sent[..2] {
            assert_eq!(outbox.send(&m.encode()), Ok(()));
        }
        let backlog = lock(&outbox.shared.backlog).unwritten().len();
        assert!(
            backlog > 0,
            "the socket took 128 KiB at once: no backlog to test"
        );
        let outbox = Outbox::Socket(outbox);
        for m in &sent[2..] {
            assert_eq!(outbox.send(m.clone()), Ok(()));
        }
        drop(outbox);
        assert_eq!(read_all(pe), sent);
    }

    #[test]
    fn the_pe_in_the_roots_process_is_told_last() {
        assert_eq!(hosting_pe_last([3, 0, 2, 1], |r| r == 0), vec![3, 2, 1, 0]);
        assert_eq!(hosting_pe_last(0..3, |_| false), vec![0, 1, 2]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (outbox, _pe) = pair(&rt, 64 << 10);
        assert!(!Outbox::Socket(outbox).hosts_root());
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        assert!(!Outbox::Channel(tx).hosts_root());
        let hosted = rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("listen");
            let addr = listener.local_addr().expect("addr");
            let (_pe, root) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
            SocketOutbox::spawn(root.expect("accept").0.into_split().1, true)
        });
        assert!(Outbox::Socket(hosted).hosts_root());
    }

    #[test]
    fn a_backlog_drops_what_was_written_once_it_is_half_of_it() {
        let mut backlog = Backlog::default();
        backlog.bytes.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
        backlog.took(2);
        assert_eq!(backlog.unwritten(), [3, 4, 5, 6]);
        assert_eq!(backlog.bytes.len(), 6, "a third written: kept");
        backlog.took(1);
        assert_eq!(backlog.unwritten(), [4, 5, 6]);
        assert_eq!(backlog.bytes.len(), 3, "half written: dropped");
        backlog.bytes.extend_from_slice(&vec![0; 1 << 20]);
        backlog.took(3 + (1 << 20));
        assert!(backlog.unwritten().is_empty());
        assert!(
            backlog.bytes.capacity() <= KEPT_CAPACITY,
            "a spike's buffer given back"
        );
    }
}
