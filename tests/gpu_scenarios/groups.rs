//! Warp and block calls of the device library where the group must meet first or is not a
//! whole warp, `fsh_wait_until_any` over nothing, integer-only atomics refused for floats at
//! compile time, and a misaligned atomic caught by the debug checks.

use ferroshmem::gpu::{CompileOptions, GpuPe, LaunchDims};
use ferroshmem::{Pe, Result};

use super::{expect_eq, fail, read_own};

const GROUPS: &str = include_str!("groups.cu");

pub async fn group_calls(_pe: Pe, g: GpuPe) -> Result<()> {
    let (me, n) = (g.my_pe(), g.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let module = g.compile(GROUPS, &CompileOptions::default())?;
    let stage = g.calloc::<i32>(1024).await?;
    let dest = g.calloc::<i32>(1024).await?;
    let src = g.malloc::<i32>(128).await?;
    let fill: Vec<i32> = (0..128).map(|i| 100 * me as i32 + i).collect();
    g.put(
        &src,
        &ferroshmem::gpu::HostBuffer::from_slice(g.context(), &fill)?,
        me,
    )
    .await?;
    let out = g.calloc::<u64>(1).await?;
    g.barrier_all().await?;
    let stream = g.new_stream()?;
    // SAFETY: each kernel takes the symmetric pointers and PE given, all alive until freed
    // below (free waits for the GPU).
    unsafe {
        module.launch(
            "block_put_after_writes",
            LaunchDims::linear(1, 256),
            &stream,
            &[
                g.local_ptr(&stage)?.into(),
                g.local_ptr(&dest)?.into(),
                (next as i32).into(),
            ],
        )?;
        module.launch(
            "wait_any_of_nothing",
            LaunchDims::linear(1, 1),
            &stream,
            &[g.local_ptr(&out)?.into(), g.local_ptr(&stage)?.into()],
        )?;
    }
    g.wait_stream(&stream).await?;
    g.barrier_all().await?;
    let got = read_own(&g, &dest).await?;
    let want: Vec<i32> = (0..1024).map(|i| 5000 + i).collect();
    expect_eq(me, "block put of what the whole block wrote", got, want)?;
    // Every PE has read its `dest` before the next kernel writes the peers' ones again.
    g.barrier_all().await?;
    expect_eq(
        me,
        "wait_until_any over nothing",
        g.g(out.at(0), me).await?,
        u64::MAX,
    )?;
    // SAFETY: as above.
    unsafe {
        module.launch(
            "half_warp_put",
            LaunchDims::linear(1, 16),
            &stream,
            &[
                g.local_ptr(&dest)?.into(),
                g.local_ptr(&src)?.into(),
                (next as i32).into(),
            ],
        )?;
    }
    g.wait_stream(&stream).await?;
    g.barrier_all().await?;
    let got = read_own(&g, &dest).await?;
    let want: Vec<i32> = (0..128).map(|i| 100 * prev as i32 + i).collect();
    expect_eq(me, "warp put by 16 threads", got[..128].to_vec(), want)?;
    // Integer-only atomics do not compile for floats.
    let float_inc = "extern \"C\" __global__ void k(float* f) { fsh_atomic_inc(f, 0); }";
    if g.compile(float_inc, &CompileOptions::default()).is_ok() {
        return Err(fail(me, "fsh_atomic_inc on a float compiled"));
    }
    // A misaligned 64-bit atomic is reported by the debug checks instead of reaching the GPU.
    let misaligned = "extern \"C\" __global__ void k(char* p) { fsh_atomic_add((long long*)(p + 4), 1ll, fsh_my_pe()); }";
    let debug = g.compile(
        misaligned,
        &CompileOptions {
            debug: Some(true),
            ..Default::default()
        },
    )?;
    let bytes = g.align::<u8>(64, 64).await?;
    // SAFETY: one symmetric pointer, alive until freed below.
    unsafe {
        debug.launch(
            "k",
            LaunchDims::linear(1, 1),
            &stream,
            &[g.local_ptr(&bytes)?.into()],
        )?;
    }
    g.wait_stream(&stream).await?;
    match debug.check() {
        Err(e) if e.to_string().contains("misaligned") => {}
        other => return Err(fail(me, format!("misaligned atomic: {other:?}"))),
    }
    g.barrier_all().await?;
    for b in [stage, dest, src] {
        g.free(b).await.map_err(|(e, _)| e)?;
    }
    g.free(out).await.map_err(|(e, _)| e)?;
    g.free(bytes).await.map_err(|(e, _)| e)?;
    Ok(())
}
