//! Loading libfabric leaves the process's signal handling as it was. Debian's libfabric links
//! the PSM provider's `libinfinipath`, whose initializer installs handlers that end the process
//! with status 1 on SIGTERM once a fabric is open (and on SIGINT, SIGSEGV, ...); a handler
//! installed later, such as tokio's, chains to it. A PE's own SIGTERM handler then never kept
//! it alive: a PE told to stop vanished without a word, in the middle of reporting a lost
//! peer.

use std::process::Command;
use std::time::Duration;

use ferroshmem_net::{Fabric, FabricOptions};

const CHILD: &str = "FSH_SIGNALS_CHILD";
/// The child's exit status when libfabric is not installed.
const NO_LIBRARY: i32 = 3;
/// The child's exit status when its own SIGTERM handler caught the signal.
const CAUGHT: i32 = 0;

/// In the child: opens a fabric endpoint as a PE does, installs a SIGTERM handler (tokio's),
/// sends itself SIGTERM, and exits with [`CAUGHT`] once the handler saw it.
fn child() -> ! {
    if ferroshmem_net::Library::load().is_err() {
        std::process::exit(NO_LIBRARY);
    }
    let options = FabricOptions {
        provider: Some("tcp;ofi_rxm".into()),
        node: Some("127.0.0.1".into()),
    };
    let _fabric = Fabric::open(&options, |_| {}).expect("a tcp;ofi_rxm endpoint on loopback");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let caught = rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let me = std::process::id();
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -TERM {me}"))
            .status();
        tokio::time::timeout(Duration::from_secs(10), terminate.recv())
            .await
            .is_ok()
    });
    std::process::exit(if caught { CAUGHT } else { 4 });
}

#[test]
fn a_sigterm_handler_keeps_its_process_alive_after_libfabric_is_loaded() {
    if std::env::var(CHILD).is_ok() {
        child();
    }
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "a_sigterm_handler_keeps_its_process_alive_after_libfabric_is_loaded",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .expect("the child starts");
    if out.status.code() == Some(NO_LIBRARY) {
        eprintln!("skipped: libfabric is not installed");
        return;
    }
    assert_eq!(
        out.status.code(),
        Some(CAUGHT),
        "the process's own handler caught SIGTERM, not {:?}:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
