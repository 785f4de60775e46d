//! Finding out how this process was started: by `ferroshmem run`, by Open MPI's `mpirun`, by
//! Slurm's `srun`, or by nothing (then the program runs its PEs in-process).
//!
//! | launcher | rank / size / local rank | root |
//! |---|---|---|
//! | `ferroshmem run` | `FERROSHMEM_RANK`, `FERROSHMEM_SIZE`, `FERROSHMEM_LOCAL_RANK` | the launcher; `FERROSHMEM_ROOT` + `FERROSHMEM_SECRET` |
//! | `mpirun` (Open MPI) | `OMPI_COMM_WORLD_RANK`, `_SIZE`, `_LOCAL_RANK` | PE 0's process |
//! | `srun` (Slurm) | `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID` | PE 0's process |
//!
//! Under `mpirun`/`srun`, PE 0 hosts the root. It listens on `FERROSHMEM_ROOT` if set (the
//! other PEs then need `FERROSHMEM_SECRET` too). Otherwise it picks a free port and a fresh
//! secret and hands both out:
//!
//! - through the launcher's PMIx key-value store when the launcher offers PMIx (`PMIX_RANK`
//!   and `PMIX_NAMESPACE` set: `mpirun`, `srun --mpi=pmix`), which reaches every host. PE 0
//!   then listens on loopback when every PE runs on its node, else on `FERROSHMEM_ROOT_ADDRESS`
//!   or the address its host sends from towards the launcher's head node (`mpirun`'s
//!   `OMPI_MCA_orte_hnp_uri`, `srun`'s `SLURM_LAUNCH_NODE_IPADDR`);
//! - else, or when PMIx cannot be loaded, on one node only: on loopback, and the address and
//!   secret go to the user's own processes on a rendezvous socket, an abstract Unix socket
//!   named after the user and the launcher's job id, which has no file and goes away with PE
//!   0's process, served until the job has formed or its bootstrap has failed. A job that
//!   spans hosts without PMIx is a configuration error.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ferroshmem_runtime::config::{env_var, Bind, MAX_PES, MAX_SETTING_DURATION};
use ferroshmem_runtime::{Error, Result};

/// Default time the bootstrap waits for the job to form.
pub const DEFAULT_BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(60);

/// Environment variables the launcher sets for each PE.
pub mod vars {
    /// The PE's number.
    pub const RANK: &str = "FERROSHMEM_RANK";
    /// The number of PEs.
    pub const SIZE: &str = "FERROSHMEM_SIZE";
    /// The PE's number among the PEs of its node.
    pub const LOCAL_RANK: &str = "FERROSHMEM_LOCAL_RANK";
    /// The number of PEs on the node.
    pub const LOCAL_SIZE: &str = "FERROSHMEM_LOCAL_SIZE";
    /// The bootstrap root's address (`host:port`).
    pub const ROOT: &str = "FERROSHMEM_ROOT";
    /// The job's secret (hex).
    pub const SECRET: &str = "FERROSHMEM_SECRET";
    /// Under `mpirun`/`srun` across hosts: the address of PE 0's host that the others reach
    /// its root on (an IP address; the port is picked free).
    pub const ROOT_ADDRESS: &str = "FERROSHMEM_ROOT_ADDRESS";
    /// Where each PE's threads may run (`share`, `core`, `none`; see
    /// `ferroshmem_runtime::config`).
    pub const BIND: &str = "FERROSHMEM_BIND";
    /// Bootstrap timeout (`30`, `30s`, `500ms`).
    pub const BOOTSTRAP_TIMEOUT: &str = "FERROSHMEM_BOOTSTRAP_TIMEOUT";
    /// How long a silent control connection (a host whose link was cut) lasts before its
    /// PE counts as lost.
    pub const PEER_TIMEOUT: &str = "FERROSHMEM_PEER_TIMEOUT";
}

/// How long a silent control connection lasts by default.
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// Where this process finds the bootstrap root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootSource {
    /// At a known address with a known secret, hosted outside the PEs (the launcher).
    Launcher {
        /// Root address.
        address: SocketAddr,
        /// Job secret.
        secret: Vec<u8>,
    },
    /// Hosted by PE 0's process on a given address; every PE knows the secret.
    Pe0AtAddress {
        /// Root address.
        address: SocketAddr,
        /// Job secret.
        secret: Vec<u8>,
    },
    /// Hosted by PE 0's process and handed out on the abstract Unix socket of this name.
    Pe0ViaSocket(String),
    /// Hosted by PE 0's process on `listen` and handed out through the launcher's PMIx
    /// key-value store; when PMIx cannot be used, on the rendezvous socket `socket` instead,
    /// which only a job on one node has.
    Pe0ViaPmix {
        /// The address PE 0 listens on (the port is picked free).
        listen: IpAddr,
        /// The rendezvous socket to fall back on, when every PE runs on one node.
        socket: Option<String>,
    },
}

/// How this process was launched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchEnv {
    /// Which launcher (for messages).
    pub launcher: &'static str,
    /// This PE's number.
    pub rank: usize,
    /// Number of PEs.
    pub size: usize,
    /// This PE's number on its node.
    pub local_rank: usize,
    /// How the PE's threads are bound where `FERROSHMEM_BIND` does not say: a share of the
    /// machine's CPUs under `ferroshmem run`; not at all under `mpirun` and `srun`, which
    /// bind (or leave unbound) on their own.
    pub default_bind: Bind,
    /// Where the root is.
    pub root: RootSource,
    /// How long the bootstrap may take.
    pub timeout: Duration,
}

fn number(name: &str) -> Result<Option<usize>> {
    env_var(&[name])?
        .map(|v| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| Error::Config(format!("{name}={v:?} is not a number")))
        })
        .transpose()
}

/// Parses a duration: `30` (seconds), `30s`, `500ms`, `2m`.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let t = text.trim();
    let bad = || {
        Error::Config(format!(
            "cannot read duration {text:?}: use e.g. 30s or 500ms"
        ))
    };
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let duration = match unit {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        _ => return Err(bad()),
    };
    if duration > MAX_SETTING_DURATION {
        return Err(Error::Config(format!(
            "duration {text:?} is longer than a year ({}s), the most a setting may give",
            MAX_SETTING_DURATION.as_secs()
        )));
    }
    Ok(duration)
}

/// Decodes a hex secret.
pub fn decode_secret(hex: &str) -> Result<Vec<u8>> {
    let hex = hex.trim().as_bytes();
    if hex.len() % 2 != 0 || hex.is_empty() {
        return Err(Error::Config(format!(
            "{} must be non-empty hex",
            vars::SECRET
        )));
    }
    let digit = |d: u8| {
        char::from(d)
            .to_digit(16)
            .ok_or_else(|| Error::Config(format!("{} must be hex", vars::SECRET)))
    };
    hex.chunks_exact(2)
        .map(|pair| Ok((digit(pair[0])? * 16 + digit(pair[1])?) as u8))
        .collect()
}

/// Encodes bytes as lower-case hex.
pub fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Fresh random bytes (job identities and secrets).
pub fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| Error::os("reading random bytes", e))?;
    Ok(b)
}

/// The bootstrap timeout from the environment.
pub fn bootstrap_timeout() -> Result<Duration> {
    duration_var(vars::BOOTSTRAP_TIMEOUT).map(|t| t.unwrap_or(DEFAULT_BOOTSTRAP_TIMEOUT))
}

/// The peer timeout from the environment (at least one second).
pub fn peer_timeout() -> Result<Duration> {
    duration_var(vars::PEER_TIMEOUT).map(|t| {
        t.unwrap_or(DEFAULT_PEER_TIMEOUT)
            .max(Duration::from_secs(1))
    })
}

/// The duration variable `name`, if set; an error names it.
fn duration_var(name: &str) -> Result<Option<Duration>> {
    env_var(&[name])?
        .map(|v| {
            parse_duration(&v).map_err(|e| match e {
                Error::Config(why) => Error::Config(format!("{name}: {why}")),
                other => other,
            })
        })
        .transpose()
}

fn root_address() -> Result<Option<SocketAddr>> {
    env_var(&[vars::ROOT])?
        .map(|v| {
            v.trim()
                .parse::<SocketAddr>()
                .map_err(|_| Error::Config(format!("{}={v:?} is not host:port", vars::ROOT)))
        })
        .transpose()
}

/// The name of the rendezvous socket of the launcher's job `job_key`, for this user.
fn rendezvous_name(job_key: &str) -> String {
    let uid = rustix::process::getuid().as_raw();
    let key: String = job_key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("ferroshmem-rendezvous-{uid}-{key}")
}

/// A PE started by `mpirun` or `srun`, as its environment says.
struct PeLaunch {
    launcher: &'static str,
    rank: usize,
    size: usize,
    local_rank: usize,
    /// The launcher's id of the job, for the rendezvous socket's name.
    job_key: String,
    /// Whether the job's PEs run on more than one node, when the launcher says.
    spans_hosts: Option<bool>,
    /// Where the launcher's head node is (the address PE 0's root should face), when known.
    head: Option<SocketAddr>,
}

/// The first address of an ORTE contact URI (`JOB;tcp://A,B:PORT;…`), with its port.
fn first_uri_address(uri: &str) -> Option<SocketAddr> {
    let tcp = uri
        .split(';')
        .find_map(|part| part.strip_prefix("tcp://"))?;
    let (addresses, port) = tcp.rsplit_once(':')?;
    let port = port.parse().ok()?;
    addresses
        .split(',')
        .filter_map(|a| a.trim_matches(['[', ']']).parse::<IpAddr>().ok())
        .find(|a| !a.is_loopback())
        .map(|ip| SocketAddr::new(ip, port))
}

impl PeLaunch {
    fn detect() -> Result<Option<PeLaunch>> {
        if let Some(rank) = number("OMPI_COMM_WORLD_RANK")? {
            let size = number("OMPI_COMM_WORLD_SIZE")?
                .ok_or_else(|| Error::Config("OMPI_COMM_WORLD_SIZE is not set".into()))?;
            let job = env_var(&["PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"])?
                .ok_or_else(|| Error::Config("mpirun set no job id (PMIX_NAMESPACE)".into()))?;
            let head = env_var(&["OMPI_MCA_orte_hnp_uri"])?;
            return Ok(Some(PeLaunch {
                launcher: "mpirun",
                rank,
                size,
                local_rank: number("OMPI_COMM_WORLD_LOCAL_RANK")?.unwrap_or(rank),
                job_key: format!("ompi-{job}"),
                spans_hosts: number("OMPI_COMM_WORLD_LOCAL_SIZE")?.map(|local| local < size),
                head: head.as_deref().and_then(first_uri_address),
            }));
        }
        let (Some(rank), Some(size), Some(step)) = (
            number("SLURM_PROCID")?,
            number("SLURM_NTASKS")?,
            env_var(&["SLURM_STEP_ID"])?,
        ) else {
            return Ok(None);
        };
        let job = env_var(&["SLURM_JOB_ID"])?.unwrap_or_default();
        let nodes = number("SLURM_STEP_NUM_NODES")?.or(number("SLURM_NNODES")?);
        let head = env_var(&["SLURM_LAUNCH_NODE_IPADDR"])?;
        Ok(Some(PeLaunch {
            launcher: "srun",
            rank,
            size,
            local_rank: number("SLURM_LOCALID")?.unwrap_or(rank),
            job_key: format!("slurm-{job}.{step}"),
            spans_hosts: nodes.map(|n| n > 1),
            head: head.and_then(|a| a.trim().parse().ok().map(|ip| SocketAddr::new(ip, 9))),
        }))
    }

    /// Where PE 0 hosts the root and how the others learn of it, when the environment does
    /// not name its address.
    fn root_source(&self) -> Result<RootSource> {
        let socket = rendezvous_name(&self.job_key);
        let pmix = env_var(&["PMIX_RANK"])?.is_some() && env_var(&["PMIX_NAMESPACE"])?.is_some();
        let spans_hosts = self.spans_hosts == Some(true);
        if !pmix {
            if spans_hosts {
                return Err(Error::Config(format!(
                    "the job spans hosts and {} offers no PMIx (PMIX_RANK is not set{}): PE 0 \
                     cannot hand out the bootstrap root's address; give {} (host:port of PE \
                     0's host) and {} (hex) to every PE",
                    self.launcher,
                    if self.launcher == "srun" {
                        "; use srun --mpi=pmix"
                    } else {
                        ""
                    },
                    vars::ROOT,
                    vars::SECRET
                )));
            }
            return Ok(RootSource::Pe0ViaSocket(socket));
        }
        let chosen = env_var(&[vars::ROOT_ADDRESS])?
            .map(|v| {
                v.trim().parse::<IpAddr>().map_err(|_| {
                    Error::Config(format!("{}={v:?} is not an IP address", vars::ROOT_ADDRESS))
                })
            })
            .transpose()?;
        let loopback = IpAddr::from([127, 0, 0, 1]);
        let listen = match (chosen, self.spans_hosts) {
            (Some(ip), _) => ip,
            (None, Some(false)) => loopback,
            (None, spans) => match self.head.and_then(crate::routes::source_towards) {
                Some(ip) => ip,
                None if spans.is_none() => loopback,
                None => {
                    return Err(Error::Config(format!(
                        "the job spans hosts and PE 0 cannot tell which of its addresses the \
                         others reach (no route to {}'s head node is known): set {}",
                        self.launcher,
                        vars::ROOT_ADDRESS
                    )))
                }
            },
        };
        Ok(RootSource::Pe0ViaPmix {
            listen,
            socket: (!spans_hosts).then_some(socket),
        })
    }
}

impl LaunchEnv {
    /// Reads the environment; `Ok(None)` when no launcher started this process.
    pub fn detect() -> Result<Option<LaunchEnv>> {
        let timeout = bootstrap_timeout()?;
        // Read by the control connections, where a bad value could only be ignored.
        peer_timeout()?;
        if let Some(rank) = number(vars::RANK)? {
            let size = number(vars::SIZE)?.ok_or_else(|| {
                Error::Config(format!("{} is set but {} is not", vars::RANK, vars::SIZE))
            })?;
            let address = root_address()?.ok_or_else(|| {
                Error::Config(format!("{} is set but {} is not", vars::RANK, vars::ROOT))
            })?;
            let secret = decode_secret(&env_var(&[vars::SECRET])?.ok_or_else(|| {
                Error::Config(format!("{} is set but {} is not", vars::RANK, vars::SECRET))
            })?)?;
            return Self::checked(LaunchEnv {
                launcher: "ferroshmem run",
                rank,
                size,
                local_rank: number(vars::LOCAL_RANK)?.unwrap_or(rank),
                default_bind: Bind::Share,
                root: RootSource::Launcher { address, secret },
                timeout,
            });
        }
        let Some(found) = PeLaunch::detect()? else {
            return Ok(None);
        };
        let root = match root_address()? {
            Some(address) => RootSource::Pe0AtAddress {
                address,
                secret: decode_secret(&env_var(&[vars::SECRET])?.ok_or_else(|| {
                    Error::Config(format!(
                        "{} is set, so {} must be too",
                        vars::ROOT,
                        vars::SECRET
                    ))
                })?)?,
            },
            None => found.root_source()?,
        };
        let PeLaunch {
            launcher,
            rank,
            size,
            local_rank,
            ..
        } = found;
        Self::checked(LaunchEnv {
            launcher,
            rank,
            size,
            local_rank,
            default_bind: Bind::None,
            root,
            timeout,
        })
    }

    fn checked(env: LaunchEnv) -> Result<Option<LaunchEnv>> {
        if env.size == 0 || env.rank >= env.size {
            return Err(Error::Config(format!(
                "{}: rank {} is not below size {}",
                env.launcher, env.rank, env.size
            )));
        }
        if env.size > MAX_PES {
            return Err(Error::Config(format!(
                "{}: a job of {} PEs; at most {MAX_PES} are supported",
                env.launcher, env.size
            )));
        }
        Ok(Some(env))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_secrets_parse() {
        assert_eq!(parse_duration("30").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("x").is_err());
        assert_eq!(
            parse_duration(&format!("{}", MAX_SETTING_DURATION.as_secs())).unwrap(),
            MAX_SETTING_DURATION
        );
        for too_long in [
            "31536001",
            "525601m",
            "10000000000000000000s",
            "18446744073709551615ms",
        ] {
            let err = parse_duration(too_long).unwrap_err().to_string();
            assert!(err.contains("longer than a year"), "{too_long}: {err}");
        }
        assert_eq!(
            decode_secret(&encode_hex(&[0, 255, 16])).unwrap(),
            vec![0, 255, 16]
        );
        assert!(decode_secret("abc").is_err());
        assert!(decode_secret("zz").is_err());
        assert_eq!(decode_secret("0AfF").unwrap(), vec![10, 255]);
    }

    #[test]
    fn a_job_beyond_the_most_pes_is_a_config_error() {
        let env = |size| LaunchEnv {
            launcher: "ferroshmem run",
            rank: 0,
            size,
            local_rank: 0,
            default_bind: Bind::None,
            root: RootSource::Launcher {
                address: SocketAddr::from(([127, 0, 0, 1], 1)),
                secret: vec![0; 16],
            },
            timeout: Duration::from_secs(1),
        };
        assert!(LaunchEnv::checked(env(MAX_PES)).is_ok());
        for size in [MAX_PES + 1, usize::MAX] {
            let err = LaunchEnv::checked(env(size)).unwrap_err().to_string();
            assert!(err.contains(&format!("at most {MAX_PES}")), "{err}");
        }
    }

    #[test]
    fn a_secret_that_is_not_ascii_is_a_config_error() {
        for secret in ["aéb", "é", "0é", "+1", "-1", "\u{1F600}"] {
            assert!(
                matches!(decode_secret(secret), Err(Error::Config(_))),
                "{secret:?}"
            );
        }
    }
}
