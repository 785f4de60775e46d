//! The `ferroshmem` command line: argument parsing and the process's exit code.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use super::{launch, LaunchOptions};
use crate::launch_env::parse_duration;

/// ferroshmem: OpenSHMEM/NVSHMEM's programming model as an async Rust runtime.
#[derive(Debug, Parser)]
#[command(name = "ferroshmem", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program as the N PEs of one job, one process per PE.
    ///
    /// The launcher hosts the job's bootstrap root and gives each PE its rank, the job's size
    /// and the way to the root in FERROSHMEM_* environment variables. Each line a PE prints is
    /// shown on the same stream prefixed with `[pe i] `. When a PE fails, or the launcher gets
    /// SIGINT/SIGTERM/SIGHUP/SIGQUIT, the other PEs get SIGTERM, then SIGKILL after the grace
    /// period. If the launcher dies anyway (SIGKILL), the kernel kills the PEs.
    ///
    /// Exit status: 0 when every PE exits with 0; else the first failing PE's exit code, or
    /// 128 + N when it was killed by signal N (or the launcher was); 127 when the program
    /// is not found.
    #[command(after_help = "Example:\n  ferroshmem run -n 4 -- target/release/examples/ring")]
    Run(RunArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Number of PEs (processes) to start.
    #[arg(short = 'n', long = "np", value_name = "N", value_parser = parse_n_pes)]
    n_pes: usize,

    /// Time the PEs get to exit after SIGTERM before SIGKILL (e.g. 2s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_time)]
    grace: Duration,

    /// How long the job may take to form (e.g. 30s); passed to the PEs as
    /// FERROSHMEM_BOOTSTRAP_TIMEOUT. Default: that variable, else 60s.
    #[arg(long, value_name = "DURATION", value_parser = parse_time)]
    timeout: Option<Duration>,

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

fn parse_n_pes(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{text:?} is not a number of PEs (1 or more)")),
    }
}

fn parse_time(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// The `ferroshmem` binary: parses the command line, runs the job, and returns the exit code
/// described in `ferroshmem run --help`.
pub fn cli_main() -> ExitCode {
    let Command::Run(args) = Cli::parse().command;
    let mut command = args.command.into_iter();
    let program = command.next().unwrap_or_default();
    let options = LaunchOptions {
        grace: args.grace,
        bootstrap_timeout: args.timeout,
        ..LaunchOptions::new(args.n_pes, program).args(command)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let result = match runtime {
        Ok(runtime) => runtime.block_on(launch(options)),
        Err(e) => {
            eprintln!("ferroshmem: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match result {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            eprintln!("ferroshmem: {e}");
            e.exit_code()
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
