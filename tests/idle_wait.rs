//! An idle waiter sleeps instead of spinning. Its own test binary, so that the process's CPU
//! time is this test's alone.

use std::time::Duration;

use ferroshmem::{run_local, Cmp, Error};

#[test]
fn an_idle_waiter_sleeps_instead_of_spinning() {
    // A wait far longer than the spin time must not burn a core: measure this process's
    // CPU time while one PE waits 300 ms for another.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cpu = |_: ()| {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    };
    let r = rt.block_on(run_local(2, move |pe| async move {
        let flag = pe.calloc::<u64>(1).await?;
        pe.barrier_all().await?;
        let mut used = Duration::ZERO;
        if pe.my_pe() == 0 {
            let before = cpu(());
            pe.wait_until(&flag, Cmp::Eq, 1).await?;
            used = cpu(()) - before;
        } else {
            tokio::time::sleep(Duration::from_millis(300)).await;
            pe.p(&flag, 1, 0).await?;
        }
        pe.barrier_all().await?;
        pe.free(flag).await?;
        Ok::<_, Error>(used)
    }));
    let used = r.expect("job")[0].clone().expect("PE 0");
    assert!(
        used < Duration::from_millis(150),
        "waiting 300 ms used {used:?} of CPU"
    );
}
