//! Teams on a [`Pe`]: its predefined teams ([`Pe::team_world`], [`Pe::team_node`]), and the
//! control plane through which the runtime's team module creates new ones (each creation is
//! two allgathers among the parent team's members, sent through the PE's actor).

use std::sync::Arc;

use ferroshmem_runtime::{DataPlane, Error, Exchange, ExchangeFuture, Result, Team, Teams};
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

/// The predefined teams of the PE of `data`, creating later teams through `mailbox`.
pub(crate) fn predefined(
    data: &Arc<DataPlane>,
    mailbox: &UnboundedSender<Command>,
) -> Result<Teams> {
    let control = Arc::new(ActorControl {
        mailbox: mailbox.downgrade(),
    });
    Teams::new(data.clone(), control)
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
