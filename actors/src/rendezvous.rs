//! Reaching the job's bootstrap root from a launched PE: at the launcher's address, at an
//! address PE 0 listens on, or through the rendezvous file PE 0 writes (see
//! [`crate::launch_env`]).

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferroshmem_runtime::{Error, Result};
use tokio::task::JoinHandle;

use crate::control::{connect, HubReport, Link, RootServer};
use crate::launch_env::{decode_secret, encode_hex, random_bytes, LaunchEnv, RootSource};

/// A PE's way to the root, once found.
#[derive(Debug)]
pub struct Root {
    /// The PE's control-plane link.
    pub link: Link,
    /// The job's secret.
    pub secret: Vec<u8>,
    /// The root's task, when this process hosts it (PE 0 under mpirun/srun).
    pub hosted: Option<JoinHandle<Result<HubReport>>>,
    /// The rendezvous file this process published, removed once the job has formed, or
    /// when this is dropped, whichever comes first.
    published: Option<Published>,
}

impl Root {
    /// The job has formed: the rendezvous file is no longer needed.
    pub fn formed(&mut self) {
        self.published = None;
    }
}

/// A published rendezvous file (it holds the job's secret): removed when dropped, so on every
/// way out of the bootstrap, failures included.
#[derive(Debug)]
struct Published(PathBuf);

impl Drop for Published {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn host_root(
    env: &LaunchEnv,
    address: SocketAddr,
    secret: Vec<u8>,
) -> Result<(SocketAddr, JoinHandle<Result<HubReport>>)> {
    let server = RootServer::bind(address).await?;
    let bound = server.address();
    let job = u64::from_le_bytes(random_bytes()?);
    Ok((bound, server.spawn(env.size, job, secret, env.timeout)))
}

fn publish(path: &Path, address: SocketAddr, secret: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        writeln!(f, "{address} {}", encode_hex(secret))?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::Bootstrap(format!(
            "PE 0 cannot write the rendezvous file {}: {e}",
            path.display()
        ))
    })
}

fn read_published(path: &Path) -> Option<(SocketAddr, Vec<u8>)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut parts = text.split_whitespace();
    let address = parts.next()?.parse().ok()?;
    let secret = decode_secret(parts.next()?).ok()?;
    Some((address, secret))
}

/// Finds (and for PE 0 under mpirun/srun, starts) the root and connects to it.
pub async fn reach_root(env: &LaunchEnv) -> Result<Root> {
    let rank = env.rank;
    match &env.root {
        RootSource::Launcher { address, secret } => Ok(Root {
            link: connect(*address, rank, None, env.timeout).await?,
            secret: secret.clone(),
            hosted: None,
            published: None,
        }),
        RootSource::Pe0AtAddress { address, secret } => {
            let hosted = if rank == 0 {
                Some(host_root(env, *address, secret.clone()).await?.1)
            } else {
                None
            };
            Ok(Root {
                link: connect(*address, rank, Some(0), env.timeout).await?,
                secret: secret.clone(),
                hosted,
                published: None,
            })
        }
        RootSource::Pe0ViaFile(path) if rank == 0 => {
            let secret = random_bytes::<32>()?.to_vec();
            let (address, hosted) =
                host_root(env, ([127, 0, 0, 1], 0).into(), secret.clone()).await?;
            publish(path, address, &secret)?;
            let published = Published(path.clone());
            Ok(Root {
                link: connect(address, rank, Some(0), env.timeout).await?,
                secret,
                hosted: Some(hosted),
                published: Some(published),
            })
        }
        RootSource::Pe0ViaFile(path) => {
            let deadline = tokio::time::Instant::now() + env.timeout;
            loop {
                if let Some((address, secret)) = read_published(path) {
                    if let Ok(link) =
                        connect(address, rank, Some(0), Duration::from_millis(200)).await
                    {
                        return Ok(Root {
                            link,
                            secret,
                            hosted: None,
                            published: None,
                        });
                    }
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(Error::Bootstrap(format!(
                        "PE {rank} found no bootstrap root: PE 0 did not publish a reachable address in {} within {:?}",
                        path.display(),
                        env.timeout
                    )));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PE 0's rendezvous file holds the job's secret: it must not outlive a bootstrap that
    /// fails before the job forms.
    #[tokio::test]
    async fn the_rendezvous_file_is_removed_when_the_bootstrap_fails() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!(
            "ferroshmem-rendezvous-test-{}.root",
            std::process::id()
        ));
        let env = LaunchEnv {
            launcher: "mpirun",
            rank: 0,
            size: 2,
            local_rank: 0,
            root: RootSource::Pe0ViaFile(path.clone()),
            timeout: Duration::from_secs(5),
        };
        let root = reach_root(&env).await.unwrap();
        assert!(read_published(&path).is_some(), "published");
        // The job never forms (PE 1 never comes); the bootstrap gives up and drops its root.
        drop(root);
        let left = path.exists();
        let _ = std::fs::remove_file(&path);
        assert!(!left, "{} outlived the failed bootstrap", path.display());
    }
}
