//! A kernel launched as a programmatic dependent of the one ahead of it on its stream
//! (`GpuModule::launch_dependent`): on a GPU of compute capability 9.0 on it starts while that
//! kernel still runs (which let it), and still reads that kernel's writes once it has waited.

use ferroshmem::gpu::{CompileOptions, GpuPe, HostWords, LaunchDims};
use ferroshmem::{Pe, Result};

use super::{expect_eq, fail};

const SOURCE: &str = include_str!("dependent_launch.cu");

/// SM clock cycles the writer spins before it writes (a few milliseconds at any clock an
/// H200 runs at): far longer than a launch takes.
const WRITER_CYCLES: i64 = 10_000_000;

pub async fn reads_after_the_kernel_ahead(_pe: Pe, g: GpuPe) -> Result<()> {
    let me = g.my_pe();
    let module = g.compile(SOURCE, &CompileOptions::default())?;
    // The word, what the reader saw, when the writer wrote, when the reader started.
    let words = HostWords::new(g.context(), 4)?;
    let stream = g.new_stream()?;
    let value = 0x5eed_0000_u64 + me as u64;
    // SAFETY: slow_writer takes (u64*, u64, long long, u64*): pinned words mapped for the
    // GPU, alive until the stream is waited for below.
    unsafe {
        module.launch(
            "slow_writer",
            LaunchDims::linear(1, 1),
            &stream,
            &[
                words.addr(0).into(),
                value.into(),
                WRITER_CYCLES.into(),
                words.addr(2).into(),
            ],
        )?
    };
    // SAFETY: waiting_reader takes (const u64*, u64*, u64*) as passed, all alive until the
    // stream is waited for below, and waits for the writer before it reads the word.
    unsafe {
        module.launch_dependent(
            "waiting_reader",
            LaunchDims::linear(1, 1),
            &stream,
            &[
                words.addr(0).into(),
                words.addr(1).into(),
                words.addr(2).into(),
            ],
        )?
    };
    g.wait_stream(&stream).await?;
    expect_eq(me, "the word the reader saw", words.load(1), value)?;
    let (written, started) = (words.load(2), words.load(3));
    if g.device().compute_capability().0 >= 9 && started >= written {
        return Err(fail(
            me,
            format!("the dependent reader started {started} ns, not before the writer wrote ({written} ns): it was not launched early"),
        ));
    }
    Ok(())
}
