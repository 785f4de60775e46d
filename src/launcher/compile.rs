//! `ferroshmem cc` and `ferroshmem c++` (also started as `oshcc` and `oshc++`): the compiler
//! wrappers for C and C++ programs written against the C API (`shmem.h`, `shmemx.h` and the
//! `libferroshmem_c` library), as `oshcc` and `mpicc` are for other implementations. This
//! module owns finding the compiler, the headers and the library, assembling the compiler's
//! command line, and running it, or printing it for `--showme`.
//!
//! The compiler is `$CC` (C) or `$CXX` (C++), split on whitespace (`CC="ccache gcc"`), else
//! `cc` or `c++`. A `$CC` that would start this very executable (`CC=oshcc make`) is passed
//! over for the default, so that the wrapper never runs itself.
//!
//! The command line is the compiler, `-I INCLUDE -fno-plt`, the user's arguments unchanged,
//! then, for a link, `-L LIB -lferroshmem_c -Wl,-rpath,LIB -lpthread -ldl -lm` (see [`Stage`]
//! and [`compiler_command`]). `-fno-plt` has the program call the library's routines through
//! its global offset table, not a PLT stub: one jump less on every call (`shmem_getmem` of
//! 8 bytes 3.9 → 3.6 ns on a mapped peer). `INCLUDE` is `$FERROSHMEM_INCLUDE_DIR`, else the
//! source tree's `capi/include`; `LIB` is `$FERROSHMEM_LIB_DIR`, else the directory of the
//! running `ferroshmem` executable, where cargo puts the library too.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use super::{hosts, LaunchError};
use crate::Error;

/// Where the headers are when `FERROSHMEM_INCLUDE_DIR` does not say.
const DEFAULT_INCLUDE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/capi/include");

/// The environment variable naming the directory of `shmem.h`.
const INCLUDE_DIR_VAR: &str = "FERROSHMEM_INCLUDE_DIR";

/// The environment variable naming the directory of `libferroshmem_c`.
const LIB_DIR_VAR: &str = "FERROSHMEM_LIB_DIR";

/// The library's name for `-l`.
const LIBRARY: &str = "ferroshmem_c";

/// The library's files, either of which links.
const LIBRARY_FILES: [&str; 2] = ["libferroshmem_c.so", "libferroshmem_c.a"];

/// What the library needs from the system, linked after it.
const SYSTEM_LIBRARIES: [&str; 3] = ["-lpthread", "-ldl", "-lm"];

/// What the wrapper asks of the code it compiles: calls into shared libraries without PLT
/// stubs (see the module documentation).
const CODEGEN_FLAGS: [&str; 1] = ["-fno-plt"];

/// The arguments that make the compiler stop before linking.
const COMPILE_ONLY_FLAGS: [&str; 5] = ["-c", "-S", "-E", "-M", "-MM"];

/// The wrapper's own flag, taken out of the compiler's arguments wherever it is.
const SHOWME_FLAG: &str = "--showme";

/// The language a wrapper compiles, which picks the compiler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// C: `$CC`, else `cc`.
    C,
    /// C++: `$CXX`, else `c++`.
    Cxx,
}

impl Language {
    /// The environment variable that names the compiler.
    fn compiler_var(self) -> &'static str {
        match self {
            Language::C => "CC",
            Language::Cxx => "CXX",
        }
    }

    /// The compiler when the environment names none.
    fn default_compiler(self) -> &'static str {
        match self {
            Language::C => "cc",
            Language::Cxx => "c++",
        }
    }
}

/// How far the compiler goes, which decides the flags the wrapper adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Compile (or only preprocess) and link: the include and the link flags.
    Link,
    /// Stop before linking (`-c`, `-S`, `-E`, `-M` or `-MM`): the include flag only.
    CompileOnly,
    /// No input at all, only options (`--version`, `-v`, or nothing): nothing is added, as
    /// Open MPI's wrappers do, so that the compiler answers the question.
    Query,
}

/// The stage that the compiler arguments `args` ask for.
pub fn stage(args: &[OsString]) -> Stage {
    if args
        .iter()
        .any(|arg| COMPILE_ONLY_FLAGS.iter().any(|flag| arg == flag))
    {
        Stage::CompileOnly
    } else if args.iter().all(|arg| arg.as_bytes().first() == Some(&b'-')) {
        Stage::Query
    } else {
        Stage::Link
    }
}

/// Where the C API's headers and library are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapiDirs {
    /// The directory of `shmem.h` and `shmemx.h`.
    pub include: PathBuf,
    /// The directory of `libferroshmem_c.so` or `libferroshmem_c.a`.
    pub lib: PathBuf,
}

/// The whole command line: `compiler` (its program and first arguments), then the flags for
/// `dirs` that `stage(args)` calls for around the user's `args`, which are passed unchanged.
pub fn compiler_command(
    compiler: &[OsString],
    args: &[OsString],
    dirs: &CapiDirs,
) -> Vec<OsString> {
    let stage = stage(args);
    let mut command = compiler.to_vec();
    if stage != Stage::Query {
        command.push("-I".into());
        command.push(dirs.include.clone().into());
        command.extend(CODEGEN_FLAGS.iter().map(OsString::from));
    }
    command.extend(args.iter().cloned());
    if stage == Stage::Link {
        let mut rpath = OsString::from("-Wl,-rpath,");
        rpath.push(&dirs.lib);
        command.push("-L".into());
        command.push(dirs.lib.clone().into());
        command.push(format!("-l{LIBRARY}").into());
        command.push(rpath);
        command.extend(SYSTEM_LIBRARIES.iter().map(OsString::from));
    }
    command
}

/// The compiler arguments without the wrapper's `--showme` (also written `-showme`), and
/// whether it was among them.
pub fn take_showme(args: Vec<OsString>) -> (Vec<OsString>, bool) {
    let (showme, args): (Vec<_>, Vec<_>) = args
        .into_iter()
        .partition(|arg| arg == SHOWME_FLAG || arg == &SHOWME_FLAG[1..]);
    (args, !showme.is_empty())
}

/// Runs the `language` compiler on `args` with the C API's flags, or, with `showme`, prints
/// the command line instead. Returns the exit code to exit with: the compiler's, or 128 + N
/// when signal N killed it.
///
/// # Errors
/// [`LaunchError::CapiMissing`] when the headers or (for a link) the library are not found,
/// unless `showme`; [`LaunchError::Spawn`] when the compiler cannot be started;
/// [`LaunchError::Setup`] when the library's directory cannot be told.
pub fn compile(language: Language, args: &[OsString], showme: bool) -> Result<i32, LaunchError> {
    let this_exe = std::env::current_exe().and_then(|exe| exe.canonicalize());
    let dirs = capi_dirs(this_exe.as_deref())?;
    if !showme {
        check_capi(&dirs, stage(args))?;
    }
    let path_var = std::env::var_os("PATH");
    let compiler = compiler_words(
        language,
        std::env::var_os(language.compiler_var()).as_deref(),
        this_exe.as_deref().ok(),
        path_var.as_deref(),
    );
    // Never empty: `compiler_words` gives at least the compiler's program.
    let command = compiler_command(&compiler, args, &dirs);
    if showme {
        println!("{}", shell_line(&command));
        return Ok(0);
    }
    let status = std::process::Command::new(&command[0])
        .args(&command[1..])
        .status()
        .map_err(|source| LaunchError::Spawn {
            program: command[0].to_string_lossy().into_owned(),
            source,
        })?;
    Ok(exit_code(status))
}

/// The directories from the environment, else the defaults (see the module doc).
fn capi_dirs(this_exe: Result<&Path, &io::Error>) -> Result<CapiDirs, LaunchError> {
    let include = std::env::var_os(INCLUDE_DIR_VAR)
        .map_or_else(|| PathBuf::from(DEFAULT_INCLUDE_DIR), PathBuf::from);
    let lib = match std::env::var_os(LIB_DIR_VAR) {
        Some(dir) => PathBuf::from(dir),
        None => this_exe
            .map_err(|e| {
                Error::Config(format!(
                    "cannot find the ferroshmem executable ({e}): set {LIB_DIR_VAR}"
                ))
            })?
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| {
                Error::Config(format!(
                    "cannot tell the ferroshmem executable's directory: set {LIB_DIR_VAR}"
                ))
            })?,
    };
    Ok(CapiDirs { include, lib })
}

/// Checks that what `stage` adds flags for exists: the headers, and for a link the library.
fn check_capi(dirs: &CapiDirs, stage: Stage) -> Result<(), LaunchError> {
    if stage != Stage::Query && !dirs.include.join("shmem.h").is_file() {
        return Err(LaunchError::CapiMissing {
            what: "the C API's header shmem.h",
            path: dirs.include.clone(),
            variable: INCLUDE_DIR_VAR,
        });
    }
    if stage == Stage::Link && !LIBRARY_FILES.iter().any(|f| dirs.lib.join(f).is_file()) {
        return Err(LaunchError::CapiMissing {
            what: "the C API's library (libferroshmem_c.so or libferroshmem_c.a)",
            path: dirs.lib.clone(),
            variable: LIB_DIR_VAR,
        });
    }
    Ok(())
}

/// The compiler: `from_env` (the value of `$CC` or `$CXX`) split on whitespace, unless it is
/// empty or one of its words would start `this_exe` when searched in `path_var`; else the
/// language's default.
fn compiler_words(
    language: Language,
    from_env: Option<&OsStr>,
    this_exe: Option<&Path>,
    path_var: Option<&OsStr>,
) -> Vec<OsString> {
    let words: Vec<OsString> = from_env
        .map(|value| {
            value
                .as_bytes()
                .split(u8::is_ascii_whitespace)
                .filter(|word| !word.is_empty())
                .map(|word| OsStr::from_bytes(word).to_os_string())
                .collect()
        })
        .unwrap_or_default();
    let starts_this_exe = |word: &OsString| {
        this_exe.is_some_and(|exe| resolve_program(word, path_var).is_some_and(|p| p == exe))
    };
    if words.is_empty() || words.iter().any(starts_this_exe) {
        vec![language.default_compiler().into()]
    } else {
        words
    }
}

/// The file that running `program` starts, canonicalized: `program` itself when it has a
/// `/`, else the first file of that name in the directories of `path_var`.
fn resolve_program(program: &OsStr, path_var: Option<&OsStr>) -> Option<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Path::new(program).canonicalize().ok();
    }
    std::env::split_paths(path_var?)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())?
        .canonicalize()
        .ok()
}

/// `command` as one line a POSIX shell runs: words with characters the shell treats
/// specially are quoted.
pub fn shell_line(command: &[OsString]) -> String {
    let plain = |b: &u8| b.is_ascii_alphanumeric() || b"-_+=/.,:@%^".contains(b);
    command
        .iter()
        .map(|word| {
            if !word.is_empty() && word.as_bytes().iter().all(plain) {
                word.to_string_lossy().into_owned()
            } else {
                hosts::quote(word).to_string_lossy().into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The exit code that reports `status`: its code, or 128 + the signal that ended it.
fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    fn dirs() -> CapiDirs {
        CapiDirs {
            include: "/fs/include".into(),
            lib: "/fs/lib".into(),
        }
    }

    #[test]
    fn stage_follows_the_compile_only_flags() {
        assert_eq!(stage(&words("-O2 ring.c -o ring")), Stage::Link);
        for line in [
            "-c ring.c",
            "-S ring.c",
            "-E ring.c",
            "-M ring.c",
            "-MM ring.c",
        ] {
            assert_eq!(stage(&words(line)), Stage::CompileOnly, "{line}");
        }
        // Flags that only look alike still link: -MD and -MMD write dependencies on the way.
        assert_eq!(stage(&words("-MD -MMD -Cfoo ring.c")), Stage::Link);
        assert_eq!(stage(&words("--version")), Stage::Query);
        assert_eq!(stage(&words("-v")), Stage::Query);
        assert_eq!(stage(&[]), Stage::Query);
    }

    #[test]
    fn a_link_gets_the_include_and_the_link_flags_around_the_arguments() {
        let command = compiler_command(&words("cc"), &words("-O2 ring.c -o ring"), &dirs());
        assert_eq!(
            shell_line(&command),
            "cc -I /fs/include -fno-plt -O2 ring.c -o ring -L /fs/lib -lferroshmem_c \
             -Wl,-rpath,/fs/lib -lpthread -ldl -lm"
        );
    }

    #[test]
    fn compile_only_gets_the_include_and_codegen_flags_alone() {
        let command = compiler_command(&words("ccache gcc"), &words("-c ring.c"), &dirs());
        assert_eq!(
            command,
            words("ccache gcc -I /fs/include -fno-plt -c ring.c")
        );
        let command = compiler_command(&words("c++"), &words("-MM x.cpp"), &dirs());
        assert_eq!(command, words("c++ -I /fs/include -fno-plt -MM x.cpp"));
    }

    #[test]
    fn a_query_is_passed_through_bare() {
        let command = compiler_command(&words("cc"), &words("--version"), &dirs());
        assert_eq!(command, words("cc --version"));
    }

    #[test]
    fn arguments_pass_unchanged_and_odd_words_are_quoted_in_the_shown_line() {
        let args = vec![
            OsString::from("-DNAME=\"a b\""),
            OsString::from("my prog.c"),
        ];
        let dirs = CapiDirs {
            include: "/it's/include".into(),
            lib: "/fs/lib".into(),
        };
        let command = compiler_command(&words("cc"), &args, &dirs);
        assert_eq!(&command[4..6], &args[..]);
        assert!(shell_line(&command).starts_with(
            r#"cc -I '/it'\''s/include' -fno-plt '-DNAME="a b"' 'my prog.c' -L /fs/lib"#
        ));
    }

    #[test]
    fn showme_is_taken_out_wherever_it_is() {
        assert_eq!(
            take_showme(words("ring.c --showme -o ring")),
            (words("ring.c -o ring"), true)
        );
        assert_eq!(
            take_showme(words("-showme -c x.c")),
            (words("-c x.c"), true)
        );
        assert_eq!(take_showme(words("-c x.c")), (words("-c x.c"), false));
    }

    #[test]
    fn the_compiler_comes_from_the_environment_unless_it_is_this_wrapper() {
        let exe = std::env::current_exe().unwrap().canonicalize().unwrap();
        let dir = exe.parent().unwrap().as_os_str();
        let name = exe.file_name().unwrap();
        let pick = |env: Option<&str>, path: Option<&OsStr>| {
            compiler_words(Language::C, env.map(OsStr::new), Some(&exe), path)
        };
        assert_eq!(pick(None, None), words("cc"));
        assert_eq!(pick(Some("  "), None), words("cc"));
        assert_eq!(
            pick(Some("ccache  gcc -m64"), None),
            words("ccache gcc -m64")
        );
        // This executable, by path or found in PATH, is passed over.
        assert_eq!(pick(Some(exe.to_str().unwrap()), None), words("cc"));
        let by_name = format!("ccache {}", name.to_str().unwrap());
        assert_eq!(pick(Some(&by_name), Some(dir)), words("cc"));
        assert_eq!(pick(Some(&by_name), None), words(&by_name));
        assert_eq!(
            compiler_words(Language::Cxx, None, None, None),
            words("c++")
        );
    }

    #[test]
    fn missing_headers_or_library_are_named() {
        let err = check_capi(&dirs(), Stage::CompileOnly).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("shmem.h") && message.contains("/fs/include"),
            "{message}"
        );
        assert!(message.contains("cargo build -p ferroshmem-c"), "{message}");
        assert!(message.contains(INCLUDE_DIR_VAR), "{message}");
        assert_eq!(err.exit_code(), 1);
        assert!(check_capi(&dirs(), Stage::Query).is_ok());

        let dir = std::env::temp_dir().join(format!("ferroshmem-cc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("shmem.h"), "").unwrap();
        let found = CapiDirs {
            include: dir.clone(),
            lib: dir.clone(),
        };
        assert!(check_capi(&found, Stage::CompileOnly).is_ok());
        let message = check_capi(&found, Stage::Link).unwrap_err().to_string();
        assert!(message.contains("libferroshmem_c.so"), "{message}");
        assert!(message.contains(LIB_DIR_VAR), "{message}");
        std::fs::write(dir.join("libferroshmem_c.a"), "").unwrap();
        assert!(check_capi(&found, Stage::Link).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_signal_becomes_128_plus_its_number() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
    }
}
