//! The audited layer of rdma-core calls for the `gpu` NIC handler: loading `libibverbs.so.1`
//! and `libmlx5.so.1` at run time (the build needs neither), the functions it binds, and the
//! objects they hand out ([`objects`]: each released when dropped). Every `unsafe` of the
//! handler's NIC side lives here.
//!
//! # What is bound
//! Plain verbs for what every RDMA device has (device list, open/close, query device, port
//! and GID, protection domains, memory registration, dmabuf registration for GPU memory) and
//! mlx5 direct verbs for the rest: whether a device is mlx5 (`mlx5dv_is_supported`), opening
//! it with DevX, the PD number (`mlx5dv_init_obj`), user memory for queues
//! (`mlx5dv_devx_umem_reg[_ex]`), doorbell pages (`mlx5dv_devx_alloc_uar`), the EQ a CQ
//! reports to (`mlx5dv_devx_query_eqn`), and the command interface
//! (`mlx5dv_devx_obj_create/modify/destroy`, `mlx5dv_devx_general_cmd`) that carries the
//! PRM commands of [`crate::devx::prm`].
//!
//! # Failures
//! A missing library, a missing function (an rdma-core too old), no mlx5 device, or a device
//! that refuses DevX is an [`Error::Config`] saying what is missing and what to install.

// The audited layer of rdma-core calls (with its `objects` submodule): allowed `unsafe`.
#![allow(unsafe_code)]

#[cfg(test)]
mod layout_tests;
mod objects;
pub mod types;

use std::ffi::{c_char, c_int, c_void};

use ferroshmem_runtime::{Error, Result};

pub use objects::{open_mlx5, Context, Mr, Obj, Pd, Uar, Umem};
use types::*;

/// The libraries looked for: libibverbs, then its mlx5 provider.
const LIBRARIES: [&str; 2] = ["libibverbs.so.1", "libmlx5.so.1"];

/// What to install when rdma-core is missing or too old.
const INSTALL: &str = "the gpu NIC handler needs rdma-core >= 44 (libibverbs.so.1 and \
     libmlx5.so.1; Debian and Ubuntu: apt-get install libibverbs1 ibverbs-providers), a \
     ConnectX-6 or newer NIC with DevX, and nvidia-peermem or dmabuf support for GPU memory; \
     without them use FERROSHMEM_IBGDA_NIC_HANDLER=cpu";

type GetDeviceList = unsafe extern "C" fn(num: *mut c_int) -> *mut *mut IbvDevice;
type FreeDeviceList = unsafe extern "C" fn(list: *mut *mut IbvDevice);
type GetDeviceName = unsafe extern "C" fn(dev: *mut IbvDevice) -> *const c_char;
type CloseDevice = unsafe extern "C" fn(ctx: *mut IbvContext) -> c_int;
type QueryDevice = unsafe extern "C" fn(ctx: *mut IbvContext, attr: *mut IbvDeviceAttr) -> c_int;
type QueryPort =
    unsafe extern "C" fn(ctx: *mut IbvContext, port: u8, attr: *mut IbvPortAttr) -> c_int;
type QueryGid =
    unsafe extern "C" fn(ctx: *mut IbvContext, port: u8, index: c_int, gid: *mut IbvGid) -> c_int;
type AllocPd = unsafe extern "C" fn(ctx: *mut IbvContext) -> *mut IbvPd;
type DeallocPd = unsafe extern "C" fn(pd: *mut IbvPd) -> c_int;
type RegMr = unsafe extern "C" fn(
    pd: *mut IbvPd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut IbvMr;
type RegDmabufMr = unsafe extern "C" fn(
    pd: *mut IbvPd,
    offset: u64,
    len: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut IbvMr;
type DeregMr = unsafe extern "C" fn(mr: *mut IbvMr) -> c_int;
type IsSupported = unsafe extern "C" fn(dev: *mut IbvDevice) -> bool;
type DvOpenDevice =
    unsafe extern "C" fn(dev: *mut IbvDevice, attr: *mut Mlx5dvContextAttr) -> *mut IbvContext;
type InitObj = unsafe extern "C" fn(obj: *mut Mlx5dvObj, types: u64) -> c_int;
type UmemReg = unsafe extern "C" fn(
    ctx: *mut IbvContext,
    addr: *mut c_void,
    size: usize,
    access: u32,
) -> *mut Mlx5dvDevxUmem;
type UmemRegEx =
    unsafe extern "C" fn(ctx: *mut IbvContext, input: *mut Mlx5dvDevxUmemIn) -> *mut Mlx5dvDevxUmem;
type UmemDereg = unsafe extern "C" fn(umem: *mut Mlx5dvDevxUmem) -> c_int;
type AllocUar = unsafe extern "C" fn(ctx: *mut IbvContext, flags: u32) -> *mut Mlx5dvDevxUar;
type FreeUar = unsafe extern "C" fn(uar: *mut Mlx5dvDevxUar);
type ObjCreate = unsafe extern "C" fn(
    ctx: *mut IbvContext,
    input: *const c_void,
    inlen: usize,
    out: *mut c_void,
    outlen: usize,
) -> *mut DevxObj;
type ObjModify = unsafe extern "C" fn(
    obj: *mut DevxObj,
    input: *const c_void,
    inlen: usize,
    out: *mut c_void,
    outlen: usize,
) -> c_int;
type ObjDestroy = unsafe extern "C" fn(obj: *mut DevxObj) -> c_int;
type GeneralCmd = unsafe extern "C" fn(
    ctx: *mut IbvContext,
    input: *const c_void,
    inlen: usize,
    out: *mut c_void,
    outlen: usize,
) -> c_int;
type QueryEqn = unsafe extern "C" fn(ctx: *mut IbvContext, vector: u32, eqn: *mut u32) -> c_int;

/// The rdma-core functions the `gpu` handler calls, loaded at run time.
pub struct Verbs {
    // Kept open while any pointer below may be called.
    _ibverbs: libloading::Library,
    _mlx5: libloading::Library,
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    get_device_name: GetDeviceName,
    close_device: CloseDevice,
    query_device: QueryDevice,
    query_port: QueryPort,
    query_gid: QueryGid,
    alloc_pd: AllocPd,
    dealloc_pd: DeallocPd,
    reg_mr: RegMr,
    reg_dmabuf_mr: RegDmabufMr,
    dereg_mr: DeregMr,
    is_supported: IsSupported,
    dv_open_device: DvOpenDevice,
    init_obj: InitObj,
    umem_reg: UmemReg,
    umem_reg_ex: UmemRegEx,
    umem_dereg: UmemDereg,
    alloc_uar: AllocUar,
    free_uar: FreeUar,
    obj_create: ObjCreate,
    obj_modify: ObjModify,
    obj_destroy: ObjDestroy,
    general_cmd: GeneralCmd,
    query_eqn: QueryEqn,
}

impl std::fmt::Debug for Verbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verbs").finish_non_exhaustive()
    }
}

/// Looks `name` (NUL-terminated) up in `lib`.
///
/// # Safety
/// `T` must be the function pointer type rdma-core declares for `name`.
unsafe fn symbol<T: Copy>(
    lib: &libloading::Library,
    name: &[u8],
) -> std::result::Result<T, String> {
    // SAFETY: per this function's contract, `T` is the symbol's declared type.
    unsafe { lib.get::<T>(name) }
        .map(|s| *s)
        .map_err(|e| format!("{e}"))
}

fn open(name: &str) -> Result<libloading::Library> {
    // SAFETY: loading libibverbs or libmlx5 runs their initializers, which only set up the
    // libraries' own state (provider registration).
    unsafe { libloading::Library::new(name) }
        .map_err(|e| Error::Config(format!("{name} could not be loaded ({e}): {INSTALL}")))
}

impl Verbs {
    /// Loads libibverbs and libmlx5 and binds every function the handler calls.
    ///
    /// # Errors
    /// [`Error::Config`] naming the library or function missing and what to install.
    pub fn load() -> Result<Verbs> {
        let ibverbs = open(LIBRARIES[0])?;
        let mlx5 = open(LIBRARIES[1])?;
        let missing =
            |e: String| Error::Config(format!("rdma-core lacks a function ({e}): {INSTALL}"));
        // SAFETY: each symbol is given the type `verbs.h` / `mlx5dv.h` (rdma-core 44) declare
        // for it; both libraries stay loaded in the returned value.
        unsafe {
            Ok(Verbs {
                get_device_list: symbol(&ibverbs, b"ibv_get_device_list\0").map_err(missing)?,
                free_device_list: symbol(&ibverbs, b"ibv_free_device_list\0").map_err(missing)?,
                get_device_name: symbol(&ibverbs, b"ibv_get_device_name\0").map_err(missing)?,
                close_device: symbol(&ibverbs, b"ibv_close_device\0").map_err(missing)?,
                query_device: symbol(&ibverbs, b"ibv_query_device\0").map_err(missing)?,
                query_port: symbol(&ibverbs, b"ibv_query_port\0").map_err(missing)?,
                query_gid: symbol(&ibverbs, b"ibv_query_gid\0").map_err(missing)?,
                alloc_pd: symbol(&ibverbs, b"ibv_alloc_pd\0").map_err(missing)?,
                dealloc_pd: symbol(&ibverbs, b"ibv_dealloc_pd\0").map_err(missing)?,
                reg_mr: symbol(&ibverbs, b"ibv_reg_mr\0").map_err(missing)?,
                reg_dmabuf_mr: symbol(&ibverbs, b"ibv_reg_dmabuf_mr\0").map_err(missing)?,
                dereg_mr: symbol(&ibverbs, b"ibv_dereg_mr\0").map_err(missing)?,
                is_supported: symbol(&mlx5, b"mlx5dv_is_supported\0").map_err(missing)?,
                dv_open_device: symbol(&mlx5, b"mlx5dv_open_device\0").map_err(missing)?,
                init_obj: symbol(&mlx5, b"mlx5dv_init_obj\0").map_err(missing)?,
                umem_reg: symbol(&mlx5, b"mlx5dv_devx_umem_reg\0").map_err(missing)?,
                umem_reg_ex: symbol(&mlx5, b"mlx5dv_devx_umem_reg_ex\0").map_err(missing)?,
                umem_dereg: symbol(&mlx5, b"mlx5dv_devx_umem_dereg\0").map_err(missing)?,
                alloc_uar: symbol(&mlx5, b"mlx5dv_devx_alloc_uar\0").map_err(missing)?,
                free_uar: symbol(&mlx5, b"mlx5dv_devx_free_uar\0").map_err(missing)?,
                obj_create: symbol(&mlx5, b"mlx5dv_devx_obj_create\0").map_err(missing)?,
                obj_modify: symbol(&mlx5, b"mlx5dv_devx_obj_modify\0").map_err(missing)?,
                obj_destroy: symbol(&mlx5, b"mlx5dv_devx_obj_destroy\0").map_err(missing)?,
                general_cmd: symbol(&mlx5, b"mlx5dv_devx_general_cmd\0").map_err(missing)?,
                query_eqn: symbol(&mlx5, b"mlx5dv_devx_query_eqn\0").map_err(missing)?,
                _ibverbs: ibverbs,
                _mlx5: mlx5,
            })
        }
    }
}

/// The error of rdma-core call `what`, which failed with `errno` set.
fn os_error(what: &str) -> Error {
    Error::Os {
        context: "rdma-core",
        message: format!("{what} failed: {}", std::io::Error::last_os_error()),
    }
}

/// The error of rdma-core call `what`, which returned `rc` (an errno value, or -1 with
/// `errno` set).
fn rc_error(what: &str, rc: c_int) -> Error {
    let e = if rc > 0 {
        std::io::Error::from_raw_os_error(rc)
    } else {
        std::io::Error::last_os_error()
    };
    Error::Os {
        context: "rdma-core",
        message: format!("{what} failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_a_config_error_saying_what_to_install() {
        match open("libferroshmem-absent-verbs.so.1") {
            Err(Error::Config(why)) => {
                assert!(why.contains("libferroshmem-absent-verbs.so.1"), "{why}");
                assert!(why.contains("apt-get install"), "{why}");
            }
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn loading_never_panics_and_names_what_is_missing() {
        match Verbs::load() {
            Ok(verbs) => eprintln!("rdma-core is installed here: {verbs:?}"),
            Err(Error::Config(why)) => assert!(why.contains("rdma-core"), "{why}"),
            Err(other) => panic!("expected a configuration error, got {other}"),
        }
    }
}
