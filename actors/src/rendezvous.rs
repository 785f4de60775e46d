//! Reaching the job's bootstrap root from a launched PE: at the launcher's address, at an
//! address PE 0 listens on, through the launcher's PMIx key-value store, or through the
//! rendezvous socket PE 0 serves (see [`crate::launch_env`]).
//!
//! # PMIx
//! PE 0 stores `ADDRESS SECRET` under [`PMIX_KEY`] (global scope) and commits it; the other
//! PEs get it from rank 0, which the PMIx servers fetch from PE 0's node. A server that
//! answers "not found" before PE 0 has stored it is asked again, until the bootstrap timeout. Every PE stays a PMIx
//! client until the job has formed (every PE has read the key) or its bootstrap has failed.
//! The secret still guards every connection to the root.
//!
//! # Rendezvous socket
//! The rendezvous socket is an abstract Unix socket: it has a name but no file, so it goes
//! away with PE 0's process however that ends (SIGKILL included) and leaves nothing behind.
//! Both ends check that the other runs as the same user (`SO_PEERCRED`): only the user's own
//! processes learn the job's secret, and a process of another user that took the name first
//! cannot hand the PEs a root of its own.

use std::net::{IpAddr, SocketAddr};
use std::os::linux::net::SocketAddrExt;
use std::time::Duration;

use ferroshmem_runtime::{Error, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;

use crate::control::{connect, HubReport, Link, RootServer};
use crate::launch_env::{decode_secret, encode_hex, random_bytes, LaunchEnv, RootSource};
use crate::pmix;

/// The PMIx key under which PE 0 stores the root's address and the job's secret.
pub const PMIX_KEY: &str = "ferroshmem.root";

/// How a PE found the root: said in its bootstrap's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rendezvous {
    /// The environment named the root (`ferroshmem run`, or `FERROSHMEM_ROOT`).
    Environment,
    /// The launcher's PMIx key-value store.
    Pmix,
    /// PE 0's rendezvous socket, on one node.
    Socket,
}

/// A PE's way to the root, once found.
#[derive(Debug)]
pub struct Root {
    /// The PE's control-plane link.
    pub link: Link,
    /// The job's secret.
    pub secret: Vec<u8>,
    /// The root's task, when this process hosts it (PE 0 under mpirun/srun).
    pub hosted: Option<JoinHandle<Result<HubReport>>>,
    /// How this PE found the root.
    pub rendezvous: Rendezvous,
    /// The rendezvous socket this process serves, closed once the job has formed, or when
    /// this is dropped, whichever comes first.
    published: Option<Published>,
    /// This process as a PMIx client, finalized at the same moments.
    pmix: Option<pmix::Client>,
}

impl Root {
    /// The job has formed: the rendezvous socket and the PMIx client are no longer needed.
    pub fn formed(&mut self) {
        self.published = None;
        self.pmix = None;
    }

    /// The job failed to form with `error`. When this process hosts the root, it waits
    /// until the root has refused the PEs still to come (or its join deadline passed), with
    /// the rendezvous socket still served, so that they learn of the failure at once
    /// instead of waiting for a root that would be gone; then it hands `error` back.
    pub async fn failed(self, error: Error) -> Error {
        if let Some(hosted) = self.hosted {
            let _ = hosted.await;
        }
        error
    }
}

/// A served rendezvous socket: closed when dropped.
#[derive(Debug)]
struct Published(JoinHandle<()>);

impl Drop for Published {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The uid of the process at the other end of `stream`, or why it cannot be told.
fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    Ok(rustix::net::sockopt::socket_peercred(stream)?.uid.as_raw())
}

fn own_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

fn abstract_address(name: &str) -> Result<std::os::unix::net::SocketAddr> {
    std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| Error::os("abstract socket name", e))
}

async fn host_root(
    env: &LaunchEnv,
    address: SocketAddr,
    secret: Vec<u8>,
) -> Result<(SocketAddr, JoinHandle<Result<HubReport>>)> {
    let server = RootServer::bind(address).await?.hosted_by(env.rank);
    let bound = server.address();
    let job = u64::from_le_bytes(random_bytes()?);
    Ok((bound, server.spawn(env.size, job, secret, env.timeout)))
}

/// Serves `address` and `secret` on the abstract socket `name` to processes of this user.
fn publish(name: &str, address: SocketAddr, secret: &[u8]) -> Result<Published> {
    let taken = |e: std::io::Error| {
        Error::Bootstrap(format!(
            "PE 0 cannot serve the rendezvous socket @{name}: {e} (is another job with the same launcher job id running?)"
        ))
    };
    let listener =
        std::os::unix::net::UnixListener::bind_addr(&abstract_address(name)?).map_err(taken)?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::os("rendezvous socket", e))?;
    let listener =
        UnixListener::from_std(listener).map_err(|e| Error::os("rendezvous socket", e))?;
    let line = published_line(address, secret) + "\n";
    Ok(Published(tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            match peer_uid(&stream) {
                Ok(uid) if uid == own_uid() => {
                    let _ = stream.write_all(line.as_bytes()).await;
                }
                other => tracing::warn!(
                    "rendezvous socket refused a process of another user ({other:?})"
                ),
            }
        }
    })))
}

/// Reads the root's address and secret from the rendezvous socket `name`, if PE 0 serves
/// it, as this user.
async fn read_published(name: &str) -> Option<(SocketAddr, Vec<u8>)> {
    let stream =
        std::os::unix::net::UnixStream::connect_addr(&abstract_address(name).ok()?).ok()?;
    stream.set_nonblocking(true).ok()?;
    let mut stream = UnixStream::from_std(stream).ok()?;
    if peer_uid(&stream).ok()? != own_uid() {
        tracing::warn!("the rendezvous socket @{name} is served by another user: ignored");
        return None;
    }
    let mut text = String::new();
    let mut limited = (&mut stream).take(4096);
    let read = limited.read_to_string(&mut text);
    tokio::time::timeout(Duration::from_secs(1), read)
        .await
        .ok()?
        .ok()?;
    parse_published(&text)
}

/// `ADDRESS SECRET`, as PE 0 hands them out.
fn published_line(address: SocketAddr, secret: &[u8]) -> String {
    format!("{address} {}", encode_hex(secret))
}

fn parse_published(text: &str) -> Option<(SocketAddr, Vec<u8>)> {
    let mut parts = text.split_whitespace();
    let address = parts.next()?.parse().ok()?;
    let secret = decode_secret(parts.next()?).ok()?;
    Some((address, secret))
}

/// A root reached without a rendezvous of PE 0's.
fn plain(link: Link, secret: Vec<u8>, hosted: Option<JoinHandle<Result<HubReport>>>) -> Root {
    Root {
        link,
        secret,
        hosted,
        rendezvous: Rendezvous::Environment,
        published: None,
        pmix: None,
    }
}

/// Finds (and for PE 0 under mpirun/srun, starts) the root and connects to it.
pub async fn reach_root(env: &LaunchEnv) -> Result<Root> {
    let rank = env.rank;
    match &env.root {
        RootSource::Launcher { address, secret } => Ok(plain(
            connect(*address, rank, None, env.timeout).await?,
            secret.clone(),
            None,
        )),
        RootSource::Pe0AtAddress { address, secret } => {
            let hosted = if rank == 0 {
                Some(host_root(env, *address, secret.clone()).await?.1)
            } else {
                None
            };
            let link = connect(*address, rank, Some(0), env.timeout).await?;
            Ok(plain(link, secret.clone(), hosted))
        }
        RootSource::Pe0ViaSocket(name) => via_socket(env, name).await,
        RootSource::Pe0ViaPmix { listen, socket } => match pmix_client(env).await {
            Ok(client) => via_pmix(env, client, *listen).await,
            Err(e) => match socket {
                Some(name) => {
                    tracing::debug!("PMIx not used ({e}): the rendezvous socket instead");
                    via_socket(env, name).await
                }
                None => Err(Error::Config(format!(
                    "PE {rank}: the job spans hosts and PE 0 hands out the bootstrap root \
                     through PMIx, which failed: {e}"
                ))),
            },
        },
    }
}

/// Runs `call` on a blocking thread, giving up after `timeout` (the thread is then left to
/// finish on its own).
async fn blocking<T: Send + 'static>(
    what: &str,
    timeout: Duration,
    call: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::time::timeout(timeout, tokio::task::spawn_blocking(call)).await {
        Ok(Ok(done)) => done,
        Ok(Err(join)) => Err(Error::Bootstrap(format!("{what}: {join}"))),
        Err(_) => Err(Error::Timeout {
            operation: "PMIx bootstrap",
            after: timeout,
        }),
    }
}

/// This process as a client of the launcher's PMIx server, checked to be PE `env.rank`.
async fn pmix_client(env: &LaunchEnv) -> Result<pmix::Client> {
    let client = blocking("PMIx_Init", env.timeout, pmix::Client::init).await?;
    if client.rank() as usize != env.rank {
        return Err(Error::Bootstrap(format!(
            "PMIx says this process is rank {}, {} says PE {}",
            client.rank(),
            env.launcher,
            env.rank
        )));
    }
    Ok(client)
}

/// PE 0 hosts the root on `listen` and stores its address with the secret in PMIx; the
/// others read them from there.
async fn via_pmix(env: &LaunchEnv, client: pmix::Client, listen: IpAddr) -> Result<Root> {
    let rank = env.rank;
    let (address, secret, hosted, client) = if rank == 0 {
        let secret = random_bytes::<32>()?.to_vec();
        let (address, hosted) = host_root(env, (listen, 0).into(), secret.clone()).await?;
        let line = published_line(address, &secret);
        let client = blocking("PMIx_Put", env.timeout, move || {
            client.publish(PMIX_KEY, &line).map(|()| client)
        })
        .await?;
        (address, secret, Some(hosted), client)
    } else {
        let (line, client) = read_pmix(env, client).await?;
        let (address, secret) = parse_published(&line).ok_or_else(|| {
            Error::Bootstrap(format!(
                "PE {rank}: PE 0's PMIx value {PMIX_KEY} is not `ADDRESS SECRET`: {line:?}"
            ))
        })?;
        (address, secret, None, client)
    };
    let link = connect(address, rank, Some(0), env.timeout).await?;
    tracing::debug!(root = %address, "the root's address came through PMIx");
    Ok(Root {
        link,
        secret,
        hosted,
        rendezvous: Rendezvous::Pmix,
        published: None,
        pmix: Some(client),
    })
}

/// Reads PE 0's `ADDRESS SECRET` from PMIx, asking again while the server says it is not
/// there yet, until the bootstrap timeout.
async fn read_pmix(env: &LaunchEnv, client: pmix::Client) -> Result<(String, pmix::Client)> {
    let deadline = crate::control::deadline_after(env.timeout);
    let mut client = client;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let (found, back) = blocking("PMIx_Get", left + Duration::from_secs(2), move || {
            client.lookup(0, PMIX_KEY, left).map(|line| (line, client))
        })
        .await?;
        client = back;
        if let Some(line) = found {
            return Ok((line, client));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Bootstrap(format!(
                "PE {}: PE 0 did not store the bootstrap root's address in PMIx ({PMIX_KEY}) within {:?}",
                env.rank, env.timeout
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// PE 0 hosts the root on loopback and serves its address on the rendezvous socket `name`;
/// the others read it from there.
async fn via_socket(env: &LaunchEnv, name: &str) -> Result<Root> {
    let rank = env.rank;
    if rank == 0 {
        let secret = random_bytes::<32>()?.to_vec();
        let (address, hosted) = host_root(env, ([127, 0, 0, 1], 0).into(), secret.clone()).await?;
        let published = publish(name, address, &secret)?;
        return Ok(Root {
            link: connect(address, rank, Some(0), env.timeout).await?,
            secret,
            hosted: Some(hosted),
            rendezvous: Rendezvous::Socket,
            published: Some(published),
            pmix: None,
        });
    }
    let deadline = crate::control::deadline_after(env.timeout);
    loop {
        if let Some((address, secret)) = read_published(name).await {
            if let Ok(link) = connect(address, rank, Some(0), Duration::from_millis(200)).await {
                return Ok(Root {
                    rendezvous: Rendezvous::Socket,
                    ..plain(link, secret, None)
                });
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Bootstrap(format!(
                "PE {rank} found no bootstrap root: PE 0 did not serve the rendezvous socket @{name} within {:?}",
                env.timeout
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> LaunchEnv {
        LaunchEnv {
            launcher: "mpirun",
            rank: 0,
            size: 2,
            local_rank: 0,
            default_bind: ferroshmem_runtime::config::Bind::None,
            root: RootSource::Pe0ViaSocket(name.into()),
            timeout: Duration::from_secs(5),
        }
    }

    /// PE 0's rendezvous socket hands out the job's secret: it must close when the bootstrap
    /// ends, formed or failed.
    #[tokio::test]
    async fn the_rendezvous_socket_closes_when_the_bootstrap_ends() {
        let name = format!("ferroshmem-rendezvous-test-{}", std::process::id());
        let root = reach_root(&env(&name)).await.unwrap();
        let (_, secret) = read_published(&name).await.expect("served");
        assert_eq!(secret, root.secret);
        // The job never forms (PE 1 never comes); the bootstrap gives up and drops its root.
        drop(root);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while read_published(&name).await.is_some() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "@{name} still served"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
