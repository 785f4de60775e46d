//! Teams: the handles C programs hold (`SHMEM_TEAM_WORLD` = 1, `SHMEM_TEAM_SHARED` = 2, the
//! splits' from 3 on, `SHMEM_TEAM_INVALID` = null), and `shmem_team_*`: numbers,
//! translation, configuration, splits, `shmem_team_sync`, `shmem_team_ptr`, destruction.
//! The deprecated active sets `(PE_start, logPE_stride, PE_size)` of the collectives map to
//! a team here too.
#![allow(unsafe_code)] // `#[no_mangle]` exports only; raw memory lives in `crate::raw`.

use std::ffi::{c_int, c_long, c_void};

use ferroshmem_runtime::{Error, Result, Team};

use crate::raw;
use crate::state::{fail, shmem, Shmem, FIRST_TEAM_HANDLE};

/// `SHMEM_TEAM_WORLD`'s handle.
pub(crate) const WORLD: usize = 1;
/// `SHMEM_TEAM_SHARED`'s handle.
const SHARED: usize = 2;

/// `shmem_team_config_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TeamConfigC {
    /// Contexts the team's creator asks to be able to make (`num_contexts`).
    pub num_contexts: c_int,
}

impl Shmem {
    /// The team of C handle `handle`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `SHMEM_TEAM_INVALID` or a handle never given out;
    /// [`Error::TeamDestroyed`] for a destroyed team.
    pub(crate) fn team(&self, handle: *mut c_void) -> Result<Team> {
        match handle as usize {
            WORLD => Ok(self.pe().team_world()),
            SHARED => Ok(self.pe().team_node()),
            h if h >= FIRST_TEAM_HANDLE => match self.split_teams().get(h - FIRST_TEAM_HANDLE) {
                Some(Some(team)) => Ok(team.clone()),
                Some(None) => Err(Error::TeamDestroyed),
                None => Err(Error::InvalidArgument(format!(
                    "{handle:p} is not a team handle"
                ))),
            },
            _ => Err(Error::InvalidArgument(
                "SHMEM_TEAM_INVALID names no team".into(),
            )),
        }
    }

    /// A new handle for `team`.
    fn team_handle(&self, team: Team) -> *mut c_void {
        let mut teams = self.split_teams();
        teams.push(Some(team));
        (FIRST_TEAM_HANDLE + teams.len() - 1) as *mut c_void
    }

    /// The team of the active set of PEs `start`, `start + 2^log_stride`, … (`size` of
    /// them) of a deprecated collective.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a set outside the job, or one other than the whole
    /// job: such sets are not supported (use a team from `shmem_team_split_strided`).
    pub(crate) fn active_set(&self, start: c_int, log_stride: c_int, size: c_int) -> Result<Team> {
        let n = self.pe().n_pes();
        let whole = start == 0 && usize::try_from(size) == Ok(n) && (log_stride == 0 || n == 1);
        if whole {
            return Ok(self.pe().team_world());
        }
        Err(Error::InvalidArgument(format!(
            "the active set (PE_start {start}, logPE_stride {log_stride}, PE_size {size}) is not \
             the whole job of {n} PEs: ferroshmem runs the deprecated active-set collectives on \
             the whole job only (use a team from shmem_team_split_strided)"
        )))
    }
}

/// The C `int` of a team-relative number, -1 for none.
fn number(pe: Option<usize>) -> c_int {
    pe.map_or(-1, |p| p as c_int)
}

/// `shmem_team_my_pe`: this PE's number in `team`, -1 for an invalid team.
#[no_mangle]
pub extern "C" fn shmem_team_my_pe(team: *mut c_void) -> c_int {
    let state = shmem("shmem_team_my_pe");
    number(state.team(team).ok().map(|t| t.my_pe()))
}

/// `shmem_team_n_pes`: the members of `team`, -1 for an invalid team.
#[no_mangle]
pub extern "C" fn shmem_team_n_pes(team: *mut c_void) -> c_int {
    let state = shmem("shmem_team_n_pes");
    number(state.team(team).ok().map(|t| t.n_pes()))
}

/// `shmem_team_translate_pe`: `src_pe` of `src_team` as a number of `dest_team`, -1 when
/// it is not a member or a team is invalid.
#[no_mangle]
pub extern "C" fn shmem_team_translate_pe(
    src_team: *mut c_void,
    src_pe: c_int,
    dest_team: *mut c_void,
) -> c_int {
    let state = shmem("shmem_team_translate_pe");
    let translated = (|| {
        let (src, dest) = (state.team(src_team)?, state.team(dest_team)?);
        let pe =
            usize::try_from(src_pe).map_err(|_| Error::InvalidArgument("negative PE".into()))?;
        src.translate_pe(pe, &dest)
    })();
    number(translated.ok().flatten())
}

/// `shmem_team_get_config`: the team's configuration (contexts: none reserved); 0 on success.
#[no_mangle]
pub extern "C" fn shmem_team_get_config(
    team: *mut c_void,
    _config_mask: c_long,
    config: *mut TeamConfigC,
) -> c_int {
    let state = shmem("shmem_team_get_config");
    let got = state
        .team(team)
        .and_then(|_| raw::store(config, TeamConfigC { num_contexts: 0 }, "config"));
    returned("shmem_team_get_config", got)
}

/// `shmem_team_split_strided`: the members `start`, `start + stride`, … (`size` of them)
/// of `parent` as a new team (`SHMEM_TEAM_INVALID` on the others); collective over the
/// parent; 0 on success.
#[no_mangle]
pub extern "C" fn shmem_team_split_strided(
    parent: *mut c_void,
    start: c_int,
    stride: c_int,
    size: c_int,
    _config: *const TeamConfigC,
    _config_mask: c_long,
    new_team: *mut *mut c_void,
) -> c_int {
    let state = shmem("shmem_team_split_strided");
    let made = (|| {
        let parent = state.team(parent)?;
        let start =
            usize::try_from(start).map_err(|_| Error::InvalidArgument(format!("start {start}")))?;
        let size =
            usize::try_from(size).map_err(|_| Error::InvalidArgument(format!("size {size}")))?;
        let team = state.block(parent.split_strided(start, stride as isize, size))?;
        let handle = team.map_or(std::ptr::null_mut(), |t| state.team_handle(t));
        raw::store(new_team, handle, "new_team")
    })();
    returned("shmem_team_split_strided", made)
}

/// `shmem_team_split_2d`: `parent` as a grid `xrange` wide: this PE's row and column
/// teams; collective over the parent; 0 on success.
#[no_mangle]
pub extern "C" fn shmem_team_split_2d(
    parent: *mut c_void,
    xrange: c_int,
    _xaxis_config: *const TeamConfigC,
    _xaxis_mask: c_long,
    xaxis_team: *mut *mut c_void,
    _yaxis_config: *const TeamConfigC,
    _yaxis_mask: c_long,
    yaxis_team: *mut *mut c_void,
) -> c_int {
    let state = shmem("shmem_team_split_2d");
    let made = (|| {
        let parent = state.team(parent)?;
        let xrange = usize::try_from(xrange)
            .map_err(|_| Error::InvalidArgument(format!("xrange {xrange}")))?;
        let (x, y) = state.block(parent.split_2d(xrange))?;
        raw::store(xaxis_team, state.team_handle(x), "xaxis_team")?;
        raw::store(yaxis_team, state.team_handle(y), "yaxis_team")
    })();
    returned("shmem_team_split_2d", made)
}

/// `shmem_team_destroy`: collective over the team; the predefined teams and
/// `SHMEM_TEAM_INVALID` are left alone.
#[no_mangle]
pub extern "C" fn shmem_team_destroy(team: *mut c_void) {
    let state = shmem("shmem_team_destroy");
    let handle = team as usize;
    if handle < FIRST_TEAM_HANDLE {
        return;
    }
    let destroyed = state.team(team).and_then(|t| state.block(t.destroy()));
    match destroyed {
        Ok(()) => {
            if let Some(slot) = state.split_teams().get_mut(handle - FIRST_TEAM_HANDLE) {
                *slot = None;
            }
        }
        Err(e) => fail("shmem_team_destroy", &e),
    }
}

/// `shmem_team_sync`: waits for every member of `team`; 0 on success.
#[no_mangle]
pub extern "C" fn shmem_team_sync(team: *mut c_void) -> c_int {
    let state = shmem("shmem_team_sync");
    let synced = state.team(team).and_then(|t| state.block(t.sync()));
    returned("shmem_team_sync", synced)
}

/// `shmem_team_ptr`: as `shmem_ptr` with `pe` a member of `team`.
#[no_mangle]
pub extern "C" fn shmem_team_ptr(team: *mut c_void, dest: *const c_void, pe: c_int) -> *mut c_void {
    let state = shmem("shmem_team_ptr");
    let found = (|| {
        let team = state.team(team)?;
        let pe = usize::try_from(pe).map_err(|_| Error::InvalidArgument("negative PE".into()))?;
        team.ptr(state.view(dest.cast::<u8>(), 1)?, pe)
    })();
    match found {
        Ok(Some(address)) => address.cast(),
        _ => std::ptr::null_mut(),
    }
}

/// A routine's C status: 0, or -1 with the error logged. A lost peer ends the job.
pub(crate) fn returned(routine: &'static str, result: Result<()>) -> c_int {
    match result {
        Ok(()) => 0,
        Err(e @ (Error::PeerLost { .. } | Error::Shutdown)) => fail(routine, &e),
        Err(e) => {
            tracing::error!(%e, "{routine} failed");
            eprintln!("ferroshmem: {routine}: {e}");
            -1
        }
    }
}
