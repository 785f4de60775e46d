//! Communication contexts for C: `shmem_ctx_create`, `shmem_team_create_ctx`,
//! `shmem_ctx_destroy`, `shmem_ctx_get_team`, `shmem_ctx_fence`, `shmem_ctx_quiet`. The
//! handles are `SHMEM_CTX_DEFAULT` (1: the data plane's own operations), then 2 on for the
//! contexts made here; `SHMEM_CTX_INVALID` is null. The `shmem_ctx_*` forms of the
//! operations live beside their families (`rma`, `amo`, `signals`).
#![allow(unsafe_code)] // `#[no_mangle]` exports only; raw memory lives in `crate::raw`.

use std::ffi::{c_int, c_long, c_void};
use std::sync::Arc;

use ferroshmem_runtime::{Context, ContextOptions, Error, Result};

use crate::raw;
use crate::state::{fail, ok, shmem, MadeContext, Shmem, FIRST_CONTEXT_HANDLE};
use crate::teams::{returned, WORLD};

/// `options` as the runtime's.
fn options(options: c_long) -> Result<ContextOptions> {
    u64::try_from(options)
        .ok()
        .and_then(ContextOptions::from_bits)
        .ok_or_else(|| {
            Error::InvalidArgument(format!("{options:#x} is not a mask of SHMEM_CTX_* options"))
        })
}

/// Records `context` (made from the team of C handle `team`) and stores its handle.
fn give_out(s: &Shmem, context: Context, team: usize, out: *mut *mut c_void) -> Result<()> {
    let handle = {
        let mut made = s.made_contexts();
        made.push(Some(MadeContext {
            context: Arc::new(context),
            team,
        }));
        FIRST_CONTEXT_HANDLE + made.len() - 1
    };
    raw::store(out, handle as *mut c_void, "ctx")
}

/// Where a creation failed, stores `SHMEM_CTX_INVALID` into the caller's handle (as
/// OpenSHMEM 1.5 asks), and passes the outcome on.
fn invalid_on_failure(made: Result<()>, out: *mut *mut c_void) -> Result<()> {
    if made.is_err() {
        // Null is SHMEM_CTX_INVALID; the store's own refusal (a null `out`) adds nothing to
        // the failure.
        let _ = raw::store(out, std::ptr::null_mut(), "ctx");
    }
    made
}

/// `shmem_ctx_create`: a context of the world's PEs; 0 on success, else non-zero with
/// `*ctx` set to `SHMEM_CTX_INVALID`.
#[no_mangle]
pub extern "C" fn shmem_ctx_create(opts: c_long, ctx: *mut *mut c_void) -> c_int {
    let s = shmem("shmem_ctx_create");
    let made = options(opts).and_then(|o| give_out(s, s.pe().ctx_create(o), WORLD, ctx));
    returned("shmem_ctx_create", invalid_on_failure(made, ctx))
}

/// `shmem_team_create_ctx`: a context whose PE numbers are `team`'s; 0 on success, else
/// non-zero with `*ctx` set to `SHMEM_CTX_INVALID`.
#[no_mangle]
pub extern "C" fn shmem_team_create_ctx(
    team: *mut c_void,
    opts: c_long,
    ctx: *mut *mut c_void,
) -> c_int {
    let s = shmem("shmem_team_create_ctx");
    let made = (|| {
        let context = Context::for_team(&s.team(team)?, options(opts)?)?;
        give_out(s, context, team as usize, ctx)
    })();
    returned("shmem_team_create_ctx", invalid_on_failure(made, ctx))
}

/// `shmem_ctx_destroy`: completes the context's operations, then forgets it. The default
/// context is left alone, and `SHMEM_CTX_INVALID` does nothing (OpenSHMEM 1.5).
#[no_mangle]
pub extern "C" fn shmem_ctx_destroy(ctx: *mut c_void) {
    let s = shmem("shmem_ctx_destroy");
    if ctx.is_null() {
        return;
    }
    let handle = ctx as usize;
    match s.context(handle) {
        Ok(None) => {}
        Ok(Some(context)) => {
            ok("shmem_ctx_destroy", s.block(context.quiet()));
            if let Some(slot) = s.made_contexts().get_mut(handle - FIRST_CONTEXT_HANDLE) {
                *slot = None;
            }
        }
        Err(e) => fail("shmem_ctx_destroy", &e),
    }
}

/// `shmem_ctx_get_team`: the team the context was made from (`SHMEM_TEAM_WORLD` for the
/// default context and `shmem_ctx_create`'s); 0 on success, -1 (and `SHMEM_TEAM_INVALID`)
/// for an invalid context.
#[no_mangle]
pub extern "C" fn shmem_ctx_get_team(ctx: *mut c_void, team: *mut *mut c_void) -> c_int {
    let s = shmem("shmem_ctx_get_team");
    let handle = ctx as usize;
    let found = s.context(handle).map(|made| match made {
        None => WORLD,
        Some(_) => s
            .made_contexts()
            .get(handle - FIRST_CONTEXT_HANDLE)
            .and_then(|slot| slot.as_ref().map(|m| m.team))
            .unwrap_or(0),
    });
    let (status, handle) = match found {
        Ok(t) => (0, t),
        Err(_) => (-1, 0),
    };
    ok(
        "shmem_ctx_get_team",
        raw::store(team, handle as *mut c_void, "team"),
    );
    status
}

/// `shmem_ctx_fence`: orders the context's operations to each PE.
#[no_mangle]
pub extern "C" fn shmem_ctx_fence(ctx: *mut c_void) {
    let s = shmem("shmem_ctx_fence");
    match ok("shmem_ctx_fence", s.context(ctx as usize)) {
        None => s.pe().fence(),
        Some(context) => context.fence(),
    }
}

/// `shmem_ctx_quiet`: completes the context's operations, and only them.
#[no_mangle]
pub extern "C" fn shmem_ctx_quiet(ctx: *mut c_void) {
    let s = shmem("shmem_ctx_quiet");
    let done = s.context(ctx as usize).and_then(|made| match made {
        None => s.block(s.pe().quiet()),
        Some(context) => s.block(context.quiet()),
    });
    ok("shmem_ctx_quiet", done)
}
