//! The audited layer of raw CUDA driver calls: every `unsafe` FFI call of the GPU crate lives
//! here, wrapped in a small owning type or a checked function. Callers bind the right context
//! to the thread first ([`bind`]): tokio moves tasks between threads, and raw calls use the
//! thread's current context.

// The audited layer of driver calls (with its submodules: `kernels`, `nic`, `vmm`): allowed
// `unsafe`.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::CudaContext;
use ferroshmem_runtime::{Error, Result};

/// Turns a driver status into a `Result`, naming the call.
pub(crate) fn check(status: sys::CUresult, what: &str) -> Result<()> {
    if status == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::cuda(format!("{what} failed: {status:?}")))
    }
}

/// Makes `ctx` current on this thread.
pub(crate) fn bind(ctx: &CudaContext) -> Result<()> {
    ctx.bind_to_thread()
        .map_err(|e| Error::cuda(format!("binding the CUDA context: {e}")))
}

/// A context of its own on GPU `ordinal` for the work the PE's services do on its behalf
/// (the NIC agent's copies into the heap and atomics on it, the NIC handler's copies): work a
/// kernel of the PE may be waiting for. In the PE's own context that work would share the
/// context's hardware work queues with the PE's streams, where it can sit behind an operation
/// queued after the waiting kernel (an event record, the next launch) and never run: seen as
/// a put-signal ping-pong across nodes that stalled in the agent's copy. Another context has
/// queues of its own; under MPS not in every case (a program that left 40 streams waiting
/// behind such a kernel still stalled). Memory of the PE's heap (virtual memory management,
/// mapped for the device) is reachable from it at the same addresses.
pub(crate) fn service_context(ordinal: usize) -> Result<Arc<CudaContext>> {
    std::panic::catch_unwind(|| CudaContext::new_non_primary(ordinal, 0))
        .map_err(|_| {
            Error::cuda(format!(
                "a service context on GPU {ordinal}: the driver panicked"
            ))
        })?
        .map_err(|e| Error::cuda(format!("creating a service context on GPU {ordinal}: {e}")))
}

/// Whether the CUDA driver library can be loaded (no panic when it cannot).
pub(crate) fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda under its usual names and drops what it opened.
    unsafe { sys::is_culib_present() }
}

fn device_handle(ordinal: usize) -> Result<sys::CUdevice> {
    let mut dev: sys::CUdevice = 0;
    check(
        // SAFETY: `dev` is a valid out-pointer; the driver was initialized by context creation.
        unsafe { sys::cuDeviceGet(&mut dev, ordinal as i32) },
        "cuDeviceGet",
    )?;
    Ok(dev)
}

/// Whether device `a` can map memory of device `b` (always true for `a == b`).
pub(crate) fn can_access_peer(a: usize, b: usize) -> Result<bool> {
    if a == b {
        return Ok(true);
    }
    let (da, db) = (device_handle(a)?, device_handle(b)?);
    let mut can = 0;
    check(
        // SAFETY: valid out-pointer and device handles.
        unsafe { sys::cuDeviceCanAccessPeer(&mut can, da, db) },
        "cuDeviceCanAccessPeer",
    )?;
    Ok(can == 1)
}

/// Whether device `a`'s atomics on device `b`'s memory are atomic with `b`'s own (NVLink
/// yes; some PCIe links no). A device and itself: yes.
pub(crate) fn peer_atomics_native(a: usize, b: usize) -> Result<bool> {
    if a == b {
        return Ok(true);
    }
    let (da, db) = (device_handle(a)?, device_handle(b)?);
    let mut native = 0;
    check(
        // SAFETY: valid out-pointer and device handles.
        unsafe {
            sys::cuDeviceGetP2PAttribute(
                &mut native,
                sys::CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
                da,
                db,
            )
        },
        "cuDeviceGetP2PAttribute",
    )?;
    Ok(native == 1)
}

/// The 16-byte UUID of device `ordinal`.
pub(crate) fn device_uuid(ordinal: usize) -> Result<[u8; 16]> {
    let dev = device_handle(ordinal)?;
    let mut uuid = sys::CUuuid { bytes: [0; 16] };
    check(
        // SAFETY: valid out-pointer and device handle.
        unsafe { sys::cuDeviceGetUuid_v2(&mut uuid, dev) },
        "cuDeviceGetUuid",
    )?;
    Ok(uuid.bytes.map(|b| b as u8))
}

/// Records `event` on `stream` as an event record node when `stream` is being captured into
/// a graph (`CU_EVENT_RECORD_EXTERNAL`; a plain record there only orders the graph's work and
/// cannot be timed), as a plain record otherwise.
pub(crate) fn record_external(event: sys::CUevent, stream: sys::CUstream) -> Result<()> {
    let external = sys::CUevent_record_flags_enum::CU_EVENT_RECORD_EXTERNAL as u32;
    check(
        // SAFETY: the caller passes a live event and a live stream of the bound context.
        unsafe { sys::cuEventRecordWithFlags(event, stream, external) },
        "cuEventRecordWithFlags",
    )
}

/// A CUDA event without timing, for completion polling; destroyed on drop.
#[derive(Debug)]
pub(crate) struct Event(sys::CUevent);

// SAFETY: CUDA events may be used from any thread.
unsafe impl Send for Event {}
// SAFETY: the driver synchronizes concurrent calls on one event.
unsafe impl Sync for Event {}

impl Event {
    /// Creates an event (`CU_EVENT_DISABLE_TIMING`).
    pub fn new() -> Result<Self> {
        let mut ev = std::ptr::null_mut();
        check(
            // SAFETY: valid out-pointer; the caller bound a context.
            unsafe {
                sys::cuEventCreate(&mut ev, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
            },
            "cuEventCreate",
        )?;
        Ok(Event(ev))
    }

    /// Records the event on `stream`.
    pub fn record(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: both handles are live.
        check(
            unsafe { sys::cuEventRecord(self.0, stream) },
            "cuEventRecord",
        )
    }

    /// Whether the work before the record has completed; never blocks.
    pub fn query(&self) -> Result<bool> {
        // SAFETY: the event is live.
        match unsafe { sys::cuEventQuery(self.0) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => check(other, "cuEventQuery (a GPU operation failed)").map(|_| true),
        }
    }

    /// Makes `stream` wait for this event.
    pub fn make_wait(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: both handles are live.
        check(
            unsafe { sys::cuStreamWaitEvent(stream, self.0, 0) },
            "cuStreamWaitEvent",
        )
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once.
        unsafe { sys::cuEventDestroy_v2(self.0) };
    }
}

/// Asynchronous copy of `bytes` bytes between any two addresses of the unified address space
/// (device, peer-mapped or pinned host memory) on `stream`.
///
/// Callers guarantee both ranges stay valid until the stream has executed the copy.
pub(crate) fn copy_async(dst: u64, src: u64, bytes: usize, stream: sys::CUstream) -> Result<()> {
    // SAFETY: the ranges are valid for the copy's lifetime (caller's contract above).
    check(
        unsafe { sys::cuMemcpyAsync(dst, src, bytes, stream) },
        "cuMemcpyAsync",
    )
}

/// Asynchronous copy of `bytes` bytes between two device addresses (this GPU's memory or a
/// peer's, mapped into this context) on `stream`, with no lookup of what memory either side is
/// (what NVSHMEM's on-stream puts use).
///
/// Callers guarantee both ranges stay valid until the stream has executed the copy.
pub(crate) fn copy_device_async(
    dst: u64,
    src: u64,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<()> {
    // SAFETY: both ranges are device memory, valid for the copy's lifetime (caller's contract).
    check(
        unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream) },
        "cuMemcpyDtoDAsync",
    )
}

/// Copy of the device (or host-mapped) bytes at `src` into `dst` on `stream`, after the
/// stream's earlier work; done when this returns.
pub(crate) fn copy_to_host_on(dst: &mut [u8], src: u64, stream: sys::CUstream) -> Result<()> {
    check(
        // SAFETY: `dst` is a live, exclusively borrowed slice, waited for below before the
        // borrow ends; `src` is a valid range of that size.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast::<c_void>(), src, dst.len(), stream)
        },
        "cuMemcpyDtoHAsync",
    )?;
    stream_synchronize(stream)
}

/// Asynchronous copy from pageable host memory: the driver stages `src` before returning.
pub(crate) fn copy_from_host_async(dst: u64, src: &[u8], stream: sys::CUstream) -> Result<()> {
    // SAFETY: `src` is read before the call returns (pageable source); `dst` is valid.
    check(
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast::<c_void>(), src.len(), stream) },
        "cuMemcpyHtoDAsync",
    )
}

/// Queues a copy of `len` bytes at byte `at` of pinned memory `src` to device address `dst`
/// on `stream`, without waiting: the copy engine reads them later. The caller leaves those
/// bytes unchanged, and `src` alive, until the stream has been synchronized.
pub(crate) fn copy_pinned_to_device_queued(
    dst: u64,
    src: &Pinned,
    at: usize,
    len: usize,
    stream: sys::CUstream,
) -> Result<()> {
    assert!(at.checked_add(len).is_some_and(|end| end <= src.bytes));
    check(
        // SAFETY: the range lies in the live pinned allocation (checked above), which the
        // caller keeps alive and unchanged until the stream is synchronized; `dst` is a
        // valid device range of that size.
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.ptr.add(at).cast::<c_void>(), len, stream) },
        "cuMemcpyHtoDAsync",
    )
}

/// Queues a copy of `len` device bytes at `src` into byte `at` of pinned memory `dst` on
/// `stream`, without waiting. The caller neither reads nor writes those bytes, and keeps
/// `dst` alive, until the stream has been synchronized.
pub(crate) fn copy_device_to_pinned_queued(
    dst: &Pinned,
    at: usize,
    len: usize,
    src: u64,
    stream: sys::CUstream,
) -> Result<()> {
    assert!(at.checked_add(len).is_some_and(|end| end <= dst.bytes));
    check(
        // SAFETY: the range lies in the live pinned allocation (checked above), which the
        // caller keeps alive and does not touch until the stream is synchronized; `src` is a
        // valid device range of that size.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.ptr.add(at).cast::<c_void>(), src, len, stream) },
        "cuMemcpyDtoHAsync",
    )
}

/// Copies host bytes to a device address and returns once they are in device memory.
///
/// `cuMemcpyHtoD` from pageable memory may return before its DMA has landed (CUDA's "API
/// synchronization behavior"), and kernels on non-blocking streams (every stream here) are not
/// ordered after the legacy default stream it runs on: a kernel launched next could read the
/// old bytes (a module's device state still zero, its heap base 0). So the legacy stream is
/// synchronized after the copy; it holds nothing else of ferroshmem's.
pub(crate) fn copy_from_host(dst: u64, src: &[u8]) -> Result<()> {
    check(
        // SAFETY: `src` is a live slice; `dst` is a valid device range of that size.
        unsafe { sys::cuMemcpyHtoD_v2(dst, src.as_ptr().cast::<c_void>(), src.len()) },
        "cuMemcpyHtoD",
    )?;
    synchronize_legacy_stream()
}

/// Waits for the work of the current context's legacy default stream: what the driver's
/// synchronous copies and memsets queued there and may not have finished.
pub(crate) fn synchronize_legacy_stream() -> Result<()> {
    check(
        // SAFETY: the null stream is the current context's legacy default stream.
        unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) },
        "cuStreamSynchronize",
    )
}

/// Synchronous copy of device bytes at `src` into `dst` (a few bytes: debug reports).
pub(crate) fn copy_to_host(dst: &mut [u8], src: u64) -> Result<()> {
    // SAFETY: `dst` is a live, exclusively borrowed slice; `src` is a valid device range.
    check(
        unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast::<c_void>(), src, dst.len()) },
        "cuMemcpyDtoH",
    )
}

/// Sets `bytes` bytes at `dst` to zero on `stream`.
pub(crate) fn zero_async(dst: u64, bytes: usize, stream: sys::CUstream) -> Result<()> {
    // SAFETY: `dst..dst+bytes` is a valid device range.
    check(
        unsafe { sys::cuMemsetD8Async(dst, 0, bytes, stream) },
        "cuMemsetD8Async",
    )
}

/// Waits for everything queued on `stream` (blocking: call off the async workers).
pub(crate) fn stream_synchronize(stream: sys::CUstream) -> Result<()> {
    // SAFETY: the stream is live.
    check(
        unsafe { sys::cuStreamSynchronize(stream) },
        "cuStreamSynchronize",
    )
}

/// Stream memory operation: writes the 64-bit `value` at `addr` once prior work on `stream`
/// is done (with a memory barrier before it).
pub(crate) fn write_value64(stream: sys::CUstream, addr: u64, value: u64) -> Result<()> {
    // SAFETY: `addr` is a valid, 8-byte aligned device address.
    check(
        unsafe { sys::cuStreamWriteValue64_v2(stream, addr, value, 0) },
        "cuStreamWriteValue64",
    )
}

/// A 4- or 8-byte word a stream memory operation writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Word {
    /// 4 bytes.
    U32(u32),
    /// 8 bytes.
    U64(u64),
}

impl Word {
    /// The word `bytes` hold, if they are 4 or 8 bytes.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<Word> {
        match *bytes {
            [a, b, c, d] => Some(Word::U32(u32::from_ne_bytes([a, b, c, d]))),
            [a, b, c, d, e, f, g, h] => {
                Some(Word::U64(u64::from_ne_bytes([a, b, c, d, e, f, g, h])))
            }
            _ => None,
        }
    }

    /// Its size in bytes (and the alignment its address needs).
    pub(crate) fn size(self) -> u64 {
        match self {
            Word::U32(_) => 4,
            Word::U64(_) => 8,
        }
    }
}

/// One stream memory operation of a batch ([`batch_mem_ops`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum MemOp {
    /// Writes `value` at `addr` (aligned to its size, 4 or 8 bytes), with a memory barrier
    /// before it.
    WriteWord { addr: u64, value: Word },
}

/// Queues `ops` on `stream` in one driver call (`cuStreamBatchMemOp`), in order, each after
/// the one before it.
pub(crate) fn batch_mem_ops(stream: sys::CUstream, ops: &[MemOp]) -> Result<()> {
    use sys::{
        CUstreamBatchMemOpParams_union_CUstreamMemOpWriteValueParams_st as Write,
        CUstreamBatchMemOpParams_union_CUstreamMemOpWriteValueParams_st__bindgen_ty_1 as WriteValue,
        CUstreamBatchMemOpType as Op,
    };
    let mut params: Vec<sys::CUstreamBatchMemOpParams> = ops
        .iter()
        .map(|op| {
            let mut p = sys::CUstreamBatchMemOpParams { pad: [0; 6] };
            match *op {
                MemOp::WriteWord { addr, value } => {
                    let (operation, value) = match value {
                        // The whole field set, though the driver reads its low 4 bytes.
                        Word::U32(v) => (
                            Op::CU_STREAM_MEM_OP_WRITE_VALUE_32,
                            WriteValue {
                                value64: u64::from(v),
                            },
                        ),
                        Word::U64(v) => (
                            Op::CU_STREAM_MEM_OP_WRITE_VALUE_64,
                            WriteValue { value64: v },
                        ),
                    };
                    p.writeValue = Write {
                        operation,
                        address: addr,
                        __bindgen_anon_1: value,
                        flags: 0,
                        alias: 0,
                    }
                }
            }
            p
        })
        .collect();
    let count = u32::try_from(params.len())
        .map_err(|_| Error::InvalidArgument("too many stream memory operations".into()))?;
    // SAFETY: `params` holds `count` fully initialized operations on valid, aligned device
    // addresses; the driver reads them before returning.
    check(
        unsafe { sys::cuStreamBatchMemOp_v2(stream, count, params.as_mut_ptr(), 0) },
        "cuStreamBatchMemOp",
    )
}

/// Whether everything queued on `stream` has completed; never blocks. A failed operation (or
/// a context broken by one) answers its error.
pub(crate) fn stream_query(stream: sys::CUstream) -> Result<bool> {
    // SAFETY: the stream is live.
    match unsafe { sys::cuStreamQuery(stream) } {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        other => check(other, "cuStreamQuery (a GPU operation failed)").map(|_| true),
    }
}

/// Stream memory operation: `stream` waits until the 64-bit word at `addr` satisfies `flags`
/// (`CU_STREAM_WAIT_VALUE_GEQ`/`EQ`/`AND`/`NOR`) against `value`.
pub(crate) fn wait_value64(stream: sys::CUstream, addr: u64, value: u64, flags: u32) -> Result<()> {
    // SAFETY: `addr` is a valid, 8-byte aligned device address.
    check(
        unsafe { sys::cuStreamWaitValue64_v2(stream, addr, value, flags) },
        "cuStreamWaitValue64",
    )
}

/// Pinned, device-mapped host memory (`cuMemHostAlloc` portable + devicemap); freed on drop.
#[derive(Debug)]
pub(crate) struct Pinned {
    ptr: *mut u8,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: plain memory; access discipline is up to the owning type.
unsafe impl Send for Pinned {}
// SAFETY: as above.
unsafe impl Sync for Pinned {}

impl Pinned {
    /// Allocates `bytes` (at least 1) zero-filled bytes, with `ctx` current.
    pub fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self> {
        bind(ctx)?;
        let bytes = bytes.max(1);
        let mut p = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        check(
            // SAFETY: valid out-pointer.
            unsafe { sys::cuMemHostAlloc(&mut p, bytes, flags) },
            "cuMemHostAlloc",
        )?;
        let ptr = p.cast::<u8>();
        // SAFETY: freshly allocated, `bytes` long, not yet shared.
        unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
        Ok(Pinned {
            ptr,
            bytes,
            ctx: ctx.clone(),
        })
    }

    /// Its address (the same on host and device under unified addressing).
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// The bytes. The owner guarantees no device write is in flight while they are borrowed.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a live allocation of `bytes` bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }

    /// The bytes, mutably. The owner guarantees no device access is in flight.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: a live allocation, borrowed exclusively through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }

    /// The memory as 64-bit words (`bytes / 8` of them), every host access atomic: memory a
    /// host thread shares with kernels and other threads (the network path's send queues).
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: the allocation is page aligned and holds `bytes / 8` whole words; it lives
        // as long as `self`; every host access to it goes through these atomics (the GPU's
        // are its own aligned stores and loads), and no `&[u8]` of it is taken meanwhile by
        // the owner (neither the network path nor `HostWords` calls `bytes`/`bytes_mut`).
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<AtomicU64>(), self.bytes / 8) }
    }

    /// Reads the 64-bit word at byte `offset` (a multiple of 8) atomically, with acquire
    /// ordering: a word the GPU advances (a stream memory write) while the host watches it.
    pub fn load_u64(&self, offset: usize) -> u64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.bytes);
        // SAFETY: in bounds and 8-byte aligned (checked above; the allocation is page
        // aligned); the memory lives as long as `self`, and every access to this word, host or
        // GPU, is an aligned 64-bit one.
        unsafe { AtomicU64::from_ptr(self.ptr.add(offset).cast::<u64>()) }.load(Ordering::Acquire)
    }

    /// Copies `src` to byte `offset` (bytes no transfer is reading or writing; transfers on
    /// other bytes of the allocation may be in flight).
    pub fn write_at(&self, offset: usize, src: &[u8]) {
        assert!(offset
            .checked_add(src.len())
            .is_some_and(|end| end <= self.bytes));
        // SAFETY: in bounds (checked above); the owner guarantees no transfer touches these
        // bytes meanwhile; no reference to the whole allocation is created.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(offset), src.len()) }
    }

    /// Has `fill` write the `len` bytes at byte `offset` (bytes no transfer is reading or
    /// writing; transfers on other bytes of the allocation may be in flight), and returns
    /// what it returns.
    pub fn fill_at<R>(&self, offset: usize, len: usize, fill: impl FnOnce(&mut [u8]) -> R) -> R {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.bytes));
        // SAFETY: in bounds (checked above); the owner guarantees no transfer touches these
        // bytes meanwhile and no other reference to them exists while `fill` runs (it holds
        // the only one); no reference to the whole allocation is created.
        let out = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), len) };
        fill(out)
    }

    /// Copies `out.len()` bytes at byte `offset` into `out` (memory no transfer is writing).
    pub fn read_into(&self, offset: usize, out: &mut [u8]) {
        assert!(offset + out.len() <= self.bytes);
        // SAFETY: in bounds (checked above); the owner guarantees no device write is in flight
        // on these bytes; no reference to the whole allocation is created.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset), out.as_mut_ptr(), out.len()) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if bind(&self.ctx).is_ok() {
            // SAFETY: allocated by cuMemHostAlloc, freed once.
            unsafe { sys::cuMemFreeHost(self.ptr.cast::<c_void>()) };
        }
    }
}

/// Host memory of this process page-locked for the copy engines (`cuMemHostRegister`,
/// portable): copies from it run as DMA, with no staging. Unregistered on drop.
#[derive(Debug)]
pub(crate) struct HostRegistration {
    host: u64,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

impl HostRegistration {
    /// Registers the `bytes` at `host`, a live mapping of this process that outlives the
    /// registration (the caller's to keep).
    pub fn new(ctx: &Arc<CudaContext>, host: u64, bytes: usize) -> Result<HostRegistration> {
        bind(ctx)?;
        check(
            // SAFETY: the range is a live mapping of this process, kept by the caller beyond
            // the registration; the driver only locks its pages.
            unsafe {
                sys::cuMemHostRegister_v2(
                    host as *mut c_void,
                    bytes,
                    sys::CU_MEMHOSTREGISTER_PORTABLE,
                )
            },
            "cuMemHostRegister",
        )?;
        Ok(HostRegistration {
            host,
            bytes,
            ctx: ctx.clone(),
        })
    }

    /// Whether `len` bytes at `host` lie inside the registered range.
    pub fn holds(&self, host: u64, len: usize) -> bool {
        host >= self.host
            && host
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.host + self.bytes as u64)
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        if bind(&self.ctx).is_ok() {
            // SAFETY: registered by `new` in this context, unregistered once.
            unsafe { sys::cuMemHostUnregister(self.host as *mut c_void) };
        }
    }
}

/// Plain device memory (`cuMemAlloc`), owned with its context; freed on drop.
#[derive(Debug)]
pub(crate) struct DeviceAlloc {
    ptr: u64,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

impl DeviceAlloc {
    /// Allocates `bytes` (at least 1) bytes on the context's device.
    pub fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self> {
        bind(ctx)?;
        let mut ptr = 0;
        check(
            // SAFETY: valid out-pointer; context bound above.
            unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes.max(1)) },
            "cuMemAlloc",
        )?;
        Ok(DeviceAlloc {
            ptr,
            bytes,
            ctx: ctx.clone(),
        })
    }

    /// Device address.
    pub fn addr(&self) -> u64 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        if bind(&self.ctx).is_ok() {
            // SAFETY: allocated by cuMemAlloc in this context, freed once.
            unsafe { sys::cuMemFree_v2(self.ptr) };
        }
    }
}

mod kernels;
mod nic;

mod vmm;

pub(crate) use kernels::{begin_capture, end_capture, launch, Function, LaunchKind, Module, Owner};
pub use kernels::{Graph, LaunchDims};
pub(crate) use nic::{dmabuf_fd, fill, IoMapping};
pub(crate) use vmm::{granularity, AddressRange, Mapping, Physical};
