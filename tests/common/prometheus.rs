//! A real Prometheus for the tests that check ferroshmem's metrics end to end: Debian's
//! `prometheus` server started on a scratch directory to scrape given endpoints every second,
//! instant queries through its HTTP API, the Grafana dashboard's queries with its variables
//! filled in as Grafana would, and a launched job that stays up while it is scraped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long any one step may take.
pub const STEP: Duration = Duration::from_secs(30);

/// Kills and reaps a child process when dropped, so that a failing test leaves nothing
/// running.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port nothing listens on, and the `count - 1` after it.
pub fn free_ports(count: u16) -> u16 {
    for _ in 0..100 {
        let base = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        if base.checked_add(count).is_some()
            && (0..count).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok())
        {
            return base;
        }
    }
    panic!("no {count} consecutive free loopback ports");
}

/// Percent-encodes a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs an instant query against the Prometheus at `server`; `None` while it cannot answer.
pub fn query(server: SocketAddr, promql: &str) -> Option<Vec<serde_json::Value>> {
    let mut stream = TcpStream::connect_timeout(&server, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET /api/v1/query?query={} HTTP/1.0\r\nHost: {server}\r\n\r\n",
        encode(promql)
    )
    .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    let body = reply.split_once("\r\n\r\n")?.1;
    let json: serde_json::Value = serde_json::from_str(body).ok()?;
    (json["status"] == "success").then(|| json["data"]["result"].as_array().cloned())?
}

/// The labels `a` and `b` and the value of each series of an instant query's result.
pub fn pairs(series: &[serde_json::Value], a: &str, b: &str) -> Vec<(String, String, f64)> {
    let label =
        |s: &serde_json::Value, name: &str| s["metric"][name].as_str().unwrap_or("").to_string();
    let mut out: Vec<_> = series
        .iter()
        .map(|s| {
            let value = s["value"][1]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN);
            (label(s, a), label(s, b), value)
        })
        .collect();
    out.sort_by(|x, y| (&x.0, &x.1).cmp(&(&y.0, &y.1)));
    out
}

/// The Grafana dashboard, parsed.
fn dashboard() -> serde_json::Value {
    serde_json::from_str(include_str!(
        "../../observability/dashboards/ferroshmem.json"
    ))
    .expect("the dashboard is JSON")
}

/// `expr` with the dashboard's variables filled in as Grafana would (every job and node, a
/// one-minute rate window).
fn filled(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$job_id", ".*")
        .replace("$node", ".*")
}

/// The Grafana dashboard's panel queries, with its variables filled in.
pub fn dashboard_queries() -> Vec<String> {
    fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) => map.iter().for_each(|(k, child)| match child {
                serde_json::Value::String(e) if k == "expr" => out.push(e.clone()),
                _ => exprs(child, out),
            }),
            serde_json::Value::Array(items) => items.iter().for_each(|i| exprs(i, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    exprs(&dashboard(), &mut out);
    assert!(!out.is_empty());
    out.iter().map(|e| filled(e)).collect()
}

/// The first query of the dashboard's panel whose title starts with `title`, filled in.
pub fn panel_query(title: &str) -> String {
    let dashboard = dashboard();
    let panel = dashboard["panels"]
        .as_array()
        .and_then(|panels| {
            panels
                .iter()
                .find(|p| p["title"].as_str().is_some_and(|t| t.starts_with(title)))
        })
        .unwrap_or_else(|| panic!("no panel titled {title:?}"));
    filled(panel["targets"][0]["expr"].as_str().expect("a query"))
}

/// The node traffic matrix's query over the counters themselves instead of their rates:
/// the bytes sent from node to node so far, which a test can compare with what it sent.
pub fn node_pair_totals() -> String {
    let rates = panel_query("Node traffic matrix");
    let totals = rates.replacen("rate(", "", 1).replacen("[1m])", "", 1);
    assert!(!totals.contains("rate("), "one rate in `{rates}`");
    totals
}

/// Starts Prometheus on `server`, storing under `dir`, scraping `targets` every second.
pub fn start_prometheus(dir: &Path, server: SocketAddr, targets: &[String]) -> Reaped {
    let config = dir.join("prometheus.yml");
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: ferroshmem\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    )
    .expect("prometheus.yml");
    let binary = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("Prometheus is not installed: `apt-get install prometheus` (.ci/run does)");
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log file");
    Reaped(
        Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={server}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting prometheus"),
    )
}

/// The job under its launcher. Dropped, it releases the PEs and stops the launcher with
/// SIGTERM, which stops the PEs; SIGKILL follows if that takes too long.
pub struct Job {
    /// The launcher's process.
    pub launcher: Child,
    /// The file whose creation releases the PEs.
    pub release: PathBuf,
}

impl Job {
    /// Releases the PEs and waits for the job's end: its exit status and the launcher's
    /// standard error.
    pub fn finish(mut self) -> (std::process::ExitStatus, String) {
        std::fs::write(&self.release, b"").expect("release file");
        let deadline = Instant::now() + STEP;
        let status = loop {
            if let Some(status) = self.launcher.try_wait().expect("waiting for the job") {
                break status;
            }
            assert!(Instant::now() < deadline, "the job did not end");
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        if let Some(mut pipe) = self.launcher.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        (status, stderr)
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if matches!(self.launcher.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = std::fs::write(&self.release, b"");
        if let Some(pid) = rustix::process::Pid::from_raw(self.launcher.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.launcher.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.launcher.kill();
        let _ = self.launcher.wait();
    }
}

/// A fresh directory for one run of the test `name`.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fsh-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Waits until `done`, failing after [`STEP`].
pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + STEP;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `look` until it returns what `good` accepts, at most for [`STEP`]; returns the last
/// value it returned.
pub fn eventually<T>(mut look: impl FnMut() -> T, good: impl Fn(&T) -> bool) -> T {
    let deadline = Instant::now() + STEP;
    let mut seen = look();
    while !good(&seen) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        seen = look();
    }
    seen
}
