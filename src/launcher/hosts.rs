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

use std::ffi::{OsStr, OsString};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;

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
            "--hosts entry {entry:?}: {why} (expected HOST[:N],...)"
        ))
    };
    text.split(',')
        .map(|entry| {
            let (name, slots) = match entry.rsplit_once(':') {
                Some((name, n)) => (
                    name,
                    Some(
                        n.parse::<usize>()
                            .map_err(|_| bad(entry, "N is not a number"))?,
                    ),
                ),
                None => (entry, None),
            };
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
/// order, which must add up to `n_pes` when it is given.
///
/// # Errors
/// [`Error::InvalidArgument`] when the counts disagree.
pub fn place(hosts: &[Host], n_pes: Option<usize>) -> Result<Vec<Placement>> {
    if hosts.is_empty() {
        let n = n_pes.ok_or_else(|| Error::InvalidArgument("give -n N or --hosts".into()))?;
        return Ok((0..n)
            .map(|r| Placement {
                host: None,
                local_rank: r,
                local_size: n,
            })
            .collect());
    }
    let total: usize = hosts.iter().map(|h| h.slots).sum();
    if let Some(n) = n_pes.filter(|&n| n != total) {
        return Err(Error::InvalidArgument(format!(
            "-n {n} but --hosts has {total} slots"
        )));
    }
    Ok(hosts
        .iter()
        .flat_map(|h| {
            let host = (!is_this_host(&h.name)).then(|| h.name.clone());
            (0..h.slots).map(move |r| Placement {
                host: host.clone(),
                local_rank: r,
                local_size: h.slots,
            })
        })
        .collect())
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
