//! Two PEs that reach each other only through the fabric (`tcp;ofi_rxm` on loopback), each a
//! `DataPlane` whose route to the other is `Remote` over a `FabricRemote`: every RMA, atomic
//! and signal operation lands with the right values, a remote write wakes a sleeping waiter
//! by its notice, the world barrier meets, fabric atomics are atomic with the target's own
//! CPU atomics, a bad key fails typed at the initiator while the target lives on, stray
//! connections to an endpoint's port (garbage, half-open, abrupt close) change nothing, and an
//! endpoint outside the job, without the segment's key, neither writes nor wakes anything.
//! Skipped, saying so, where libfabric is not installed; `.ci/run` installs it.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use ferroshmem_runtime::route::{Drive, Remote};

use std::sync::Arc;

use common::{available, fabric_for, two_nodes, view, wide_data_plane, within, Node, HEAP};

use ferroshmem_net::{notice, Operation, Registered};
use ferroshmem_runtime::segment::HEADER_SIZE;
use ferroshmem_runtime::{Cmp, Error, Segment, SignalOp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_reaches_a_pe_on_another_node() {
    if !available() {
        return;
    }
    let [a, b] = two_nodes(|r| r);
    assert!(!a.dp.is_mapped(1) && a.dp.is_mapped(0));
    let words = view::<u64>(0, 16);
    let small = view::<u32>(4096, 16);
    within("rma", async {
        let data: Vec<u64> = (1..=16).collect();
        a.dp.put(&words, &data, 1).await.expect("put");
        // On its way; landed once a quiet confirms it.
        a.dp.quiet().await.expect("quiet");
        let mut back = [0u64; 16];
        b.dp.get(&mut back, &words, 1).await.expect("local get");
        assert_eq!(back.to_vec(), data, "the put landed");
        let mut remote = [0u64; 16];
        a.dp.get(&mut remote, &words, 1).await.expect("remote get");
        assert_eq!(remote.to_vec(), data);
        a.dp.p(words.at(3), 99, 1).await.expect("p");
        assert_eq!(a.dp.g(words.at(3), 1).await, Ok(99));
        // Strided: every other element of the first 8.
        a.dp.iput(&words, &[7u64, 8, 9, 10], 2, 1, 4, 1)
            .await
            .expect("iput");
        let mut strided = [0u64; 4];
        a.dp.iget(&mut strided, &words, 1, 2, 4, 1)
            .await
            .expect("iget");
        assert_eq!(strided, [7, 8, 9, 10]);
        // Non-blocking forms complete at quiet.
        a.dp.put_nbi(words.slice(8..12), &[1u64, 2, 3, 4], 1)
            .expect("put_nbi");
        a.dp.quiet().await.expect("quiet");
        a.dp.get_nbi(words.slice(12..16), words.slice(8..12), 1)
            .expect("get_nbi");
        a.dp.quiet().await.expect("quiet");
        let mut own = [0u64; 4];
        a.dp.get(&mut own, words.slice(12..16), 0)
            .await
            .expect("own get");
        assert_eq!(own, [1, 2, 3, 4], "the get_nbi landed in PE 0's own heap");
    })
    .await;
    within("atomics", async {
        let w = words.at(0);
        a.dp.atomic_set(w, 10u64, 1).await.expect("set");
        assert_eq!(a.dp.atomic_fetch(w, 1).await, Ok(10));
        assert_eq!(a.dp.atomic_swap(w, 20u64, 1).await, Ok(10));
        assert_eq!(a.dp.atomic_compare_swap(w, 19u64, 5, 1).await, Ok(20));
        assert_eq!(a.dp.atomic_compare_swap(w, 20u64, 5, 1).await, Ok(20));
        assert_eq!(a.dp.atomic_fetch_inc(w, 1).await, Ok(5));
        a.dp.atomic_inc(w, 1).await.expect("inc");
        assert_eq!(a.dp.atomic_fetch_add(w, 100u64, 1).await, Ok(7));
        a.dp.atomic_add(w, u64::MAX, 1).await.expect("add wraps");
        assert_eq!(a.dp.atomic_fetch_and(w, 0b0110_0110u64, 1).await, Ok(106));
        a.dp.atomic_or(w, 0b1u64, 1).await.expect("or");
        assert_eq!(a.dp.atomic_fetch_xor(w, 0b11u64, 1).await, Ok(0b0110_0011));
        assert_eq!(b.dp.atomic_fetch(w, 1).await, Ok(0b0110_0000));
        // 32-bit words, signed and not, beside their neighbours.
        let s = small.at(1);
        a.dp.atomic_set(s, u32::MAX, 1).await.expect("set u32");
        assert_eq!(a.dp.atomic_fetch_add(s, 2u32, 1).await, Ok(u32::MAX));
        assert_eq!(a.dp.atomic_fetch(s, 1).await, Ok(1), "wrapped at 32 bits");
        assert_eq!(b.dp.atomic_fetch(small.at(0), 1).await, Ok(0));
        assert_eq!(b.dp.atomic_fetch(small.at(2), 1).await, Ok(0));
        let signed = view::<i32>(4096 + 12, 1);
        assert_eq!(a.dp.atomic_fetch_add(&signed, -5i32, 1).await, Ok(0));
        assert_eq!(
            a.dp.atomic_compare_swap(&signed, -5i32, -9, 1).await,
            Ok(-5)
        );
        assert_eq!(b.dp.atomic_fetch(&signed, 1).await, Ok(-9));
        let wide = view::<i64>(8192, 1);
        a.dp.atomic_set(&wide, i64::MIN, 1).await.expect("set i64");
        assert_eq!(a.dp.atomic_fetch_xor(&wide, -1i64, 1).await, Ok(i64::MIN));
        assert_eq!(b.dp.atomic_fetch(&wide, 1).await, Ok(i64::MAX));
        std::mem::forget((signed, wide));
    })
    .await;
    within("signals", async {
        let sig = view::<u64>(16384, 1);
        let mailbox = view::<u64>(16392, 4);
        a.dp.put_signal(&mailbox, &[5u64, 6, 7, 8], &sig, 3, SignalOp::Set, 1)
            .await
            .expect("put_signal");
        a.dp.signal_op(&sig, 4, SignalOp::Add, 1)
            .await
            .expect("signal_op");
        assert_eq!(b.dp.signal_fetch(&sig), Ok(7));
        let mut got = [0u64; 4];
        b.dp.get(&mut got, &mailbox, 1).await.expect("local get");
        assert_eq!(got, [5, 6, 7, 8]);
        std::mem::forget((sig, mailbox));
    })
    .await;
    std::mem::forget((words, small));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_write_wakes_a_sleeping_waiter_by_its_notice() {
    if !available() {
        return;
    }
    let [a, b] = two_nodes(|r| r);
    // The doorbell also ticks every 10 ms while anyone sleeps, and a tick may find the value
    // before the notice arrives (an atomic's notice leaves once the atomic was applied): each
    // kind gets a few tries, and must once be woken by its notice. Another task drives PE 1's
    // fabric meanwhile: a waiter that drove it would wake at the atomic's own arrival too.
    let driving = hold_the_drive(&b);
    let mut value = 0;
    for how in ["put", "atomic", "put_signal"] {
        let mut rang = false;
        for _ in 0..5 {
            value += 1;
            rang = wake_once(&a, &b, how, value).await;
            if rang {
                break;
            }
        }
        assert!(
            rang,
            "{how}: the waiter never woke by its notice ringing the doorbell"
        );
    }
    driving.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_drives_its_fabric_while_it_waits() {
    if !available() {
        return;
    }
    let [a, b] = two_nodes(|r| r);
    let flag = view::<u64>(0, 1);
    let waiter = {
        let dp = b.dp.clone();
        tokio::spawn(async move {
            let flag = view::<u64>(0, 1);
            let got = dp.wait_until(&flag, Cmp::Eq, 1).await;
            std::mem::forget(flag);
            got
        })
    };
    within("the waiter to sleep", async {
        while !b.segment.has_sleepers() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert!(
        b.fabric.drive().is_none(),
        "a sleeping waiter holds its fabric's drive"
    );
    a.dp.p(&flag, 1, 1).await.expect("p");
    assert_eq!(
        within("the waiter", waiter).await.expect("waiter task"),
        Ok(1)
    );
    assert!(
        b.fabric.drive().is_some(),
        "the drive is free once the wait ended"
    );
    std::mem::forget(flag);
}

/// A task that takes `node`'s fabric drive and reads the queue whenever it fires, until
/// aborted.
fn hold_the_drive(node: &Node) -> tokio::task::JoinHandle<()> {
    let mut driver = node.fabric.drive().expect("the drive is free");
    tokio::spawn(std::future::poll_fn(move |cx| {
        driver.poll_drive(cx);
        std::task::Poll::<()>::Pending
    }))
}

/// PE 1 sleeps until its word is `value`, PE 0 writes it by `how`: whether a ring (only a
/// notice reaching a watched range moves the doorbell's count; its ticks do not) came
/// between the write and the wake.
async fn wake_once(a: &Node, b: &Node, how: &'static str, value: u64) -> bool {
    let (flag, sig, data) = (view::<u64>(0, 1), view::<u64>(64, 1), view::<u64>(128, 2));
    let waiter = {
        let dp = b.dp.clone();
        tokio::spawn(async move {
            let (flag, sig) = (view::<u64>(0, 1), view::<u64>(64, 1));
            let got = if how == "put_signal" {
                dp.signal_wait_until(&sig, Cmp::Eq, value).await
            } else {
                dp.wait_until(&flag, Cmp::Eq, value).await
            };
            std::mem::forget((flag, sig));
            got
        })
    };
    within("the waiter to sleep", async {
        while !b.segment.has_sleepers() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let rings = b.segment.wake_seq().load(Ordering::SeqCst);
    match how {
        "put" => a.dp.p(&flag, value, 1).await.expect("p"),
        "atomic" => a.dp.atomic_set(&flag, value, 1).await.expect("set"),
        _ => {
            a.dp.put_signal(&data, &[1u64, 2], &sig, value, SignalOp::Set, 1)
                .await
                .expect("put_signal")
        }
    }
    let got = within(how, waiter).await.expect("waiter task");
    assert_eq!(got, Ok(value), "{how}");
    std::mem::forget((flag, sig, data));
    b.segment.wake_seq().load(Ordering::SeqCst) > rings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_world_barrier_meets_across_the_fabric() {
    if !available() {
        return;
    }
    let [a, b] = two_nodes(|r| r);
    let counter = view::<u64>(0, 1);
    let (da, db) = (a.dp.clone(), b.dp.clone());
    let rounds = 50u64;
    let pe1 = tokio::spawn(async move {
        let counter = view::<u64>(0, 1);
        for i in 0..rounds {
            db.barrier_all().await?;
            // After barrier i, PE 0 has added i + 1 times.
            let seen = db.atomic_fetch(&counter, 1).await?;
            if seen != i + 1 {
                return Err(Error::InvalidArgument(format!("round {i}: saw {seen}")));
            }
            db.barrier_all().await?;
        }
        std::mem::forget(counter);
        Ok::<_, Error>(())
    });
    within("barriers", async {
        for _ in 0..rounds {
            da.atomic_inc(&counter, 1).await.expect("inc");
            da.barrier_all().await.expect("barrier");
            da.barrier_all().await.expect("barrier");
        }
    })
    .await;
    within("PE 1", pe1)
        .await
        .expect("task")
        .expect("PE 1's rounds");
    std::mem::forget(counter);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fabric_atomics_are_atomic_with_the_targets_own() {
    if !available() {
        return;
    }
    let [a, b] = two_nodes(|r| r);
    let counter = view::<u64>(0, 1);
    let n = 2000u64;
    let local = {
        let dp = b.dp.clone();
        tokio::spawn(async move {
            let counter = view::<u64>(0, 1);
            for _ in 0..n {
                dp.atomic_add(&counter, 1u64, 1).await?;
                tokio::task::yield_now().await;
            }
            std::mem::forget(counter);
            Ok::<_, Error>(())
        })
    };
    let mut seen = within("remote adds", async {
        let mut seen = Vec::new();
        for _ in 0..n {
            seen.push(
                a.dp.atomic_fetch_add(&counter, 1u64, 1)
                    .await
                    .expect("fadd"),
            );
        }
        seen
    })
    .await;
    within("local adds", local)
        .await
        .expect("task")
        .expect("local adds");
    assert_eq!(
        b.dp.atomic_fetch(&counter, 1).await,
        Ok(2 * n),
        "no add lost"
    );
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len() as u64, n, "every fetched value distinct");
    std::mem::forget(counter);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_key_fails_at_the_initiator_and_the_target_lives_on() {
    if !available() {
        return;
    }
    let [a, b] = two_nodes(|r| Registered {
        key: r.key ^ 0xdead,
        ..r
    });
    let words = view::<u64>(0, 4);
    within("refusals", async {
        // A put completes once on its way: the quiet that confirms it reports the refusal.
        a.dp.put(&words, &[1u64, 2], 1).await.expect("on its way");
        let confirmed = a.dp.quiet().await;
        assert!(
            matches!(confirmed, Err(Error::Os { .. })),
            "quiet after a put: {confirmed:?}"
        );
        let fadd = a.dp.atomic_fetch_add(words.at(0), 1u64, 1).await;
        assert!(matches!(fadd, Err(Error::Os { .. })), "fadd: {fadd:?}");
        a.dp.put_nbi(words.slice(..2), &[3u64, 4], 1)
            .expect("started");
        let quiet = a.dp.quiet().await;
        assert!(matches!(quiet, Err(Error::Os { .. })), "quiet: {quiet:?}");
        assert_eq!(a.dp.quiet().await, Ok(()), "a failure is reported once");
        // The target was not written and still serves its own (right) key.
        let mut got = [9u64; 2];
        b.dp.get(&mut got, words.slice(..2), 1)
            .await
            .expect("own get");
        assert_eq!(got, [0, 0]);
        // The provider drops the connection after a remote access error and makes a new one
        // for the next operations (one may fail meanwhile).
        let mut tries = 0;
        let put_landed = || async {
            b.dp.put(&words, &[5u64, 6], 0).await?;
            b.dp.quiet().await
        };
        while let Err(e) = put_landed().await {
            tries += 1;
            assert!(tries < 100, "PE 1 never reached PE 0 again: {e}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut back = [0u64; 2];
        a.dp.get(&mut back, words.slice(..2), 0).await.expect("own");
        assert_eq!(back, [5, 6]);
    })
    .await;
    std::mem::forget(words);
}

/// Words of each signalled put in the ordering test.
const WORDS: usize = 512;

/// PE 0 sends `rounds` signalled puts (round k writes k everywhere, then signal k) while
/// PE 1 checks, each time it sees the signal move, that the data is at least as new.
async fn signalled_puts(a: &Node, b: &Node, rounds: u64) {
    let sig = view::<u64>(0, 1);
    let data = view::<u64>(4096, WORDS);
    let reader = {
        let dp = b.dp.clone();
        tokio::spawn(async move {
            let (sig, data) = (view::<u64>(0, 1), view::<u64>(4096, WORDS));
            let mut last = 0;
            while last < rounds {
                let seen = dp.signal_wait_until(&sig, Cmp::Gt, last).await?;
                let mut got = vec![0u64; WORDS];
                dp.get(&mut got, &data, 1).await?;
                if let Some(i) = got.iter().position(|&v| v < seen) {
                    return Err(Error::InvalidArgument(format!(
                        "signal {seen} seen before its data: element {i} is {}",
                        got[i]
                    )));
                }
                last = seen;
            }
            std::mem::forget((sig, data));
            Ok::<_, Error>(())
        })
    };
    within("signalled puts", async {
        for k in 1..=rounds {
            a.dp.put_signal_nbi(&data, &vec![k; WORDS], &sig, k, SignalOp::Set, 1)
                .expect("put_signal_nbi");
        }
        a.dp.quiet().await.expect("quiet");
    })
    .await;
    within("the reader", reader)
        .await
        .expect("task")
        .expect("data before every signal");
    std::mem::forget((sig, data));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_is_never_seen_before_its_data_nor_overtaken_by_a_later_one() {
    if !available() {
        return;
    }
    // Unordered, the signals overtake their data mostly on fresh connections (in about a
    // third of these runs on tcp;ofi_rxm): six fresh pairs.
    for _ in 0..6 {
        let [a, b] = two_nodes(|r| r);
        signalled_puts(&a, &b, 200).await;
    }
    let [a, b] = two_nodes(|r| r);
    let sig = view::<u64>(0, 1);
    let data = view::<u64>(4096, WORDS);
    // A plain signal right after a signalled put lands after it.
    within("overtaking", async {
        for k in 0..50u64 {
            a.dp.put_signal_nbi(&data, &vec![k; WORDS], &sig, 1000 + 2 * k, SignalOp::Set, 1)
                .expect("put_signal_nbi");
            a.dp.signal_op(&sig, 1001 + 2 * k, SignalOp::Set, 1)
                .await
                .expect("signal_op");
            a.dp.quiet().await.expect("quiet");
            assert_eq!(b.dp.signal_fetch(&sig), Ok(1001 + 2 * k), "round {k}");
        }
    })
    .await;
    std::mem::forget((sig, data));
}

/// The IPv4 address in a tcp provider's endpoint name (a `sockaddr_in`), if it is one.
fn endpoint_address(name: &[u8]) -> Option<std::net::SocketAddr> {
    let family = u16::from_ne_bytes([*name.first()?, *name.get(1)?]);
    if family != 2 || name.len() < 8 {
        return None;
    }
    let port = u16::from_be_bytes([name[2], name[3]]);
    let ip = std::net::Ipv4Addr::new(name[4], name[5], name[6], name[7]);
    Some(std::net::SocketAddr::from((ip, port)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stray_connections_to_an_endpoint_change_nothing() {
    if !available() {
        return;
    }
    let [a, b] = two_nodes(|r| r);
    let words = view::<u64>(0, 4);
    within("before", a.dp.put(&words, &[1u64, 2, 3, 4], 1))
        .await
        .expect("put");
    within("before", a.dp.quiet()).await.expect("landed");
    let address = endpoint_address(&b.name).expect("a tcp endpoint");
    // Garbage, a half-open connection, and an abrupt close, to PE 1's fabric port.
    let mut reached = 0;
    for junk in [
        &b"GET / HTTP/1.0\r\n\r\n"[..],
        &[0u8; 0][..],
        &[0xffu8; 4096][..],
    ] {
        if let Ok(mut s) = std::net::TcpStream::connect(address) {
            use std::io::Write;
            reached += 1;
            let _ = s.write_all(junk);
            if junk.is_empty() {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    assert_eq!(reached, 3, "the stray connections reached {address}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    within("after", async {
        a.dp.put(&words, &[5u64, 6, 7, 8], 1)
            .await
            .expect("put after");
        a.dp.quiet().await.expect("landed");
        let mut got = [0u64; 4];
        b.dp.get(&mut got, &words, 1).await.expect("own get");
        assert_eq!(
            got,
            [5, 6, 7, 8],
            "PE 1's memory holds what PE 0 wrote, nothing else"
        );
        assert_eq!(a.dp.atomic_fetch_add(words.at(0), 1u64, 1).await, Ok(5));
        b.dp.put(&words, &[9u64], 0)
            .await
            .expect("PE 1 still reaches PE 0");
    })
    .await;
    std::mem::forget(words);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_outside_the_job_without_the_key_neither_writes_nor_wakes() {
    if !available() {
        return;
    }
    let [a, b] = two_nodes(|r| r);
    let words = view::<u64>(0, 4);
    within("before", a.dp.put(&words, &[1u64, 2, 3, 4], 1))
        .await
        .expect("put");
    within("before", a.dp.quiet()).await.expect("landed");
    // PE 1 sleeps on its first word.
    let waiter = {
        let dp = b.dp.clone();
        tokio::spawn(async move {
            let word = view::<u64>(0, 1);
            let got = dp.wait_until(&word, Cmp::Eq, 7).await;
            std::mem::forget(word);
            got
        })
    };
    within("the waiter to sleep", async {
        while !b.segment.has_sleepers() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    // A stranger: an endpoint of its own, in no PE's address vector, that learnt PE 1's
    // address (it is on the wire) and its segment's base, but not its key. `tcp;ofi_rxm`
    // accepts its connection and cannot say where a write came from (with FI_SOURCE it
    // names PE 1's first peer as the source of the stranger's writes too), so the random
    // 64-bit key each PE registers its heap under is what guards the memory and the
    // notices: a write with data under the wrong key is refused before it lands or rings.
    let scratch = Arc::new(Segment::create(9, HEAP).expect("segment"));
    let stranger = fabric_for(&scratch);
    let to_b = stranger
        .connect(std::slice::from_ref(&b.name))
        .expect("insert")[0];
    let guessed = Registered {
        key: b.registered.key ^ 0xdead,
        ..b.registered
    };
    let rings = b.segment.wake_seq().load(Ordering::SeqCst);
    for _ in 0..3 {
        let bare = Operation::WriteData(Vec::new(), notice(HEADER_SIZE, 8));
        let sent = within(
            "a bare notice",
            stranger.run(bare, to_b, guessed, HEADER_SIZE as u64),
        )
        .await;
        assert!(
            matches!(sent, Err(Error::Os { .. })),
            "bare notice: {sent:?}"
        );
    }
    let forged = Operation::WriteData(vec![0xff; 32], notice(HEADER_SIZE, 32));
    let wrote = within(
        "the forged write",
        stranger.run(forged, to_b, guessed, HEADER_SIZE as u64),
    )
    .await;
    assert!(
        matches!(wrote, Err(Error::Os { .. })),
        "forged write: {wrote:?}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        b.segment.wake_seq().load(Ordering::SeqCst),
        rings,
        "a stranger's notice rang PE 1's doorbell"
    );
    assert!(
        !waiter.is_finished(),
        "the waiter woke with its word unchanged"
    );
    within("after", async {
        let mut got = [0u64; 4];
        b.dp.get(&mut got, &words, 1).await.expect("own get");
        assert_eq!(
            got,
            [1, 2, 3, 4],
            "PE 1's memory holds what PE 0 wrote, nothing else"
        );
        a.dp.p(&words, 7u64, 1).await.expect("a member's put");
    })
    .await;
    let woke = within("the waiter", waiter).await.expect("waiter task");
    assert_eq!(woke, Ok(7), "a member's put still wakes the waiter");
    std::mem::forget(words);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_confirms_the_puts_to_its_busy_peers_among_idle_ones() {
    if !available() {
        return;
    }
    let [a, b] = two_nodes(|r| r);
    // PEs 1..8 are all `b`: a lane each, one connection.
    let (dp, remote) = wide_data_plane(&a, 8);
    let words = view::<u64>(0, 2);
    assert!(remote.settle().is_none(), "nothing was sent");
    within("puts and their quiet", async {
        dp.put(words.slice(..1), &[7], 3).await.expect("put");
        dp.put(words.slice(1..), &[9], 6).await.expect("put");
        let settled = remote.settle().expect("two lanes' puts to confirm");
        settled.await.expect("confirmed");
    })
    .await;
    let mut landed = [0u64; 2];
    b.dp.get(&mut landed, &words, 1).await.expect("local get");
    assert_eq!(landed, [7, 9]);
    assert!(remote.settle().is_none(), "every lane is settled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_while_another_confirms_the_same_puts_waits_for_them_too() {
    if !available() {
        return;
    }
    let [a, b] = two_nodes(|r| r);
    let (dp, remote) = wide_data_plane(&a, 4);
    let words = view::<u64>(0, 1);
    within("a put, two quiets and the next", async {
        dp.put(&words, &[5], 2).await.expect("put");
        let first = remote.settle().expect("the put to confirm");
        // The first quiet's confirmation is on its way: a second (another thread's quiet,
        // which must cover the puts that thread started) still finds the lane to wait for.
        let second = remote.settle().expect("the same put, still unconfirmed");
        second.await.expect("confirmed");
        first.await.expect("confirmed");
        assert!(remote.settle().is_none(), "every lane is settled");
        dp.put(&words, &[6], 2).await.expect("put");
        remote
            .settle()
            .expect("a later put to confirm")
            .await
            .expect("confirmed");
    })
    .await;
    let mut landed = [0u64];
    b.dp.get(&mut landed, &words, 1).await.expect("local get");
    assert_eq!(landed, [6]);
}
