//! Under `mpirun` without PMIx on one node, PE 0 hands the root's address and the job's
//! secret to the other PEs on a rendezvous socket with no file (here, PMIx is taken from PE
//! 0 by removing `PMIX_RANK` from its environment): a job stopped before it forms (PE 0
//! waiting for PEs that never come, `mpirun` sent SIGTERM) leaves nothing behind, in the
//! temporary directory or among the node's sockets. With PMIx, a PE whose root never comes
//! gives up at the bootstrap timeout. The PMIx test serves no socket, so that no other job's
//! socket shows to the first.

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

const PMIX_PE: &str = "FSH_RENDEZVOUS_PMIX_PE";

/// Under `mpirun` with PMIx, a PE whose PE 0 never hands the root out (rank 0 here is not a
/// ferroshmem PE) gives up at the bootstrap timeout with a typed error naming PMIx, instead of
/// waiting for the key forever.
#[test]
fn a_pe_whose_root_never_comes_through_pmix_gives_up() {
    if std::env::var(PMIX_PE).is_ok() {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let joined = rt.block_on(ferroshmem::init());
        println!("PE 1's init ended with {:?}", joined.map(|pe| pe.my_pe()));
        // Non-zero: mpirun then stops rank 0 at once.
        std::process::exit(3);
    }
    let exe: PathBuf = std::env::current_exe().expect("test binary");
    let mpirun = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ])
        .args(["-x", PMIX_PE, "-x", "FERROSHMEM_BOOTSTRAP_TIMEOUT"])
        .args(["-np", "1", "sleep", "60", ":", "-np", "1"])
        .arg(&exe)
        .args([
            "--exact",
            "a_pe_whose_root_never_comes_through_pmix_gives_up",
            "--nocapture",
        ])
        .env(PMIX_PE, "1")
        .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "2s")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("mpirun (openmpi-bin)");
    let pid = Pid::from_child(&mpirun);
    let guard = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(45));
        let _ = kill_process(pid, Signal::KILL);
    });
    let out = mpirun.wait_with_output().expect("mpirun's end");
    drop(guard);
    let said = String::from_utf8_lossy(&out.stdout);
    let ended = said
        .lines()
        .find_map(|l| l.split_once("PE 1's init ended with ").map(|(_, e)| e))
        .unwrap_or_else(|| panic!("PE 1 gave up on its own:\n{said}"));
    assert!(
        ended.starts_with("Err(Bootstrap(") && ended.contains("PMIx"),
        "{ended}"
    );
}
