//! The job's bootstrap root, hosted by the launcher: binding it before the PEs start, and
//! reporting how it ended. The root's result is only reported: the PEs' exit statuses alone
//! decide the job's outcome.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ferroshmem_actors::control::{HubNews, HubReport, RootServer};
use tokio::task::JoinHandle;

use super::output::status;
use crate::launch_env::{encode_hex, random_bytes};
use crate::Result;

/// How long the root may take to finish once every PE process has exited. The PEs' sockets
/// closed when they exited, so this only covers the root's own processing; a root still
/// waiting after it never heard from any PE (a program that does not use ferroshmem) and is
/// stopped without a word.
const SETTLE: Duration = Duration::from_millis(250);

/// The root, serving the job.
#[derive(Debug)]
pub(crate) struct Root {
    /// Where PEs reach it.
    pub(crate) address: SocketAddr,
    /// The job's secret, as the PEs receive it.
    pub(crate) secret_hex: String,
    /// The PEs the root has lost, in the order it lost them, and a global exit.
    news: Arc<HubNews>,
    task: Option<JoinHandle<Result<HubReport>>>,
}

impl Root {
    /// Binds a port of `ip` and serves a job of `n_pes` PEs that must form within `timeout`.
    pub(crate) async fn start(n_pes: usize, ip: IpAddr, timeout: Duration) -> Result<Root> {
        let server = RootServer::bind(SocketAddr::new(ip, 0)).await?;
        let address = server.address();
        let job = u64::from_le_bytes(random_bytes()?);
        let secret = random_bytes::<32>()?;
        Ok(Root {
            address,
            secret_hex: encode_hex(&secret),
            news: server.news(),
            task: Some(server.spawn(n_pes, job, secret.to_vec(), timeout)),
        })
    }

    /// The first PE the root lost (its connection ended or it failed), if any: the PEs that
    /// fail because of it learn of it from the root, so it failed before them.
    pub(crate) fn first_lost(&self) -> Option<usize> {
        self.news.first_lost()
    }

    /// The PE that ended the job with a global exit, and its status, if one did.
    pub(crate) fn global_exit(&self) -> Option<(usize, i32)> {
        self.news.global_exit()
    }

    /// Waits until the root ends and reports how on stderr, but for the PEs it lost that
    /// the launcher had `stopped` (their loss is the stop's doing); pending forever once
    /// reported.
    pub(crate) async fn ended(&mut self, stopped: &[bool]) {
        match self.task.as_mut() {
            Some(task) => {
                let result = task.await.map_err(|e| e.to_string());
                self.task = None;
                match result.and_then(|r| r.map_err(|e| e.to_string())) {
                    Ok(report) => report_lost(&report, stopped),
                    Err(e) => status(format_args!("the bootstrap root stopped: {e}")),
                }
            }
            None => std::future::pending().await,
        }
    }

    /// Called once every PE has exited: reports the root's end if it comes promptly.
    pub(crate) async fn settle(&mut self, stopped: &[bool]) {
        let _ = tokio::time::timeout(SETTLE, self.ended(stopped)).await;
    }
}

fn report_lost(report: &HubReport, stopped: &[bool]) {
    let news = report
        .lost
        .iter()
        .filter(|(pe, _)| !stopped.get(*pe).copied().unwrap_or(false));
    for (pe, reason) in news {
        status(format_args!("the bootstrap root lost PE {pe}: {reason}"));
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
