//! Building and running C programs against `shmem.h` and `libferroshmem_c`, as a C user
//! does: `ferroshmem cc` (or `c++`) to build, `ferroshmem run` to launch, each bounded in
//! time. Shared by the tests of the C ABI on one host and across hosts.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;

use rustix::process::{kill_process, Pid, Signal};

/// The longest a program may run at one PE count.
pub const LIMIT: Duration = Duration::from_secs(120);

/// The directory of this test's executable, where cargo put `libferroshmem_c` (a
/// dependency of these tests).
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.parent().expect("the test's directory").to_path_buf()
}

/// Where the built programs go.
pub fn out_dir() -> PathBuf {
    // One directory per test binary: two binaries building a program of the same name at
    // once (under a runner that runs them side by side) must not overwrite each other's.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(env!("CARGO_CRATE_NAME"));
    std::fs::create_dir_all(&dir).expect("an output directory");
    dir
}

/// Whether the compiler `ferroshmem DRIVER` starts (`cc`: `$CC` or `cc`; `c++`: `$CXX` or
/// `c++`) runs here; says why the tests skip when not.
pub fn have_compiler(driver: &str) -> bool {
    let (variable, language) = match driver {
        "c++" => ("CXX", "C++"),
        _ => ("CC", "C"),
    };
    let compiler = std::env::var(variable).unwrap_or_else(|_| driver.into());
    let found = Command::new(&compiler)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!("skipped: no {language} compiler ({compiler}) on this machine");
    }
    found
}

/// Whether a C compiler runs here.
pub fn have_cc() -> bool {
    have_compiler("cc")
}

/// `ferroshmem ARGS` with the C library's directory set, its output captured.
pub fn ferroshmem(args: &[&str]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferroshmem"));
    command.args(args).env("FERROSHMEM_LIB_DIR", lib_dir());
    start(command, "ferroshmem")
}

/// Starts `command` (a launcher running C programs) with the test environment, its output
/// captured.
pub fn start(mut command: Command, what: &str) -> Child {
    command
        // The library these tests were built with, not another build's that cargo's own
        // search path may name first.
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "30s")
        .env("FERROSHMEM_SYMMETRIC_SIZE", "64M")
        .env_remove("FERROSHMEM_RANK")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"))
}

/// Waits for `child`, killing it and failing the test after [`LIMIT`].
pub fn finish(child: Child, what: &str) -> Output {
    let pid = Pid::from_child(&child);
    let (tx, rx) = channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(LIMIT) {
        Ok(output) => output.expect("ferroshmem's output"),
        Err(_) => {
            let _ = kill_process(pid, Signal::KILL);
            panic!("{what}: still running after {LIMIT:?}");
        }
    }
}

/// Builds `source` with `ferroshmem cc` and `flags` into the output directory; returns the
/// program.
pub fn build(source: &Path, name: &str, flags: &[&str]) -> PathBuf {
    build_with("cc", source, name, flags)
}

/// Builds `source` with `ferroshmem DRIVER` (`cc` or `c++`) and `flags` into the output
/// directory; returns the program.
pub fn build_with(driver: &str, source: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let program = out_dir().join(name);
    let mut args = vec![driver, "-O1", "-Wall"];
    args.extend_from_slice(flags);
    args.extend([
        "-o",
        program.to_str().expect("a UTF-8 path"),
        source.to_str().expect("a UTF-8 path"),
    ]);
    let output = finish(ferroshmem(&args), &format!("building {name}"));
    assert!(
        output.status.success(),
        "ferroshmem {driver} {}: {}{}",
        source.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    program
}

/// The path of `tests/c/FILE`, one of the C test programs.
pub fn test_source(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{file}"))
}

/// The C programs of `tests/c/`, one per family of the C API, by name.
pub fn families() -> Vec<String> {
    let dir = test_source("");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".c")?.to_string())
        })
        .collect();
    names.sort();
    names
}
