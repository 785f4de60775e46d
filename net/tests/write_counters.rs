//! Write counters over the fabric (`tcp;ofi_rxm` on loopback): a peer's writes into a counted
//! range add their length, in units, to the counter word once they have landed, wake a waiter
//! sleeping on it, and see their bytes; writes elsewhere, or reaching past the range, are not
//! counted, nor any once the counter is dropped. Skipped, saying so, where libfabric is not
//! installed; `.ci/run` installs it.

mod common;

use std::future::IntoFuture;
use std::time::Duration;

use common::{available, two_nodes, view, within};

use ferroshmem_runtime::{Cmp, Error};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_counts_the_writes_that_landed_in_its_range() {
    if !available() {
        return;
    }
    let [a, b] = two_nodes(|r| r);
    let ring = view::<u8>(0, 4096);
    let outside = view::<u8>(8192, 256);
    let counter = view::<u64>(6000, 1);
    let counting =
        b.dp.count_writes(ring.all(), counter.at(0), 64)
            .expect("a counter");
    let waiter = {
        let dp = b.dp.clone();
        tokio::spawn(async move {
            let counter = view::<u64>(6000, 1);
            let got = dp.wait_until(&counter, Cmp::Eq, 3).await;
            std::mem::forget(counter);
            got
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.dp.put(ring.slice(0..64), &[1u8; 64], 1)
        .await
        .expect("put");
    a.dp.put(outside.all(), &[9u8; 256], 1)
        .await
        .expect("put elsewhere");
    a.dp.put(ring.slice(4032..4096), &[0u8; 64], 1)
        .await
        .expect("put at the end");
    // A write that goes on past the range is not the range's.
    let across = view::<u8>(4032, 128);
    a.dp.put(&across, &[5u8; 128], 1).await.expect("put across");
    a.dp.put(ring.slice(64..128), &[2u8; 64], 1)
        .await
        .expect("put");
    assert_eq!(within("the counter", waiter).await.expect("task"), Ok(3));
    let mut seen = [0u8; 128];
    b.dp.get(&mut seen, ring.slice(0..128), 1)
        .await
        .expect("own get");
    assert!(seen[..64].iter().all(|&x| x == 1) && seen[64..].iter().all(|&x| x == 2));
    drop(counting);
    a.dp.put(ring.slice(128..192), &[3u8; 64], 1)
        .await
        .expect("put");
    // A later write, seen at the target: the one before it has landed (the order of one
    // peer's writes).
    let flag = view::<u64>(7000, 1);
    a.dp.p(flag.at(0), 1u64, 1).await.expect("p");
    within(
        "the flag",
        b.dp.wait_until(flag.at(0), Cmp::Eq, 1).into_future(),
    )
    .await
    .expect("flag");
    // Its notice, and the one before it, handed on.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        b.dp.signal_fetch(counter.at(0)),
        Ok(3),
        "counted once dropped"
    );
    std::mem::forget((ring, outside, counter, across, flag));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_outside_the_heap_or_in_its_range_is_a_typed_error() {
    if !available() {
        return;
    }
    let [_, b] = two_nodes(|r| r);
    let ring = view::<u8>(0, 4096);
    let inside = view::<u64>(8, 1);
    let beyond = view::<u64>(common::HEAP, 1);
    let counter = view::<u64>(6000, 1);
    assert!(matches!(
        b.dp.count_writes(ring.all(), inside.at(0), 64),
        Err(Error::InvalidArgument(_))
    ));
    assert!(b.dp.count_writes(ring.all(), beyond.at(0), 64).is_err());
    assert!(matches!(
        b.dp.count_writes(ring.all(), counter.at(0), 0),
        Err(Error::InvalidArgument(_))
    ));
    std::mem::forget((ring, inside, beyond, counter));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owned_put_lands_on_either_route() {
    if !available() {
        return;
    }
    let [a, b] = two_nodes(|r| r);
    let dest = view::<u8>(0, 300);
    let data: Vec<u8> = (0..300).map(|i| i as u8).collect();
    a.dp.put_owned(dest.all(), data.clone(), 1)
        .await
        .expect("an owned put over the fabric");
    a.dp.put_owned(dest.all(), data.iter().rev().copied().collect(), 0)
        .await
        .expect("an owned put to a mapped PE");
    let mut there = vec![0u8; 300];
    b.dp.get(&mut there, dest.all(), 1).await.expect("get");
    assert_eq!(there, data, "landed on the remote PE");
    let mut here = vec![0u8; 300];
    a.dp.get(&mut here, dest.all(), 0).await.expect("get");
    assert!(
        here.iter().rev().copied().eq(data.iter().copied()),
        "landed here"
    );
    assert!(matches!(
        a.dp.put_owned(dest.slice(0..10), vec![0; 11], 1).await,
        Err(Error::OutOfBounds { .. })
    ));
    std::mem::forget(dest);
}
