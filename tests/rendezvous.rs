//! Under `mpirun` without PMIx on one node, PE 0 hands the root's address and the job's
//! secret to the other PEs on a rendezvous socket with no file (here, PMIx is taken from PE
//! 0 by removing `PMIX_RANK` from its environment): a job stopped before it forms (PE 0 waiting for PEs that
//! never come, `mpirun` sent SIGTERM) leaves nothing behind, in the temporary directory or
//! among the node's sockets. One test in this binary, so that no other job's socket shows.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

const PE_MODE: &str = "FSH_RENDEZVOUS_PE";

/// Whether a rendezvous socket of this user is open on the node.
fn served() -> bool {
    let uid = rustix::process::getuid().as_raw();
    std::fs::read_to_string("/proc/net/unix")
        .expect("/proc/net/unix")
        .contains(&format!("@ferroshmem-rendezvous-{uid}-"))
}

#[test]
fn a_job_stopped_before_it_forms_leaves_nothing_behind() {
    if std::env::var(PE_MODE).is_ok() {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let joined = rt.block_on(ferroshmem::init());
        panic!("PE 0 should wait for the PEs that never come: {joined:?}");
    }
    assert!(!served(), "a rendezvous socket is open before the test");
    let temp = std::env::temp_dir().join(format!("fsh-rendezvous-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&temp);
    std::fs::create_dir_all(&temp).expect("temp dir");
    let exe: PathBuf = std::env::current_exe().expect("test binary");
    // Rank 0 is a ferroshmem PE; ranks 1 to 3 never join.
    let mut mpirun = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ])
        .args(["-x", PE_MODE, "-x", "TMPDIR", "-np", "1"])
        .args(["env", "-u", "PMIX_RANK"])
        .arg(&exe)
        .args([
            "--exact",
            "a_job_stopped_before_it_forms_leaves_nothing_behind",
        ])
        .args([":", "-np", "3", "sleep", "30"])
        .env(PE_MODE, "1")
        .env("TMPDIR", &temp)
        .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "30s")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mpirun (openmpi-bin)");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !served() {
        assert!(
            Instant::now() < deadline,
            "PE 0 never served its rendezvous socket"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = kill_process(Pid::from_child(&mpirun), Signal::TERM);
    let status = mpirun.wait().expect("mpirun's end");
    assert!(!status.success(), "{status:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while served() {
        assert!(
            Instant::now() < deadline,
            "the rendezvous socket outlived the job"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<_> = std::fs::read_dir(&temp)
        .expect("temp dir")
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("ferroshmem"))
        .collect();
    let _ = std::fs::remove_dir_all(&temp);
    assert!(left.is_empty(), "left in the temporary directory: {left:?}");
}
