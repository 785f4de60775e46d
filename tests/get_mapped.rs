//! `DataPlane::get_mapped`, the C ABI's fast path of `get`: it reads what `get` reads on a
//! mapped route, and declines (reading and counting nothing) whatever `get` would refuse or
//! send elsewhere, so that its caller falls back to `get` for the error.

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
    let outcomes = runtime()
        .block_on(async { tokio::time::timeout(Duration::from_secs(20), job).await })
        .expect("the job ended in time")
        .expect("job");
    for (pe, outcome) in outcomes.into_iter().enumerate() {
        outcome.unwrap_or_else(|e| panic!("PE {pe}: {e}"));
    }
}
