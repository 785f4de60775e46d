//! Teams on a [`Pe`]: its predefined teams ([`Pe::team_world`], [`Pe::team_node`]), and the
//! control plane through which the runtime's team module creates new ones (each creation is
//! two allgathers among the parent team's members, sent through the PE's actor).

use std::sync::Arc;

use ferroshmem_runtime::{
    DataPlane, Error, Exchange, ExchangeFuture, Result, Team, TeamConfig, Teams,
};
use tokio::sync::mpsc::{UnboundedSender, WeakUnboundedSender};
use tokio::sync::oneshot;

use crate::actor::Command;
use crate::pe::Pe;

/// Exchanges through a PE's actor. It holds the mailbox weakly, so that teams kept after
/// their PE's handles are gone do not keep the actor alive.
#[derive(Debug)]
struct ActorControl {
    mailbox: WeakUnboundedSender<Command>,
}

impl Exchange for ActorControl {
    fn exchange(
        &self,
        group: u64,
        index: usize,
        size: usize,
        payload: Vec<u8>,
    ) -> ExchangeFuture<'_> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            let mailbox = self.mailbox.upgrade().ok_or(Error::Shutdown)?;
            mailbox
                .send(Command::Exchange {
                    group,
                    index,
                    size,
                    payload,
                    reply,
                })
                .map_err(|_| Error::Shutdown)?;
            drop(mailbox);
            answer.await.map_err(|_| Error::Shutdown)?
        })
    }
}

/// The predefined teams of the PE of `data`, creating later teams through `mailbox`; with
/// [`TeamConfig::dest_ready`] where `dest_ready` (see [`JoinOptions`]).
pub(crate) fn predefined(
    data: &Arc<DataPlane>,
    mailbox: &UnboundedSender<Command>,
    dest_ready: bool,
) -> Result<Teams> {
    let control = Arc::new(ActorControl {
        mailbox: mailbox.downgrade(),
    });
    let config = TeamConfig {
        dest_ready,
        ..TeamConfig::for_job(data.nodes(), data.heap_size())
    };
    Teams::with_config(data.clone(), control, config)
}

/// How a PE joins its job, beyond what the environment says ([`crate::init_with`],
/// [`crate::init_alone_with`]); every PE of a job passes the same.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JoinOptions {
    /// Whether the program's callers make every `dest` ready before a collective, as
    /// OpenSHMEM requires of its callers: the predefined teams (and the teams split from
    /// them) then take [`TeamConfig::dest_ready`]. The C library sets it.
    pub dest_ready: bool,
}

impl JoinOptions {
    /// The options of a program whose callers keep OpenSHMEM's contract (see
    /// [`JoinOptions::dest_ready`]).
    pub fn openshmem() -> JoinOptions {
        JoinOptions { dest_ready: true }
    }
}

impl Pe {
    /// The world team (`SHMEM_TEAM_WORLD`): every PE of the job, numbered as in the job.
    ///
    /// ```no_run
    /// # async fn f(pe: ferroshmem_actors::Pe) -> ferroshmem_runtime::Result<()> {
    /// let world = pe.team_world();
    /// let total = pe.calloc::<u64>(1).await?;
    /// pe.p(&total, pe.my_pe() as u64, pe.my_pe()).await?;
    /// world.sum_reduce(&total, &total).await?; // every PE: 0 + 1 + … + (n − 1)
    /// pe.free(total).await?;
    /// # Ok(()) }
    /// ```
    pub fn team_world(&self) -> Team {
        self.teams().world().clone()
    }

    /// The node team (`SHMEM_TEAM_SHARED`, `NVSHMEMX_TEAM_NODE`): the PEs whose memory this
    /// PE reaches by loads and stores.
    pub fn team_node(&self) -> Team {
        self.teams().node().clone()
    }
}
