//! A job whose standard error cannot be written (closed, full, a pipe whose reader left)
//! still ends when a PE fails: logging drops what it cannot write instead of panicking in
//! the task that logged (the control plane's, which a job cannot do without).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferroshmem::{run_local, Cmp, Error};

/// Set in the child process that runs [`child_job`].
const CHILD: &str = "FERROSHMEM_TEST_BROKEN_STDERR_CHILD";

/// The child's job: logging to standard error at `info`, PE 1 panics while the others wait
/// on a flag nobody sets; the child exits 0 when the job fails with PE 1's panic.
#[test]
fn child_job() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    ferroshmem::observability::init_tracing();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let job = run_local(3, |pe| async move {
        let flag = pe.calloc::<u64>(1).await?;
        pe.barrier_all().await?;
        if pe.my_pe() == 1 {
            panic!("PE 1 gives up");
        }
        pe.wait_until(&flag, Cmp::Eq, 1).await?;
        Ok::<_, Error>(())
    });
    let ended =
        runtime.block_on(async { tokio::time::timeout(Duration::from_secs(30), job).await });
    std::process::exit(match ended {
        Ok(Err(Error::Panicked { pe: 1, .. })) => 0,
        Ok(_) => 3,
        Err(_) => 4,
    });
}

#[test]
fn a_failing_pe_ends_the_job_while_standard_error_is_full() {
    let Ok(full) = std::fs::File::options().write(true).open("/dev/full") else {
        eprintln!("skipping: no /dev/full here");
        return;
    };
    let mut child = Command::new(std::env::current_exe().expect("this test's path"))
        .args(["--exact", "child_job", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("RUST_LOG", "info")
        .env("FERROSHMEM_SYMMETRIC_SIZE", "16M")
        .stdout(Stdio::null())
        .stderr(full)
        .spawn()
        .expect("the child starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child's status") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the job hung with standard error full");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "the job's end: {status:?}");
}
