//! `DataPlane::get_mapped` and `DataPlane::put_mapped`, the C ABI's fast paths of `get` and
//! `put`: they move what `get` and `put` move on a mapped route, and decline (moving and
//! counting nothing) whatever those would refuse or send elsewhere, so that their caller
//! falls back to `get` or `put` for the error.

mod common;

use std::time::Duration;

use common::runtime;
use ferroshmem::{run_local, Error};

#[test]
fn reads_a_mapped_peer_and_declines_what_get_would_refuse() {
    let job = run_local(2, |pe| async move {
        let buf = pe.malloc::<u64>(4).await?;
        let me = pe.my_pe() as u64;
        pe.put(&buf, &[10 + me, 20 + me, 30 + me, 40 + me], pe.my_pe())
            .await?;
        pe.barrier_all().await?;
        let dp = pe.data_plane();
        let peer = 1 - pe.my_pe();
        let mut got = [0u64; 4];
        assert!(dp.get_mapped(&mut got, &buf, peer));
        let p = peer as u64;
        assert_eq!(got, [10 + p, 20 + p, 30 + p, 40 + p]);
        let mut part = [0u64; 2];
        assert!(dp.get_mapped(&mut part, buf.slice(2..), peer));
        assert_eq!(part, [30 + p, 40 + p]);
        // More than the view holds, a PE out of range: declined, nothing read.
        let mut long = [7u64; 5];
        assert!(!dp.get_mapped(&mut long, &buf, peer));
        assert_eq!(long, [7; 5]);
        assert!(!dp.get_mapped(&mut got[..1], &buf, 2));
        assert!(matches!(
            pe.get(&mut long, &buf, peer).await,
            Err(Error::OutOfBounds { .. })
        ));
        pe.barrier_all().await?;
        pe.free(buf).await?;
        Ok::<_, Error>(())
    });
    finish(job);
}

#[test]
fn writes_a_mapped_peer_and_declines_what_put_would_refuse() {
    let job = run_local(2, |pe| async move {
        let buf = pe.malloc::<u64>(4).await?;
        pe.barrier_all().await?;
        let dp = pe.data_plane();
        let (me, peer) = (pe.my_pe() as u64, 1 - pe.my_pe());
        let v = 100 + 10 * me;
        assert!(dp.put_mapped(&buf, &[v, v + 1, v + 2, v + 3], peer));
        assert!(dp.put_mapped(buf.slice(3..), &[v + 9], peer));
        // More than the view holds, a PE out of range: declined, nothing written.
        assert!(!dp.put_mapped(&buf, &[7u64; 5], peer));
        assert!(!dp.put_mapped(buf.slice(1..), &[7u64; 4], peer));
        assert!(!dp.put_mapped(&buf, &[7u64], 2));
        assert!(matches!(
            pe.put(buf.slice(1..), &[7u64; 4], peer).await,
            Err(Error::OutOfBounds { .. })
        ));
        pe.barrier_all().await?;
        let mut got = [0u64; 4];
        pe.get(&mut got, &buf, pe.my_pe()).await?;
        let p = 100 + 10 * peer as u64;
        assert_eq!(
            got,
            [p, p + 1, p + 2, p + 9],
            "the peer's puts, and nothing else"
        );
        pe.barrier_all().await?;
        pe.free(buf).await?;
        Ok::<_, Error>(())
    });
    finish(job);
}

/// Waits for a two-PE job (20 s at most) and fails on any PE's error.
fn finish<F: std::future::Future<Output = ferroshmem::Result<Vec<ferroshmem::Result<()>>>>>(
    job: F,
) {
    let outcomes = runtime()
        .block_on(async { tokio::time::timeout(Duration::from_secs(20), job).await })
        .expect("the job ended in time")
        .expect("job");
    for (pe, outcome) in outcomes.into_iter().enumerate() {
        outcome.unwrap_or_else(|e| panic!("PE {pe}: {e}"));
    }
}
