//! Where the PEs run: `--hosts a:2,b:2` (or `--hosts a,b -N 2`) parsed into [`Host`]s,
//! each rank's [`Placement`], the remote shell command that starts a PE on another host, and
//! the address the root listens on so that those hosts reach it.
//!
//! # Remote PEs
//! A PE on another host is started as `RSH HOST WORD...`, where the words are one shell
//! command line, quoted for a POSIX shell, as `ssh` expects (it joins its arguments and hands
//! them to the remote user's shell): `cd` to the launcher's directory where it exists there,
//! then `exec env VAR=VALUE... PROGRAM ARGS...`. The bootstrap variables and every
//! `FERROSHMEM_*` and `RUST_LOG` variable of the launcher's environment travel that way. An
//! `--rsh` agent that enters a network namespace instead must run that command line with
//! `sh -c`.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;

use ferroshmem_runtime::config::MAX_PES;

use crate::{Error, Result};

/// One host of `--hosts` and how many PEs it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The host's name or address, as the remote shell takes it.
    pub name: String,
    /// Its PEs (consecutive ranks).
    pub slots: usize,
}

/// Parses `a:2,b:2,c` (a host without a count runs one PE).
///
/// # Errors
/// [`Error::InvalidArgument`] naming the bad entry.
pub fn parse_hosts(text: &str) -> Result<Vec<Host>> {
    parse_entries(text)?
        .into_iter()
        .map(|(name, slots)| {
            Ok(Host {
                name,
                slots: slots.unwrap_or(1),
            })
        })
        .collect()
}

/// Parses `a,b,c` for `-N pes_per_host`: every host runs `pes_per_host` PEs, so no entry
/// may give a count of its own.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the bad entry, or one that gives a count.
pub fn parse_hosts_per_host(text: &str, pes_per_host: usize) -> Result<Vec<Host>> {
    parse_entries(text)?
        .into_iter()
        .map(|(name, slots)| match slots {
            None => Ok(Host {
                name,
                slots: pes_per_host,
            }),
            Some(n) => Err(Error::InvalidArgument(format!(
                "--hosts entry \"{name}:{n}\" gives a count, but -N {pes_per_host} sets every \
                 host's count: drop the counts or -N"
            ))),
        })
        .collect()
}

/// The `--hosts` entries: each host's name and its count, if it gives one.
fn parse_entries(text: &str) -> Result<Vec<(String, Option<usize>)>> {
    let bad = |entry: &str, why: &str| {
        Error::InvalidArgument(format!(
            "--hosts entry {entry:?}: {why} (expected HOST[:N] or [IPV6-ADDRESS][:N],...)"
        ))
    };
    text.split(',')
        .map(|entry| {
            let (name, count) = split_entry(entry).map_err(|why| bad(entry, why))?;
            let slots = count
                .map(|n| n.parse::<usize>())
                .transpose()
                .map_err(|_| bad(entry, "N is not a number"))?;
            if name.is_empty() || name.starts_with('-') || name.contains(char::is_whitespace) {
                return Err(bad(entry, "not a host name"));
            }
            if slots == Some(0) {
                return Err(bad(entry, "a host needs at least one PE"));
            }
            Ok((name.to_string(), slots))
        })
        .collect()
}

/// One `--hosts` entry as its host and its count, if it gives one: `HOST`, `HOST:N`,
/// `[ADDRESS]` or `[ADDRESS]:N`. An IPv6 address goes in brackets, since its own colons
/// would read as a count; the host is then the address without them, as `ssh` takes it.
fn split_entry(entry: &str) -> std::result::Result<(&str, Option<&str>), &'static str> {
    let Some(rest) = entry.strip_prefix('[') else {
        return match entry.split_once(':') {
            Some((_, n)) if n.contains(':') => {
                Err("an IPv6 address goes in brackets, as [ADDRESS] or [ADDRESS]:N")
            }
            Some((name, n)) => Ok((name, Some(n))),
            None => Ok((entry, None)),
        };
    };
    let (address, after) = rest
        .split_once(']')
        .ok_or("no ']' closes the bracketed address")?;
    let unscoped = address.split('%').next().unwrap_or(address);
    if unscoped.parse::<Ipv6Addr>().is_err() {
        return Err("the brackets hold no IPv6 address");
    }
    match after {
        "" => Ok((address, None)),
        _ => after
            .strip_prefix(':')
            .map(|n| (address, Some(n)))
            .ok_or("expected :N after the bracketed address"),
    }
}

/// Where one rank runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The host, or `None` for this one (started directly, without the remote shell).
    pub host: Option<String>,
    /// Its rank among the PEs of its host.
    pub local_rank: usize,
    /// How many PEs its host runs.
    pub local_size: usize,
}

/// Every rank's placement: `n_pes` PEs here when `hosts` is empty, else the hosts' slots in
/// order, which must add up to `n_pes` when it is given. A host named in several entries
/// (or this host under several names) counts its PEs across them: their local ranks go on
/// from one entry to the next.
///
/// # Errors
/// [`Error::InvalidArgument`] when the counts disagree or add up to more than
/// [`MAX_PES`].
pub fn place(hosts: &[Host], n_pes: Option<usize>) -> Result<Vec<Placement>> {
    if hosts.is_empty() {
        let n = n_pes.ok_or_else(|| Error::InvalidArgument("give -n N or --hosts".into()))?;
        check_job_size(n)?;
        return Ok((0..n)
            .map(|r| Placement {
                host: None,
                local_rank: r,
                local_size: n,
            })
            .collect());
    }
    let total = hosts
        .iter()
        .try_fold(0usize, |sum, h| sum.checked_add(h.slots))
        .unwrap_or(usize::MAX);
    check_job_size(total)?;
    if let Some(n) = n_pes.filter(|&n| n != total) {
        return Err(Error::InvalidArgument(format!(
            "-n {n} but --hosts has {total} slots"
        )));
    }
    let remote = |h: &Host| (!is_this_host(&h.name)).then(|| h.name.clone());
    let mut sizes: HashMap<Option<String>, usize> = HashMap::new();
    for h in hosts {
        *sizes.entry(remote(h)).or_default() += h.slots;
    }
    let mut next_rank: HashMap<Option<String>, usize> = HashMap::new();
    let mut placements = Vec::with_capacity(total);
    for h in hosts {
        let host = remote(h);
        let local_size = sizes[&host];
        let first = next_rank.entry(host.clone()).or_default();
        placements.extend((*first..*first + h.slots).map(|local_rank| Placement {
            host: host.clone(),
            local_rank,
            local_size,
        }));
        *first += h.slots;
    }
    Ok(placements)
}

/// Refuses a job of more than [`MAX_PES`] PEs.
fn check_job_size(n_pes: usize) -> Result<()> {
    if n_pes > MAX_PES {
        return Err(Error::InvalidArgument(format!(
            "a job of {n_pes} PEs; at most {MAX_PES} are supported"
        )));
    }
    Ok(())
}

/// Whether `name` means this host without a remote shell.
fn is_this_host(name: &str) -> bool {
    matches!(name, "localhost" | "127.0.0.1" | "::1")
}

/// The address the root listens on: `chosen`, else loopback when every PE runs here, else
/// the address this host sends from towards the first other host.
///
/// # Errors
/// [`Error::Config`] when no route to that host is known.
pub fn root_address(placements: &[Placement], chosen: Option<IpAddr>) -> Result<IpAddr> {
    if let Some(ip) = chosen {
        return Ok(ip);
    }
    let Some(other) = placements.iter().find_map(|p| p.host.as_deref()) else {
        return Ok(IpAddr::from([127, 0, 0, 1]));
    };
    source_towards(other).ok_or_else(|| {
        Error::Config(format!(
            "cannot tell which address of this host {other} reaches: give --root-address"
        ))
    })
}

fn source_towards(host: &str) -> Option<IpAddr> {
    let to: SocketAddr = (host, 9).to_socket_addrs().ok()?.next()?;
    ferroshmem_actors::routes::source_towards(to)
}

/// The words after `RSH HOST` that start `program args` with `env` on another host.
pub fn remote_words(
    env: &[(String, OsString)],
    program: &OsStr,
    args: &[OsString],
    cwd: Option<&OsStr>,
) -> Vec<OsString> {
    let mut line = OsString::new();
    if let Some(dir) = cwd {
        line.push("cd ");
        line.push(quote(dir));
        line.push(" 2>/dev/null; ");
    }
    line.push("exec env");
    for (k, v) in env {
        let mut pair = OsString::from(k);
        pair.push("=");
        pair.push(v);
        line.push(" ");
        line.push(quote(&pair));
    }
    for word in std::iter::once(program).chain(args.iter().map(OsString::as_os_str)) {
        line.push(" ");
        line.push(quote(word));
    }
    vec![line]
}

/// `word` quoted for a POSIX shell: in single quotes, each `'` written as `'\''`.
pub(super) fn quote(word: &OsStr) -> OsString {
    let mut out = Vec::with_capacity(word.len() + 2);
    out.push(b'\'');
    for &b in word.as_bytes() {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    std::ffi::OsStr::from_bytes(&out).to_os_string()
}

/// The launcher's own variables that PEs on other hosts receive too.
pub fn forwarded_env() -> Vec<(String, OsString)> {
    std::env::vars_os()
        .filter_map(|(k, v)| {
            let k = k.into_string().ok()?;
            (k.starts_with("FERROSHMEM_") || k == "RUST_LOG" || k == "RUST_BACKTRACE")
                .then_some((k, v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_parse_and_bad_entries_are_named() {
        assert_eq!(
            parse_hosts("a:2,b").unwrap(),
            vec![
                Host {
                    name: "a".into(),
                    slots: 2
                },
                Host {
                    name: "b".into(),
                    slots: 1
                }
            ]
        );
        for bad in ["", "a:0", "a:x", ":2", "a,,b", "-x:1", "a b:1"] {
            assert!(parse_hosts(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pes_per_host_gives_every_host_its_count() {
        let hosts = parse_hosts_per_host("a,b", 3).unwrap();
        assert_eq!(
            hosts
                .iter()
                .map(|h| (h.name.as_str(), h.slots))
                .collect::<Vec<_>>(),
            vec![("a", 3), ("b", 3)]
        );
        let err = parse_hosts_per_host("a,b:2", 3).unwrap_err().to_string();
        assert!(err.contains("\"b:2\"") && err.contains("-N 3"), "{err}");
        for bad in ["", "a:0", "a,,b", "-x"] {
            assert!(parse_hosts_per_host(bad, 2).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn placements_follow_the_slots() {
        let hosts = parse_hosts("localhost:1,h:2").unwrap();
        let p = place(&hosts, None).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!((p[0].host.clone(), p[0].local_size), (None, 1));
        assert_eq!(
            (p[2].host.as_deref(), p[2].local_rank, p[2].local_size),
            (Some("h"), 1, 2)
        );
        assert!(place(&hosts, Some(4)).is_err());
        assert!(place(&[], None).is_err());
        assert_eq!(place(&[], Some(2)).unwrap().len(), 2);
    }

    #[test]
    fn ipv6_addresses_go_in_brackets() {
        let names = |text| {
            parse_hosts(text)
                .unwrap()
                .into_iter()
                .map(|h| (h.name, h.slots))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names("[fd00::5]:2,[fd00::6],[fe80::1%eth0]:1,a:3"),
            vec![
                ("fd00::5".to_string(), 2),
                ("fd00::6".to_string(), 1),
                ("fe80::1%eth0".to_string(), 1),
                ("a".to_string(), 3)
            ]
        );
        for bad in [
            "fd00::5",
            "::1",
            "fd00::5:2",
            "[fd00::5",
            "[fd00::5]2",
            "[a]:1",
            "[]",
        ] {
            let err = parse_hosts(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{bad:?}: {err}");
        }
        assert!(parse_hosts("fd00::5")
            .unwrap_err()
            .to_string()
            .contains("brackets"));
        let here = place(&parse_hosts("[::1]:2").unwrap(), None).unwrap();
        assert!(here.iter().all(|p| p.host.is_none()), "{here:?}");
    }

    #[test]
    fn a_host_named_twice_counts_its_pes_across_entries() {
        let p = place(
            &parse_hosts("localhost:1,b:2,127.0.0.1:1,b:1").unwrap(),
            None,
        )
        .unwrap();
        let seen: Vec<_> = p
            .iter()
            .map(|p| (p.host.as_deref(), p.local_rank, p.local_size))
            .collect();
        assert_eq!(
            seen,
            vec![
                (None, 0, 2),
                (Some("b"), 0, 3),
                (Some("b"), 1, 3),
                (None, 1, 2),
                (Some("b"), 2, 3)
            ]
        );
    }

    #[test]
    fn a_job_beyond_the_most_pes_is_refused_before_anything_is_placed() {
        let over = format!("a:{MAX_PES},b:1");
        let err = place(&parse_hosts(&over).unwrap(), None).unwrap_err();
        assert!(err.to_string().contains("at most"), "{err}");
        let huge = format!("a:{},b:1", usize::MAX);
        assert!(place(&parse_hosts(&huge).unwrap(), None).is_err());
        assert!(place(&[], Some(MAX_PES + 1)).is_err());
        assert_eq!(place(&[], Some(3)).unwrap().len(), 3);
    }

    #[test]
    fn remote_words_survive_a_shell() {
        let env = vec![("FERROSHMEM_RANK".to_string(), OsString::from("3"))];
        let args = vec![OsString::from("it's"), OsString::from("a b")];
        let words = remote_words(&env, OsStr::new("/bin/echo"), &args, Some(OsStr::new("/")));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&words[0])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "it's a b\n");
    }
}
