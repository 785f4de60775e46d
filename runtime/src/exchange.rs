//! The control plane as the layers under the actors see it: [`Exchange`], an allgather among
//! a group of PEs. Teams are created through it and GPU PEs exchange their heap handles
//! through it; the actors crate implements it over the job's bootstrap root.

use std::future::Future;
use std::pin::Pin;

use crate::error::Result;

/// The future of an exchange: every member's payload, in member-index order.
pub type ExchangeFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<Vec<u8>>>> + Send + 'a>>;

/// Allgathers among any group of the job's PEs, through the control plane (slow path: for
/// set-up, never for data).
pub trait Exchange: Send + Sync + std::fmt::Debug + 'static {
    /// Exchanges `payload` among the `size` members of group `group` (this PE being member
    /// `index`); resolves to every member's payload in member order. Collective within the
    /// group, in the same order on every member.
    fn exchange(
        &self,
        group: u64,
        index: usize,
        size: usize,
        payload: Vec<u8>,
    ) -> ExchangeFuture<'_>;
}
