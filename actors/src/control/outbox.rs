//! Where the hub sends a PE's messages: a channel to a PE of the same process, or the PE's
//! TCP connection to the root.
//!
//! # Written by the sender
//! A message to a connection goes to the kernel from the hub's own step, not from a task
//! woken later, unless it is held (below): when the hub answers an allgather, every other
//! member's answer is on its way before the hub takes its next event. The root may run in a
//! PE's process (`mpirun`, `srun`), and that PE may exit as soon as it has its own answer (a
//! program that fails its next call and exits without finalizing). Had the answers of the
//! other members still waited for their writer tasks, they would have gone with the process,
//! and those members would have read the connection's end instead of their answer. The hub
//! tells that PE last of the members it tells at once ([`Outbox::hosts_root`]), so the
//! others' answers are handed to their sockets first.
//!
//! What a socket does not take at once (its buffer full) waits for a task, which writes it,
//! in order, once the socket is writable again; so do the held messages of the PE in the
//! root's process. Dropping the outbox lets the task write what is left, then close the
//! connection's sending side.
//!
//! # Held for the others
//! A process that ends would lose what its tasks had not yet written. So a message to the PE
//! in the root's process goes to its socket only once the count of the root's other
//! connections with bytes waiting for their task has been seen at zero since the message was
//! sent. A connection counts while its outbox is alive and no write to it has failed. Until
//! then the message waits in that PE's own backlog, in order behind its earlier messages
//! ([`Backlogs`]).
//!
//! What ends a hold: the other backlogs written; or a PE that holds it let go. The hub drops
//! a PE's outbox when it loses the PE, when the PE finishes, and when a global exit's wait
//! ends with the PE still there; a connection whose write fails is let go too (what its task
//! still had to write is then of no concern to the hold). A PE whose connection breaks, or
//! goes silent past the peer timeout (the connection's heartbeat), ends the hold that way. A
//! PE that is alive but does not read its connection (a stopped process, or one whose runtime
//! never runs its reader) holds the host until it reads again, or until the kernel gives up on
//! the connection (`TCP_USER_TIMEOUT`, which on recent kernels also ends a connection whose
//! receiver's window stays closed).
//!
//! A hold needs the count at zero once: backlogs take megabytes of answers (allgathers of
//! large contributions), and the world's allgathers need the host's own contribution, which
//! needs its answer to the last one first; those of a team without the host could keep other
//! connections full and the host waiting.
//!
//! # After the process
//! What the kernel has taken goes out after the process has ended, with exceptions nothing
//! here covers. A connection that then still holds bytes from its PE that the hub has not read
//! (the PE's next message) is reset when the process's end closes it, and whatever the kernel
//! had not yet sent on it is lost. A PE that does not read within the peer timeout has its
//! connection ended by the kernel (`TCP_USER_TIMEOUT`) with the same loss. The hold counts only
//! the bytes the kernel has not taken: what it has taken may still wait in its send queue. An
//! answer a PE waits for before it sends again has reached it before it can send.

use std::io::IoSlice;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::net::{sendmsg, SendAncillaryBuffer, SendFlags};
use tokio::io::Interest;
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
    /// connection, handed to the kernel at once where the socket takes it and the message is
    /// not held (see the module's doc).
    pub fn send(&self, msg: ToPe) -> Result<(), Closed> {
        match self {
            Outbox::Channel(tx) => tx.send(msg).map_err(|_| Closed),
            Outbox::Socket(socket) => socket.send(&msg.encode()),
        }
    }

    /// Whether the PE it reaches runs in the root's own process: the hub tells it last, and
    /// its messages are held while another connection has bytes waiting.
    pub fn hosts_root(&self) -> bool {
        matches!(self, Outbox::Socket(socket) if socket.shared.hosts_root)
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

/// How many connections of one root, other than that of the PE in the root's own process,
/// have bytes waiting for their task (a dropped or failed one counts no longer): while any
/// do, that PE's messages are held (see the module's doc). Every connection of the root
/// shares one.
#[derive(Debug, Default)]
pub struct Backlogs {
    /// The connections counted: bytes wait, outbox alive, no write failed.
    waiting: AtomicUsize,
    /// Wakes the held tasks (a refused connection with the host's rank has one too) once
    /// `waiting` falls to zero.
    drained: Notify,
}

impl Backlogs {
    /// Whether some connection counted here has bytes waiting.
    fn any(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) > 0
    }

    /// Returns once the count has been seen at zero since the call (a backlog may begin
    /// again at once): a wake-up from the last connection counted out is such a sight.
    async fn wait_drained(&self) {
        let drained = self.drained.notified();
        tokio::pin!(drained);
        drained.as_mut().enable();
        if self.any() {
            drained.await;
        }
    }
}

/// A connection's sending side, written by whoever sends, with a task that writes what the
/// socket did not take at once and, on the host's connection, what was held (see the
/// module's doc).
#[derive(Debug)]
pub struct SocketOutbox {
    shared: Arc<Shared>,
}

/// What a [`SocketOutbox`] shares with its task.
#[derive(Debug)]
struct Shared {
    /// The connection's sending side.
    socket: OwnedWriteHalf,
    /// What waits for the task.
    backlog: Mutex<Backlog>,
    /// Wakes the task: bytes were left, or the outbox was dropped.
    more: Notify,
    /// Whether the PE runs in the root's own process.
    hosts_root: bool,
    /// The root's connections with bytes waiting: counted into by the others, waited on by
    /// the PE in the root's process.
    backlogs: Arc<Backlogs>,
}

impl Shared {
    /// Counts `backlog` among the root's waiting ones, once, unless this is the host's.
    fn count_in(&self, backlog: &mut Backlog) {
        if !self.hosts_root && !backlog.counted {
            backlog.counted = true;
            self.backlogs.waiting.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A write to the PE failed: nothing more reaches it, and it holds the host no longer.
    fn fail(&self, backlog: &mut Backlog) {
        backlog.failed = true;
        self.count_out(backlog);
    }

    /// Takes `backlog` out of the root's waiting ones, if it was counted; the last one out
    /// lets the held host go.
    fn count_out(&self, backlog: &mut Backlog) {
        if backlog.counted {
            backlog.counted = false;
            if self.backlogs.waiting.fetch_sub(1, Ordering::SeqCst) == 1 {
                self.backlogs.drained.notify_waiters();
            }
        }
    }
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
    /// Counted in [`Backlogs`]: bytes wait, the outbox is not the host's, was not dropped
    /// and no write to it failed.
    counted: bool,
}

impl Backlog {
    /// The bytes still to write, oldest first.
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

/// Locks a backlog, also one whose holder panicked (nothing here panics while holding one).
fn lock(m: &Mutex<Backlog>) -> std::sync::MutexGuard<'_, Backlog> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SocketOutbox {
    /// Wraps `socket`, spawning the task that writes what it does not take at once; must be
    /// called within a Tokio runtime. `hosts_root`: the PE runs in the root's own process;
    /// `backlogs`: shared by every connection of the root.
    pub fn spawn(socket: OwnedWriteHalf, hosts_root: bool, backlogs: Arc<Backlogs>) -> Self {
        let shared = Arc::new(Shared {
            socket,
            backlog: Mutex::default(),
            more: Notify::new(),
            hosts_root,
            backlogs,
        });
        tokio::spawn(write_backlog(shared.clone()));
        SocketOutbox { shared }
    }

    /// Writes the frame of `body` (its length, then itself) now as far as the socket takes
    /// it, behind any backlog, unless it is held for the others; leaves the rest to the task.
    fn send(&self, body: &[u8]) -> Result<(), Closed> {
        let length = (body.len() as u32).to_le_bytes();
        let mut backlog = lock(&self.shared.backlog);
        if backlog.failed {
            return Err(Closed);
        }
        let held = self.shared.hosts_root && self.shared.backlogs.any();
        let mut taken = 0;
        if backlog.unwritten().is_empty() && !held {
            match self.shared.try_send_frame(&length, body) {
                Ok(n) => taken = n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    self.shared.fail(&mut backlog);
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
            self.shared.count_in(&mut backlog);
            self.shared.more.notify_one();
        }
        Ok(())
    }
}

impl Drop for SocketOutbox {
    fn drop(&mut self) {
        let mut backlog = lock(&self.shared.backlog);
        backlog.dropped = true;
        self.shared.count_out(&mut backlog);
        drop(backlog);
        self.shared.more.notify_one();
    }
}

impl Shared {
    /// Hands the kernel what it takes at once of `length` then `body`, in one call.
    ///
    /// `sendmsg` with `MSG_NOSIGNAL`, never `writev`: a write to a connection its PE has
    /// closed must fail with `EPIPE`, not raise `SIGPIPE`, which ends the process where the
    /// hub runs in a PE of a C program (under `mpirun` or `srun`) that keeps the signal's
    /// default action. Rust's own `write` sends with that flag; its `write_vectored` does not.
    fn try_send_frame(&self, length: &[u8], body: &[u8]) -> std::io::Result<usize> {
        let parts = [IoSlice::new(length), IoSlice::new(body)];
        let stream: &tokio::net::TcpStream = self.socket.as_ref();
        stream.try_io(Interest::WRITABLE, || {
            sendmsg(
                stream,
                &parts,
                &mut SendAncillaryBuffer::default(),
                SendFlags::NOSIGNAL,
            )
            .map_err(std::io::Error::from)
        })
    }
}

/// The task of a [`SocketOutbox`]: writes its backlog whenever there is one and the socket
/// is writable (the host's, once no other connection has bytes waiting); ends on a failed
/// write, or once the outbox is dropped and its backlog written (closing the sending side).
async fn write_backlog(shared: Arc<Shared>) {
    loop {
        shared.more.notified().await;
        loop {
            if shared.hosts_root && !lock(&shared.backlog).unwritten().is_empty() {
                shared.backlogs.wait_drained().await;
            }
            let blocked = {
                let mut backlog = lock(&shared.backlog);
                if backlog.unwritten().is_empty() {
                    shared.count_out(&mut backlog);
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
                        shared.fail(&mut backlog);
                        return;
                    }
                }
            };
            if blocked && shared.socket.writable().await.is_err() {
                shared.fail(&mut lock(&shared.backlog));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, Read};
    use std::net::TcpStream;
    use std::time::Duration;

    use super::*;
    use crate::control::wire::read_frame;

    /// Longest a test waits to read what was sent: reaching it means a hang.
    const BOUND: Duration = Duration::from_secs(20);

    /// A connected pair: the root's sending side, spawned on `rt`, and the PE's end, each
    /// with a socket buffer of about `buffer` bytes; the PE runs in no root's process.
    fn pair(rt: &tokio::runtime::Runtime, buffer: usize) -> (SocketOutbox, std::net::TcpStream) {
        pair_of_root(rt, buffer, false, &Arc::default())
    }

    /// As [`pair`], for a root whose connections share `backlogs`; `hosts_root`: the PE
    /// runs in the root's process.
    fn pair_of_root(
        rt: &tokio::runtime::Runtime,
        buffer: usize,
        hosts_root: bool,
        backlogs: &Arc<Backlogs>,
    ) -> (SocketOutbox, std::net::TcpStream) {
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
            SocketOutbox::spawn(root.into_split().1, hosts_root, backlogs.clone())
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
            SocketOutbox::spawn(root.expect("accept").0.into_split().1, true, Arc::default())
        });
        assert!(Outbox::Socket(hosted).hosts_root());
    }

    /// A root's two connections, with small buffers: to the PE in its process (the host)
    /// and to another PE, whose outbox has bytes waiting.
    struct Root {
        /// The outbox to the PE in the root's process.
        host: Outbox,
        /// That PE's end of its connection.
        host_pe: TcpStream,
        /// The outbox to the other PE, with bytes waiting.
        other: SocketOutbox,
        /// The other PE's end, unread.
        other_pe: TcpStream,
    }

    /// A [`Root`] on `rt`, its other PE's outbox left with a message of 256 KiB waiting
    /// (asserted).
    fn host_and_backlogged_pe(rt: &tokio::runtime::Runtime) -> Root {
        let backlogs = Arc::default();
        let (host, host_pe) = pair_of_root(rt, 16 << 10, true, &backlogs);
        let (other, other_pe) = pair_of_root(rt, 16 << 10, false, &backlogs);
        let big = ToPe::GatherFailed {
            group: 1,
            seq: 2,
            reason: "x".repeat(256 << 10),
        };
        assert_eq!(other.send(&big.encode()), Ok(()));
        assert!(
            !lock(&other.shared.backlog).unwritten().is_empty(),
            "the socket took 256 KiB at once: no backlog to test"
        );
        Root {
            host: Outbox::Socket(host),
            host_pe,
            other,
            other_pe,
        }
    }

    /// The first message that reaches `pe` within `wait`, if one does.
    fn first_within(pe: &mut TcpStream, wait: Duration) -> Option<ToPe> {
        pe.set_read_timeout(Some(wait)).expect("timeout");
        let mut length = [0; 4];
        match pe.read_exact(&mut length) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None
            }
            Err(e) => panic!("reading a PE's connection: {e}"),
        }
        let mut body = vec![0; u32::from_le_bytes(length) as usize];
        pe.read_exact(&mut body).expect("a whole frame");
        Some(ToPe::decode(&body).expect("a message"))
    }

    /// Sends the host two messages while the other PE's bytes wait, and checks that it
    /// hears nothing for a while; then lets it go by `release` (given the other PE's outbox
    /// and connection, it returns what must stay alive), and checks that the host hears both
    /// messages, in order.
    fn held_then_let_go_by<Kept>(release: impl FnOnce(SocketOutbox, TcpStream) -> Kept) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let mut root = host_and_backlogged_pe(&rt);
        let told = [ToPe::Finished { pe: 1 }, ToPe::Finished { pe: 2 }];
        for m in &told {
            assert_eq!(root.host.send(m.clone()), Ok(()));
        }
        assert_eq!(
            first_within(&mut root.host_pe, Duration::from_millis(300)),
            None,
            "the host heard while another PE's message waited"
        );
        let _kept = release(root.other, root.other_pe);
        for m in &told {
            assert_eq!(first_within(&mut root.host_pe, BOUND).as_ref(), Some(m));
        }
    }

    #[test]
    fn the_pe_in_the_roots_process_hears_nothing_while_another_pe_has_bytes_waiting() {
        held_then_let_go_by(|other, mut other_pe| {
            let waited = first_within(&mut other_pe, BOUND);
            assert!(matches!(waited, Some(ToPe::GatherFailed { .. })));
            (other, other_pe)
        });
    }

    #[test]
    fn a_pe_whose_outbox_is_dropped_with_bytes_waiting_holds_the_host_no_longer() {
        // As the hub does with a PE it has lost; the PE never reads.
        held_then_let_go_by(|other, never_read| {
            drop(other);
            never_read
        });
    }

    #[test]
    fn a_pe_whose_connection_fails_with_bytes_waiting_holds_the_host_no_longer() {
        // The PE's process ends with bytes unread: its kernel resets the connection.
        held_then_let_go_by(|other, other_pe| {
            drop(other_pe);
            other
        });
    }

    /// Runs `send` with `SIGPIPE` blocked on this thread; says whether it raised one here.
    /// A blocked signal stays pending, which Linux does even for one whose action is to be
    /// ignored (as the test harness sets `SIGPIPE`'s; POSIX leaves that open); a pending one
    /// is taken back before the mask is restored.
    #[allow(unsafe_code)]
    fn raises_sigpipe(send: impl FnOnce()) -> bool {
        let mut pipe = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        let mut before = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises `pipe` before sigaddset and pthread_sigmask read
        // it; pthread_sigmask writes this thread's former mask into `before` and changes
        // only this thread's.
        let blocked = unsafe {
            libc::sigemptyset(pipe.as_mut_ptr());
            libc::sigaddset(pipe.as_mut_ptr(), libc::SIGPIPE);
            libc::pthread_sigmask(libc::SIG_BLOCK, pipe.as_ptr(), before.as_mut_ptr())
        };
        assert_eq!(blocked, 0, "SIGPIPE blocked on this thread");
        send();
        let mut pending = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        let now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: sigpending fills `pending` before sigismember reads it; `pipe` and
        // `before` were initialised above; sigtimedwait with a zero timeout takes a pending
        // SIGPIPE without waiting; the mask restored is the one this thread had.
        let (read, raised, restored) = unsafe {
            let read = libc::sigpending(pending.as_mut_ptr());
            let raised = libc::sigismember(pending.as_ptr(), libc::SIGPIPE) == 1;
            while libc::sigtimedwait(pipe.as_ptr(), std::ptr::null_mut(), &now) == libc::SIGPIPE {}
            let restored =
                libc::pthread_sigmask(libc::SIG_SETMASK, before.as_ptr(), std::ptr::null_mut());
            (read, raised, restored)
        };
        assert_eq!(
            (read, restored),
            (0, 0),
            "the pending signals read, the mask restored"
        );
        raised
    }

    #[test]
    fn a_send_to_a_pe_that_closed_its_connection_fails_without_raising_sigpipe() {
        // The hub may run in a C program's PE, where SIGPIPE keeps its default action: the
        // end of that process.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (outbox, pe) = pair(&rt, 64 << 10);
        let outbox = Outbox::Socket(outbox);
        drop(pe);
        let mut sent = Ok(());
        let raised = raises_sigpipe(|| {
            // The first write after the close may be taken; the PE's reset then fails the next.
            for _ in 0..100 {
                sent = outbox.send(ToPe::Finished { pe: 3 });
                if sent.is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        assert_eq!(sent, Err(Closed), "the PE's end closed");
        assert!(!raised, "a write to the closed connection raised SIGPIPE");
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
