//! The rdma-core objects the `gpu` handler holds, each released when dropped and each
//! keeping what it was made from alive (a PD its context, an MR its PD): an mlx5 device
//! opened with DevX ([`Context`]), protection domains ([`Pd`]), memory regions ([`Mr`]), DevX
//! user memory ([`Umem`]), doorbell pages ([`Uar`]) and DevX objects ([`Obj`]: CQs, QPs).

use std::ffi::{c_int, c_void, CStr};
use std::os::fd::RawFd;
use std::sync::Arc;

use ferroshmem_runtime::{Error, Result};

use super::types::*;
use super::{os_error, rc_error, Verbs, INSTALL};

/// An mlx5 device opened with DevX.
pub struct Context {
    verbs: Arc<Verbs>,
    ctx: *mut IbvContext,
    name: String,
}

// SAFETY: an `ibv_context` may be used from any thread (libibverbs serialises what needs
// it); this type only hands it to rdma-core calls.
unsafe impl Send for Context {}
// SAFETY: as above: every method takes `&self` and only passes the pointer to rdma-core.
unsafe impl Sync for Context {}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from `mlx5dv_open_device` and is closed once, here, after every
        // object made from it (each holds an `Arc` of this context).
        unsafe { (self.verbs.close_device)(self.ctx) };
    }
}

/// The device list, freed when dropped.
struct DeviceList<'a> {
    verbs: &'a Verbs,
    list: *mut *mut IbvDevice,
    len: usize,
}

impl Drop for DeviceList<'_> {
    fn drop(&mut self) {
        // SAFETY: `list` came from `ibv_get_device_list` and is freed once, here; contexts
        // opened from its devices stay valid after.
        unsafe { (self.verbs.free_device_list)(self.list) };
    }
}

impl DeviceList<'_> {
    fn get(&self, i: usize) -> *mut IbvDevice {
        // SAFETY: `i < len`, the number of entries `ibv_get_device_list` reported.
        unsafe { *self.list.add(i) }
    }

    fn name(&self, i: usize) -> String {
        // SAFETY: a device of the list; its name is a NUL-terminated string it owns.
        let p = unsafe { (self.verbs.get_device_name)(self.get(i)) };
        if p.is_null() {
            return format!("device {i}");
        }
        // SAFETY: non-null: a NUL-terminated string valid while the list lives.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Opens the first mlx5 device (or the one named `wanted`) with DevX.
///
/// # Errors
/// [`Error::Config`] when there is no RDMA device, none is mlx5 (or named `wanted`), or every
/// mlx5 device refuses DevX; each says what was found and what is needed.
pub fn open_mlx5(verbs: Arc<Verbs>, wanted: Option<&str>) -> Result<Arc<Context>> {
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer; a null result means no list.
    let list = unsafe { (verbs.get_device_list)(&mut n) };
    if list.is_null() || n <= 0 {
        if !list.is_null() {
            // SAFETY: an empty list from `ibv_get_device_list`, freed once.
            unsafe { (verbs.free_device_list)(list) };
        }
        return Err(Error::Config(format!(
            "no RDMA device found (ibv_get_device_list: {}): {INSTALL}",
            std::io::Error::last_os_error()
        )));
    }
    let devices = DeviceList {
        verbs: &verbs,
        list,
        len: n as usize,
    };
    let mut seen = Vec::new();
    for i in 0..devices.len {
        let name = devices.name(i);
        if wanted.is_some_and(|w| w != name) {
            seen.push(format!("{name} (not the one named)"));
            continue;
        }
        // SAFETY: a device of the live list.
        if !unsafe { (verbs.is_supported)(devices.get(i)) } {
            seen.push(format!("{name} (not mlx5)"));
            continue;
        }
        let mut attr = Mlx5dvContextAttr {
            flags: MLX5DV_CONTEXT_FLAGS_DEVX,
            comp_mask: 0,
        };
        // SAFETY: a device of the live list and a valid attribute struct.
        let ctx = unsafe { (verbs.dv_open_device)(devices.get(i), &mut attr) };
        if ctx.is_null() {
            let e = std::io::Error::last_os_error();
            seen.push(format!("{name} (refused DevX: {e})"));
            continue;
        }
        drop(devices);
        return Ok(Arc::new(Context { verbs, ctx, name }));
    }
    Err(Error::Config(format!(
        "no mlx5 device usable with DevX among {}: {INSTALL}",
        seen.join(", ")
    )))
}

/// The status and syndrome of a failed command's output, for its error message.
fn command_status(out: &[u8]) -> String {
    match out.get(..8) {
        Some(o) => format!(
            "status {:#x}, syndrome {:#010x}",
            o[0],
            u32::from_be_bytes([o[4], o[5], o[6], o[7]])
        ),
        None => "no output".into(),
    }
}

impl Context {
    /// The device's name (`mlx5_0`, …).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<IbvDeviceAttr> {
        // SAFETY: an all-zero `ibv_device_attr` is a valid value of the plain C struct.
        let mut attr: IbvDeviceAttr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and a valid out-pointer of the header's type.
        let rc = unsafe { (self.verbs.query_device)(self.ctx, &mut attr) };
        if rc != 0 {
            return Err(rc_error("ibv_query_device", rc));
        }
        Ok(attr)
    }

    /// `ibv_query_port` of port `port` (1-based).
    pub fn query_port(&self, port: u8) -> Result<IbvPortAttr> {
        let mut attr = IbvPortAttr::default();
        // SAFETY: a live context and a valid out-pointer of the full `ibv_port_attr`; the
        // exported function fills at most that (its compatible prefix: all but
        // `port_cap_flags2`, as the header's inline wrapper relies on).
        let rc = unsafe { (self.verbs.query_port)(self.ctx, port, &mut attr) };
        if rc != 0 {
            return Err(rc_error("ibv_query_port", rc));
        }
        Ok(attr)
    }

    /// `ibv_query_gid` of entry `index` of port `port`'s GID table.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<IbvGid> {
        let mut gid = IbvGid::default();
        // SAFETY: a live context and a valid 16-byte out-pointer.
        let rc = unsafe { (self.verbs.query_gid)(self.ctx, port, index as c_int, &mut gid) };
        if rc != 0 {
            return Err(rc_error("ibv_query_gid", rc));
        }
        Ok(gid)
    }

    /// The EQ number of completion vector 0 (a CQ's `c_eqn`).
    pub fn query_eqn(&self) -> Result<u32> {
        let mut eqn = 0u32;
        // SAFETY: a live context and a valid out-pointer.
        let rc = unsafe { (self.verbs.query_eqn)(self.ctx, 0, &mut eqn) };
        if rc != 0 {
            return Err(rc_error("mlx5dv_devx_query_eqn", rc));
        }
        Ok(eqn)
    }

    /// Runs a general command (`QUERY_HCA_CAP`, …): `input` in, `out_len` bytes out.
    pub fn general_cmd(&self, what: &str, input: &[u8], out_len: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; out_len.max(16)];
        // SAFETY: `input` and `out` are live buffers of the lengths passed.
        let rc = unsafe {
            (self.verbs.general_cmd)(
                self.ctx,
                input.as_ptr().cast::<c_void>(),
                input.len(),
                out.as_mut_ptr().cast::<c_void>(),
                out.len(),
            )
        };
        if rc != 0 {
            let e = rc_error(what, rc);
            return Err(Error::Config(format!("{e} ({})", command_status(&out))));
        }
        Ok(out)
    }

    /// A protection domain.
    pub fn alloc_pd(self: &Arc<Self>) -> Result<Arc<Pd>> {
        // SAFETY: a live context.
        let pd = unsafe { (self.verbs.alloc_pd)(self.ctx) };
        if pd.is_null() {
            return Err(os_error("ibv_alloc_pd"));
        }
        Ok(Arc::new(Pd {
            ctx: self.clone(),
            pd,
        }))
    }

    /// Registers `size` bytes at `addr` (host memory, or GPU memory through nvidia-peermem)
    /// as DevX user memory.
    pub fn umem_reg(self: &Arc<Self>, addr: u64, size: usize, access: u32) -> Result<Umem> {
        // SAFETY: rdma-core pins and translates the range; it never dereferences it here.
        let umem = unsafe { (self.verbs.umem_reg)(self.ctx, addr as *mut c_void, size, access) };
        if umem.is_null() {
            return Err(os_error("mlx5dv_devx_umem_reg"));
        }
        Ok(Umem {
            ctx: self.clone(),
            umem,
        })
    }

    /// Registers `size` bytes at `offset` of dmabuf `fd` (GPU memory) as DevX user memory.
    pub fn umem_reg_dmabuf(
        self: &Arc<Self>,
        fd: RawFd,
        offset: u64,
        size: usize,
        access: u32,
    ) -> Result<Umem> {
        let mut input = Mlx5dvDevxUmemIn {
            addr: offset as *mut c_void,
            size,
            access,
            // As `mlx5dv_devx_umem_reg` asks: any page size of 4 KiB or more.
            pgsz_bitmap: !0xfff,
            comp_mask: MLX5DV_UMEM_MASK_DMABUF,
            dmabuf_fd: fd,
        };
        // SAFETY: a live context and a valid input struct; `fd` stays open for the call.
        let umem = unsafe { (self.verbs.umem_reg_ex)(self.ctx, &mut input) };
        if umem.is_null() {
            return Err(os_error("mlx5dv_devx_umem_reg_ex (dmabuf)"));
        }
        Ok(Umem {
            ctx: self.clone(),
            umem,
        })
    }

    /// A doorbell page: a dedicated non-cached one if the device grants it (an 8-byte
    /// register), else a BlueFlame one.
    pub fn alloc_uar(self: &Arc<Self>) -> Result<Uar> {
        for kind in [UAR_ALLOC_TYPE_NC, UAR_ALLOC_TYPE_BF] {
            // SAFETY: a live context.
            let uar = unsafe { (self.verbs.alloc_uar)(self.ctx, kind) };
            if !uar.is_null() {
                return Ok(Uar {
                    ctx: self.clone(),
                    uar,
                });
            }
        }
        Err(os_error("mlx5dv_devx_alloc_uar"))
    }

    /// Creates a DevX object from command `input`; returns it with the command's output.
    pub fn obj_create(
        self: &Arc<Self>,
        what: &str,
        input: &[u8],
        out_len: usize,
    ) -> Result<(Obj, Vec<u8>)> {
        let mut out = vec![0u8; out_len.max(16)];
        // SAFETY: `input` and `out` are live buffers of the lengths passed.
        let obj = unsafe {
            (self.verbs.obj_create)(
                self.ctx,
                input.as_ptr().cast::<c_void>(),
                input.len(),
                out.as_mut_ptr().cast::<c_void>(),
                out.len(),
            )
        };
        if obj.is_null() {
            let e = os_error(what);
            return Err(Error::Config(format!("{e} ({})", command_status(&out))));
        }
        Ok((
            Obj {
                ctx: self.clone(),
                obj,
            },
            out,
        ))
    }
}

/// A protection domain.
pub struct Pd {
    ctx: Arc<Context>,
    pd: *mut IbvPd,
}

// SAFETY: an `ibv_pd` may be used from any thread; this type only passes it to rdma-core.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: `pd` came from `ibv_alloc_pd`; every MR of it holds an `Arc` of this PD, so
        // none is left when it is freed, once, here.
        unsafe { (self.ctx.verbs.dealloc_pd)(self.pd) };
    }
}

impl Pd {
    /// The PD number DevX commands name (`mlx5dv_init_obj`).
    pub fn pdn(&self) -> Result<u32> {
        let mut dv = Mlx5dvPd::default();
        let none = ObjPair {
            input: std::ptr::null_mut(),
            output: std::ptr::null_mut(),
        };
        let mut obj = Mlx5dvObj { pairs: [none; 7] };
        obj.pairs[OBJ_PAIR_PD] = ObjPair {
            input: self.pd.cast::<c_void>(),
            output: (&mut dv as *mut Mlx5dvPd).cast::<c_void>(),
        };
        // SAFETY: only the PD pair is asked for, with a live PD and a valid out struct.
        let rc = unsafe { (self.ctx.verbs.init_obj)(&mut obj, MLX5DV_OBJ_PD) };
        if rc != 0 {
            return Err(rc_error("mlx5dv_init_obj(PD)", rc));
        }
        Ok(dv.pdn)
    }

    /// Registers `len` bytes of host memory at `addr`.
    pub fn reg_mr(self: &Arc<Self>, addr: u64, len: usize, access: u32) -> Result<Mr> {
        // SAFETY: rdma-core pins and translates the range; it never dereferences it here.
        let mr =
            unsafe { (self.ctx.verbs.reg_mr)(self.pd, addr as *mut c_void, len, access as c_int) };
        if mr.is_null() {
            return Err(os_error("ibv_reg_mr"));
        }
        Ok(Mr {
            pd: self.clone(),
            mr,
        })
    }

    /// Registers `len` bytes at `offset` of dmabuf `fd` (GPU memory), addressed by the NIC
    /// as `iova` onwards.
    pub fn reg_dmabuf_mr(
        self: &Arc<Self>,
        fd: RawFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: u32,
    ) -> Result<Mr> {
        // SAFETY: a live PD; `fd` stays open for the call (the MR holds its own reference).
        let mr = unsafe {
            (self.ctx.verbs.reg_dmabuf_mr)(self.pd, offset, len, iova, fd, access as c_int)
        };
        if mr.is_null() {
            return Err(os_error("ibv_reg_dmabuf_mr"));
        }
        Ok(Mr {
            pd: self.clone(),
            mr,
        })
    }
}

/// A registered memory region.
pub struct Mr {
    pd: Arc<Pd>,
    mr: *mut IbvMr,
}

// SAFETY: an `ibv_mr` is read-only after registration; this type reads its keys and passes
// it to `ibv_dereg_mr` once.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: `mr` came from `ibv_reg_mr`/`ibv_reg_dmabuf_mr` and is deregistered once.
        unsafe { (self.pd.ctx.verbs.dereg_mr)(self.mr) };
    }
}

impl Mr {
    /// The local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: a live MR, whose fields rdma-core wrote at registration.
        unsafe { (*self.mr).lkey }
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as in `lkey`.
        unsafe { (*self.mr).rkey }
    }
}

/// DevX user memory.
pub struct Umem {
    ctx: Arc<Context>,
    umem: *mut Mlx5dvDevxUmem,
}

// SAFETY: the umem is read-only after registration (its id) and deregistered once.
unsafe impl Send for Umem {}
// SAFETY: as above.
unsafe impl Sync for Umem {}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: `umem` came from `mlx5dv_devx_umem_reg[_ex]` and is deregistered once; the
        // objects naming it are dropped first by their owner.
        unsafe { (self.ctx.verbs.umem_dereg)(self.umem) };
    }
}

impl Umem {
    /// The id commands name.
    pub fn id(&self) -> u32 {
        // SAFETY: a live umem, whose id rdma-core wrote at registration.
        unsafe { (*self.umem).umem_id }
    }
}

/// A doorbell page mapped into this process.
pub struct Uar {
    ctx: Arc<Context>,
    uar: *mut Mlx5dvDevxUar,
}

// SAFETY: the UAR description is read-only after allocation and freed once.
unsafe impl Send for Uar {}
// SAFETY: as above.
unsafe impl Sync for Uar {}

impl Drop for Uar {
    fn drop(&mut self) {
        // SAFETY: `uar` came from `mlx5dv_devx_alloc_uar` and is freed once, after the GPU
        // mapping of its page (owned beside it) is gone.
        unsafe { (self.ctx.verbs.free_uar)(self.uar) };
    }
}

impl Uar {
    /// The doorbell register's address in this process.
    pub fn reg_addr(&self) -> u64 {
        // SAFETY: a live UAR description.
        unsafe { (*self.uar).reg_addr as u64 }
    }

    /// The page's address in this process.
    pub fn base_addr(&self) -> u64 {
        // SAFETY: a live UAR description.
        unsafe { (*self.uar).base_addr as u64 }
    }

    /// The page's index (`uar_page` in commands).
    pub fn page_id(&self) -> u32 {
        // SAFETY: a live UAR description.
        unsafe { (*self.uar).page_id }
    }
}

/// A DevX object (a CQ, a QP), destroyed when dropped.
pub struct Obj {
    ctx: Arc<Context>,
    obj: *mut DevxObj,
}

// SAFETY: a DevX object handle may be used from any thread; this type passes it to rdma-core.
unsafe impl Send for Obj {}
// SAFETY: as above.
unsafe impl Sync for Obj {}

impl Drop for Obj {
    fn drop(&mut self) {
        // SAFETY: `obj` came from `mlx5dv_devx_obj_create` and is destroyed once, here.
        unsafe { (self.ctx.verbs.obj_destroy)(self.obj) };
    }
}

impl Obj {
    /// Runs a modify command (`RST2INIT_QP`, …) on the object.
    pub fn modify(&self, what: &str, input: &[u8], out_len: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; out_len.max(16)];
        // SAFETY: a live object; `input` and `out` are live buffers of the lengths passed.
        let rc = unsafe {
            (self.ctx.verbs.obj_modify)(
                self.obj,
                input.as_ptr().cast::<c_void>(),
                input.len(),
                out.as_mut_ptr().cast::<c_void>(),
                out.len(),
            )
        };
        if rc != 0 {
            let e = rc_error(what, rc);
            return Err(Error::Config(format!("{e} ({})", command_status(&out))));
        }
        Ok(out)
    }
}
