//! A PE's end of the control plane: two channels, whatever carries them (in-process hub or
//! TCP connection to the root).

use std::time::Duration;

use ferroshmem_runtime::{Error, Result};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;

use super::hub::{run_hub, HubConfig, HubEvent, HubReport};
use super::outbox::Outbox;
use super::wire::{FromPe, Hello, ToPe, Welcome};

/// A PE's control-plane link.
#[derive(Debug)]
pub struct Link {
    /// Messages to the root.
    pub to_root: UnboundedSender<FromPe>,
    /// Messages from the root.
    pub from_root: UnboundedReceiver<ToPe>,
    /// The PE whose process hosts the root, if a PE does (its loss ends the link).
    pub root_pe: Option<usize>,
    /// Where the root is, for messages.
    pub root_address: String,
    /// Resolves once a goodbye sent on `to_root` has reached the connection, for links whose
    /// messages are written by another task (TCP): a process must not exit before that.
    pub goodbye_written: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl Link {
    /// Sends `hello` and waits for the job to form.
    pub async fn join(&mut self, hello: Hello, timeout: Duration) -> Result<Welcome> {
        let rank = hello.rank;
        self.to_root.send(FromPe::Hello(hello)).map_err(|_| {
            Error::Bootstrap(format!(
                "PE {rank}: the root at {} is gone",
                self.root_address
            ))
        })?;
        let reply = tokio::time::timeout(timeout, self.from_root.recv())
            .await
            .map_err(|_| {
                Error::Bootstrap(format!(
                    "PE {rank}: the job did not form within {timeout:?} (root at {})",
                    self.root_address
                ))
            })?;
        match reply {
            Some(ToPe::Welcome(w)) => Ok(w),
            Some(ToPe::Refused { reason }) => Err(Error::Bootstrap(format!(
                "PE {rank}: the root at {} refused: {reason}",
                self.root_address
            ))),
            Some(other) => Err(Error::Bootstrap(format!(
                "PE {rank}: unexpected first message from the root: {other:?}"
            ))),
            None => Err(Error::Bootstrap(format!(
                "PE {rank}: the root at {} closed the connection during bootstrap",
                self.root_address
            ))),
        }
    }
}

/// Starts an in-process hub for `n_pes` PEs and returns each PE's link and the hub's task.
pub fn local_job(
    n_pes: usize,
    job: u64,
    secret: Vec<u8>,
    join_timeout: Duration,
) -> (Vec<Link>, JoinHandle<Result<HubReport>>) {
    let (events_tx, events_rx) = unbounded_channel();
    let hub = tokio::spawn(run_hub(
        HubConfig {
            n_pes,
            job,
            secret,
            join_timeout,
            address: "in-process".into(),
            news: Default::default(),
        },
        events_rx,
    ));
    let links = (0..n_pes)
        .map(|rank| {
            let (to_root, mut from_pe) = unbounded_channel::<FromPe>();
            let (outbox, from_root) = unbounded_channel::<ToPe>();
            let events = events_tx.clone();
            tokio::spawn(async move {
                let mut outbox = Some(outbox);
                while let Some(msg) = from_pe.recv().await {
                    let event = match (msg, outbox.take()) {
                        (FromPe::Hello(hello), Some(outbox)) => HubEvent::Join {
                            hello,
                            outbox: Outbox::Channel(outbox),
                        },
                        (msg, _) => HubEvent::Message { rank, msg },
                    };
                    if events.send(event).is_err() {
                        return;
                    }
                }
                let _ = events.send(HubEvent::Disconnected {
                    rank,
                    reason: "its task ended without finishing".into(),
                });
            });
            Link {
                to_root,
                from_root,
                root_pe: None,
                root_address: "in-process".into(),
                goodbye_written: None,
            }
        })
        .collect();
    (links, hub)
}
