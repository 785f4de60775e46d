//! Tests of one send queue: decode order, CQEs, errors and flushes, the doorbell record as the
//! producer index, and many threads posting past the 16-bit index wrap.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::cqe::{read_cqe, Syndrome};
use super::decode::WqeError;
use super::queue::{Completion, Consumer, Producer, QueueLayout, QueueMemory, Words};
use super::wqe::{encode_linear, AtomicOp, Width, WorkRequest, WqeFlags};
use super::wqe_tests::all_requests;
use super::WQEBB;

const QPN: u32 = 0x77;
const T: Duration = Duration::from_secs(20);

fn queue(nwqes: usize, ncqes: usize) -> QueueMemory {
    let layout = QueueLayout::new(nwqes, ncqes).expect("layout");
    QueueMemory::host(layout, QPN).expect("queue")
}

fn write(tag: u64) -> WorkRequest {
    WorkRequest::Write {
        local: tag,
        lkey: 1,
        remote: tag,
        rkey: 2,
        len: 8,
    }
}

#[test]
fn layouts_are_checked() {
    assert!(QueueLayout::new(4, 4).is_err());
    assert!(QueueLayout::new(24, 32).is_err());
    assert!(QueueLayout::new(64, 32).is_err());
    assert!(QueueLayout::new(1 << 16, 1 << 16).is_err());
    let l = QueueLayout::new(8, 16).expect("layout");
    assert_eq!(l.words(), 8 * 8 + 16 * 8 + 8);
    let small: Arc<dyn Words> = Arc::new((0..10).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
    assert!(QueueMemory::new(l, QPN, small).is_err());
    assert!(QueueMemory::host(l, 1 << 24).is_err());
}

#[test]
fn posts_decode_in_order_and_signaled_ones_complete() {
    let q = queue(16, 16);
    let p = Producer::new(q.clone(), T);
    let mut c = Consumer::new(q.clone());
    let mut signaled = 0;
    for (i, req) in all_requests().into_iter().enumerate() {
        let flags = if i % 3 == 0 {
            WqeFlags::SIGNALED
        } else {
            WqeFlags::default()
        };
        let index = p.post(&req, flags).expect("posts");
        let (at, d) = c.pending().expect("reads").expect("pending");
        let d = d.expect("decodes");
        assert_eq!((at, &d.request), (index as u16, &req));
        assert!(d.flags.signaled || !flags.signaled);
        signaled += usize::from(d.flags.signaled);
        assert_eq!(c.pending(), Ok(None));
        c.complete(at, Completion::Success).expect("completes");
        p.poll();
        assert_eq!(p.cqes() as usize, signaled);
        if d.flags.signaled {
            assert_eq!(q.consumed(), index + 1);
        }
    }
    assert_eq!(p.error(), None);
}

#[test]
fn an_error_flushes_every_other_wqe_and_fails_the_producer() {
    let q = queue(16, 16);
    let p = Producer::new(q.clone(), T);
    let mut c = Consumer::new(q.clone());
    for tag in 0..3 {
        p.post(&write(tag), WqeFlags::default()).expect("posts");
    }
    let (at, _) = c.pending().expect("reads").expect("pending");
    assert_eq!(
        c.complete(1, Completion::Success),
        Err(WqeError::NotInFlight { index: 1 })
    );
    c.complete(at, Completion::Error(Syndrome::RemoteAccess, 0x42))
        .expect("completes");
    assert!(c.in_error());
    let cqes: Vec<_> = (0..3).filter_map(|i| read_cqe(q.cq(), i)).collect();
    let seen: Vec<_> = cqes.iter().map(|c| (c.wqe_counter, c.syndrome)).collect();
    assert_eq!(seen, [(0, 0x13), (1, 0x05), (2, 0x05)]);
    assert_eq!((cqes[0].vendor_syndrome, cqes[0].wqe_opcode), (0x42, 0x08));
    // The replies of the flushed WQEs, coming later, change nothing.
    c.complete(1, Completion::Success)
        .expect("a flushed WQE's completion is no error");
    assert!(read_cqe(q.cq(), 3).is_none());
    p.poll();
    let failed = WqeError::Completion {
        syndrome: 0x13,
        vendor: 0x42,
        wqe_counter: 0,
    };
    assert_eq!(p.error(), Some(failed.clone()));
    assert_eq!(p.post(&write(9), WqeFlags::default()), Err(failed));
    assert_eq!(q.consumed(), 3);
}

#[test]
fn a_refused_wqe_stalls_decoding_until_completed_then_fails_the_queue() {
    let mem: Arc<Vec<AtomicU64>> =
        Arc::new((0..16 * 8 * 2 + 8).map(|_| AtomicU64::new(0)).collect());
    let layout = QueueLayout::new(16, 16).expect("layout");
    let q = QueueMemory::new(layout, QPN, mem.clone()).expect("queue");
    let p = Producer::new(q.clone(), T);
    let mut c = Consumer::new(q.clone());
    p.post(&write(1), WqeFlags::default()).expect("posts");
    p.post(&write(2), WqeFlags::default()).expect("posts");
    // Corrupt the raddr segment's reserved word of WQE 0 (bytes 28..32 = word 3, high half).
    mem[3].fetch_or(1 << 40, Ordering::Relaxed);
    let (at, got) = c.pending().expect("reads").expect("pending");
    let e = got.expect_err("refused");
    assert_eq!((at, &e), (0, &WqeError::Reserved { offset: 29 }));
    assert_eq!(c.pending(), Ok(None));
    c.complete(0, Completion::Error(e.syndrome(), 0))
        .expect("completes");
    let first = read_cqe(q.cq(), 0).expect("error CQE");
    assert_eq!((first.syndrome, first.wqe_counter), (0x02, 0));
    let flush = read_cqe(q.cq(), 1).expect("flush CQE");
    assert_eq!((flush.syndrome, flush.wqe_counter), (0x05, 1));
    assert_eq!(read_cqe(q.cq(), 2), None);
}

#[test]
fn a_refused_wqe_completed_as_success_still_fails() {
    let q = queue(8, 8);
    let p = Producer::new(q.clone(), T);
    let mut c = Consumer::new(q.clone());
    let bad = WorkRequest::Write {
        local: 0,
        lkey: 0,
        remote: 0,
        rkey: 0,
        len: 8,
    };
    p.post(&bad, WqeFlags::default()).expect("posts");
    // Turn its opcode into SEND (0x0a), which this NIC does not execute.
    q.sq()[0].fetch_xor(0x02 << 24, Ordering::Relaxed);
    let (at, got) = c.pending().expect("reads").expect("pending");
    assert_eq!(got, Err(WqeError::UnknownOpcode { opcode: 0x0a }));
    c.complete(at, Completion::Success).expect("completes");
    assert!(c.in_error());
    let cqe = read_cqe(q.cq(), 0).expect("error CQE");
    assert_eq!((cqe.opcode, cqe.syndrome, cqe.wqe_opcode), (13, 0x02, 0x0a));
}

#[test]
fn the_doorbell_record_alone_publishes_and_later_posts_are_flushed_in_error() {
    let mem: Arc<Vec<AtomicU64>> =
        Arc::new((0..8 * 8 * 2 + 8).map(|_| AtomicU64::new(0)).collect());
    let layout = QueueLayout::new(8, 8).expect("layout");
    let q = QueueMemory::new(layout, QPN, mem.clone()).expect("queue");
    let mut c = Consumer::new(q.clone());
    // Write WQE 0 as a GPU would, then only the DBR (bytes 4..8 of the first control word).
    let e = encode_linear(&write(5), WqeFlags::SIGNALED, 0, QPN).expect("encodes");
    for (w, chunk) in mem.iter().zip(e.bytes[..WQEBB].chunks_exact(8)) {
        w.store(
            u64::from_ne_bytes(chunk.try_into().expect("8")),
            Ordering::Relaxed,
        );
    }
    assert_eq!(c.pending(), Ok(None));
    let dbr = u64::from_ne_bytes([0, 0, 0, 0, 0, 0, 0, 1]);
    mem[layout.control_at()].store(dbr, Ordering::Release);
    let (at, d) = c.pending().expect("reads").expect("pending");
    assert_eq!((at, d.map(|d| d.request)), (0, Ok(write(5))));
    c.fail(Syndrome::TransportRetryExceeded).expect("fails");
    let cqe = read_cqe(q.cq(), 0).expect("error CQE");
    assert_eq!(cqe.syndrome, 0x15);
    // A WQE posted after the failure is flushed by the next look at the queue.
    let e = encode_linear(&write(6), WqeFlags::default(), 1, QPN).expect("encodes");
    for (w, chunk) in mem[8..].iter().zip(e.bytes[..WQEBB].chunks_exact(8)) {
        w.store(
            u64::from_ne_bytes(chunk.try_into().expect("8")),
            Ordering::Relaxed,
        );
    }
    q.prod_cell().fetch_max(2, Ordering::Release);
    assert_eq!(c.pending(), Ok(None));
    let flush = read_cqe(q.cq(), 1).expect("flush CQE");
    assert_eq!((flush.syndrome, flush.wqe_counter), (0x05, 1));
}

/// The request thread `t` posts as its `seq`-th: mostly one-WQEBB writes, every tenth a
/// two-WQEBB masked compare-swap.
fn tagged(t: u64, seq: u64) -> WorkRequest {
    let tag = t << 32 | seq;
    if seq % 10 == 9 {
        return WorkRequest::Atomic {
            op: AtomicOp::MaskedCompareSwap {
                swap: tag,
                compare: 0,
                swap_mask: u64::MAX,
                compare_mask: 0,
            },
            width: Width::W8,
            remote: tag * 8,
            rkey: 3,
            result: 0,
            lkey: 4,
        };
    }
    write(tag)
}

fn tag_of(req: &WorkRequest) -> Option<u64> {
    match req {
        WorkRequest::Write { remote, .. } => Some(*remote),
        WorkRequest::Atomic { remote, .. } => Some(remote / 8),
        _ => None,
    }
}

/// The handler: decodes everything in order, completes it, until `stop` and nothing is left;
/// it pauses every 512 WQEs so the posters fill the ring and must wait for space.
/// Returns the tags in decode order, the signaled count and the WQEBBs consumed.
fn handle(q: QueueMemory, stop: &AtomicBool) -> (Vec<u64>, u64, u64) {
    let mut c = Consumer::new(q);
    let (mut tags, mut signaled, mut next) = (Vec::new(), 0u64, 0u64);
    loop {
        match c.pending().expect("reads") {
            Some((at, d)) => {
                let d = d.expect("decodes");
                assert_eq!(at, next as u16, "WQEs are contiguous");
                next += d.wqebbs as u64;
                tags.extend(tag_of(&d.request));
                signaled += u64::from(d.flags.signaled);
                c.complete(at, Completion::Success).expect("completes");
                if tags.len() % 512 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            None if stop.load(Ordering::Acquire) => return (tags, signaled, next),
            None => std::thread::yield_now(),
        }
    }
}

#[test]
fn many_threads_post_past_the_16_bit_wrap_without_loss_or_duplication() {
    const THREADS: u64 = 4;
    const EACH: u64 = 17_000;
    let q = queue(64, 64);
    let p = Producer::new(q.clone(), T);
    let stop = AtomicBool::new(false);
    let (tags, signaled, wqebbs) = std::thread::scope(|s| {
        let handler = s.spawn(|| handle(q.clone(), &stop));
        let posters: Vec<_> = (0..THREADS)
            .map(|t| {
                let p = &p;
                s.spawn(move || {
                    (0..EACH).try_for_each(|seq| {
                        p.post(&tagged(t, seq), WqeFlags::default()).map(|_| ())
                    })
                })
            })
            .collect();
        let posted: Vec<_> = posters.into_iter().map(|h| h.join()).collect();
        let quiet = p.quiet();
        // The handler stops whatever happened, so a failure fails the test instead of hanging it.
        stop.store(true, Ordering::Release);
        let handled = handler.join().expect("handler");
        for r in posted {
            r.expect("poster").expect("posts");
        }
        quiet.expect("quiet");
        handled
    });
    assert!(
        wqebbs > 1 << 16,
        "only {wqebbs} WQEBBs: the 16-bit index never wrapped"
    );
    assert_eq!(tags.len() as u64, THREADS * EACH, "lost or duplicated WQEs");
    for t in 0..THREADS {
        let mine: Vec<u64> = tags
            .iter()
            .filter(|g| *g >> 32 == t)
            .map(|g| g & 0xffff_ffff)
            .collect();
        assert_eq!(
            mine,
            (0..EACH).collect::<Vec<_>>(),
            "thread {t}'s posts, in its order"
        );
    }
    p.poll();
    assert_eq!(p.error(), None, "CQEs out of order or failed");
    assert_eq!(p.cqes(), signaled);
    assert!(
        signaled >= wqebbs / 16,
        "a signaled WQE in every quarter ring"
    );
}

/// A post that times out waiting for ring space holds slots that can never be published:
/// the producer then fails every post at once with that timeout, instead of each later post
/// waiting out its own timeout for a publishing order that never comes.
#[test]
fn a_post_timed_out_for_ring_space_fails_the_producer_at_once() {
    let q = queue(8, 8);
    let p = Producer::new(q.clone(), Duration::from_millis(50));
    for tag in 0..8 {
        p.post(&write(tag), WqeFlags::default()).expect("posts");
    }
    let full = p.post(&write(8), WqeFlags::default());
    assert!(
        matches!(
            full,
            Err(WqeError::Timeout {
                what: "ring space",
                ..
            })
        ),
        "{full:?}"
    );
    let mut c = Consumer::new(q.clone());
    while let Some((at, _)) = c.pending().expect("reads") {
        c.complete(at, Completion::Success).expect("completes");
    }
    p.poll();
    let started = std::time::Instant::now();
    assert_eq!(p.post(&write(9), WqeFlags::default()), full);
    assert_eq!(p.quiet(), full.map(|_| ()));
    assert!(
        started.elapsed() < Duration::from_millis(50),
        "no timeout waited out"
    );
}
