//! The `ferroshmem` command line: argument parsing, the subcommands (`run`, and the compiler
//! wrappers `cc` and `c++`) and the process's exit code.

use std::ffi::OsString;
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use ferroshmem_runtime::config::Bind;

use super::compile::{self, Language};
use super::hosts::{self, Host};
use super::{argv, launch, LaunchOptions};
use crate::launch_env::parse_duration;
use crate::Error;

/// ferroshmem: OpenSHMEM/NVSHMEM's programming model as an async Rust runtime.
#[derive(Debug, Parser)]
#[command(name = "ferroshmem", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program as the N PEs of one job, one process per PE (also `oshrun`).
    ///
    /// The launcher hosts the job's bootstrap root and gives each PE its rank, the job's size
    /// and the way to the root in FERROSHMEM_* environment variables. Each line a PE prints is
    /// shown on the same stream prefixed with `[pe i] `. When a PE fails, or the launcher gets
    /// SIGINT/SIGTERM/SIGHUP/SIGQUIT, the other PEs get SIGTERM, then SIGKILL after the grace
    /// period. If the launcher dies anyway (SIGKILL), the kernel kills the PEs.
    ///
    /// oshrun's and mpirun's spellings work too: `-np 4`, `-N 2` (PEs per host), and the long
    /// options with one dash (`-hosts a,b`), up to the program's name.
    ///
    /// Exit status: 0 when every PE exits with 0; else the first failing PE's exit code, or
    /// 128 + N when it was killed by signal N (or the launcher was); 127 when the program
    /// is not found; 2 for bad options.
    #[command(
        after_help = "Examples:\n  ferroshmem run -n 4 -- target/release/examples/ring\n  ferroshmem run -np 4 ./ring\n  ferroshmem run --hosts node1:2,node2:2 -- /shared/ring\n  ferroshmem run --hosts node1,node2 -N 2 -- /shared/ring"
    )]
    Run(RunArgs),
    /// Compile and link a C program against the C API (shmem.h, libferroshmem_c), as oshcc.
    ///
    /// Runs $CC (else cc) on the arguments, unchanged, after `-I INCLUDE -fno-plt` and
    /// followed by `-L LIB -lferroshmem_c -Wl,-rpath,LIB -lpthread -ldl -lm`. Only the first
    /// two are added when the arguments stop before linking (-c, -S, -E, -M or -MM), and
    /// nothing when they name no input (--version, -v). INCLUDE: $FERROSHMEM_INCLUDE_DIR,
    /// else the source tree's capi/include; LIB: $FERROSHMEM_LIB_DIR, else the directory of this ferroshmem, where
    /// `cargo build -p ferroshmem-c` puts the library. A link to ferroshmem named oshcc acts as
    /// `ferroshmem cc`. A $CC that would run this wrapper itself (CC=oshcc) is passed over.
    ///
    /// Exit status: the compiler's; 1 when the headers or the library are missing; 127 when
    /// the compiler is not found.
    #[command(
        after_help = "Examples:\n  ferroshmem cc -O2 -o ring ring.c\n  ferroshmem cc -c ring.c && ferroshmem cc -o ring ring.o\n  ferroshmem cc --showme -o ring ring.c"
    )]
    Cc(CompileArgs),
    /// Compile and link a C++ program against the C API, as oshc++: `ferroshmem cc` with $CXX
    /// (else c++).
    ///
    /// The flags, the directories and the exit status are those of `ferroshmem cc`; a link to
    /// ferroshmem named oshc++ (or oshcxx, oshCC) acts as `ferroshmem c++`.
    #[command(name = "c++")]
    Cxx(CompileArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Number of PEs (processes) to start (also `-np N`); with --hosts or -N, the job's size
    /// that they give (which -n must then equal).
    #[arg(short = 'n', long = "np", value_name = "N", value_parser = parse_n_pes)]
    n_pes: Option<usize>,

    /// PEs per host: with --hosts (given without counts), every host runs N; without it,
    /// this host runs N.
    #[arg(
        short = 'N',
        long = "pes-per-host",
        visible_alias = "npernode",
        value_name = "N",
        value_parser = parse_n_pes
    )]
    pes_per_host: Option<usize>,

    /// Hosts and how many PEs each runs, in rank order: `a:2,b:2` (a host without a count
    /// runs one, or -N). PEs on hosts other than `localhost` are started through --rsh.
    #[arg(long, visible_alias = "host", value_name = "HOST[:N]|[IPV6][:N],...")]
    hosts: Option<String>,

    /// The remote shell that starts PEs on other hosts, as `RSH HOST COMMAND-LINE`; split
    /// on spaces (`"ssh -p 2222"`). The command line is quoted for a POSIX shell, as `ssh`
    /// expects; an agent must run it with `sh -c`.
    #[arg(long, value_name = "CMD", default_value = "ssh")]
    rsh: String,

    /// The address the bootstrap root listens on. Default: loopback when every PE runs here,
    /// else the address this host reaches the first other host from.
    #[arg(long, value_name = "IP")]
    root_address: Option<IpAddr>,

    /// Time the PEs get to exit after SIGTERM before SIGKILL (e.g. 2s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_time)]
    grace: Duration,

    /// How long the job may take to form (e.g. 30s); passed to the PEs as
    /// FERROSHMEM_BOOTSTRAP_TIMEOUT. Default: that variable, else 60s.
    #[arg(long, value_name = "DURATION", value_parser = parse_time)]
    timeout: Option<Duration>,

    /// Where each PE's threads run: `share`, an equal block of the machine's CPUs per PE of
    /// the job there, in rank order (one CPU each, dealt in rank order, where PEs outnumber
    /// CPUs; unbound where they were placed already); `core`, one CPU each, the
    /// host's CPUs dealt over its PEs in rank order, as `mpirun --bind-to core`; `none`,
    /// where they start. Passed to the PEs as FERROSHMEM_BIND. Default: that variable, else
    /// share.
    #[arg(long, value_name = "share|core|none", value_parser = str::parse::<Bind>)]
    bind_to: Option<Bind>,

    /// The PE program and its arguments (put `--` before them if they start with `-`).
    #[arg(
        value_name = "PROGRAM",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

/// The compiler wrapper's arguments.
#[derive(Debug, Args)]
struct CompileArgs {
    /// Print the compiler's command line instead of running it (also `-showme`, and
    /// anywhere among the compiler's arguments).
    #[arg(long)]
    showme: bool,

    /// The compiler's arguments, passed on unchanged: sources, objects, -o, -O2, ...
    #[arg(
        value_name = "COMPILER-ARGS",
        num_args = 0..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    compiler_args: Vec<OsString>,
}

fn parse_n_pes(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{text:?} is not a number of PEs (1 or more)")),
    }
}

fn parse_time(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// The `ferroshmem` binary: parses the command line (also as `oshrun`, `mpirun` and `oshcc`
/// users write it), runs the subcommand, and returns the exit code described in its `--help`.
pub fn cli_main() -> ExitCode {
    let argv = argv::normalize(std::env::args_os(), &Cli::command());
    let code = match Cli::parse_from(argv).command {
        Command::Run(args) => run_job(args),
        Command::Cc(args) => run_compiler(Language::C, args),
        Command::Cxx(args) => run_compiler(Language::Cxx, args),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// The job's size and hosts from `-n`, `-N` and `--hosts` (an empty list: every PE here).
///
/// # Errors
/// [`Error::InvalidArgument`] when `--hosts` is malformed, when the job's size is not given,
/// or when `-n` disagrees with the size that `-N` and `--hosts` give.
fn job_shape(
    n_pes: Option<usize>,
    pes_per_host: Option<usize>,
    hosts_text: Option<&str>,
) -> crate::Result<(usize, Vec<Host>)> {
    let hosts = match (hosts_text, pes_per_host) {
        (Some(text), None) => hosts::parse_hosts(text)?,
        (Some(text), Some(per_host)) => {
            let hosts = hosts::parse_hosts_per_host(text, per_host)?;
            let total = hosts.len().saturating_mul(per_host);
            if let Some(n) = n_pes.filter(|&n| n != total) {
                return Err(Error::InvalidArgument(format!(
                    "-n {n} but -N {per_host} on {} hosts makes {total} PEs",
                    hosts.len()
                )));
            }
            hosts
        }
        (None, Some(per_host)) => {
            if let Some(n) = n_pes.filter(|&n| n != per_host) {
                return Err(Error::InvalidArgument(format!(
                    "-n {n} but -N {per_host} without --hosts makes {per_host} PEs on this host"
                )));
            }
            return Ok((per_host, Vec::new()));
        }
        (None, None) => Vec::new(),
    };
    Ok((hosts::place(&hosts, n_pes)?.len(), hosts))
}

/// `ferroshmem run`: launches the job and returns the launcher's exit code.
fn run_job(args: RunArgs) -> i32 {
    let mut command = args.command.into_iter();
    let program = command.next().unwrap_or_default();
    // The program's words take what follows the options, so a misspelt option would be
    // taken for the program: no program's name starts with '-'.
    if program.as_encoded_bytes().starts_with(b"-") {
        eprintln!(
            "ferroshmem: {} is not an option of `ferroshmem run` (see `ferroshmem run --help`)",
            program.to_string_lossy()
        );
        return 2;
    }
    let (n_pes, hosts) = match job_shape(args.n_pes, args.pes_per_host, args.hosts.as_deref()) {
        Ok(shape) => shape,
        Err(e) => {
            eprintln!("ferroshmem: {e}");
            return 2;
        }
    };
    let options = LaunchOptions {
        grace: args.grace,
        bootstrap_timeout: args.timeout,
        hosts,
        rsh: args.rsh.split_whitespace().map(OsString::from).collect(),
        root_address: args.root_address,
        bind: args.bind_to,
        ..LaunchOptions::new(n_pes, program).args(command)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let result = match runtime {
        Ok(runtime) => runtime.block_on(launch(options)),
        Err(e) => {
            eprintln!("ferroshmem: cannot start the async runtime: {e}");
            return 1;
        }
    };
    match result {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            eprintln!("ferroshmem: {e}");
            e.exit_code()
        }
    }
}

/// `ferroshmem cc` and `c++`: runs the compiler and returns its exit code.
fn run_compiler(language: Language, args: CompileArgs) -> i32 {
    let (compiler_args, showme_among_args) = compile::take_showme(args.compiler_args);
    match compile::compile(language, &compiler_args, args.showme || showme_among_args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferroshmem: {e}");
            e.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `line` (after the program's name) as the binary does.
    fn parse(line: &str) -> Result<Command, clap::Error> {
        let words = std::iter::once("ferroshmem")
            .chain(line.split_whitespace())
            .map(OsString::from);
        Cli::try_parse_from(argv::normalize(words, &Cli::command())).map(|cli| cli.command)
    }

    fn run_args(line: &str) -> RunArgs {
        match parse(line) {
            Ok(Command::Run(args)) => args,
            other => panic!("{line}: {other:?}"),
        }
    }

    fn program_words(args: &RunArgs) -> Vec<&str> {
        args.command.iter().map(|w| w.to_str().unwrap()).collect()
    }

    #[test]
    fn np_is_taken_in_every_spelling() {
        for line in [
            "run -np 4 prog",
            "run -np=4 prog",
            "run --np 4 prog",
            "run --np=4 prog",
            "run -n 4 prog",
            "run -n4 prog",
            "run -n=4 prog",
            "run -N4 -n 4 prog",
            "run --grace 1s -np 4 prog",
            "run -np 4 -- prog",
        ] {
            let args = run_args(line);
            assert_eq!(args.n_pes, Some(4), "{line}");
            assert_eq!(program_words(&args), ["prog"], "{line}");
        }
    }

    #[test]
    fn the_programs_arguments_are_not_rewritten() {
        let args = run_args("run -np 2 prog -np 3 -npernode 1");
        assert_eq!(program_words(&args), ["prog", "-np", "3", "-npernode", "1"]);
        let args = run_args("run -n 2 -- -np 3");
        assert_eq!(program_words(&args), ["-np", "3"]);
        // An option's value is not the program: the rewriting goes on after it.
        let args = run_args("run -N 2 -np 2 prog");
        assert_eq!((args.n_pes, args.pes_per_host), (Some(2), Some(2)));
    }

    #[test]
    fn mpirun_long_options_take_one_dash() {
        let args = run_args("run -npernode 2 -host a,b -grace=1s -rsh ssh prog");
        assert_eq!(args.pes_per_host, Some(2));
        assert_eq!(args.hosts.as_deref(), Some("a,b"));
        assert_eq!(args.grace, Duration::from_secs(1));
        assert_eq!(program_words(&args), ["prog"]);
        assert!(parse("run -np 0 prog").is_err());
        assert!(parse("run -np x prog").is_err());
    }

    #[test]
    fn existing_options_are_unchanged() {
        let args = run_args("run -n 2 --hosts a:1,b:1 --timeout 5s --root-address 10.0.0.1 prog x");
        assert_eq!(args.n_pes, Some(2));
        assert_eq!(args.hosts.as_deref(), Some("a:1,b:1"));
        assert_eq!(args.timeout, Some(Duration::from_secs(5)));
        assert_eq!(program_words(&args), ["prog", "x"]);
    }

    #[test]
    fn pes_per_host_shapes_the_job() {
        let local = |n, per| job_shape(n, per, None).map(|(n, hosts)| (n, hosts.len()));
        assert_eq!(local(None, Some(3)).unwrap(), (3, 0));
        assert_eq!(local(Some(3), Some(3)).unwrap(), (3, 0));
        let err = local(Some(4), Some(3)).unwrap_err().to_string();
        assert!(err.contains("-n 4") && err.contains("-N 3"), "{err}");
        assert_eq!(local(Some(5), None).unwrap(), (5, 0));
        assert!(local(None, None).is_err());

        let (n, hosts) = job_shape(None, Some(2), Some("a,b")).unwrap();
        assert_eq!(n, 4);
        assert!(hosts.iter().all(|h| h.slots == 2));
        assert_eq!(job_shape(Some(4), Some(2), Some("a,b")).unwrap().0, 4);
        let err = job_shape(Some(3), Some(2), Some("a,b"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("makes 4 PEs"), "{err}");
        assert!(job_shape(None, Some(2), Some("a:2,b")).is_err());
        assert_eq!(job_shape(None, None, Some("a:2,b")).unwrap().0, 3);
        assert!(job_shape(Some(2), None, Some("a:2,b")).is_err());
    }

    #[test]
    fn the_compiler_wrappers_take_every_argument() {
        let arguments = "-O2 -c x.c -o x.o --showme";
        for subcommand in ["cc", "c++"] {
            let line = format!("{subcommand} {arguments}");
            let args = match (subcommand, parse(&line)) {
                ("cc", Ok(Command::Cc(args))) | ("c++", Ok(Command::Cxx(args))) => args,
                (_, other) => panic!("{line}: {other:?}"),
            };
            assert!(!args.showme);
            assert_eq!(
                args.compiler_args,
                arguments.split_whitespace().collect::<Vec<_>>()
            );
        }
        let Ok(Command::Cc(args)) = parse("cc --showme -np 2 x.c") else {
            panic!("cc --showme");
        };
        assert!(args.showme);
        assert_eq!(args.compiler_args, ["-np", "2", "x.c"]);
    }

    #[test]
    fn a_link_named_oshcc_or_oshrun_acts_as_the_subcommand() {
        let parse_as = |argv0: &str, line: &str| {
            let words = std::iter::once(argv0)
                .chain(line.split_whitespace())
                .map(OsString::from);
            Cli::try_parse_from(argv::normalize(words, &Cli::command())).map(|cli| cli.command)
        };
        assert!(matches!(
            parse_as("/usr/local/bin/oshcc", "-c x.c"),
            Ok(Command::Cc(_))
        ));
        assert!(matches!(parse_as("oshc++", "x.cpp"), Ok(Command::Cxx(_))));
        match parse_as("oshrun", "-np 3 prog") {
            Ok(Command::Run(args)) => assert_eq!(args.n_pes, Some(3)),
            other => panic!("oshrun: {other:?}"),
        }
        assert!(matches!(
            parse_as("/x/ferroshmem", "cc x.c"),
            Ok(Command::Cc(_))
        ));
    }
}
