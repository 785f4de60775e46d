//! Two fabric endpoints in one process, over libfabric's `tcp;ofi_rxm` on loopback, each with
//! a registered segment: writes, reads, every 64-bit and 32-bit atomic the transport uses,
//! writes with data (delivered to the target's handler), and refused operations (a bad key,
//! a range past the region) failing typed, never hanging. Skipped, saying so, where libfabric
//! is not installed; `.ci/run` installs it.

use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use ferroshmem_net::{
    atomic, Ended, Fabric, FabricOptions, Hooks, Library, Operation, Peer, Registered,
};
use ferroshmem_runtime::segment::HEADER_SIZE;
use ferroshmem_runtime::{Error, Segment};

const HEAP: usize = 1 << 20;

/// One side: its fabric, its segment, and the data peers' writes delivered to it.
struct Side {
    fabric: Fabric,
    segment: Arc<Segment>,
    registered: Registered,
    data: Receiver<u64>,
}

fn side(rank: usize) -> Side {
    let (tx, data) = channel();
    let fabric = Fabric::open(
        &FabricOptions {
            provider: Some("tcp;ofi_rxm".into()),
            node: Some("127.0.0.1".into()),
        },
        move |d| {
            let _ = tx.send(d);
        },
    )
    .expect("a tcp;ofi_rxm endpoint on loopback");
    let segment = Arc::new(Segment::create(rank, HEAP).expect("segment"));
    let registered = fabric
        .register(segment.clone(), 100 + rank as u64)
        .expect("register the segment");
    Side {
        fabric,
        segment,
        registered,
        data,
    }
}

/// Two sides, the first connected to the second.
fn connected() -> (Side, Side, Peer) {
    let (a, b) = (side(0), side(1));
    let peer = a.fabric.connect(&[b.fabric.name().unwrap()]).unwrap()[0];
    (a, b, peer)
}

fn available() -> bool {
    match Library::load() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

/// `s`'s segment under a key it was not registered with.
fn wrong_key(s: &Side) -> Registered {
    Registered {
        key: s.registered.key + 1000,
        ..s.registered
    }
}

fn word(s: &Side, offset: usize) -> u64 {
    let mut b = [0u8; 8];
    s.segment.mapping().read(HEADER_SIZE + offset, &mut b);
    u64::from_ne_bytes(b)
}

fn set_word(s: &Side, offset: usize, v: u64) {
    s.segment
        .mapping()
        .write(HEADER_SIZE + offset, &v.to_ne_bytes());
}

async fn run(a: &Side, peer: Peer, b: &Side, op: Operation, offset: usize) -> Vec<u8> {
    let at = (HEADER_SIZE + offset) as u64;
    tokio::time::timeout(
        Duration::from_secs(10),
        a.fabric.run(op, peer, b.registered, at),
    )
    .await
    .expect("completes in time")
    .expect("succeeds")
}

fn old(bytes: Vec<u8>) -> u64 {
    let mut b = [0u8; 8];
    b[..bytes.len()].copy_from_slice(&bytes);
    u64::from_ne_bytes(b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rma_atomics_and_writes_with_data_reach_the_peer() {
    if !available() {
        return;
    }
    let (a, b, peer) = connected();
    assert!(
        a.fabric.provider().contains("rxm"),
        "{}",
        a.fabric.provider()
    );

    run(
        &a,
        peer,
        &b,
        Operation::Write(7u64.to_ne_bytes().to_vec()),
        64,
    )
    .await;
    assert_eq!(word(&b, 64), 7, "write");
    set_word(&b, 128, 41);
    assert_eq!(
        old(run(&a, peer, &b, Operation::Read(8), 128).await),
        41,
        "read"
    );

    let fetch = |op, operand| Operation::FetchAtomic {
        op,
        operand,
        width: 8,
    };
    assert_eq!(old(run(&a, peer, &b, fetch(atomic::SUM, 1), 128).await), 41);
    assert_eq!(word(&b, 128), 42, "fetch-add");
    let swap = Operation::CompareSwap {
        compare: 42,
        value: 5,
        width: 8,
    };
    assert_eq!(old(run(&a, peer, &b, swap, 128).await), 42);
    assert_eq!(word(&b, 128), 5, "compare-and-swap");
    assert_eq!(
        old(run(&a, peer, &b, fetch(atomic::WRITE, 9), 128).await),
        5
    );
    assert_eq!(word(&b, 128), 9, "swap");
    assert_eq!(old(run(&a, peer, &b, fetch(atomic::READ, 0), 128).await), 9);
    for (op, operand, want) in [
        (atomic::OR, 0xF0, 0xF9),
        (atomic::AND, 0x3C, 0x38),
        (atomic::XOR, 0x01, 0x39),
        (atomic::SUM, 7, 0x40),
    ] {
        let plain = Operation::Atomic {
            op,
            operand,
            width: 8,
        };
        run(&a, peer, &b, plain, 128).await;
        assert_eq!(word(&b, 128), want, "atomic {op}");
    }
    // 32-bit words, next to a 64-bit one that must not change.
    set_word(&b, 192, u64::MAX);
    let add32 = Operation::FetchAtomic {
        op: atomic::SUM,
        operand: 3,
        width: 4,
    };
    assert_eq!(old(run(&a, peer, &b, add32, 192).await), u32::MAX as u64);
    assert_eq!(
        word(&b, 192),
        0xFFFF_FFFF_0000_0002,
        "a 32-bit add wraps alone"
    );

    let data = Operation::WriteData(vec![1, 2, 3, 4], 0xC0FFEE);
    run(&a, peer, &b, data, 256).await;
    assert_eq!(b.data.recv_timeout(Duration::from_secs(5)), Ok(0xC0FFEE));
    assert_eq!(word(&b, 256) & 0xFFFF_FFFF, 0x0403_0201, "the data's write");
    assert_eq!(a.fabric.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_key_or_range_fails_typed_and_in_time() {
    if !available() {
        return;
    }
    let (a, b, peer) = connected();
    let wrong_key = wrong_key(&b);
    let past = (HEADER_SIZE + HEAP) as u64;
    for (target, at, what) in [
        (wrong_key, 0, "a wrong key"),
        (b.registered, past, "past the end"),
    ] {
        let ended = tokio::time::timeout(
            Duration::from_secs(10),
            a.fabric.run(Operation::Read(64), peer, target, at),
        )
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer"));
        assert!(matches!(ended, Err(Error::Os { .. })), "{what}: {ended:?}");
    }
    // The provider drops its connection after a remote access error and makes a new one for
    // the next operations (one may fail meanwhile): the endpoint works again, in time.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let at = HEADER_SIZE as u64;
    while a
        .fabric
        .run(Operation::Write(vec![9; 8]), peer, b.registered, at)
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the endpoint never recovered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(word(&b, 0), u64::from_ne_bytes([9; 8]));
}

/// A peer's address of another length than the provider's (an empty or a short name in a
/// malformed contact) is refused typed before the provider reads it: an empty one crashed
/// the process, a short one was read past its end.
#[test]
fn a_peer_address_of_the_wrong_length_is_refused() {
    if !available() {
        return;
    }
    let a = side(0);
    let own = a.fabric.name().expect("a name");
    for bad in [
        Vec::new(),
        own[..3.min(own.len())].to_vec(),
        [own.clone(), vec![0]].concat(),
    ] {
        match a.fabric.connect(std::slice::from_ref(&bad)) {
            Err(Error::Bootstrap(why)) => assert!(why.contains("bytes"), "{why}"),
            other => panic!("a {}-byte address: {other:?}", bad.len()),
        }
    }
    assert_eq!(a.fabric.connect(&[own]).expect("its own address").len(), 1);
}

/// An operation's end hook is told how it ended: completed, or failed (a wrong key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operations_end_hook_is_told_how_it_ended() {
    if !available() {
        return;
    }
    let (a, b, peer) = connected();
    let wrong_key = wrong_key(&b);
    for (target, want) in [(b.registered, Ended::Completed), (wrong_key, Ended::Failed)] {
        let (tx, told) = channel();
        let hooks = Hooks {
            posted: None,
            ended: Some(Box::new(move |how| {
                let _ = tx.send(how);
            })),
        };
        let at = HEADER_SIZE as u64;
        let op = Operation::FetchAtomic {
            op: atomic::SUM,
            operand: 1,
            width: 8,
        };
        let outcome = tokio::time::timeout(
            Duration::from_secs(10),
            a.fabric.start_then(op, peer, target, at, hooks),
        )
        .await
        .expect("an answer in time");
        assert_eq!(outcome.is_ok(), want == Ended::Completed, "{outcome:?}");
        assert_eq!(told.recv_timeout(Duration::from_secs(5)), Ok(want));
    }
}

/// Writes started from a thread with no async runtime, more than the provider's queue
/// holds, and their futures dropped at once: every one is posted all the same (those the
/// provider had no room for, once it has), and each delivers its data to the target.
#[test]
fn operations_the_provider_has_no_room_for_yet_are_posted_later_unawaited() {
    if !available() {
        return;
    }
    let (a, b, peer) = connected();
    const WRITES: u64 = 20_000;
    for k in 0..WRITES {
        let op = Operation::WriteData(vec![1; 8], k);
        drop(a.fabric.start(op, peer, b.registered, HEADER_SIZE as u64));
    }
    let mut seen = vec![false; WRITES as usize];
    for _ in 0..WRITES {
        let data = b.data.recv_timeout(Duration::from_secs(20));
        let k = data.expect("every write's data, in time");
        seen[k as usize] = true;
    }
    assert!(seen.iter().all(|&s| s));
}

/// An operation to a peer that cannot be reached (nothing listens at its address) holds up
/// only that peer's operations: a write to a live peer, started after it, completes in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_cannot_be_reached_holds_up_only_its_own_operations() {
    if !available() {
        return;
    }
    let (a, b) = (side(0), side(1));
    let live_name = b.fabric.name().unwrap();
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        listener.local_addr().expect("its address").port()
    };
    let mut dead_name = live_name.clone();
    assert_eq!(
        u16::from_ne_bytes([dead_name[0], dead_name[1]]),
        2,
        "AF_INET"
    );
    dead_name[2..4].copy_from_slice(&closed_port.to_be_bytes());
    let peers = a.fabric.connect(&[live_name, dead_name]).unwrap();
    let (live, dead) = (peers[0], peers[1]);
    let at = HEADER_SIZE as u64;
    run(&a, live, &b, Operation::Write(vec![1; 8]), 0).await;
    let stuck = a
        .fabric
        .start(Operation::Write(vec![7; 8]), dead, b.registered, at);
    let write = a
        .fabric
        .start(Operation::Write(vec![2; 8]), live, b.registered, at);
    let written = tokio::time::timeout(Duration::from_secs(10), write).await;
    assert!(
        matches!(written, Ok(Ok(_))),
        "the live peer's write: {written:?}"
    );
    assert_eq!(word(&b, 0), u64::from_ne_bytes([2; 8]));
    drop(stuck);
}
