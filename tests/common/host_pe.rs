//! The PE program of the tests across namespace hosts, and what they share to watch a job:
//! a test binary acts as a PE when [`SCENARIO`] is set (its `pe_entry` test calls
//! [`act_if_asked`]), whichever launcher started it (`ferroshmem run --hosts`, `mpirun`,
//! `srun`).

use std::process::Output;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Instant;

use ferroshmem::Error;

use super::cpus;

/// The scenario a PE runs: `all`, `collectives`, one scenario's name, `c:NAME` for one
/// collective scenario, `cpus`, `kill-remote` or `cut-link`.
pub const SCENARIO: &str = "FSH_TEST_SCENARIO";
/// Where PE 0 of a loss scenario writes what its wait ended with.
pub const REPORT: &str = "FSH_TEST_REPORT";

/// Acts as a PE of the job when [`SCENARIO`] is set, and does nothing otherwise.
pub fn act_if_asked() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    ferroshmem::observability::init_tracing();
    let rt = super::runtime();
    let results = rt.block_on(ferroshmem::run(1, move |pe| {
        let scenario = scenario.clone();
        async move {
            let me = pe.my_pe();
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            println!("PE {me} runs on {}", host.trim());
            if scenario == "cpus" {
                println!(
                    "PE {me} may run on CPUs {}",
                    cpus::allowed_list("/proc/self/status")
                );
                return Ok(());
            }
            if let "kill-remote" | "cut-link" = scenario.as_str() {
                return lose_one(&pe, &scenario).await;
            }
            // `all`, `collectives`, one scenario, or `c:NAME` for one collective scenario.
            let names: Vec<&str> = match scenario.as_str() {
                "all" => super::scenarios::ALL.to_vec(),
                "collectives" => super::collective_scenarios::ALL.to_vec(),
                one => vec![one.strip_prefix("c:").unwrap_or(one)],
            };
            let collective = scenario == "collectives" || scenario.starts_with("c:");
            let mut failed = Vec::new();
            for name in names {
                let started = Instant::now();
                let outcome = if collective {
                    super::collective_scenarios::run(name, pe.clone()).await
                } else {
                    super::scenarios::run(name, pe.clone()).await
                };
                println!("PE {me}: scenario {name} took {:?}", started.elapsed());
                if let Err(e) = outcome {
                    println!("PE {me}: scenario {name} failed: {e}");
                    failed.push(name);
                }
            }
            if failed.is_empty() {
                println!("PE {me}: every scenario passed");
                Ok(())
            } else {
                Err(Error::InvalidArgument(format!("failed: {failed:?}")))
            }
        }
    }));
    match results {
        Ok(r) if r.iter().all(|r| r.is_ok()) => {}
        other => {
            eprintln!("{other:?}");
            std::process::exit(1);
        }
    }
}

/// The last PE (on the last host) is lost once every PE has said `ready` after a barrier:
/// the test kills its process (by the pid it printed) or cuts its host's link. PE 0, which
/// outlives the launcher's SIGTERM (the job stops when the victim's process ends), reports
/// what its wait ended with.
async fn lose_one(pe: &ferroshmem::Pe, how: &str) -> ferroshmem::Result<()> {
    let mut stop = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::os("SIGTERM handler", e))?;
    let (me, victim) = (pe.my_pe(), pe.n_pes() - 1);
    let flag = pe.calloc::<u64>(1).await?;
    pe.barrier_all().await?;
    println!("PE {me} ready, pid {}", std::process::id());
    if me == victim && how == "cut-link" {
        // Cut off meanwhile: this put never arrives, and this PE, which loses the root,
        // stays until the launcher stops it, so that PE 0 learns of the loss from the root.
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let _ = pe.p(&flag, 1, 0).await;
    }
    if me != 0 {
        // The launcher stops the job: this PE's own handler keeps it to say so.
        let _ = stop.recv().await;
        println!("PE {me} stopped by SIGTERM");
        return Ok(());
    }
    let started = Instant::now();
    let report = match pe.wait_until(&flag, ferroshmem::Cmp::Eq, 1).await {
        Err(Error::PeerLost { pe: lost, .. }) => format!(
            "PE {me}: PeerLost of PE {lost} after {} ms",
            started.elapsed().as_millis()
        ),
        other => format!("PE {me}: the wait ended with {other:?}"),
    };
    // Also in a file: the launcher stops this PE once the victim's process has ended, and
    // what it prints by then may not all be forwarded.
    if let Ok(path) = std::env::var(REPORT) {
        let _ = std::fs::write(path, &report);
    }
    println!("{report}");
    std::mem::forget(flag);
    Ok(())
}

/// A finished job's stdout and stderr, one after the other, for the tests' messages.
pub fn text(out: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Reads the job's stdout lines as they come; `on_ready` runs, with the lines so far, once
/// `ready_lines` PEs said `ready`. Returns every line, with when PE 0's report came (after
/// `on_ready`). Kills the job if it runs past a minute (the test then fails on the missing
/// report).
pub fn watch_job(
    mut child: std::process::Child,
    ready_lines: usize,
    on_ready: impl FnOnce(&str),
) -> (
    String,
    Option<std::time::Duration>,
    std::process::ExitStatus,
) {
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let errors = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let pid = rustix::process::Pid::from_child(&child);
    // Told when the job has ended, so that it never kills a process that took its pid.
    let (ended, guard_hears) = std::sync::mpsc::channel::<()>();
    let guard = std::thread::spawn(move || {
        let limit = std::time::Duration::from_secs(60);
        if guard_hears.recv_timeout(limit) == Err(RecvTimeoutError::Timeout) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    });
    let (mut all, mut ready, mut on_ready, mut since, mut report) =
        (String::new(), 0, Some(on_ready), None, None);
    for line in std::io::BufReader::new(stdout)
        .lines()
        .map_while(|l| l.ok())
    {
        all.push_str(&line);
        all.push('\n');
        if line.contains(" ready") {
            ready += 1;
            if ready == ready_lines {
                if let Some(f) = on_ready.take() {
                    f(&all);
                    since = Some(Instant::now());
                }
            }
        }
        if line.contains("[pe 0] PE 0:") && report.is_none() {
            report = since.map(|t| t.elapsed());
        }
    }
    let status = child.wait().expect("the launcher ends");
    let _ = ended.send(());
    let _ = guard.join();
    all.push_str(&errors.join().unwrap_or_default());
    (all, report, status)
}

/// Kills PE 3's process (on the second host), by the pid its `ready` line gave.
pub fn kill_pe_3(ready: &str) {
    let pid = ready
        .lines()
        .find_map(|l| {
            l.split_once("PE 3 ready, pid ")?
                .1
                .trim()
                .parse::<i32>()
                .ok()
        })
        .and_then(rustix::process::Pid::from_raw)
        .unwrap_or_else(|| panic!("PE 3 said its pid:\n{ready}"));
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("kill PE 3");
}
