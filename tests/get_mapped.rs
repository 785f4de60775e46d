//! `DataPlane::get_mapped_at` and `DataPlane::put_mapped`, the C ABI's fast paths of `get` and
//! `put`: they move what `get` and `put` move on a mapped route, and decline (moving and
//! counting nothing) what would go elsewhere or that `put` would refuse (`get_mapped_at`,
//! which takes a heap offset rather than a view, checks the user heap's bounds, not an
//! allocation's), so that their caller falls back to `get` or `put` for the error.

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
        let at = buf.offset();
        let mut got = [0u64; 4];
        assert!(dp.get_mapped_at(bytemuck::cast_slice_mut(&mut got), at, peer));
        let p = peer as u64;
        assert_eq!(got, [10 + p, 20 + p, 30 + p, 40 + p]);
        let mut part = [0u64; 2];
        assert!(dp.get_mapped_at(bytemuck::cast_slice_mut(&mut part), at + 16, peer));
        assert_eq!(part, [30 + p, 40 + p]);
        // Past the user heap's end (into the team pool), at an offset that wraps, from a
        // PE out of range: declined, nothing read.
        let end = dp.user_heap_bytes();
        let mut untouched = [7u8; 16];
        assert!(!dp.get_mapped_at(&mut untouched, end - 8, peer));
        assert!(!dp.get_mapped_at(&mut untouched, usize::MAX - 3, peer));
        assert!(!dp.get_mapped_at(&mut untouched, at, 2));
        assert_eq!(untouched, [7; 16]);
        assert!(dp.get_mapped_at(&mut untouched[..8], end - 8, peer));
        // What was declined, `get` refuses and says why: a PE out of range.
        let mut long = [7u64; 5];
        assert!(!dp.get_mapped_at(bytemuck::cast_slice_mut(&mut long), at, 3));
        assert!(matches!(
            pe.get(&mut long[..4], &buf, 3).await,
            Err(Error::PeOutOfRange { .. })
        ));
        // The offset form checks the user heap only, not the allocation: more than `buf`
        // holds is read where the heap goes on, and `get` from the view refuses it.
        assert!(dp.get_mapped_at(bytemuck::cast_slice_mut(&mut long), at, peer));
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
