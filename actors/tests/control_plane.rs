//! The bootstrap root over TCP: connections without the job's secret are refused while the
//! job still forms; a PE that never joins makes the root fail naming it; a lost PE is
//! announced to the others; the PE in the root's process hears an answer only once the
//! others' are written.

mod common;

use common::hello;
use std::time::Duration;

use ferroshmem_actors::control::wire::{
    read_frame, write_frame, Contribution, FromPe, ToPe, MAX_FRAME,
};
use ferroshmem_actors::control::{connect, RootServer};
use ferroshmem_runtime::Error;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

async fn root(
    n: usize,
    secret: &[u8],
    timeout: Duration,
) -> (
    std::net::SocketAddr,
    tokio::task::JoinHandle<ferroshmem_runtime::Result<ferroshmem_actors::control::HubReport>>,
) {
    let server = RootServer::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let address = server.address();
    (address, server.spawn(n, 42, secret.to_vec(), timeout))
}

/// PEs 0 and 1 of a job of two at `address`, joined: both welcomed alike, to job 42.
async fn two_joined(
    address: std::net::SocketAddr,
    secret: &[u8],
) -> (
    ferroshmem_actors::control::Link,
    ferroshmem_actors::control::Link,
) {
    let mut a = connect(address, 0, None, Duration::from_secs(5))
        .await
        .unwrap();
    let mut b = connect(address, 1, None, Duration::from_secs(5))
        .await
        .unwrap();
    let (wa, wb) = tokio::join!(
        a.join(hello(secret, 0, 2), Duration::from_secs(5)),
        b.join(hello(secret, 1, 2), Duration::from_secs(5))
    );
    let (wa, wb) = (wa.unwrap(), wb.unwrap());
    assert_eq!(wa, wb);
    assert_eq!(wa.job, 42);
    assert_eq!(wa.nodes, vec!["test-node".to_string(); 2]);
    (a, b)
}

#[tokio::test]
async fn a_connection_without_the_secret_is_refused_and_the_job_still_forms() {
    let secret = b"right".to_vec();
    let (address, root) = root(2, &secret, Duration::from_secs(10)).await;

    let mut intruder = TcpStream::connect(address).await.unwrap();
    write_frame(
        &mut intruder,
        &FromPe::Hello(hello(b"wrong", 0, 2)).encode(),
    )
    .await
    .unwrap();
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(5), intruder.read(&mut byte)).await;
    assert!(
        matches!(closed, Ok(Ok(0))),
        "the root closes a connection with the wrong secret"
    );

    let (mut a, b) = two_joined(address, &secret).await;

    // PE 1 leaves without saying goodbye: PE 0 hears that it was lost.
    drop(b);
    let lost = tokio::time::timeout(Duration::from_secs(5), a.from_root.recv())
        .await
        .unwrap();
    assert!(
        matches!(lost, Some(ToPe::PeerLost { pe: 1, .. })),
        "{lost:?}"
    );
    a.to_root.send(FromPe::Goodbye).unwrap();
    let report = root.await.unwrap().unwrap();
    assert_eq!(report.lost.len(), 1);
    assert_eq!(report.lost[0].0, 1);
}

#[tokio::test]
async fn a_pe_that_never_joins_is_named_when_the_root_times_out() {
    let secret = b"s".to_vec();
    let (address, root) = root(3, &secret, Duration::from_millis(300)).await;
    let mut a = connect(address, 0, None, Duration::from_secs(5))
        .await
        .unwrap();
    let joined = a.join(hello(&secret, 0, 3), Duration::from_secs(5)).await;
    match joined {
        Err(Error::Bootstrap(msg)) => {
            assert!(msg.contains("PE(s) 1, 2 did not join"), "{msg}");
            assert!(msg.contains(&address.to_string()), "{msg}");
        }
        other => panic!("expected a bootstrap failure, got {other:?}"),
    }
    assert!(matches!(root.await.unwrap(), Err(Error::Bootstrap(_))));
}

#[tokio::test]
async fn a_pe_of_another_job_size_is_refused() {
    let secret = b"s".to_vec();
    let (address, _root) = root(2, &secret, Duration::from_secs(5)).await;
    let mut a = connect(address, 0, None, Duration::from_secs(5))
        .await
        .unwrap();
    let joined = a.join(hello(&secret, 0, 3), Duration::from_secs(5)).await;
    assert!(
        matches!(joined, Err(Error::Bootstrap(ref m)) if m.contains("does not fit")),
        "{joined:?}"
    );
}

/// A PE that says goodbye is reported to the PEs still in the job as finished (not lost),
/// so that a wait for one of its signals can end; the job's report counts no loss.
#[tokio::test]
async fn a_goodbye_reaches_the_others_as_finished() {
    let secret = b"s".to_vec();
    let (address, root) = root(2, &secret, Duration::from_secs(5)).await;
    let (mut a, b) = two_joined(address, &secret).await;
    b.to_root.send(FromPe::Goodbye).unwrap();
    let told = tokio::time::timeout(Duration::from_secs(5), a.from_root.recv())
        .await
        .unwrap();
    assert!(matches!(told, Some(ToPe::Finished { pe: 1 })), "{told:?}");
    a.to_root.send(FromPe::Goodbye).unwrap();
    let report = root.await.unwrap().unwrap();
    assert!(report.lost.is_empty(), "{:?}", report.lost);
}

/// Under `mpirun` the root runs in PE 0's process, which may exit as soon as it has its own
/// answer: PE 0 hears an allgather's answer only once PE 1's, too large for PE 1's socket to
/// take at once, has been written. (The root's socket buffer is autotuned: on Linux it starts
/// at a few MiB and cannot grow while PE 1's 16 KiB window holds the sender back, far below
/// the 16 MiB answer.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pe_hosting_the_root_hears_its_answer_only_once_the_others_answer_is_written() {
    let secret = b"s".to_vec();
    let server = RootServer::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
        .hosted_by(0);
    let address = server.address();
    let _root = server.spawn(2, 42, secret.clone(), Duration::from_secs(10));
    let mut host = connect(address, 0, Some(0), Duration::from_secs(5))
        .await
        .unwrap();
    let slow = std::net::TcpStream::connect(address).unwrap();
    rustix::net::sockopt::set_socket_recv_buffer_size(&slow, 16 << 10).unwrap();
    slow.set_nonblocking(true).unwrap();
    let mut slow = TcpStream::from_std(slow).unwrap();
    write_frame(&mut slow, &FromPe::Hello(hello(&secret, 1, 2)).encode())
        .await
        .unwrap();
    host.join(hello(&secret, 0, 2), Duration::from_secs(5))
        .await
        .unwrap();
    let welcome = read_frame(&mut slow, MAX_FRAME).await.unwrap().unwrap();
    assert!(matches!(ToPe::decode(&welcome), Ok(ToPe::Welcome(_))));

    let contribution = |index| Contribution {
        group: 0,
        seq: 1,
        index,
        size: 2,
        payload: vec![index as u8; 8 << 20],
    };
    host.to_root
        .send(FromPe::Contribute(contribution(0)))
        .unwrap();
    write_frame(&mut slow, &FromPe::Contribute(contribution(1)).encode())
        .await
        .unwrap();
    // The hub tells PE 1, then PE 0, in one step: once PE 1's answer begins to arrive, PE 0's
    // has been sent or held.
    let mut header = [0u8; 4];
    while slow.peek(&mut header).await.unwrap() < header.len() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let early = tokio::time::timeout(Duration::from_millis(500), host.from_root.recv()).await;
    assert!(
        early.is_err(),
        "PE 0 heard a message ({}) while PE 1's answer still waited",
        if matches!(early, Ok(Some(ToPe::Gathered { .. }))) {
            "its answer"
        } else {
            "another"
        }
    );
    let answer = read_frame(&mut slow, MAX_FRAME).await.unwrap().unwrap();
    assert!(matches!(ToPe::decode(&answer), Ok(ToPe::Gathered { .. })));
    let told = tokio::time::timeout(Duration::from_secs(10), host.from_root.recv())
        .await
        .unwrap();
    assert!(matches!(told, Some(ToPe::Gathered { .. })), "{told:?}");
}
