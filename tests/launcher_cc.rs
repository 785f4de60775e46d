//! The `ferroshmem` binary as users of `oshrun`, `mpirun` and `oshcc` call it: `run` with
//! `-np N` and `-N N`, and the compiler wrappers `cc` and `c++` (also as a link named
//! `oshcc`), which compile, link and run a C program here against a stand-in `shmem.h` and
//! `libferroshmem_c.a` built for the test, so that the wrapper is checked on its own.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A scratch directory of one test, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ferroshmem-cc-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        Scratch(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A stand-in C API here: `shmem.h` declaring `stand_in_answer`, and the static library
    /// `libferroshmem_c.a` defining it.
    fn stand_in_capi(&self) {
        self.write("shmem.h", "int stand_in_answer(void);\n");
        let source = self.write("capi.c", "int stand_in_answer(void) { return 42; }\n");
        let object = self.0.join("capi.o");
        run_ok(
            Command::new("cc")
                .arg("-c")
                .arg(&source)
                .arg("-o")
                .arg(&object),
        );
        let lib = self.0.join("libferroshmem_c.a");
        run_ok(Command::new("ar").arg("rcs").arg(&lib).arg(&object));
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The program that prints what the stand-in library returns.
const MAIN_C: &str = "#include <shmem.h>\n#include <stdio.h>\n\
                      int main(void) { printf(\"%d\\n\", stand_in_answer()); return 0; }\n";

fn run_ok(command: &mut Command) -> Output {
    let out = command.output().unwrap();
    assert!(out.status.success(), "{command:?}: {out:?}");
    out
}

/// `ferroshmem ARGS` (or the binary under `program`), in `dir`, with the C API's directories
/// pointing at `capi` when given.
fn ferroshmem(program: &Path, args: &[&str], dir: &Path, capi: Option<&Path>) -> Output {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(dir)
        .env_remove("CC")
        .env_remove("CXX");
    command
        .env_remove("FERROSHMEM_INCLUDE_DIR")
        .env_remove("FERROSHMEM_LIB_DIR");
    if let Some(capi) = capi {
        command
            .env("FERROSHMEM_INCLUDE_DIR", capi)
            .env("FERROSHMEM_LIB_DIR", capi);
    }
    command
        .env("FERROSHMEM_BOOTSTRAP_TIMEOUT", "5s")
        .env_remove("FERROSHMEM_RANK");
    command.output().unwrap()
}

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ferroshmem"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn cc_compiles_links_and_the_program_runs() {
    let scratch = Scratch::new("link");
    scratch.stand_in_capi();
    scratch.write("main.c", MAIN_C);
    let dir = scratch.0.as_path();
    let out = ferroshmem(
        binary(),
        &["cc", "-O1", "main.c", "-o", "prog"],
        dir,
        Some(dir),
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        text(&run_ok(&mut Command::new(dir.join("prog"))).stdout),
        "42\n"
    );

    // In two steps: -c adds the include flag only, the link the library.
    let out = ferroshmem(binary(), &["cc", "-c", "main.c"], dir, Some(dir));
    assert!(out.status.success(), "{out:?}");
    let out = ferroshmem(binary(), &["c++", "main.o", "-o", "prog2"], dir, Some(dir));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        text(&run_ok(&mut Command::new(dir.join("prog2"))).stdout),
        "42\n"
    );
}

#[test]
fn the_compilers_exit_status_is_the_wrappers() {
    let scratch = Scratch::new("status");
    scratch.stand_in_capi();
    scratch.write("bad.c", "int main(void) { return undeclared; }\n");
    let dir = scratch.0.as_path();
    let out = ferroshmem(binary(), &["cc", "-c", "bad.c"], dir, Some(dir));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("undeclared"), "{out:?}");

    let compiler = scratch.write("exit7", "#!/bin/sh\nexit 7\n");
    run_ok(Command::new("chmod").arg("+x").arg(&compiler));
    let out = Command::new(binary())
        .args(["cc", "-c", "x.c"])
        .env("CC", &compiler)
        .env("FERROSHMEM_INCLUDE_DIR", dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{out:?}");

    let out = Command::new(binary())
        .args(["cc", "-c", "x.c"])
        .env("CC", dir.join("no-such-compiler"))
        .env("FERROSHMEM_INCLUDE_DIR", dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert!(text(&out.stderr).contains("no-such-compiler"), "{out:?}");
}

#[test]
fn a_missing_library_is_named_and_showme_prints_anyway() {
    let scratch = Scratch::new("missing");
    scratch.write("shmem.h", "\n");
    let dir = scratch.0.as_path();
    let out = ferroshmem(binary(), &["cc", "main.c"], dir, Some(dir));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains(dir.to_str().unwrap()), "{stderr}");
    assert!(stderr.contains("cargo build -p ferroshmem-c"), "{stderr}");

    let nowhere = dir.join("nowhere");
    let out = ferroshmem(binary(), &["cc", "main.c", "--showme"], dir, Some(&nowhere));
    assert!(out.status.success(), "{out:?}");
    let n = nowhere.display();
    assert_eq!(
        text(&out.stdout),
        format!(
            "cc -I {n} -fno-plt main.c -L {n} -lferroshmem_c -Wl,-rpath,{n} -lpthread -ldl -lm\n"
        )
    );
}

#[test]
fn a_link_named_oshcc_finds_the_library_beside_the_real_binary() {
    let scratch = Scratch::new("oshcc");
    let oshcc = scratch.0.join("oshcc");
    std::os::unix::fs::symlink(binary(), &oshcc).unwrap();
    let out = ferroshmem(&oshcc, &["--showme", "-c", "x.c"], &scratch.0, None);
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).starts_with("cc -I ") && text(&out.stdout).ends_with(" -c x.c\n"));

    let out = ferroshmem(&oshcc, &["--showme", "x.c"], &scratch.0, None);
    let lib_dir = binary().canonicalize().unwrap();
    let lib_dir = lib_dir.parent().unwrap().display();
    assert!(
        text(&out.stdout).contains(&format!(" -L {lib_dir} ")),
        "{out:?}"
    );

    // CC=oshcc (as in `CC=oshcc make`) does not make the wrapper run itself.
    let out = Command::new(&oshcc)
        .args(["--showme", "x.c"])
        .env("CC", "oshcc")
        .env("PATH", &scratch.0)
        .output()
        .unwrap();
    assert!(text(&out.stdout).starts_with("cc -I "), "{out:?}");
}

#[test]
fn run_takes_np_and_pes_per_host() {
    let dir = std::env::temp_dir();
    let greet = [
        "sh",
        "-c",
        "echo \"pe $FERROSHMEM_RANK of $FERROSHMEM_SIZE\"",
    ];
    for (spelling, n) in [
        (&["run", "-np", "3"][..], 3),
        (&["run", "-np=2"][..], 2),
        (&["run", "-N", "2"][..], 2),
        (&["run", "-n", "2", "-N", "2"][..], 2),
        (&["run", "--hosts", "localhost", "-N", "3"][..], 3),
    ] {
        let args: Vec<&str> = spelling.iter().chain(&greet).copied().collect();
        let out = ferroshmem(binary(), &args, &dir, None);
        assert!(out.status.success(), "{args:?}: {out:?}");
        let stdout = text(&out.stdout);
        for rank in 0..n {
            assert!(
                stdout.contains(&format!("[pe {rank}] pe {rank} of {n}")),
                "{args:?}: {stdout}"
            );
        }
        assert_eq!(stdout.lines().count(), n, "{args:?}: {stdout}");
    }

    let out = ferroshmem(binary(), &["run", "-n", "3", "-N", "2", "true"], &dir, None);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("-n 3 but -N 2"), "{out:?}");

    // The program's own -np is its own.
    let out = ferroshmem(
        binary(),
        &["run", "-np", "1", "echo", "-np", "3"],
        &dir,
        None,
    );
    assert_eq!(text(&out.stdout), "[pe 0] -np 3\n", "{out:?}");
}
