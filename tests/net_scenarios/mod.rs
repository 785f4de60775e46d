//! Scenarios of GPU jobs across nodes (the network path): host-initiated operations on
//! remote GPU PEs, one device function per kernel, thousands of threads on one send queue,
//! and a put-with-signal ping-pong between running kernels; `faults` has refused writes and
//! a killed peer. Each runs on every PE of a job and returns a typed error naming the PE and
//! what differed.

// Kernel launches take raw arguments, which only the caller can vouch for.
#![allow(unsafe_code)]

use crate::gpu_scenarios::Scenario;

mod faults;

/// Every scenario of this module, by name.
pub fn all() -> Vec<Scenario> {
    vec![
        ("host_ops", |p, g| Box::pin(host_ops(p, g))),
        ("network_steps", |p, g| Box::pin(network_steps(p, g))),
        ("network_errors", |p, g| {
            Box::pin(faults::network_errors(p, g))
        }),
        ("network_bad_key", |p, g| {
            Box::pin(faults::network_bad_key(p, g))
        }),
        ("network_failed_free", |p, g| {
            Box::pin(faults::network_failed_free(p, g))
        }),
        ("network_crowd", |p, g| Box::pin(network_crowd(p, g))),
        ("network_pingpong", |p, g| Box::pin(network_pingpong(p, g))),
        ("network_peer_killed", |p, g| {
            Box::pin(faults::network_peer_killed(p, g))
        }),
        ("networkless_module_refused", |p, g| {
            Box::pin(faults::networkless_module_refused(p, g))
        }),
    ]
}

/// Host-initiated `put`, `p`, `get` and `g` on the next PE, whatever its route.
async fn host_ops(pe: ferroshmem::Pe, g: ferroshmem::gpu::GpuPe) -> ferroshmem::Result<()> {
    use ferroshmem::gpu::HostBuffer;
    let (me, n) = (g.my_pe(), g.n_pes());
    let next = (me + 1) % n;
    let buf = g.calloc::<u64>(64).await?;
    let data: Vec<u64> = (0..32).map(|i| (me * 1000 + i) as u64).collect();
    g.put(
        buf.slice(0..32),
        &HostBuffer::from_slice(g.context(), &data)?,
        next,
    )
    .await?;
    g.p(buf.at(40), me as u64 + 7, next).await?;
    let mut back = HostBuffer::<u64>::new(g.context(), 32)?;
    g.get(&mut back, buf.slice(0..32), next).await?;
    let single = g.g(buf.at(40), next).await?;
    let fine = back.as_slice() == data.as_slice() && single == me as u64 + 7;
    // The `_nbi` forms: this PE's 16 words to the next PE's [16..32), then read back from
    // there into this PE's [0..16) (zeroed first), each completed by quiet.
    let nbi = g.calloc::<u64>(32).await?;
    let mine: Vec<u64> = (0..16).map(|i| (me * 100 + i) as u64).collect();
    g.put(
        nbi.slice(0..16),
        &HostBuffer::from_slice(g.context(), &mine)?,
        me,
    )
    .await?;
    g.put_nbi(nbi.slice(16..32), nbi.slice(0..16), next)?;
    g.quiet().await?;
    g.put(
        nbi.slice(0..16),
        &HostBuffer::from_slice(g.context(), &[0u64; 16])?,
        me,
    )
    .await?;
    g.get_nbi(nbi.slice(0..16), nbi.slice(16..32), next)?;
    g.quiet().await?;
    pe.barrier_all().await?;
    let mut landed = HostBuffer::<u64>::new(g.context(), 32)?;
    g.get(&mut landed, &nbi, me).await?;
    let prev = (me + n - 1) % n;
    let from_prev: Vec<u64> = (0..16).map(|i| (prev * 100 + i) as u64).collect();
    let nbi_fine = landed.as_slice()[..16] == mine[..] && landed.as_slice()[16..] == from_prev[..];
    pe.barrier_all().await?;
    g.free(nbi).await.map_err(|(e, _)| e)?;
    g.free(buf).await.map_err(|(e, _)| e)?;
    if !nbi_fine {
        return Err(ferroshmem::Error::Config(format!(
            "PE {me}: put_nbi/get_nbi left {:?}",
            landed.as_slice()
        )));
    }
    match fine {
        true => Ok(()),
        false => Err(ferroshmem::Error::Config(format!(
            "PE {me}: read back {:?} and {single} from PE {next}",
            &back.as_slice()[..4]
        ))),
    }
}

/// One device function per kernel on the next PE, each kernel given 20 s: a p, a g, a
/// gathered put, a fetch-add, a barrier, each checked, so that a failure names its step.
async fn network_steps(pe: ferroshmem::Pe, g: ferroshmem::gpu::GpuPe) -> ferroshmem::Result<()> {
    use ferroshmem::gpu::{CompileOptions, LaunchDims};
    const STEPS: &str = r#"
extern "C" __global__ void step_p(int* dst, int v, int pe) { fsh_p(dst, v, pe); fsh_quiet(); }
extern "C" __global__ void step_g(const int* src, int pe, long long* out) { *out = fsh_g(src, pe); }
extern "C" __global__ void step_put(int* dst, const int* src, int n, int pe) { fsh_put(dst, src, n, pe); fsh_quiet(); }
extern "C" __global__ void step_amo(unsigned long long* w, int pe, long long* out) { *out = (long long)fsh_atomic_fetch_add(w, 5ull, pe); }
extern "C" __global__ void step_barrier() { fsh_barrier_all(); }
"#;
    let (me, n) = (g.my_pe(), g.n_pes());
    let next = (me + 1) % n;
    let fail = |what: String| ferroshmem::Error::Config(format!("PE {me}: {what}"));
    let module = g.compile(STEPS, &CompileOptions::default())?;
    let ints = g.calloc::<i32>(8192).await?;
    let words = g.calloc::<u64>(8).await?;
    let out = g.calloc::<i64>(8).await?;
    let src: Vec<i32> = (0..4096).map(|i| me as i32 * 10_000 + i).collect();
    let staged = ferroshmem::gpu::HostBuffer::from_slice(g.context(), &src)?;
    g.put(ints.slice(4096..8192), &staged, me).await?;
    pe.barrier_all().await?;
    let stream = g.new_stream()?;
    let (i0, i4096) = (
        g.local_ptr(ints.at(0))?,
        g.local_ptr(ints.slice(4096..8192))?,
    );
    let (w, o) = (g.local_ptr(&words)?, g.local_ptr(&out)?);
    let steps: [(&str, Vec<ferroshmem::gpu::KernelArg>); 5] = [
        (
            "step_p",
            vec![i0.into(), (me as i32 + 100).into(), (next as i32).into()],
        ),
        ("step_g", vec![i4096.into(), (next as i32).into(), o.into()]),
        (
            "step_put",
            vec![
                (i0 + 4).into(),
                i4096.into(),
                1024i32.into(),
                (next as i32).into(),
            ],
        ),
        (
            "step_amo",
            vec![w.into(), (next as i32).into(), (o + 8).into()],
        ),
        ("step_barrier", vec![]),
    ];
    for (name, args) in steps {
        // SAFETY: each step kernel takes exactly these arguments (STEPS above), symmetric
        // pointers alive until the frees below.
        unsafe { module.launch(name, LaunchDims::linear(1, 1), &stream, &args)? };
        match tokio::time::timeout(std::time::Duration::from_secs(20), g.wait_stream(&stream)).await
        {
            Ok(done) => done?,
            Err(_) => return Err(fail(format!("{name} to PE {next} did not finish in 20 s"))),
        }
        module.check()?;
        eprintln!("PE {me}: {name} done");
    }
    pe.barrier_all().await?;
    check_steps(&g, &ints, &out).await?;
    g.free(ints).await.map_err(|(e, _)| e)?;
    g.free(words).await.map_err(|(e, _)| e)?;
    g.free(out).await.map_err(|(e, _)| e)?;
    Ok(())
}

/// Threads of a kernel at once on the send queue to the next PE, twice its depth of them:
/// each `fsh_p`s its own slot and fetch-adds one shared counter. Nothing may be lost (every
/// slot written, the counter at the thread count) and each thread must get back its own
/// fetch (the old values are a permutation).
async fn network_crowd(pe: ferroshmem::Pe, g: ferroshmem::gpu::GpuPe) -> ferroshmem::Result<()> {
    use ferroshmem::gpu::{CompileOptions, HostBuffer, LaunchDims};
    const CROWD: &str = r#"
extern "C" __global__ void crowd(int* slots, unsigned long long* counter, unsigned long long* olds, int tag, int pe) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    fsh_p(slots + t, tag + t, pe);
    olds[t] = fsh_atomic_fetch_add(counter, 1ull, pe);
    fsh_quiet();
}
"#;
    const BLOCKS: u32 = 8;
    const THREADS: u32 = 256;
    let total = (BLOCKS * THREADS) as usize;
    let (me, n) = (g.my_pe(), g.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let fail = |what: String| ferroshmem::Error::Config(format!("PE {me}: {what}"));
    let module = g.compile(CROWD, &CompileOptions::default())?;
    let slots = g.calloc::<i32>(total).await?;
    let counter = g.calloc::<u64>(1).await?;
    let olds = g.calloc::<u64>(total).await?;
    pe.barrier_all().await?;
    let stream = g.new_stream()?;
    let tag = |pe: usize| (pe as i32 + 1) * 1_000_000;
    let args = [
        g.local_ptr(&slots)?.into(),
        g.local_ptr(&counter)?.into(),
        g.local_ptr(&olds)?.into(),
        tag(me).into(),
        (next as i32).into(),
    ];
    // SAFETY: crowd takes (int*, u64*, u64*, int, int): symmetric buffers of `total`, 1 and
    // `total` elements, alive until the frees below.
    unsafe { module.launch("crowd", LaunchDims::linear(BLOCKS, THREADS), &stream, &args)? };
    match tokio::time::timeout(std::time::Duration::from_secs(60), g.wait_stream(&stream)).await {
        Ok(done) => done?,
        Err(_) => {
            return Err(fail(format!(
                "{total} threads to PE {next} did not finish in 60 s"
            )))
        }
    }
    module.check()?;
    pe.barrier_all().await?;
    let mut got = HostBuffer::<i32>::new(g.context(), total)?;
    g.get(&mut got, &slots, me).await?;
    let mut count = HostBuffer::<u64>::new(g.context(), 1)?;
    g.get(&mut count, &counter, me).await?;
    let mut fetched = HostBuffer::<u64>::new(g.context(), total)?;
    g.get(&mut fetched, &olds, me).await?;
    let want: Vec<i32> = (0..total as i32).map(|t| tag(prev) + t).collect();
    if got.as_slice() != want.as_slice() {
        let wrong = (0..total)
            .filter(|t| got.as_slice()[*t] != want[*t])
            .count();
        return Err(fail(format!(
            "{wrong} of {total} slots from PE {prev} are wrong"
        )));
    }
    if count.as_slice()[0] != total as u64 {
        return Err(fail(format!(
            "the counter is {}, not {total}",
            count.as_slice()[0]
        )));
    }
    let mut olds_seen = fetched.as_slice().to_vec();
    olds_seen.sort_unstable();
    if olds_seen != (0..total as u64).collect::<Vec<_>>() {
        return Err(fail(
            "the fetched old values are not a permutation of the adds".into(),
        ));
    }
    g.free(slots).await.map_err(|(e, _)| e)?;
    g.free(counter).await.map_err(|(e, _)| e)?;
    g.free(olds).await.map_err(|(e, _)| e)?;
    Ok(())
}

/// Put-with-signal ping-pong between PEs on different nodes (PE i and PE i + n/2), both
/// kernels running at once: each waits on its own signal word while the other's writes
/// reach it through the NIC handler, with an event recorded behind each kernel on its
/// stream, as a program timing its kernels does. The kernels leave the last round they
/// reached, named in the error if they do not finish.
async fn network_pingpong(pe: ferroshmem::Pe, g: ferroshmem::gpu::GpuPe) -> ferroshmem::Result<()> {
    use ferroshmem::gpu::{CompileOptions, HostBuffer, LaunchDims};
    const PINGPONG: &str = r#"
extern "C" __global__ void pingpong(unsigned long long* data, unsigned long long* sig, int rounds, int peer, int first, volatile unsigned long long* reached) {
    for (unsigned long long i = 1; i <= (unsigned long long)rounds; ++i) {
        if (!first) fsh_signal_wait_until(sig, FSH_CMP_GE, i);
        data[1] = i;
        fsh_putmem_signal_nbi(data, data + 1, 8, sig, i, FSH_SIGNAL_SET, peer);
        if (first) fsh_signal_wait_until(sig, FSH_CMP_GE, i);
        *reached = i;
    }
    fsh_quiet();
}
"#;
    // Over a thousand rounds of three WQEBBs each (an inline write, a two-WQEBB masked
    // atomic): some signal WQE straddles the send queue's end whatever the queue held.
    const ROUNDS: i32 = 1100;
    let (me, n) = (g.my_pe(), g.n_pes());
    let peer = (me + n / 2) % n;
    let fail = |what: String| ferroshmem::Error::Config(format!("PE {me}: {what}"));
    if !g.is_remote(peer) {
        return Err(fail(format!("PE {peer} is not on another node")));
    }
    let module = g.compile(PINGPONG, &CompileOptions::default())?;
    let data = g.calloc::<u64>(2).await?;
    let sig = g.calloc::<u64>(1).await?;
    let reached = g.calloc::<u64>(1).await?;
    pe.barrier_all().await?;
    let stream = g.new_stream()?;
    let args = [
        g.local_ptr(&data)?.into(),
        g.local_ptr(&sig)?.into(),
        ROUNDS.into(),
        (peer as i32).into(),
        i32::from(me < n / 2).into(),
        g.local_ptr(&reached)?.into(),
    ];
    // SAFETY: pingpong takes (u64*, u64*, int, int, int, u64*): symmetric buffers of 2, 1
    // and 1 words, alive until the frees below.
    unsafe { module.launch("pingpong", LaunchDims::linear(1, 1), &stream, &args)? };
    let behind = g
        .context()
        .new_event(None)
        .map_err(|e| fail(format!("an event: {e}")))?;
    behind
        .record(&stream)
        .map_err(|e| fail(format!("recording an event behind the kernel: {e}")))?;
    let waited = tokio::time::timeout(std::time::Duration::from_secs(60), g.wait_stream(&stream));
    if waited.await.is_err() {
        let mut round = HostBuffer::<u64>::new(g.context(), 1)?;
        let mut signal = HostBuffer::<u64>::new(g.context(), 1)?;
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            g.get(&mut round, &reached, me).await?;
            g.get(&mut signal, &sig, me).await
        });
        let seen = match read.await {
            Ok(Ok(())) => format!(
                "round {} reached, signal {}",
                round.as_slice()[0],
                signal.as_slice()[0]
            ),
            other => format!("its progress unreadable ({other:?})"),
        };
        return Err(fail(format!(
            "the ping-pong with PE {peer} did not finish in 60 s: {seen}"
        )));
    }
    module.check()?;
    let mut got = HostBuffer::<u64>::new(g.context(), 2)?;
    g.get(&mut got, &data, me).await?;
    if got.as_slice()[0] != ROUNDS as u64 {
        return Err(fail(format!(
            "the last round's data is {}, not {ROUNDS}",
            got.as_slice()[0]
        )));
    }
    pe.barrier_all().await?;
    for b in [data, sig, reached] {
        g.free(b).await.map_err(|(e, _)| e)?;
    }
    Ok(())
}

/// What [`network_steps`] must have left in this PE's heap: the previous PE's `fsh_p` and
/// `fsh_put`, and the next PE's values that `fsh_g` and the fetch-add brought back.
async fn check_steps(
    g: &ferroshmem::gpu::GpuPe,
    ints: &ferroshmem::gpu::GpuBuffer<i32>,
    out: &ferroshmem::gpu::GpuBuffer<i64>,
) -> ferroshmem::Result<()> {
    let (me, n) = (g.my_pe(), g.n_pes());
    let next = (me + 1) % n;
    let fail = |what: String| ferroshmem::Error::Config(format!("PE {me}: {what}"));
    let prev = (me + n - 1) % n;
    let mut got = ferroshmem::gpu::HostBuffer::<i32>::new(g.context(), 1025)?;
    g.get(&mut got, ints.slice(0..1025), me).await?;
    let mut res = ferroshmem::gpu::HostBuffer::<i64>::new(g.context(), 2)?;
    g.get(&mut res, out.slice(0..2), me).await?;
    let want_put: Vec<i32> = (0..1024).map(|i| prev as i32 * 10_000 + i).collect();
    let checks = [
        (
            got.as_slice()[0] == prev as i32 + 100,
            "fsh_p from the previous PE",
        ),
        (
            res.as_slice()[0] == next as i64 * 10_000,
            "fsh_g from the next PE",
        ),
        (
            got.as_slice()[1..] == want_put[..],
            "fsh_put from the previous PE",
        ),
        (res.as_slice()[1] == 0, "fsh_atomic_fetch_add's old value"),
    ];
    for (ok, what) in checks {
        if !ok {
            return Err(fail(format!(
                "{what} is wrong: {:?} {:?}",
                &got.as_slice()[..3],
                res.as_slice()
            )));
        }
    }
    Ok(())
}
