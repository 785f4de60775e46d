//! A kernel that needs more per-thread local memory than the context holds, launched while
//! another kernel of the PE waits for the host: the launch must not wait for that kernel.
//! CUDA grows a context's local memory at such a launch after every running kernel has
//! finished; loading the module grows it beforehand, so the launch returns at once and the
//! host can release the waiting kernel.

use ferroshmem::gpu::{CompileOptions, DeviceBuffer, GpuPe, HostWords, LaunchDims};
use ferroshmem::{Pe, Result};

use super::expect_eq;

const SOURCE: &str = include_str!("local_memory.cu");

/// SM clock cycles the waiting kernel waits for the host before it gives up (seconds at
/// any clock an H200 runs at).
const GIVE_UP_CYCLES: i64 = 6_000_000_000;

pub async fn launch_beside_a_waiting_kernel(_pe: Pe, g: GpuPe) -> Result<()> {
    let me = g.my_pe();
    let module = g.compile(SOURCE, &CompileOptions::default())?;
    let words = HostWords::new(g.context(), 2)?;
    let out = DeviceBuffer::<u64>::new(g.context(), 1)?;
    let (waiting, wide) = (g.new_stream()?, g.new_stream()?);
    // SAFETY: wait_for_host takes (const u64*, u64*, long long): two pinned words mapped for
    // the GPU, alive until both streams are waited for below.
    unsafe {
        module.launch(
            "wait_for_host",
            LaunchDims::linear(1, 1),
            &waiting,
            &[
                words.addr(0).into(),
                words.addr(1).into(),
                GIVE_UP_CYCLES.into(),
            ],
        )?
    };
    // SAFETY: wide_locals takes (u64*, int): one word of device memory, alive until the
    // stream is waited for below.
    unsafe {
        module.launch(
            "wide_locals",
            LaunchDims::linear(4, 128),
            &wide,
            &[out.device_ptr().into(), 3i32.into()],
        )?
    };
    words.store(0, 1);
    g.wait_stream(&waiting).await?;
    g.wait_stream(&wide).await?;
    expect_eq(
        me,
        "the waiting kernel's outcome (1: it saw the host's flag; 2: it gave up, so the launch beside it waited for it)",
        words.load(1),
        1,
    )
}
