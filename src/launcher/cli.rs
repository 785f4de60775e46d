//! The `ferroshmem` command line: argument parsing and the process's exit code.

use std::ffi::OsString;
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use super::hosts;
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
    #[command(
        after_help = "Examples:\n  ferroshmem run -n 4 -- target/release/examples/ring\n  ferroshmem run --hosts node1:2,node2:2 -- /shared/ring"
    )]
    Run(RunArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Number of PEs (processes) to start; with --hosts, the sum of its counts (which -n
    /// must then equal).
    #[arg(short = 'n', long = "np", value_name = "N", value_parser = parse_n_pes)]
    n_pes: Option<usize>,

    /// Hosts and how many PEs each runs, in rank order: `a:2,b:2` (a host without a count
    /// runs one). PEs on hosts other than `localhost` are started through --rsh.
    #[arg(long, value_name = "HOST[:N],...")]
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
    let placed = args
        .hosts
        .as_deref()
        .map_or(Ok(Vec::new()), hosts::parse_hosts)
        .and_then(|hosts| Ok((hosts::place(&hosts, args.n_pes)?.len(), hosts)));
    let (n_pes, hosts) = match placed {
        Ok(placed) => placed,
        Err(e) => {
            eprintln!("ferroshmem: {e}");
            return ExitCode::from(2);
        }
    };
    let options = LaunchOptions {
        grace: args.grace,
        bootstrap_timeout: args.timeout,
        hosts,
        rsh: args.rsh.split_whitespace().map(OsString::from).collect(),
        root_address: args.root_address,
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
