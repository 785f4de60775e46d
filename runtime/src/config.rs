//! Configuration read from the environment: names, defaults and parsers.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `FERROSHMEM_SYMMETRIC_SIZE` (or `NVSHMEM_SYMMETRIC_SIZE`) | symmetric heap bytes per PE (`512M`, `2G`, `1048576`) | `1G` |
//! | `FERROSHMEM_SPIN_US` | how long a wait spins before it sleeps, in µs (at most 1 000 000) | `50` |
//! | `FERROSHMEM_BIND` | `share`: each PE's threads run on an equal share of the machine's CPUs; `core`: on one CPU, the node's PEs dealt over its CPUs in turn; `none`: as started | `share` under `ferroshmem run`, else `none` |

use std::time::Duration;

use crate::cpus::MachinePlace;
use crate::error::{Error, Result};

/// Default symmetric heap size per PE (1 GiB; host segments are sparse until touched).
pub const DEFAULT_SYMMETRIC_SIZE: usize = 1 << 30;
/// Default spin time of a wait before it sleeps.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
/// The longest a wait may spin before it sleeps (`FERROSHMEM_SPIN_US`): a wait checks its
/// peers' calls (a call given up, a barrier broken) only once it sleeps, so a longer spin
/// would put off those verdicts.
pub const MAX_SPIN: Duration = Duration::from_secs(1);
/// The longest duration a setting may give (a year): timeouts, grace periods and spin times
/// are added to the clock, and a year is as good as forever for any of them.
pub const MAX_SETTING_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
/// The most PEs a job may have. Every PE keeps a few words of state per PE of the job, and a
/// count beyond this comes from a typo rather than a machine.
pub const MAX_PES: usize = 1 << 20;

/// Parses a size such as `4096`, `64K`, `512M`, `2G`, `1T` (binary units; `KiB`/`MB`/`kb`
/// spellings accepted, case-insensitive).
pub fn parse_size(text: &str) -> Result<usize> {
    let t = text.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits_end);
    let bad = || Error::Config(format!("cannot read size {text:?}: use e.g. 512M or 2G"));
    let value: usize = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    value
        .checked_mul(1usize << shift)
        .ok_or_else(|| Error::Config(format!("size {text:?} overflows")))
}

/// Reads the first of `names` that is set; `Ok(None)` if none is.
pub fn env_var(names: &[&str]) -> Result<Option<String>> {
    for name in names {
        match std::env::var(name) {
            Ok(v) => return Ok(Some(v)),
            Err(std::env::VarError::NotPresent) => {}
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(Error::Config(format!("{name} is not valid UTF-8")))
            }
        }
    }
    Ok(None)
}

/// The symmetric heap size per PE from the environment, or the default.
pub fn symmetric_size_from_env() -> Result<usize> {
    let size = match env_var(&["FERROSHMEM_SYMMETRIC_SIZE", "NVSHMEM_SYMMETRIC_SIZE"])? {
        Some(v) => parse_size(&v)?,
        None => DEFAULT_SYMMETRIC_SIZE,
    };
    if size == 0 {
        return Err(Error::Config("the symmetric size must not be zero".into()));
    }
    Ok(size)
}

/// The spin time of waits from `FERROSHMEM_SPIN_US`, or the default.
///
/// # Errors
/// [`Error::Config`] when it is not a number of microseconds up to [`MAX_SPIN`].
pub fn spin_from_env() -> Result<Duration> {
    match env_var(&["FERROSHMEM_SPIN_US"])? {
        Some(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .map(Duration::from_micros)
            .filter(|&spin| spin <= MAX_SPIN)
            .ok_or_else(|| {
                Error::Config(format!(
                    "FERROSHMEM_SPIN_US={v:?} is not a number of microseconds up to {}",
                    MAX_SPIN.as_micros()
                ))
            }),
        None => Ok(DEFAULT_SPIN),
    }
}

/// Where a PE's threads may run (`FERROSHMEM_BIND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bind {
    /// Wherever the PE was started to run.
    #[default]
    None,
    /// On one CPU of those the PE was started with: the one its rank on the node picks,
    /// in turn (see [`crate::cpus::bind_to_core`]).
    Core,
    /// On an equal share of the CPUs the PE was started with, one block of them per PE of
    /// the job on this machine (nodes of one kernel, [`same_machine`]), in rank order; one
    /// CPU each, dealt in rank order, where those PEs outnumber the machine's CPUs (see
    /// [`crate::cpus::bind_to_share`]). The default under `ferroshmem run`.
    Share,
}

impl Bind {
    /// The variable's value that asks for this binding.
    pub fn name(self) -> &'static str {
        match self {
            Bind::None => "none",
            Bind::Core => "core",
            Bind::Share => "share",
        }
    }
}

impl std::str::FromStr for Bind {
    type Err = String;

    /// `share`, `core` or `none` (what `FERROSHMEM_BIND` and `ferroshmem run --bind-to`
    /// take).
    fn from_str(text: &str) -> std::result::Result<Bind, String> {
        match text.trim() {
            "none" => Ok(Bind::None),
            "core" => Ok(Bind::Core),
            "share" => Ok(Bind::Share),
            other => Err(format!("{other:?}: expected share, core or none")),
        }
    }
}

/// The binding `FERROSHMEM_BIND` asks for (`share`, `core` or `none`), or `None` where it is
/// not set (the launcher's default applies).
pub fn bind_from_env() -> Result<Option<Bind>> {
    env_var(&["FERROSHMEM_BIND"])?
        .map(|v| {
            v.parse()
                .map_err(|e| Error::Config(format!("FERROSHMEM_BIND={e}")))
        })
        .transpose()
}

/// This machine's node key (host name and boot id): PEs with the same key share memory.
pub fn node_key() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "{}/{}",
        read("/proc/sys/kernel/hostname"),
        read("/proc/sys/kernel/random/boot_id")
    )
}

/// Whether two node keys ([`node_key`]) name nodes of one machine: the same kernel (boot id),
/// which gives them the same CPUs, whatever their host names (network and UTS namespaces,
/// containers).
pub fn same_machine(a: &str, b: &str) -> bool {
    fn boot_id(key: &str) -> Option<&str> {
        key.rsplit_once('/').map(|(_, id)| id)
    }
    boot_id(a).is_some_and(|id| !id.is_empty() && boot_id(b) == Some(id))
}

/// The place of PE `rank` among the job's PEs on its machine, from every PE's node key
/// (`nodes`): those of one kernel ([`same_machine`]), or of its very node key where that
/// has no boot id. `None` for a rank that `nodes` lacks.
pub fn machine_place(nodes: &[String], rank: usize) -> Option<MachinePlace> {
    let here = nodes.get(rank)?;
    let on_machine = |(_, node): &(usize, &String)| same_machine(node, here) || *node == here;
    let mates: Vec<(usize, &String)> = nodes.iter().enumerate().filter(on_machine).collect();
    let mut keys: Vec<&String> = mates.iter().map(|(_, node)| *node).collect();
    keys.sort_unstable();
    keys.dedup();
    Some(MachinePlace {
        rank: mates.iter().position(|(r, _)| *r == rank)?,
        pes: mates.len(),
        nodes: keys.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pe_s_place_counts_the_pes_of_its_kernel_in_rank_order() {
        let nodes: Vec<String> = ["a/1", "b/2", "c/1", "b/2", "x/"]
            .iter()
            .map(|n| n.to_string())
            .collect();
        let place = |rank| machine_place(&nodes, rank).map(|p| (p.rank, p.pes, p.nodes));
        assert_eq!(place(0), Some((0, 2, 2)), "a and c: two nodes of kernel 1");
        assert_eq!(place(2), Some((1, 2, 2)));
        assert_eq!(place(3), Some((1, 2, 1)), "b's second PE");
        assert_eq!(place(4), Some((0, 1, 1)), "no boot id: its own node only");
        assert_eq!(place(5), None);
    }

    #[test]
    fn nodes_of_one_kernel_are_one_machine() {
        assert!(same_machine("a/1234", "b/1234"));
        assert!(same_machine("a/1234", "a/1234"));
        assert!(!same_machine("a/1234", "a/5678"));
        assert!(
            !same_machine("a/", "b/"),
            "no boot id: not known to be one machine"
        );
        assert!(!same_machine("a", "a"));
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("2gib").unwrap(), 2 << 30);
        assert!(parse_size("").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("99999999999999999999T").is_err());
    }
}
