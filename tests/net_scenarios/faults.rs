//! Faults across nodes: writes the target refuses (an address past its heap, a corrupted
//! key), a free after such a write, and a peer process killed while a kernel waits on it.

use std::time::Instant;

/// PE 1 kills its own process while PE 0's kernel fetch-adds on it without end; PE 0's
/// kernel must end on the error CQEs the lost peer brings (within 20 s; the loss is known in
/// milliseconds), its module report and `synchronize` must say so. PE 0 ignores the
/// launcher's SIGTERM until it has reported.
pub async fn network_peer_killed(
    pe: ferroshmem::Pe,
    g: ferroshmem::gpu::GpuPe,
) -> ferroshmem::Result<()> {
    use ferroshmem::gpu::{CompileOptions, LaunchDims};
    const HAMMER: &str = r#"
extern "C" __global__ void hammer(unsigned long long* w, int pe, int rounds) {
    for (int i = 0; i < rounds; ++i) fsh_atomic_fetch_add(w, 1ull, pe);
    fsh_quiet();
}
"#;
    let me = g.my_pe();
    let fail = |what: String| ferroshmem::Error::Config(format!("PE {me}: {what}"));
    let _term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    let module = g.compile(HAMMER, &CompileOptions::default())?;
    let word = g.calloc::<u64>(1).await?;
    pe.barrier_all().await?;
    if me == 1 {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
    if me != 0 {
        return Ok(());
    }
    let stream = g.new_stream()?;
    let args = [g.local_ptr(&word)?.into(), 1i32.into(), 1_000_000i32.into()];
    let started = Instant::now();
    // SAFETY: hammer takes (u64*, int, int); the word is symmetric and never freed here.
    unsafe { module.launch("hammer", LaunchDims::linear(1, 1), &stream, &args)? };
    let waited = tokio::time::timeout(std::time::Duration::from_secs(20), g.wait_stream(&stream));
    if waited.await.is_err() {
        return Err(fail(
            "the kernel still waited on the killed PE 1 after 20 s".into(),
        ));
    }
    let ended = started.elapsed();
    match module.check() {
        Err(ferroshmem::Error::Gpu(ferroshmem::GpuError::DeviceCheck(text)))
            if text.contains("TRANSPORT_RETRY_EXC_ERR") => {}
        other => return Err(fail(format!("module.check() said {other:?}"))),
    }
    let handler = g.synchronize().await;
    if handler.is_ok() {
        return Err(fail("synchronize kept the lost peer to itself".into()));
    }
    eprintln!(
        "GPU scenario network_peer_killed: ok on PE 0, the kernel ended {ended:?} after its launch (PE 1 killed 300 ms after the barrier); synchronize: {handler:?}"
    );
    Err(fail("PE 1 was lost, as the scenario wants".into()))
}

/// An `fsh_p` to an address past the end of the next PE's heap (it lives on another node):
/// the target refuses it, the kernel's `fsh_quiet` sees the error CQE, `module.check()`
/// reports it, and `synchronize` returns the handler's failure; the PEs stay whole (a host
/// barrier afterwards).
pub async fn network_errors(
    pe: ferroshmem::Pe,
    g: ferroshmem::gpu::GpuPe,
) -> ferroshmem::Result<()> {
    refused_write(pe, g, "bad_p", true).await
}

/// The same with a valid address and a corrupted key: the kernel flips bits of the queue's
/// remote key in its descriptor before the `fsh_p`.
pub async fn network_bad_key(
    pe: ferroshmem::Pe,
    g: ferroshmem::gpu::GpuPe,
) -> ferroshmem::Result<()> {
    refused_write(pe, g, "bad_key", false).await
}

/// Kernels whose `fsh_p` the target refuses: to an address it is given (past the heap), or
/// with the queue's remote key corrupted.
const BAD: &str = r#"
extern "C" __global__ void bad_p(unsigned long long at, int pe) { fsh_p((int*)at, 7, pe); fsh_quiet(); }
extern "C" __global__ void bad_key(unsigned long long at, int pe) {
    fsh_qp_t* q = fsh__qp(pe);
    fsh_u32 key = q->rkey;
    q->rkey = key ^ 0x5a5au;
    fsh_p((int*)at, 7, pe);
    fsh_quiet();
    q->rkey = key;
}
"#;

/// Runs `kernel`, an `fsh_p` the next PE must refuse (to an address `beyond` its heap, or
/// not), and checks that the refusal comes back as REMOTE_ACCESS_ERR.
async fn refused_write(
    pe: ferroshmem::Pe,
    g: ferroshmem::gpu::GpuPe,
    kernel: &str,
    beyond: bool,
) -> ferroshmem::Result<()> {
    use ferroshmem::gpu::{CompileOptions, LaunchDims};
    let (me, n) = (g.my_pe(), g.n_pes());
    let next = (me + 1) % n;
    let fail = |what: String| ferroshmem::Error::Config(format!("PE {me}: {what}"));
    if !g.is_remote(next) {
        return Err(fail(format!("PE {next} is not on another node")));
    }
    let module = g.compile(BAD, &CompileOptions::default())?;
    let buf = g.calloc::<i32>(16).await?;
    // Past the end of the heap, the target's bounds check refuses it; else its key check.
    let at = match beyond {
        true => g.local_ptr(&buf)? + g.heap_size() as u64 + 64,
        false => g.local_ptr(&buf)?,
    };
    let stream = g.new_stream()?;
    let args = [at.into(), (next as i32).into()];
    // SAFETY: both kernels take (u64, int); the address is never dereferenced on this GPU
    // (the peer is reached through its send queue).
    unsafe { module.launch(kernel, LaunchDims::linear(1, 1), &stream, &args)? };
    match tokio::time::timeout(std::time::Duration::from_secs(20), g.wait_stream(&stream)).await {
        Ok(done) => done?,
        Err(_) => {
            return Err(fail(format!(
                "{kernel}: the refused write's kernel did not finish in 20 s"
            )))
        }
    }
    match module.check() {
        Err(ferroshmem::Error::Gpu(ferroshmem::GpuError::DeviceCheck(text)))
            if text.contains("REMOTE_ACCESS_ERR") => {}
        other => return Err(fail(format!("{kernel}: module.check() said {other:?}"))),
    }
    if g.synchronize().await.is_ok() {
        return Err(fail(format!(
            "{kernel}: synchronize kept the handler's failure to itself"
        )));
    }
    pe.barrier_all().await?;
    Ok(())
}

/// A module compiled without the network path (as `GpuPe::compile` compiles on a PE of a job
/// on one node) is refused on a PE of this job, which spans nodes, with a typed error; the
/// same source compiled here loads, and its `fsh_ptr` of the remote peer is null.
pub async fn networkless_module_refused(
    _pe: ferroshmem::Pe,
    g: ferroshmem::gpu::GpuPe,
) -> ferroshmem::Result<()> {
    use ferroshmem::gpu::cudarc::nvrtc;
    use ferroshmem::gpu::{CompileOptions, LaunchDims, DEVICE_HEADER};
    use ferroshmem::{Error, GpuError};
    const KERNEL: &str = r#"
extern "C" __global__ void remote_ptr(unsigned long long p, int pe, unsigned long long* out) { *out = (unsigned long long)fsh_ptr((void*)p, pe); }
"#;
    let me = g.my_pe();
    let fail = |what: String| Error::Config(format!("PE {me}: {what}"));
    let source = format!("#define FSH_NETWORK 0\n{DEVICE_HEADER}\n{KERNEL}");
    let ptx = nvrtc::compile_ptx(source).map_err(|e| fail(format!("NVRTC: {e}")))?;
    match g.load_ptx(&ptx.to_src()) {
        Err(Error::Gpu(GpuError::NoNetworkPath { pe })) if pe == me => {}
        Err(e) => return Err(fail(format!("a networkless module: {e}"))),
        Ok(_) => return Err(fail("a networkless module was loaded".into())),
    }
    let module = g.compile(KERNEL, &CompileOptions::default())?;
    let remote = (0..g.n_pes())
        .find(|&p| g.is_remote(p))
        .ok_or_else(|| fail("no PE on another node".into()))?;
    // Word 0 is the address asked about, word 1 takes the answer (set to non-null first).
    let words = g.calloc::<u64>(2).await?;
    let at = g.local_ptr(&words)?;
    g.p(words.at(1), u64::MAX, me).await?;
    let stream = g.new_stream()?;
    let args = [at.into(), (remote as i32).into(), (at + 8).into()];
    // SAFETY: remote_ptr takes (u64 symmetric address, int pe, u64* out); `words` holds both
    // and lives until the stream is waited for.
    unsafe { module.launch("remote_ptr", LaunchDims::linear(1, 1), &stream, &args)? };
    g.wait_stream(&stream).await?;
    let got = g.g(words.at(1), me).await?;
    if got != 0 {
        return Err(fail(format!(
            "fsh_ptr of remote PE {remote} is {got:#x}, not null"
        )));
    }
    g.free(words).await.map_err(|(e, _)| e)
}

/// PE 0's kernel writes past the next PE's heap; then every PE frees a buffer. PE 0's GPU
/// work failed, so its free fails with that failure, inside the free's agreement: the others
/// fail with a mismatch instead of waiting for PE 0. Each gets its buffer back, the second
/// free succeeds everywhere (the failure was reported once), and the PEs stay whole.
pub async fn network_failed_free(
    pe: ferroshmem::Pe,
    g: ferroshmem::gpu::GpuPe,
) -> ferroshmem::Result<()> {
    use ferroshmem::gpu::{CompileOptions, LaunchDims};
    use ferroshmem::Error;
    let me = g.my_pe();
    let fail = |what: String| Error::Config(format!("PE {me}: {what}"));
    let module = g.compile(BAD, &CompileOptions::default())?;
    let buf = g.calloc::<i32>(16).await?;
    if me == 0 {
        let at = g.local_ptr(&buf)? + g.heap_size() as u64 + 64;
        let stream = g.new_stream()?;
        let args = [at.into(), 1i32.into()];
        // SAFETY: bad_p takes (u64, int); the address is never dereferenced on this GPU (PE 1
        // is reached through its send queue).
        unsafe { module.launch("bad_p", LaunchDims::linear(1, 1), &stream, &args)? };
        let waited =
            tokio::time::timeout(std::time::Duration::from_secs(20), g.wait_stream(&stream));
        waited
            .await
            .map_err(|_| fail("the refused write's kernel did not finish in 20 s".into()))??;
    }
    let freed = tokio::time::timeout(std::time::Duration::from_secs(20), g.free(buf))
        .await
        .map_err(|_| fail("the free still waited after 20 s".into()))?;
    let buf = match (me, freed) {
        (0, Err((Error::CollectiveMismatch { .. }, _))) | (0, Ok(())) => {
            return Err(fail("the free kept the failed GPU work to itself".into()))
        }
        (0, Err((_, buf))) => buf,
        (_, Err((Error::CollectiveMismatch { .. }, buf))) => buf,
        (_, other) => {
            let said = other.map_err(|(e, _)| e);
            return Err(fail(format!(
                "the free beside PE 0's refusal said {said:?}"
            )));
        }
    };
    g.free(buf).await.map_err(|(e, _)| e)?;
    pe.barrier_all().await
}
