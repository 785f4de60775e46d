//! Hosts for tests, on one machine: each a network namespace with its own address on a bridge
//! (198.18.K.i/24, the benchmarking range) and, for its processes, its own host name (a UTS
//! namespace), so that ferroshmem sees one node per host. Made as root only; [`Hosts::make`]
//! says why and returns `None` otherwise. Everything is deleted when the value is dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Whether libfabric can be loaded, which jobs across these hosts need; says why not (the
/// test is then skipped) when it cannot.
pub fn fabric_available() -> bool {
    match ferroshmem_net::Library::load() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

/// The host name of the host at `address`: `h-` and the address with dashes for dots. A
/// name without dots, because Open MPI names its session directories (in `/tmp`, which every
/// namespace host shares) after the host name up to its first dot: with dots, the daemons
/// of concurrent tests' jobs shared them and crashed.
pub fn host_name(address: &str) -> String {
    format!("h-{}", address.replace('.', "-"))
}

/// A set of namespace hosts and the remote-shell agent that starts commands in them.
pub struct Hosts {
    tag: String,
    /// Each host's address, which is also its name for `--hosts`.
    pub addresses: Vec<String>,
    /// The bridge's address, in the root namespace.
    pub bridge_address: String,
    /// `AGENT HOST COMMAND-LINE`: runs the line with `sh -c` inside that host.
    pub agent: PathBuf,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A subnet 198.18.K.0/24 (K in 1..=250, tried from `seed` on) that no interface of this
/// machine has an address in: other sets of hosts, of other test processes, may exist at the
/// same time, and two bridges on one subnet would take each other's traffic.
fn free_subnet(seed: u32) -> u32 {
    let taken = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    (0..250)
        .map(|i| 1 + seed.wrapping_add(i) % 250)
        .find(|k| !taken.contains(&format!(" 198.18.{k}.")))
        .unwrap_or(1 + seed % 250)
}

impl Hosts {
    /// Makes `n` hosts, or says why it cannot and returns `None`.
    pub fn make(n: usize) -> Option<Hosts> {
        if !is_root() {
            eprintln!("skipped: namespace hosts need root (CI runs these tests as root)");
            return None;
        }
        if Command::new("ip").arg("-V").output().is_err() {
            eprintln!("skipped: `ip` (iproute2) is not installed");
            return None;
        }
        // Unique per set, among this process's tests and other test processes.
        static MADE: AtomicU32 = AtomicU32::new(0);
        let made = MADE.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("f{:x}{made:x}", pid % 0xffff);
        let subnet = free_subnet(pid.wrapping_mul(7).wrapping_add(made.wrapping_mul(31)));
        let mut hosts = Hosts {
            tag: tag.clone(),
            addresses: Vec::new(),
            bridge_address: format!("198.18.{subnet}.254"),
            agent: std::env::temp_dir().join(format!("fsh-agent-{tag}")),
        };
        match hosts.build(n, subnet) {
            Ok(()) => Some(hosts),
            // Root without CAP_SYS_ADMIN/CAP_NET_ADMIN (a restricted container): say so.
            Err(e) if e.contains("Operation not permitted") => {
                eprintln!("skipped: namespace hosts cannot be made here: {e}");
                None
            }
            Err(e) => panic!("making namespace hosts: {e}"),
        }
    }

    fn bridge(&self) -> String {
        format!("{}b", self.tag)
    }

    /// The network namespace of the host at `address`.
    pub fn namespace(&self, address: &str) -> String {
        format!("{}-{address}", self.tag)
    }

    fn build(&mut self, n: usize, subnet: u32) -> Result<(), String> {
        let bridge = self.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", self.bridge_address),
            "dev",
            &bridge,
        ])?;
        ip(&["link", "set", &bridge, "up"])?;
        for i in 0..n {
            let address = format!("198.18.{subnet}.{}", i + 1);
            let ns = self.namespace(&address);
            let outer = format!("{}v{i}", self.tag);
            ip(&["netns", "add", &ns])?;
            self.addresses.push(address.clone());
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            ip(&["link", "set", &outer, "master", &bridge, "up"])?;
            let inside = |args: &[&str]| {
                let mut all = vec!["netns", "exec", &ns, "ip"];
                all.extend_from_slice(args);
                ip(&all)
            };
            inside(&["addr", "add", &format!("{address}/24"), "dev", "eth0"])?;
            inside(&["link", "set", "eth0", "up"])?;
            inside(&["link", "set", "lo", "up"])?;
        }
        let script = format!(
            "#!/bin/sh\n# AGENT HOST COMMAND-LINE: runs the line in HOST's namespace, under its own host name.\nhost=$1; shift\nexec ip netns exec \"{}-$host\" unshare --uts sh -c 'hostname \"h-$(echo \"$1\" | tr . -)\"; exec sh -c \"$2\"' sh \"$host\" \"$*\"\n",
            self.tag
        );
        std::fs::write(&self.agent, script).map_err(|e| e.to_string())?;
        make_executable(&self.agent)
    }

    /// `--hosts` for `per_host` PEs on each host.
    pub fn hosts_arg(&self, per_host: usize) -> String {
        self.addresses
            .iter()
            .map(|a| format!("{a}:{per_host}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `--hosts` for `counts[i]` PEs on host `i`.
    pub fn hosts_arg_of(&self, counts: &[usize]) -> String {
        self.addresses
            .iter()
            .zip(counts)
            .map(|(a, n)| format!("{a}:{n}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Runs `command` (shell words) inside host `i`'s namespace, as the agent does.
    pub fn on(&self, i: usize, line: &str) -> Command {
        let mut cmd = Command::new(&self.agent);
        cmd.arg(&self.addresses[i]).arg(line);
        cmd
    }

    /// Cuts host `i`'s link (its bridge port goes down).
    pub fn cut(&self, i: usize) -> Result<(), String> {
        ip(&["link", "set", &format!("{}v{i}", self.tag), "down"])
    }
}

fn make_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for address in &self.addresses {
            let _ = ip(&["netns", "del", &self.namespace(address)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
        let _ = std::fs::remove_file(&self.agent);
    }
}
