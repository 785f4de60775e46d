//! GPU scenarios shared by the one-process and the multi-process GPU tests: each runs on
//! every PE of a job and checks values, naming the PE and what differed.

// Kernel launches take raw arguments, which only the caller can vouch for.
#![allow(unsafe_code)]

use ferroshmem::gpu::{CompileOptions, DeviceBuffer, GpuPe, HostBuffer, LaunchDims, LocalMem};
use ferroshmem::{Cmp, Error, GpuError, Pe, Result, SignalOp};

mod dependent_launch;
mod groups;
mod local_memory;

/// A scenario's name and body.
pub type Scenario = (
    &'static str,
    fn(Pe, GpuPe) -> futures::future::BoxFuture<'static, Result<()>>,
);

/// A `get_nbi` whose buffer is freed before any quiet: the free completes it first, so
/// nothing of it lands in the allocation that takes the memory next (across nodes such a
/// get lands at its quiet).
async fn freed_get_nbi(_pe: Pe, g: GpuPe) -> Result<()> {
    let me = g.my_pe();
    let next = (me + 1) % g.n_pes();
    let source = g.malloc::<u64>(64).await?;
    let words = HostBuffer::from_slice(g.context(), &pattern(me + 1, 64))?;
    g.put(source.slice(..), &words, me).await?;
    g.barrier_all().await?;
    let landing = g.malloc::<u64>(64).await?;
    g.get_nbi(landing.slice(..), source.slice(..), next)?;
    g.free(landing).await.map_err(|(e, _)| e)?;
    let reused = g.calloc::<u64>(64).await?;
    g.quiet().await?;
    let untouched = read_own(&g, &reused).await?;
    expect_eq(
        me,
        "the allocation after a freed get_nbi",
        untouched,
        vec![0; 64],
    )?;
    g.free(reused).await.map_err(|(e, _)| e)?;
    g.free(source).await.map_err(|(e, _)| e)
}

/// Every scenario, in the order they run.
pub fn all() -> Vec<Scenario> {
    vec![
        ("device_functions", |p, g| Box::pin(device_functions(p, g))),
        ("host_futures", |p, g| Box::pin(host_futures(p, g))),
        ("freed_get_nbi", |p, g| Box::pin(freed_get_nbi(p, g))),
        ("on_stream", |p, g| Box::pin(on_stream(p, g))),
        ("graph_capture", |p, g| Box::pin(graph_capture(p, g))),
        ("debug_reports", |p, g| Box::pin(debug_reports(p, g))),
        ("dropped_futures", |p, g| Box::pin(dropped_futures(p, g))),
        ("group_calls", |p, g| Box::pin(groups::group_calls(p, g))),
        ("dependent_launch", |p, g| {
            Box::pin(dependent_launch::reads_after_the_kernel_ahead(p, g))
        }),
        ("local_memory", |p, g| {
            Box::pin(local_memory::launch_beside_a_waiting_kernel(p, g))
        }),
    ]
}

fn fail(pe: usize, what: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("PE {pe}: {what}"))
}

fn expect_eq<T: PartialEq + std::fmt::Debug>(pe: usize, what: &str, got: T, want: T) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(fail(pe, format!("{what}: got {got:?}, expected {want:?}")))
    }
}

/// PE `q`'s host pattern: element `i` is `q * 1_000_000 + i`.
fn pattern(q: usize, len: usize) -> Vec<u64> {
    (0..len as u64).map(|i| q as u64 * 1_000_000 + i).collect()
}

async fn read_own<T: bytemuck::Pod>(
    g: &GpuPe,
    buf: &ferroshmem::gpu::GpuBuffer<T>,
) -> Result<Vec<T>> {
    let mut h = HostBuffer::<T>::new(g.context(), buf.len())?;
    g.get(&mut h, buf, g.my_pe()).await?;
    Ok(h.as_slice().to_vec())
}

const SUITE: &str = include_str!("suite.cu");

/// Every device-library function, in one cooperative kernel per PE.
async fn device_functions(_pe: Pe, g: GpuPe) -> Result<()> {
    let (me, n) = (g.my_pe(), g.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let module = g.compile(SUITE, &CompileOptions::default())?;
    let ints = g.calloc::<i32>(1024).await?;
    let src = g.malloc::<i32>(1024).await?;
    let longs = g.calloc::<u64>(64).await?;
    let flt = g.calloc::<f32>(4).await?;
    let dbl = g.calloc::<f64>(4).await?;
    let sig = g.calloc::<u64>(16).await?;
    let res = g.calloc::<i64>(128).await?;
    let scratch = g.calloc::<i32>(1024).await?;
    let mine: Vec<i32> = (0..1024).map(|i| me as i32 * 1000 + i).collect();
    g.put(&src, &HostBuffer::from_slice(g.context(), &mine)?, me)
        .await?;
    g.barrier_all().await?;
    let stream = g.new_stream()?;
    let args = [
        g.local_ptr(&ints)?.into(),
        g.local_ptr(&src)?.into(),
        g.local_ptr(&longs)?.into(),
        g.local_ptr(&flt)?.into(),
        g.local_ptr(&dbl)?.into(),
        g.local_ptr(&sig)?.into(),
        g.local_ptr(&res)?.into(),
        g.local_ptr(&scratch)?.into(),
    ];
    // SAFETY: `suite` takes these eight symmetric pointers, all alive until freed below
    // (free waits for the GPU).
    unsafe { module.launch_cooperative("suite", LaunchDims::linear(2, 64), &stream, &args)? };
    g.wait_stream(&stream).await?;
    module.check()?;
    g.barrier_all().await?;

    let r = read_own(&g, &res).await?;
    let (me_i, n_i, next_i, prev_i) = (me as i64, n as i64, next as i64, prev as i64);
    let want: &[(usize, i64, &str)] = &[
        (0, me_i, "fsh_my_pe"),
        (1, n_i, "fsh_n_pes"),
        (
            2,
            i64::from(!g.is_remote(next)),
            "fsh_ptr non-null (null on another node)",
        ),
        (3, me_i, "fsh_team_my_pe(world)"),
        (4, n_i, "fsh_team_n_pes(world)"),
        (5, prev_i + 100, "fsh_p from the previous PE"),
        (6, me_i + 100, "fsh_g from the next PE"),
        (7, 8000 * next_i + 36, "fsh_get (sum)"),
        (10, 5, "fsh_atomic_set + fetch"),
        (11, 5, "fsh_atomic_fetch_add"),
        (12, 10, "fsh_atomic_fetch_inc"),
        (13, 0, "fsh_atomic_swap"),
        (14, 7, "fsh_atomic_compare_swap (hit)"),
        (15, 9, "fsh_atomic_compare_swap (miss)"),
        (16, 0xF0F0, "fsh_atomic_fetch_and"),
        (17, 0xF000, "fsh_atomic_fetch_or"),
        (18, 0xFF0F, "fsh_atomic_fetch_xor"),
        (19, 0, "fsh_atomic_fetch_add (i64)"),
        (20, 0, "fsh_atomic_fetch_add (i32)"),
        (21, 8, "fsh_atomic_compare_swap (i32)"),
        (22, 0, "fsh_atomic_swap (u32)"),
        (23, 0xABCD, "fsh_atomic_fetch_or (u32)"),
        (24, 5, "fsh_atomic_xor + fetch (i32)"),
        (25, 150, "fsh_atomic_fetch_add (f32) x100"),
        (26, 25, "fsh_atomic_fetch_add (f64) x100"),
        (27, 35, "fsh_atomic_set/fetch (f32) x10"),
        (28, 0, "fsh_atomic_swap (f64)"),
        (29, 0, "fsh_atomic_fetch_inc (i64)"),
        (30, 1, "fsh_signal_wait_until after fsh_put_signal"),
        (31, 2000 * prev_i + 1203, "fsh_put_signal data"),
        (32, 7, "fsh_put_signal_nbi + fsh_signal_op (add)"),
        (33, 1000 * prev_i + 611, "fsh_put_signal_nbi data"),
        (34, 42, "fsh_signal_op (set) + fsh_signal_fetch"),
        (35, 2, "warp + block put_signal (add)"),
        (36, 4000 * prev_i + 2622, "warp + block put_signal data"),
        (37, 2000 * prev_i + 1803, "fsh_fence ordering put before p"),
        (38, 1, "fsh_test (true)"),
        (39, 0, "fsh_test (false)"),
        (40, 3, "fsh_quiet + fsh_wait_until"),
        (41, 0, "fsh_wait_until_any"),
        (42, 1, "fsh_test_all"),
        (
            43,
            4000 * prev_i + 2770,
            "putmem_signal(_nbi), warp/block nbi put_signal data",
        ),
        (50, 1, "every barrier form completed"),
    ];
    for &(i, v, what) in want {
        expect_eq(me, what, r[i], v)?;
    }
    let got = read_own(&g, &ints).await?;
    let from = |q: usize, i: usize| q as i32 * 1000 + i as i32;
    for (range, what) in [
        (1..9, "fsh_put"),
        (16..24, "fsh_put_nbi"),
        (24..27, "fsh_putmem (12 bytes)"),
        (32..64, "fsh_put_warp"),
        (100..120, "fsh_put_nbi_warp"),
        (128..384, "fsh_put_block"),
        (384..512, "fsh_put_nbi_block"),
    ] {
        for i in range {
            expect_eq(me, what, got[i], from(prev, i))?;
        }
    }
    expect_eq(me, "i32 atomics result", got[800], -1)?;
    expect_eq(me, "u32 atomics result", got[801] as u32, 0x1ABCD)?;
    let s = read_own(&g, &scratch).await?;
    for (range, q, what) in [
        (8..12, prev, "fsh_get_nbi"),
        (12..14, prev, "fsh_getmem_nbi"),
        (64..96, next, "fsh_get_warp"),
        (96..128, next, "fsh_get_nbi_warp"),
        (128..384, next, "fsh_get_block"),
        (384..448, next, "fsh_get_nbi_block"),
    ] {
        for i in range {
            // The _nbi gets into scratch[8..14] read the source from element 500 on.
            let src_index = if i < 64 { i + 492 } else { i };
            expect_eq(me, what, s[i], from(q, src_index))?;
        }
    }
    let l = read_own(&g, &longs).await?;
    expect_eq(me, "u64 atomics final", (l[0], l[1], l[2]), (12, 9, 0xFFFF))?;
    expect_eq(me, "i64 atomics final", (l[3] as i64, l[4]), (-4, 1))?;
    expect_eq(
        me,
        "f32 atomics final",
        read_own(&g, &flt).await?[..2].to_vec(),
        vec![3.5, 3.5],
    )?;
    expect_eq(
        me,
        "f64 atomics final",
        read_own(&g, &dbl).await?[..2].to_vec(),
        vec![1.25, 2.0],
    )?;
    let sg = read_own(&g, &sig).await?;
    expect_eq(
        me,
        "signals final",
        sg[..8].to_vec(),
        vec![1, 7, 42, 2, 1, 1, 1, 1],
    )?;
    for b in [ints, src, scratch] {
        g.free(b).await.map_err(|(e, _)| e)?;
    }
    g.free(longs).await.map_err(|(e, _)| e)?;
    g.free(flt).await.map_err(|(e, _)| e)?;
    g.free(dbl).await.map_err(|(e, _)| e)?;
    g.free(sig).await.map_err(|(e, _)| e)?;
    g.free(res).await.map_err(|(e, _)| e)?;
    Ok(())
}

/// Host-initiated put/get/p/g, `_nbi` + quiet, device buffers, typed errors, collective checks.
async fn host_futures(pe: Pe, g: GpuPe) -> Result<()> {
    let (me, n) = (g.my_pe(), g.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let prev2 = (me + 2 * n - 2) % n;
    let used_before = g.heap_used().await;
    let a = g.calloc::<u64>(1024).await?;
    let b = g.malloc::<u64>(1024).await?;
    let mut h = HostBuffer::<u64>::new(g.context(), 1024)?;
    g.get(&mut h, &a, next).await?;
    expect_eq(
        me,
        "calloc zeroes",
        h.as_slice().iter().all(|&x| x == 0),
        true,
    )?;
    let src = HostBuffer::from_slice(g.context(), &pattern(me, 1024))?;
    g.put(&a, &src, next).await?;
    g.barrier_all().await?;
    expect_eq(
        me,
        "put from pinned host memory",
        read_own(&g, &a).await?,
        pattern(prev, 1024),
    )?;
    expect_eq(
        me,
        "g",
        g.g(a.at(6), next).await?,
        me as u64 * 1_000_000 + 6,
    )?;
    // Values wider than a word: 64 bytes (a staging slot) and 128 bytes (a pinned buffer of
    // its own).
    let wide = g
        .g(a.slice(8..16).as_bytes().cast::<[u64; 8]>(), next)
        .await?;
    expect_eq(
        me,
        "g of 64 bytes",
        wide.to_vec(),
        pattern(me, 16)[8..].to_vec(),
    )?;
    let wider = g
        .g(a.slice(16..32).as_bytes().cast::<[u64; 16]>(), next)
        .await?;
    expect_eq(
        me,
        "g of 128 bytes",
        wider.to_vec(),
        pattern(me, 32)[16..].to_vec(),
    )?;
    g.barrier_all().await?;
    g.p(a.at(5), 77u64 + me as u64, next).await?;
    g.barrier_all().await?;
    expect_eq(me, "p", g.g(a.at(5), me).await?, 77 + prev as u64)?;
    g.put_nbi(b.slice(0..512), a.slice(0..512), next)?;
    g.get_nbi(b.slice(512..1024), a.slice(0..512), next)?;
    g.quiet().await?;
    g.barrier_all().await?;
    let got = read_own(&g, &b).await?;
    let mut want = pattern(prev2, 512);
    want[5] = 77 + prev2 as u64;
    let mut tail = pattern(me, 512);
    tail[5] = 77 + me as u64;
    want.extend(tail);
    expect_eq(me, "put_nbi / get_nbi + quiet", got, want)?;
    // Single words (stream memory writes): 8- and 4-byte puts from pinned memory, a 4-byte p.
    let c = g.calloc::<u32>(4).await?;
    let word = HostBuffer::from_slice(g.context(), &[0xfeed_0000 + me as u64])?;
    g.put(a.slice(7..8), &word, next).await?;
    let half = HostBuffer::from_slice(g.context(), &[0xbeef_0000 + me as u32])?;
    g.put(c.slice(1..2), &half, next).await?;
    g.p(c.at(2), 0xcafe_0000 + me as u32, next).await?;
    g.barrier_all().await?;
    expect_eq(
        me,
        "8-byte put",
        g.g(a.at(7), me).await?,
        0xfeed_0000 + prev as u64,
    )?;
    let got = read_own(&g, &c).await?;
    let want = vec![0, 0xbeef_0000 + prev as u32, 0xcafe_0000 + prev as u32, 0];
    expect_eq(me, "4-byte put and p", got, want)?;
    g.free(c).await.map_err(|(e, _)| e)?;
    let mut dev = DeviceBuffer::<u64>::new(g.context(), 1024)?;
    g.copy_local(&mut dev, &src).await?;
    g.barrier_all().await?;
    g.put(&a, &dev, next).await?;
    g.barrier_all().await?;
    g.get(&mut dev, &a, me).await?;
    let mut back = HostBuffer::<u64>::new(g.context(), 1024)?;
    g.copy_local(&mut back, &dev).await?;
    expect_eq(
        me,
        "put/get with device memory",
        back.as_slice().to_vec(),
        pattern(prev, 1024),
    )?;
    // Typed errors, nothing sent.
    let small = HostBuffer::<u64>::new(g.context(), 4)?;
    match g.put(&a, &small, n).await {
        Err(Error::PeOutOfRange { pe, n_pes }) if pe == n && n_pes == n => {}
        other => return Err(fail(me, format!("put to PE {n}: {other:?}"))),
    }
    match g.put(a.slice(0..2), &small, next).await {
        Err(Error::OutOfBounds { .. }) => {}
        other => return Err(fail(me, format!("put past the view: {other:?}"))),
    }
    let host_buf = pe.malloc::<u64>(4).await?;
    match g.put(&host_buf, &small, next).await {
        Err(Error::NotSymmetric) => {}
        other => return Err(fail(me, format!("host-heap view on the GPU: {other:?}"))),
    }
    pe.free(host_buf).await?;
    // A collective call that differs is named on every PE.
    match g.malloc::<u8>(100 + me).await {
        Err(Error::CollectiveMismatch { .. }) if n > 1 => {}
        Ok(buf) if n == 1 => g.free(buf).await.map_err(|(e, _)| e)?,
        other => return Err(fail(me, format!("mismatched malloc: {other:?}"))),
    }
    // Arguments that PE 0 alone refuses still take part in the call: PE 0 gets its own
    // error, the others the mismatch, and the heaps stay in step for the next call.
    let align = if me == 0 { 3 } else { 64 };
    match g.align::<u8>(align, 64).await {
        Err(Error::InvalidAlignment(3)) if me == 0 => {}
        Err(Error::CollectiveMismatch { .. }) if me != 0 => {}
        other => return Err(fail(me, format!("an alignment refused on PE 0: {other:?}"))),
    }
    // A handle made by hand past the end of the GPU heap is refused before anything moves.
    let past_the_end = ferroshmem::SymBuffer::<u64>::from_allocation(
        ferroshmem_runtime::Allocation::new(g.heap_id(), g.heap_size() - 8, 64),
        8,
    )?;
    match g.put(&past_the_end, &small, me).await {
        Err(Error::NotSymmetric) => {}
        other => return Err(fail(me, format!("a handle past the GPU heap: {other:?}"))),
    }
    std::mem::forget(past_the_end);
    g.free(a).await.map_err(|(e, _)| e)?;
    g.free(b).await.map_err(|(e, _)| e)?;
    expect_eq(
        me,
        "heap usage after free",
        g.heap_used().await,
        used_before,
    )?;
    Ok(())
}

/// Futures dropped or leaked before their GPU work completes, and operands refused before
/// anything is queued.
async fn dropped_futures(_pe: Pe, g: GpuPe) -> Result<()> {
    use futures::FutureExt;
    let (me, n) = (g.my_pe(), g.n_pes());
    let next = (me + 1) % n;
    // A leaked get of 64 MiB: reading its buffer waits for the copy instead of racing it.
    const LEN: usize = 8 << 20;
    let big = g.malloc::<u64>(LEN).await?;
    let fill = HostBuffer::from_slice(g.context(), &pattern(me, LEN))?;
    g.put(&big, &fill, me).await?;
    drop(fill);
    g.barrier_all().await?;
    let want = pattern(next, LEN);
    let mut h = HostBuffer::<u64>::new(g.context(), LEN)?;
    let mut get = Box::pin(g.get(&mut h, &big, next));
    let first = (&mut get).now_or_never();
    std::mem::forget(get);
    // The last element first: the copy writes it last.
    let last = h.as_slice()[LEN - 1];
    expect_eq(me, "first poll of a 64 MiB get", first.is_none(), true)?;
    expect_eq(me, "last element after a leaked get", last, want[LEN - 1])?;
    expect_eq(
        me,
        "buffer of a leaked get",
        h.as_slice() == want.as_slice(),
        true,
    )?;
    drop(h);
    // A dropped wait of a stream held by a signal wait returns at once; the stream goes on.
    let stream = g.new_stream()?;
    let sig = g.calloc::<u64>(1).await?;
    g.signal_wait_until_on_stream(sig.at(0), Cmp::Ge, 1, &stream)?;
    let mut wait = Box::pin(g.wait_stream(&stream));
    expect_eq(
        me,
        "wait of a held stream",
        (&mut wait).now_or_never().is_none(),
        true,
    )?;
    drop(wait);
    g.p(sig.at(0), 1u64, me).await?;
    g.wait_stream(&stream).await?;
    // Refused before queuing: a misaligned signal (on the GPU it would fail the context)
    // and an alignment the GPU heap cannot give.
    let bytes = g.calloc::<u8>(64).await?;
    let odd = bytes.slice(1..9).cast::<u64>();
    match g.signal_op_on_stream(odd, 1, SignalOp::Add, next, &stream) {
        Err(Error::MisalignedAtomic { align: 8, .. }) => {}
        other => return Err(fail(me, format!("misaligned signal: {other:?}"))),
    }
    match g.align::<u8>(1 << 20, 64).await {
        Err(Error::AlignmentTooLarge {
            align: 1_048_576,
            max: 65_536,
        }) => {}
        other => return Err(fail(me, format!("1 MiB alignment: {other:?}"))),
    }
    g.wait_stream(&stream).await?;
    // A calloc dropped on PE 0 alone still takes its part in the collective call, so the
    // next call pairs with the next call on every PE (both buffers stay allocated).
    if me == 0 {
        let mut dropped = Box::pin(g.calloc::<u64>(1024));
        let _ = (&mut dropped).now_or_never();
    } else {
        drop(g.calloc::<u64>(1024).await?);
    }
    let next_call = g.calloc::<u64>(1024).await?;
    g.free(next_call).await.map_err(|(e, _)| e)?;
    g.barrier_all().await?;
    g.free(big).await.map_err(|(e, _)| e)?;
    g.free(sig).await.map_err(|(e, _)| e)?;
    g.free(bytes).await.map_err(|(e, _)| e)?;
    Ok(())
}

/// Every on-stream operation, checked after the stream completes.
async fn on_stream(_pe: Pe, g: GpuPe) -> Result<()> {
    let (me, n) = (g.my_pe(), g.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let stream = g.new_stream()?;
    let d = g.calloc::<u64>(4096).await?;
    let s = g.malloc::<u64>(4096).await?;
    let sig = g.calloc::<u64>(8).await?;
    g.put(
        &s,
        &HostBuffer::from_slice(g.context(), &pattern(me, 4096))?,
        me,
    )
    .await?;
    g.barrier_all().await?;
    g.put_on_stream(d.slice(0..1024), s.slice(0..1024), next, &stream)?;
    g.p_on_stream(d.at(2000), 0xdead_beef + me as u64, next, &stream)?;
    g.put_signal_on_stream(
        d.slice(1024..1536),
        s.slice(1024..1536),
        sig.at(0),
        1,
        SignalOp::Set,
        next,
        &stream,
    )?;
    g.signal_wait_until_on_stream(sig.at(0), Cmp::Ge, 1, &stream)?;
    g.put_signal_on_stream(
        d.slice(1536..1600),
        s.slice(1536..1600),
        sig.at(1),
        3,
        SignalOp::Add,
        next,
        &stream,
    )?;
    g.signal_wait_until_on_stream(sig.at(1), Cmp::Gt, 2, &stream)?;
    g.signal_op_on_stream(sig.at(2), 5, SignalOp::Add, next, &stream)?;
    g.barrier_all_on_stream(&stream)?;
    g.get_on_stream(d.slice(2048..3072), s.slice(0..1024), next, &stream)?;
    g.put_nbi(d.slice(3072..3100), s.slice(0..28), next)?;
    g.quiet_on_stream(&stream)?;
    g.barrier_all_on_stream(&stream)?;
    g.sync_all_on_stream(&stream)?;
    g.wait_stream(&stream).await?;
    let got = read_own(&g, &d).await?;
    let p = pattern(prev, 4096);
    let q = pattern(next, 1024);
    expect_eq(
        me,
        "put_on_stream",
        got[..1024].to_vec(),
        p[..1024].to_vec(),
    )?;
    expect_eq(
        me,
        "put_signal_on_stream (set) data",
        got[1024..1536].to_vec(),
        p[1024..1536].to_vec(),
    )?;
    expect_eq(
        me,
        "put_signal_on_stream (add) data",
        got[1536..1600].to_vec(),
        p[1536..1600].to_vec(),
    )?;
    expect_eq(me, "p_on_stream", got[2000], 0xdead_beef + prev as u64)?;
    expect_eq(me, "get_on_stream", got[2048..3072].to_vec(), q)?;
    expect_eq(
        me,
        "put_nbi + quiet_on_stream",
        got[3072..3100].to_vec(),
        p[..28].to_vec(),
    )?;
    expect_eq(
        me,
        "signals",
        read_own(&g, &sig).await?[..3].to_vec(),
        vec![1, 3, 5],
    )?;
    // alltoall: block j of PE q's source goes to block q of PE j.
    let per = 16;
    let at_src = g.malloc::<u64>(n * per).await?;
    let at_dst = g.calloc::<u64>(n * per).await?;
    let mine: Vec<u64> = (0..n * per)
        .map(|x| (me * 10_000 + (x / per) * 100 + x % per) as u64)
        .collect();
    g.put(&at_src, &HostBuffer::from_slice(g.context(), &mine)?, me)
        .await?;
    g.barrier_all().await?;
    g.alltoall_on_stream(&at_dst, &at_src, per, &stream)?;
    g.wait_stream(&stream).await?;
    let want: Vec<u64> = (0..n * per)
        .map(|x| ((x / per) * 10_000 + me * 100 + x % per) as u64)
        .collect();
    expect_eq(me, "alltoall_on_stream", read_own(&g, &at_dst).await?, want)?;
    g.barrier_all().await?;
    for b in [d, s, sig, at_src, at_dst] {
        g.free(b).await.map_err(|(e, _)| e)?;
    }
    Ok(())
}

/// On-stream operations captured into CUDA graphs and replayed.
async fn graph_capture(_pe: Pe, g: GpuPe) -> Result<()> {
    let (me, n) = (g.my_pe(), g.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let stream = g.new_stream()?;
    let d = g.calloc::<u64>(64).await?;
    let s = g.malloc::<u64>(64).await?;
    let sig = g.calloc::<u64>(4).await?;
    g.put(
        &s,
        &HostBuffer::from_slice(g.context(), &pattern(me, 64))?,
        me,
    )
    .await?;
    g.barrier_all().await?;
    // Warm-up: loads the kernels behind the operations before capturing.
    g.sync_all_on_stream(&stream)?;
    g.wait_stream(&stream).await?;
    let kernels = g.capture(&stream, |st| {
        g.p_on_stream(d.at(40), 7u64, next, st)?;
        g.signal_op_on_stream(sig.at(0), 1, SignalOp::Add, next, st)?;
        g.barrier_all_on_stream(st)
    })?;
    for _ in 0..3 {
        kernels.launch(&stream)?;
    }
    g.wait_stream(&stream).await?;
    let memops = g.capture(&stream, |st| {
        g.put_on_stream(d.slice(0..32), s.slice(0..32), next, st)?;
        g.put_signal_on_stream(
            d.slice(32..36),
            s.slice(32..36),
            sig.at(1),
            9,
            SignalOp::Set,
            next,
            st,
        )?;
        g.signal_wait_until_on_stream(sig.at(1), Cmp::Eq, 9, st)?;
        g.barrier_all_on_stream(st)
    })?;
    memops.launch(&stream)?;
    g.wait_stream(&stream).await?;
    g.barrier_all().await?;
    let got = read_own(&g, &d).await?;
    expect_eq(me, "graph: p_on_stream", got[40], 7)?;
    expect_eq(
        me,
        "graph: put_on_stream",
        got[..36].to_vec(),
        pattern(prev, 36),
    )?;
    expect_eq(
        me,
        "graph: signals",
        read_own(&g, &sig).await?[..2].to_vec(),
        vec![3, 9],
    )?;
    for b in [d, s, sig] {
        g.free(b).await.map_err(|(e, _)| e)?;
    }
    Ok(())
}

const BAD: &str = r#"
extern "C" __global__ void bad_pe(int* x) { fsh_p(x, 2, fsh_my_pe()); fsh_p(x, 1, 99); }
extern "C" __global__ void bad_addr(int* local) { fsh_p(local, 3, fsh_my_pe()); }
"#;

/// Debug mode reports a bad PE and a non-symmetric address instead of touching memory.
async fn debug_reports(_pe: Pe, g: GpuPe) -> Result<()> {
    let me = g.my_pe();
    let module = g.compile(
        BAD,
        &CompileOptions {
            debug: Some(true),
            ..Default::default()
        },
    )?;
    let x = g.calloc::<i32>(4).await?;
    let local = DeviceBuffer::<i32>::new(g.context(), 4)?;
    let stream = g.new_stream()?;
    // SAFETY: one symmetric pointer, alive until freed below.
    unsafe {
        module.launch(
            "bad_pe",
            LaunchDims::linear(1, 1),
            &stream,
            &[g.local_ptr(&x)?.into()],
        )?
    };
    g.wait_stream(&stream).await?;
    let report = module.check().expect_err("a report for PE 99");
    let text = report.to_string();
    let is_check = matches!(report, Error::Gpu(GpuError::DeviceCheck(_)));
    if !(is_check && text.contains("fsh_p") && text.contains("PE 99")) {
        return Err(fail(me, format!("unexpected report: {text}")));
    }
    module.check()?;
    expect_eq(me, "the valid p still ran", g.g(x.at(0), me).await?, 2)?;
    // SAFETY: a device pointer of this PE, alive until the stream is waited for below.
    unsafe {
        module.launch(
            "bad_addr",
            LaunchDims::linear(1, 1),
            &stream,
            &[local.addr().into()],
        )?
    };
    g.wait_stream(&stream).await?;
    let text = module
        .check()
        .expect_err("a report for a local address")
        .to_string();
    if !text.contains("not in this PE's symmetric GPU heap") {
        return Err(fail(me, format!("unexpected report: {text}")));
    }
    eprintln!("PE {me}: debug report as printed: {text}");
    g.free(x).await.map_err(|(e, _)| e)?;
    Ok(())
}
