//! What OpenSHMEM's query routines answer about the library and the job: the specification
//! version and the library's name (`shmem_info_get_version`, `shmem_info_get_name`), whether a
//! PE or an address can be reached (`shmem_pe_accessible`, `shmem_addr_accessible`), and a
//! load/store address of a peer's symmetric memory (`shmem_ptr`, `shmem_team_ptr`), which
//! only peers on this node (mapped routes) have.

use bytemuck::Pod;

use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::route::Route;
use crate::segment::HEADER_SIZE;
use crate::team::Team;

/// The OpenSHMEM specification version ferroshmem implements: (major, minor).
pub const SPEC_VERSION: (u32, u32) = (1, 5);

/// The library's name, as `shmem_info_get_name` gives it.
pub const LIBRARY_NAME: &str = concat!("ferroshmem ", env!("CARGO_PKG_VERSION"));

impl DataPlane {
    /// The OpenSHMEM specification version implemented (`shmem_info_get_version`).
    pub fn info_get_version(&self) -> (u32, u32) {
        SPEC_VERSION
    }

    /// The library's name and version (`shmem_info_get_name`).
    pub fn info_get_name(&self) -> &'static str {
        LIBRARY_NAME
    }

    /// Whether PE `pe` can be reached by this PE's operations now (`shmem_pe_accessible`):
    /// it is a PE of the job and the job has not failed (a lost PE fails the job, and then
    /// no PE is reachable).
    pub fn pe_accessible(&self, pe: usize) -> bool {
        pe < self.n_pes() && self.health.check().is_ok()
    }

    /// Whether `addr` lies in this PE's symmetric heap and PE `pe` is accessible
    /// (`shmem_addr_accessible`): the same offset then names symmetric memory on `pe`.
    pub fn addr_accessible(&self, addr: *const u8, pe: usize) -> bool {
        let own = self.own_segment();
        let start = own.mapping().base_addr() + HEADER_SIZE;
        (start..start + own.heap_size()).contains(&(addr as usize)) && self.pe_accessible(pe)
    }

    /// The address of `view`'s first element in PE `pe`'s copy, for loads and stores from
    /// this process (`shmem_ptr`); `None` when `pe` lives on another node, where only the
    /// operations reach. The address stays valid while this PE is open and the view's
    /// allocation lives; accesses through it are the caller's to synchronise (they bypass
    /// ordering, completion and the atomics' guarantees, as in OpenSHMEM).
    ///
    /// # Errors
    /// As the operations: [`Error::PeOutOfRange`], a view of
    /// another heap or a freed allocation.
    pub fn ptr<'a, T: Pod>(
        &self,
        view: impl Into<SymSlice<'a, T>>,
        pe: usize,
    ) -> Result<Option<*mut T>> {
        let view = view.into();
        let offset = self.locate(view, view.len(), "ptr")?;
        Ok(match self.route(pe)? {
            Route::Mapped(segment) => Some((segment.mapping().base_addr() + offset) as *mut T),
            Route::Remote => None,
        })
    }
}

impl Team {
    /// [`DataPlane::ptr`] with `pe` a member of this team (`shmem_team_ptr`).
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] when `pe` is not a member, [`Error::TeamDestroyed`], and
    /// [`DataPlane::ptr`]'s.
    pub fn ptr<'a, T: Pod>(
        &self,
        view: impl Into<SymSlice<'a, T>>,
        pe: usize,
    ) -> Result<Option<*mut T>> {
        if self.is_destroyed() {
            return Err(Error::TeamDestroyed);
        }
        let world = self.world_pe(pe).ok_or(Error::PeOutOfRange {
            pe,
            n_pes: self.n_pes(),
        })?;
        self.dp().ptr(view, world)
    }
}
