//! Teams: the handles C programs hold (`SHMEM_TEAM_WORLD` = 1, `SHMEM_TEAM_SHARED` = 2, the
//! splits' from 3 on, `SHMEM_TEAM_INVALID` = null), and `shmem_team_*`: numbers,
//! translation, configuration, splits, `shmem_team_sync`, `shmem_team_ptr`, destruction.
//! The deprecated active sets `(PE_start, logPE_stride, PE_size)` of the collectives map to
//! a team here too.
#![allow(unsafe_code)] // `#[no_mangle]` exports only; raw memory lives in `crate::raw`.

use std::ffi::{c_int, c_long, c_void};

use ferroshmem_runtime::{Error, Result, Team};

use crate::raw;
use crate::state::{fail, ok, report, shmem, MadeTeam, Shmem, FIRST_TEAM_HANDLE};

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
            WORLD => Ok(self.world().clone()),
            SHARED => Ok(self.pe().team_node()),
            h if h >= FIRST_TEAM_HANDLE => match self.split_teams().get(h - FIRST_TEAM_HANDLE) {
                Some(Some(made)) => Ok(made.team.clone()),
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

    /// A new handle for `team`, made with `num_contexts` asked for.
    fn team_handle(&self, team: Team, num_contexts: c_int) -> *mut c_void {
        let mut teams = self.split_teams();
        teams.push(Some(MadeTeam { team, num_contexts }));
        (FIRST_TEAM_HANDLE + teams.len() - 1) as *mut c_void
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

/// `SHMEM_TEAM_NUM_CONTEXTS`: the configuration mask's bit for `num_contexts`.
const NUM_CONTEXTS: c_long = 1;

/// The contexts a split's configuration asks for: `num_contexts` where the mask names it.
fn asked_contexts(config: *const TeamConfigC, mask: c_long) -> Result<c_int> {
    match mask & NUM_CONTEXTS {
        0 => Ok(0),
        _ => Ok(raw::local(config, 1, "config")?[0].num_contexts),
    }
}

/// `shmem_team_get_config`: the team's configuration as its split was given it (the
/// predefined teams: no contexts asked for); 0 on success.
#[no_mangle]
pub extern "C" fn shmem_team_get_config(
    team: *mut c_void,
    config_mask: c_long,
    config: *mut TeamConfigC,
) -> c_int {
    let state = shmem("shmem_team_get_config");
    let got = state.team(team).and_then(|_| {
        let made = (team as usize).checked_sub(FIRST_TEAM_HANDLE);
        let num_contexts = made.map_or(0, |i| {
            let teams = state.split_teams();
            teams
                .get(i)
                .and_then(Option::as_ref)
                .map_or(0, |m| m.num_contexts)
        });
        match config_mask & NUM_CONTEXTS {
            0 => Ok(()),
            _ => raw::store(config, TeamConfigC { num_contexts }, "config"),
        }
    });
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
    config: *const TeamConfigC,
    config_mask: c_long,
    new_team: *mut *mut c_void,
) -> c_int {
    let state = shmem("shmem_team_split_strided");
    // SHMEM_TEAM_INVALID unless the split gives this PE a team.
    ok(
        "shmem_team_split_strided",
        raw::store(new_team, std::ptr::null_mut(), "new_team"),
    );
    if parent.is_null() {
        return INVALID_PARENT;
    }
    let made = (|| {
        let parent = state.team(parent)?;
        let checked = (|| {
            let start = usize::try_from(start)
                .map_err(|_| Error::InvalidArgument(format!("start {start}")))?;
            let size = usize::try_from(size)
                .map_err(|_| Error::InvalidArgument(format!("size {size}")))?;
            Ok((start, size, asked_contexts(config, config_mask)?))
        })();
        let (start, size, contexts) = refused_split(state, &parent, checked)?;
        let team = state.block(parent.split_strided(start, stride as isize, size))?;
        let handle = team.map_or(std::ptr::null_mut(), |t| state.team_handle(t, contexts));
        raw::store(new_team, handle, "new_team")
    })();
    returned("shmem_team_split_strided", made)
}

/// `checked`, a split's own arguments read before the split; where they fail, this PE takes
/// its part in the split as a refusal, so that the other members' splits fail instead of
/// waiting for it, and the arguments' error is this PE's.
fn refused_split<T>(state: &Shmem, parent: &Team, checked: Result<T>) -> Result<T> {
    if checked.is_err() {
        let _ = state.block(parent.refuse_split());
    }
    checked
}

/// What a split of `SHMEM_TEAM_INVALID` returns, without a word: OpenSHMEM makes it the way
/// a PE outside the parent's split says so (no team made, the new handles invalid), not an
/// error.
const INVALID_PARENT: c_int = -1;

/// `shmem_team_split_2d`: `parent` as a grid `xrange` wide: this PE's row and column
/// teams; collective over the parent; 0 on success.
#[no_mangle]
pub extern "C" fn shmem_team_split_2d(
    parent: *mut c_void,
    xrange: c_int,
    xaxis_config: *const TeamConfigC,
    xaxis_mask: c_long,
    xaxis_team: *mut *mut c_void,
    yaxis_config: *const TeamConfigC,
    yaxis_mask: c_long,
    yaxis_team: *mut *mut c_void,
) -> c_int {
    let state = shmem("shmem_team_split_2d");
    // SHMEM_TEAM_INVALID unless the split succeeds.
    for out in [xaxis_team, yaxis_team] {
        ok(
            "shmem_team_split_2d",
            raw::store(out, std::ptr::null_mut(), "team"),
        );
    }
    if parent.is_null() {
        return INVALID_PARENT;
    }
    let made = (|| {
        let parent = state.team(parent)?;
        let checked = (|| {
            let xrange = usize::try_from(xrange)
                .map_err(|_| Error::InvalidArgument(format!("xrange {xrange}")))?;
            let x_contexts = asked_contexts(xaxis_config, xaxis_mask)?;
            Ok((
                xrange,
                x_contexts,
                asked_contexts(yaxis_config, yaxis_mask)?,
            ))
        })();
        let (xrange, x_contexts, y_contexts) = refused_split(state, &parent, checked)?;
        let (x, y) = state.block(parent.split_2d(xrange))?;
        raw::store(xaxis_team, state.team_handle(x, x_contexts), "xaxis_team")?;
        raw::store(yaxis_team, state.team_handle(y, y_contexts), "yaxis_team")
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
        if team.world_pe(pe) == Some(state.me()) {
            // This PE's own: the address itself (static data lives at its own address).
            return state
                .view(dest.cast::<u8>(), 1)
                .map(|_| Some(dest.cast_mut().cast()));
        }
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
            report(routine, &e);
            -1
        }
    }
}
