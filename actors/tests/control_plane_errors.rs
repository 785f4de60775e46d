//! Misuse of the control plane fails fast with a typed error and changes nothing: a `free` of
//! another job's buffer, collective exchanges whose members disagree or name an impossible
//! group, and connections that claim the rank of a PE that already joined. Every test is
//! bounded by [`LIMIT`], so a regression shows as a failure, not a hang.

mod common;

use common::hello;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferroshmem_actors::control::wire::{
    read_frame, write_frame, Contribution, FromPe, ToPe, MAX_FRAME,
};
use ferroshmem_actors::control::{connect, HubReport, Link, RootServer};
use ferroshmem_actors::{run_local, FreeError};
use ferroshmem_runtime::{Error, Result, SymBuffer};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Longest any test here may take.
const LIMIT: Duration = Duration::from_secs(20);

/// Runs `f`, failing the test if it does not finish within [`LIMIT`].
async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what} still running after {LIMIT:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freeing_a_buffer_of_another_job_is_refused_and_frees_nothing() {
    // Job A's buffers (one per PE, at the same offset), kept past the job's end.
    let foreign = bounded(
        "job A",
        run_local(2, |pe| async move { pe.malloc::<u64>(4).await.map(Some) }),
    )
    .await
    .unwrap()
    .into_iter()
    .collect::<Result<Vec<Option<SymBuffer<u64>>>>>()
    .unwrap();
    let foreign = Arc::new(Mutex::new(foreign));
    let outcomes = bounded(
        "job B",
        run_local(2, move |pe| {
            let foreign = foreign.clone();
            async move {
                let me = pe.my_pe();
                let theirs = foreign.lock().unwrap()[me]
                    .take()
                    .expect("a foreign buffer");
                let own = pe.malloc::<u64>(4).await?;
                assert_eq!(
                    own.offset(),
                    theirs.offset(),
                    "the same offset in both jobs"
                );
                pe.p(&own, 7, me).await?;
                let usage = pe.heap_usage().await?;

                // Every PE frees a buffer of job A: refused everywhere, handed back.
                let FreeError { error, buffer } = pe.free(theirs).await.unwrap_err();
                assert_eq!(error, Error::NotSymmetric, "PE {me}");
                let theirs = buffer.expect("the foreign buffer comes back");
                assert_eq!(pe.heap_usage().await?, usage, "PE {me}: nothing freed");
                assert_eq!(
                    pe.g(&own, me).await?,
                    7,
                    "PE {me}: its own buffer is intact"
                );

                // Only PE 0 frees a foreign buffer, PE 1 its own: both are refused, nothing
                // is freed, and the PEs stay in step for the next collective call.
                let own = if me == 0 {
                    let FreeError { error, buffer } = pe.free(theirs).await.unwrap_err();
                    assert_eq!(error, Error::NotSymmetric);
                    std::mem::forget(buffer.expect("the foreign buffer comes back"));
                    own
                } else {
                    std::mem::forget(theirs);
                    let FreeError { error, buffer } = pe.free(own).await.unwrap_err();
                    assert!(
                        matches!(
                            error,
                            Error::CollectiveMismatch {
                                operation: "free",
                                ..
                            }
                        ),
                        "PE {me}: {error:?}"
                    );
                    buffer.expect("its own buffer comes back")
                };
                assert_eq!(pe.heap_usage().await?, usage, "PE {me}: nothing freed");
                assert_eq!(
                    pe.g(&own, me).await?,
                    7,
                    "PE {me}: its own buffer is intact"
                );
                pe.free(own).await?;
                assert_eq!(pe.heap_usage().await?.0, 0, "PE {me}");
                Ok::<_, Error>(())
            }
        }),
    )
    .await
    .unwrap();
    for outcome in outcomes {
        outcome.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exchange_with_a_duplicate_index_fails_on_every_pe() {
    let outcomes = bounded(
        "the job",
        run_local(2, |pe| async move {
            let me = pe.my_pe();
            // Both PEs claim index 0 of group 7.
            let clash = pe.exchange(7, 0, 2, vec![me as u8]).await;
            // The group is still usable, and its members still in step.
            let next = pe.exchange(7, me, 2, vec![me as u8]).await;
            (clash, next)
        }),
    )
    .await
    .unwrap();
    for (pe, (clash, next)) in outcomes.into_iter().enumerate() {
        match clash {
            Err(Error::CollectiveMismatch {
                operation: "exchange",
                detail,
            }) => assert!(detail.contains("index 0"), "PE {pe}: {detail}"),
            other => panic!("PE {pe}: expected a collective mismatch, got {other:?}"),
        }
        assert_eq!(next.unwrap(), vec![vec![0], vec![1]], "PE {pe}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exchange_beyond_the_job_is_refused_and_its_group_told() {
    let outcomes = bounded(
        "the job",
        run_local(2, |pe| async move {
            let me = pe.my_pe();
            // PE 0 names a group of 3 PEs in a job of 2; PE 1 calls correctly.
            let size = if me == 0 { 3 } else { 2 };
            let first = pe.exchange(9, me, size, vec![1]).await;
            // Sizes and indexes past u32 are refused before anything is sent.
            let huge = pe.exchange(9, 1 << 32, (1 << 32) + 1, vec![]).await;
            let next = pe.exchange(9, me, 2, vec![me as u8]).await;
            (first, huge, next)
        }),
    )
    .await
    .unwrap();
    for (pe, (first, huge, next)) in outcomes.into_iter().enumerate() {
        match (pe, first) {
            (0, Err(Error::InvalidArgument(m))) => assert!(m.contains("2 PEs"), "{m}"),
            (1, Err(Error::CollectiveMismatch { detail, .. })) => {
                assert!(detail.contains("PE 0"), "{detail}")
            }
            (pe, other) => panic!("PE {pe}: {other:?}"),
        }
        assert!(
            matches!(huge, Err(Error::InvalidArgument(_))),
            "PE {pe}: {huge:?}"
        );
        assert_eq!(next.unwrap(), vec![vec![0], vec![1]], "PE {pe}");
    }
}

type RootTask = JoinHandle<Result<HubReport>>;

async fn root(n: usize, secret: &[u8]) -> (SocketAddr, RootTask) {
    let server = RootServer::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let address = server.address();
    let task = server.spawn(n, 42, secret.to_vec(), Duration::from_secs(10));
    (address, task)
}

async fn join(address: SocketAddr, secret: &[u8], rank: u32, size: u32) -> Link {
    let link = connect(address, rank as usize, None, Duration::from_secs(5))
        .await
        .unwrap();
    link.to_root
        .send(FromPe::Hello(hello(secret, rank, size)))
        .unwrap();
    link
}

/// Connects as PE `rank`, sends `frames`, and returns the root's first reply.
async fn impostor(address: SocketAddr, frames: &[FromPe]) -> ToPe {
    let mut stream = TcpStream::connect(address).await.unwrap();
    for f in frames {
        write_frame(&mut stream, &f.encode()).await.unwrap();
    }
    let frame = read_frame(&mut stream, MAX_FRAME)
        .await
        .unwrap()
        .expect("a reply");
    ToPe::decode(&frame).unwrap()
}

async fn next(link: &mut Link) -> Option<ToPe> {
    tokio::time::timeout(Duration::from_millis(500), link.from_root.recv())
        .await
        .ok()
        .flatten()
}

#[tokio::test]
async fn a_refused_duplicate_of_a_pe_cannot_speak_or_leave_for_it() {
    bounded("the job", async {
        let secret = b"s".to_vec();
        let (address, root) = root(2, &secret).await;
        let mut a = join(address, &secret, 0, 2).await;

        // While the job forms: a second PE 0 is refused, and its leaving is not PE 0's.
        let reply = impostor(address, &[FromPe::Hello(hello(&secret, 0, 2))]).await;
        assert!(
            matches!(&reply, ToPe::Refused { reason } if reason.contains("twice")),
            "{reply:?}"
        );
        let mut b = join(address, &secret, 1, 2).await;
        assert!(matches!(next(&mut a).await, Some(ToPe::Welcome(_))));
        assert!(matches!(next(&mut b).await, Some(ToPe::Welcome(_))));

        // Once formed: a second PE 1 (a restarted process) says it fails, then leaves.
        let fail = FromPe::Fail {
            reason: "impostor".into(),
        };
        let reply = impostor(address, &[FromPe::Hello(hello(&secret, 1, 2)), fail]).await;
        assert!(matches!(reply, ToPe::Refused { .. }), "{reply:?}");
        let heard = next(&mut a).await;
        assert!(heard.is_none(), "PE 0 heard {heard:?}");

        // The real PEs still run collectives and finish cleanly.
        for (rank, link) in [(0u32, &a), (1, &b)] {
            link.to_root
                .send(FromPe::Contribute(Contribution {
                    group: 0,
                    seq: 0,
                    index: rank,
                    size: 2,
                    payload: vec![rank as u8],
                }))
                .unwrap();
        }
        for link in [&mut a, &mut b] {
            let got = next(link).await;
            assert!(
                matches!(&got, Some(ToPe::Gathered { payloads, .. }) if *payloads == [vec![0], vec![1]]),
                "{got:?}"
            );
            link.to_root.send(FromPe::Goodbye).unwrap();
        }
        let report = root.await.unwrap().unwrap();
        assert_eq!(report.lost, vec![]);
    })
    .await;
}

#[tokio::test]
async fn a_contribution_of_an_impossible_size_is_refused_by_the_root() {
    bounded("the job", async {
        let secret = b"s".to_vec();
        let (address, root) = root(2, &secret).await;
        let mut a = join(address, &secret, 0, 2).await;
        let mut b = join(address, &secret, 1, 2).await;
        assert!(matches!(next(&mut a).await, Some(ToPe::Welcome(_))));
        assert!(matches!(next(&mut b).await, Some(ToPe::Welcome(_))));
        let contribute = |link: &Link, index, size| {
            let c = Contribution {
                group: 5,
                seq: 0,
                index,
                size,
                payload: vec![],
            };
            link.to_root.send(FromPe::Contribute(c)).unwrap();
        };
        // A PE of another version (or a bug) asks for a group of 2^32 - 1 PEs: the root
        // refuses without allocating for it, and the group's other member hears so too.
        contribute(&a, 0, u32::MAX);
        contribute(&b, 1, 2);
        for link in [&mut a, &mut b] {
            let got = next(link).await;
            let Some(ToPe::GatherFailed {
                group: 5, reason, ..
            }) = got
            else {
                panic!("expected the group's failure, got {got:?}")
            };
            assert!(reason.contains("PE 0"), "{reason}");
            link.to_root.send(FromPe::Goodbye).unwrap();
        }
        assert_eq!(root.await.unwrap().unwrap().lost, vec![]);
    })
    .await;
}

/// Whether the root closed `stream` (an end of stream or a reset) within `within`.
async fn closed_by_root(stream: &mut TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(within, stream.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test]
async fn a_connection_without_the_secret_cannot_make_the_root_read_a_large_frame() {
    let (address, _root) = root(2, b"s3cret").await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    use tokio::io::AsyncWriteExt;
    // A frame that claims 63 MiB: refused on its length, before its body is read.
    stream
        .write_all(&(63u32 << 20).to_le_bytes())
        .await
        .unwrap();
    let _ = stream.write_all(&vec![0u8; 1 << 20]).await;
    assert!(
        closed_by_root(&mut stream, Duration::from_secs(2)).await,
        "the root still reads a frame of 63 MiB from a stranger"
    );
}

#[tokio::test]
async fn connections_that_never_show_the_secret_are_capped() {
    use ferroshmem_actors::control::tcp::MAX_UNAUTHENTICATED;
    let (address, root_task) = root(1, b"s3cret").await;
    let tries = MAX_UNAUTHENTICATED + 40;
    let mut silent = Vec::with_capacity(tries);
    for _ in 0..tries {
        silent.push(TcpStream::connect(address).await.unwrap());
    }
    let mut closed = 0;
    for stream in &mut silent {
        closed += usize::from(closed_by_root(stream, Duration::from_millis(20)).await);
    }
    assert!(
        closed >= tries - MAX_UNAUTHENTICATED,
        "the root keeps {} silent connections open",
        tries - closed
    );
    // Once they are gone, a PE with the secret forms its job.
    drop(silent);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut link = join(address, b"s3cret", 0, 1).await;
    assert!(
        matches!(next(&mut link).await, Some(ToPe::Welcome(_))),
        "the job forms"
    );
    link.to_root.send(FromPe::Goodbye).unwrap();
    drop(link);
    assert!(bounded("root", root_task).await.is_ok());
}

#[tokio::test]
async fn a_pe_that_leaves_before_the_job_forms_fails_the_pes_still_to_come_at_once() {
    let (address, root_task) = root(3, b"s3cret").await;
    let mut first = join(address, b"s3cret", 0, 3).await;
    let leaver = join(address, b"s3cret", 2, 3).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(leaver);
    let refused = |msg: Option<ToPe>| match msg {
        Some(ToPe::Refused { reason }) => reason.contains("PE 2 left during bootstrap"),
        _ => false,
    };
    assert!(refused(next(&mut first).await), "PE 0 is told at once");
    // PE 1 comes late: the root is still there to tell it, not gone.
    let started = std::time::Instant::now();
    let mut late = join(address, b"s3cret", 1, 3).await;
    assert!(
        refused(next(&mut late).await),
        "the late PE is told at once"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // Every PE has heard of the failure: the root ends.
    assert!(bounded("root", root_task).await.unwrap().is_err());
}
