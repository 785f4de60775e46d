//! The libfabric objects of one endpoint — fabric, domain, address vector, completion queue,
//! endpoint, memory regions — closed in the right order when dropped, and the operations
//! posted on the endpoint with the records that own their buffers until they complete.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, PoisonError};

use ferroshmem_runtime::{Error, Result, Segment};

mod completion;

use super::types::*;
use super::{Info, Library};

pub use completion::WaitObject;

/// Closes the object behind `fid`, reporting (not failing on) an error.
///
/// # Safety
/// `fid` is a live libfabric object, closed by no one else, never used afterwards.
unsafe fn close(fid: *mut Fid, what: &str) {
    // SAFETY: the caller's contract; every object's ops table has `close`.
    let rc = unsafe { (*(*fid).ops).close.map_or(0, |close| close(fid)) };
    if rc != 0 {
        tracing::warn!("closing the fabric {what} failed: {rc}");
    }
}

/// Turns a negative return code of call `what` into an error.
fn check(lib: &Library, what: &str, rc: isize) -> Result<()> {
    if rc < 0 {
        return Err(lib.fail(what, rc));
    }
    Ok(())
}

/// Fails when an ops table lacks the entry a call needs.
pub(super) fn entry<T: Copy>(entry: Option<T>, what: &str) -> Result<T> {
    entry.ok_or_else(|| {
        Error::Config(format!(
            "the fabric provider does not implement {what}: pick another \
             (FERROSHMEM_FABRIC_PROVIDER)"
        ))
    })
}

/// A fabric and its domain: what memory is registered with.
pub struct Domain {
    lib: Arc<Library>,
    info: Info,
    fabric: *mut FidFabric,
    domain: *mut FidDomain,
}

// SAFETY: the domain was opened with FI_THREAD_SAFE, so any thread may use it; the pointers
// are only closed in `drop`, which has the object to itself.
unsafe impl Send for Domain {}
// SAFETY: as above.
unsafe impl Sync for Domain {}

impl Domain {
    /// Opens the fabric and the domain of `info`.
    pub fn open(lib: &Arc<Library>, info: Info) -> Result<Arc<Domain>> {
        let mut fabric: *mut FidFabric = std::ptr::null_mut();
        // SAFETY: `info` is a provider description libfabric returned; its fabric attributes
        // name the fabric to open; the out-pointer is valid.
        let rc =
            unsafe { (lib.fabric)((*info.info).fabric_attr, &mut fabric, std::ptr::null_mut()) };
        check(lib, "fi_fabric", rc as isize)?;
        let mut domain: *mut FidDomain = std::ptr::null_mut();
        // SAFETY: `fabric` was just opened; its ops table comes from the provider.
        let rc = unsafe {
            match (*(*fabric).ops).domain {
                Some(open) => open(fabric, info.info, &mut domain, std::ptr::null_mut()),
                None => -38,
            }
        };
        if rc != 0 {
            // SAFETY: opened above, used by no one else.
            unsafe { close(fabric.cast(), "fabric") };
            return Err(lib.fail("fi_domain", rc as isize));
        }
        Ok(Arc::new(Domain {
            lib: lib.clone(),
            info,
            fabric,
            domain,
        }))
    }

    /// The provider description the domain was opened with.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// Registers the whole of `segment`'s mapping for remote reads and writes, with key
    /// `key` when the provider lets the application choose.
    pub fn register(self: &Arc<Domain>, segment: Arc<Segment>, key: u64) -> Result<MemoryRegion> {
        let map = segment.mapping();
        let mut mr: *mut FidMr = std::ptr::null_mut();
        // SAFETY: the mapping stays mapped while the region exists (the region holds the
        // segment); the domain's MR table comes from the provider; the out-pointer is valid.
        let rc = unsafe {
            let reg = entry((*(*self.domain).mr).reg, "memory registration")?;
            reg(
                &mut (*self.domain).fid,
                map.base_addr() as *const c_void,
                map.len(),
                FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                0,
                key,
                0,
                &mut mr,
                std::ptr::null_mut(),
            )
        };
        check(&self.lib, "fi_mr_reg", rc as isize)?;
        Ok(MemoryRegion {
            domain: self.clone(),
            mr,
            _segment: segment,
        })
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: every region and endpoint holds an `Arc` of the domain, so none is left;
        // the domain, then the fabric, are closed once.
        unsafe {
            close(self.domain.cast(), "domain");
            close(self.fabric.cast(), "fabric");
        }
    }
}

/// A registered memory region: a segment remote PEs may read and write.
pub struct MemoryRegion {
    domain: Arc<Domain>,
    mr: *mut FidMr,
    _segment: Arc<Segment>,
}

// SAFETY: a region is only read (its key and descriptor) and closed in `drop`.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// The key remote PEs present to reach the region.
    pub fn key(&self) -> u64 {
        // SAFETY: `mr` is live for the region's life.
        unsafe { (*self.mr).key }
    }

    /// Binds the region to `ep` and enables it, for providers that ask for it
    /// (`FI_MR_ENDPOINT`).
    pub fn bind(&self, ep: &Endpoint) -> Result<()> {
        if self.domain.info.mr_mode() & FI_MR_ENDPOINT == 0 {
            return Ok(());
        }
        // SAFETY: both objects are live; binding a region to an endpoint and enabling it are
        // the generic `bind` and `control(FI_ENABLE)` of the region's fid.
        unsafe {
            let fid = &mut (*self.mr).fid;
            let bind = entry((*fid.ops).bind, "binding a region")?;
            check(
                &self.domain.lib,
                "fi_mr_bind",
                bind(fid, &mut (*ep.ep).fid, 0) as isize,
            )?;
            let control = entry((*fid.ops).control, "enabling a region")?;
            check(
                &self.domain.lib,
                "fi_mr_enable",
                control(fid, FI_ENABLE, std::ptr::null_mut()) as isize,
            )
        }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: the region is closed once; the segment it covers outlives the call.
        unsafe { close(self.mr.cast(), "memory region") };
    }
}

/// An operation to post, with the data it sends.
#[derive(Debug, Clone)]
pub enum Operation {
    /// Write these bytes.
    Write(Vec<u8>),
    /// Write these bytes, then deliver `data` with the target's completion of the write.
    WriteData(Vec<u8>, u64),
    /// As [`Operation::WriteData`], but complete once the provider no longer needs the
    /// bytes (inject completion), not once the target placed them: the target then sends
    /// no acknowledgement. A later [`Operation::Confirm`] (or any write or read completing
    /// at the target) says it has landed.
    WriteSent(Vec<u8>, u64),
    /// A write of nothing that completes once the target has placed it, and so every write
    /// posted to that peer before it (writes land in order).
    Confirm,
    /// Read this many bytes.
    Read(usize),
    /// A non-fetching atomic `op` with `operand` on a word of `width` bytes (4 or 8).
    Atomic {
        op: c_int,
        operand: u64,
        width: usize,
    },
    /// A fetching atomic: the old value comes back.
    FetchAtomic {
        op: c_int,
        operand: u64,
        width: usize,
    },
    /// Compare-and-swap: the old value comes back.
    CompareSwap {
        compare: u64,
        value: u64,
        width: usize,
    },
}

/// How an operation ended: the bytes it read (or the old value of a fetching atomic, in
/// native order), or why it failed.
pub type Outcome = Result<Vec<u8>>;

/// What is told when an operation ends.
pub type Done = Box<dyn FnOnce(Outcome) + Send>;

/// An operation in flight: the provider's context room first (`FI_CONTEXT2`), then what the
/// operation owns until it completes.
#[repr(C)]
struct Pending {
    provider: [u64; CONTEXT_BYTES / 8],
    /// Its place in the endpoint's table.
    slot: usize,
    /// What is sent, and where what is read or fetched lands.
    buffer: Vec<u8>,
    /// The compare operand of a compare-and-swap.
    compare: u64,
    /// The old value of a fetching atomic.
    result: u64,
    /// Whether the outcome is `buffer` (reads) or `result` (fetching atomics).
    returns: Returns,
    done: Option<Done>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Returns {
    Nothing,
    Buffer,
    Result(usize),
}

/// The operations in flight of one endpoint, by slot.
#[derive(Default)]
struct Table {
    slots: Vec<Option<Box<Pending>>>,
    free: Vec<usize>,
}

impl Table {
    fn insert(&mut self, mut p: Box<Pending>) -> *mut Pending {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        p.slot = slot;
        let ptr: *mut Pending = &mut *p;
        self.slots[slot] = Some(p);
        ptr
    }

    fn take(&mut self, slot: usize) -> Option<Box<Pending>> {
        let p = self.slots.get_mut(slot)?.take()?;
        self.free.push(slot);
        Some(p)
    }
}

/// A reliable-datagram endpoint with its address vector and completion queue.
pub struct Endpoint {
    domain: Arc<Domain>,
    av: *mut FidAv,
    cq: *mut FidCq,
    ep: *mut FidEp,
    pending: Mutex<Table>,
}

// SAFETY: the domain is FI_THREAD_SAFE: posting from several threads and reading the CQ from
// another are allowed; the table of operations is behind a mutex.
unsafe impl Send for Endpoint {}
// SAFETY: as above.
unsafe impl Sync for Endpoint {}

/// Why an operation was not posted.
pub enum Refused {
    /// The provider's queue is full: post again (with the `Done` handed back) later.
    Full(Done),
    /// The provider refused the operation: the error, and the `Done` handed back (to be
    /// told it).
    Failed(Error, Option<Done>),
}

impl std::fmt::Debug for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Full(_) => f.write_str("Full"),
            Refused::Failed(e, _) => f.debug_tuple("Failed").field(e).finish(),
        }
    }
}

impl Endpoint {
    /// Opens an endpoint on `domain`, with an address vector (as a table) and one completion
    /// queue for its operations and for remote CQ data, and enables it.
    pub fn open(domain: &Arc<Domain>) -> Result<Endpoint> {
        let lib = &domain.lib;
        let mut ep = Endpoint {
            domain: domain.clone(),
            av: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            ep: std::ptr::null_mut(),
            pending: Mutex::default(),
        };
        // SAFETY: the domain is live; the attribute structures are zero-initialized C
        // structures with the fields libfabric reads set; out-pointers are valid; every
        // object opened is recorded in `ep`, whose drop closes what was opened.
        unsafe {
            let ops = &*(*domain.domain).ops;
            let mut av_attr: FiAvAttr = std::mem::zeroed();
            av_attr.av_type = FI_AV_TABLE;
            let rc = entry(ops.av_open, "address vectors")?(
                domain.domain,
                &mut av_attr,
                &mut ep.av,
                std::ptr::null_mut(),
            );
            check(lib, "fi_av_open", rc as isize)?;
            let mut cq_attr: FiCqAttr = std::mem::zeroed();
            cq_attr.format = FI_CQ_FORMAT_DATA;
            cq_attr.wait_obj = FI_WAIT_UNSPEC;
            cq_attr.size = 1024;
            let rc = entry(ops.cq_open, "completion queues")?(
                domain.domain,
                &mut cq_attr,
                &mut ep.cq,
                std::ptr::null_mut(),
            );
            check(lib, "fi_cq_open", rc as isize)?;
            let rc = entry(ops.endpoint, "endpoints")?(
                domain.domain,
                domain.info.info,
                &mut ep.ep,
                std::ptr::null_mut(),
            );
            check(lib, "fi_endpoint", rc as isize)?;
            let fid = &mut (*ep.ep).fid;
            let bind = entry((*fid.ops).bind, "binding to an endpoint")?;
            let rc = bind(fid, &mut (*ep.cq).fid, FI_TRANSMIT | FI_RECV);
            check(lib, "fi_ep_bind (completion queue)", rc as isize)?;
            let rc = bind(fid, &mut (*ep.av).fid, 0);
            check(lib, "fi_ep_bind (address vector)", rc as isize)?;
            let control = entry((*fid.ops).control, "enabling an endpoint")?;
            let rc = control(fid, FI_ENABLE, std::ptr::null_mut());
            check(lib, "fi_enable", rc as isize)?;
        }
        Ok(ep)
    }

    /// The endpoint's address, for peers to insert into their address vectors.
    pub fn name(&self) -> Result<Vec<u8>> {
        let mut name = vec![0u8; 256];
        let mut len = name.len();
        // SAFETY: the endpoint is live; `name` has `len` writable bytes.
        let rc = unsafe {
            let getname = entry((*(*self.ep).cm).getname, "endpoint names")?;
            getname(&mut (*self.ep).fid, name.as_mut_ptr().cast(), &mut len)
        };
        check(&self.domain.lib, "fi_getname", rc as isize)?;
        name.truncate(len);
        Ok(name)
    }

    /// Inserts peers' addresses; returns their handles in order.
    ///
    /// # Errors
    /// [`Error::Bootstrap`] for a name of another length than this endpoint's own (the
    /// provider reads a whole address from each, whatever its length); the provider's
    /// refusal.
    pub fn insert(&self, names: &[Vec<u8>]) -> Result<Vec<FiAddr>> {
        let expected = self.name()?.len();
        if let Some((i, bad)) = names.iter().enumerate().find(|(_, n)| n.len() != expected) {
            return Err(Error::Bootstrap(format!(
                "fabric address {i} of the job is {} bytes, this provider's are {expected}",
                bad.len()
            )));
        }
        let mut handles = Vec::with_capacity(names.len());
        for name in names {
            let mut handle: FiAddr = u64::MAX;
            // SAFETY: the address vector is live; `name` is one address as the provider
            // encoded it; the out-pointer is valid.
            let rc = unsafe {
                let insert = entry((*(*self.av).ops).insert, "inserting addresses")?;
                insert(
                    self.av,
                    name.as_ptr().cast(),
                    1,
                    &mut handle,
                    0,
                    std::ptr::null_mut(),
                )
            };
            if rc != 1 {
                return Err(self
                    .domain
                    .lib
                    .fail("fi_av_insert", (rc.min(0) as isize).min(-22)));
            }
            handles.push(handle);
        }
        Ok(handles)
    }

    /// Posts `op` to `peer` at `remote` (an address or offset, as the provider wants) with
    /// `key`; once posted, `done` is told how it ended, exactly once. A write's bytes move
    /// into the operation (no copy): `op` keeps them only if it was not posted.
    ///
    /// # Errors
    /// [`Refused::Full`], handing `done` back, when the provider's queue is full (nothing was
    /// posted, `op` is whole again: try again after completions); [`Refused::Failed`], handing
    /// `done` back untold, when the provider refused the operation.
    pub fn post(
        &self,
        op: &mut Operation,
        peer: FiAddr,
        remote: u64,
        key: u64,
        done: Done,
    ) -> std::result::Result<(), Refused> {
        let (buffer, compare, returns) = match op {
            Operation::Write(b) | Operation::WriteData(b, _) | Operation::WriteSent(b, _) => {
                (std::mem::take(b), 0, Returns::Nothing)
            }
            Operation::Read(len) => (vec![0; *len], 0, Returns::Buffer),
            // Empty, but with an allocation behind it: a provider that registers the buffer
            // of every operation (rxm over verbs) must not be handed a dangling pointer.
            Operation::Confirm => (Vec::with_capacity(8), 0, Returns::Nothing),
            Operation::Atomic { operand, width, .. } => (
                operand.to_ne_bytes()[..*width].to_vec(),
                0,
                Returns::Nothing,
            ),
            Operation::FetchAtomic { operand, width, .. } => (
                operand.to_ne_bytes()[..*width].to_vec(),
                0,
                Returns::Result(*width),
            ),
            Operation::CompareSwap {
                compare,
                value,
                width,
            } => (
                value.to_ne_bytes()[..*width].to_vec(),
                *compare,
                Returns::Result(*width),
            ),
        };
        let pending = Box::new(Pending {
            provider: [0; CONTEXT_BYTES / 8],
            slot: 0,
            buffer,
            compare,
            result: 0,
            returns,
            done: Some(done),
        });
        let mut table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let p = table.insert(pending);
        // SAFETY: `p` stays in the table, unmoved (boxed), until its completion, an error
        // completion or the endpoint's close takes it out, so every buffer handed to the
        // provider outlives its use; the endpoint and its tables are live.
        let rc = unsafe { self.submit(op, p, peer, remote, key) };
        if matches!(rc, Ok(0)) {
            return Ok(());
        }
        // SAFETY: the provider refused `p`, which is still in the table.
        let slot = unsafe { (*p).slot };
        let refused = table.take(slot);
        let done = refused.and_then(|mut p| {
            if let Operation::Write(b) | Operation::WriteData(b, _) | Operation::WriteSent(b, _) =
                op
            {
                *b = std::mem::take(&mut p.buffer);
            }
            p.done.take()
        });
        match (rc, done) {
            (Ok(rc), Some(done)) if rc == -FI_EAGAIN => Err(Refused::Full(done)),
            (Ok(rc), done) => Err(Refused::Failed(
                self.domain.lib.fail("posting a fabric operation", rc),
                done,
            )),
            (Err(e), done) => Err(Refused::Failed(e, done)),
        }
    }

    /// Calls the ops-table entry of `op` for the record `p`.
    ///
    /// # Safety
    /// `p` is a live record of this endpoint's table, which keeps it until it completes.
    unsafe fn submit(
        &self,
        op: &Operation,
        p: *mut Pending,
        peer: FiAddr,
        remote: u64,
        key: u64,
    ) -> Result<isize> {
        let ep = self.ep;
        // SAFETY: the caller's contract for `p`; the endpoint's tables come from the provider.
        unsafe {
            let ctx: *mut c_void = p.cast();
            let buf = (*p).buffer.as_mut_ptr().cast::<c_void>();
            let len = (*p).buffer.len();
            let null = std::ptr::null_mut();
            let rma = &*(*ep).rma;
            let atomic = &*(*ep).atomic;
            let datatype = |width: usize| if width == 4 { FI_UINT32 } else { FI_UINT64 };
            Ok(match op {
                Operation::Write(_) => {
                    entry(rma.write, "RMA writes")?(ep, buf, len, null, peer, remote, key, ctx)
                }
                Operation::WriteData(_, data) => entry(rma.writedata, "writes with data")?(
                    ep, buf, len, null, *data, peer, remote, key, ctx,
                ),
                Operation::WriteSent(_, data) => {
                    super::sent::write_sent(rma, ep, (buf, len), (peer, remote, key), ctx, *data)?
                }
                Operation::Confirm => {
                    entry(rma.write, "RMA writes")?(ep, buf, 0, null, peer, remote, key, ctx)
                }
                Operation::Read(_) => {
                    entry(rma.read, "RMA reads")?(ep, buf, len, null, peer, remote, key, ctx)
                }
                Operation::Atomic { op, width, .. } => entry(atomic.write, "atomics")?(
                    ep,
                    buf,
                    1,
                    null,
                    peer,
                    remote,
                    key,
                    datatype(*width),
                    *op,
                    ctx,
                ),
                Operation::FetchAtomic { op, width, .. } => {
                    let result = (&mut (*p).result as *mut u64).cast::<c_void>();
                    entry(atomic.readwrite, "fetching atomics")?(
                        ep,
                        buf,
                        1,
                        null,
                        result,
                        null,
                        peer,
                        remote,
                        key,
                        datatype(*width),
                        *op,
                        ctx,
                    )
                }
                Operation::CompareSwap { width, .. } => {
                    let result = (&mut (*p).result as *mut u64).cast::<c_void>();
                    let compare = (&(*p).compare as *const u64).cast::<c_void>();
                    entry(atomic.compwrite, "compare-and-swap")?(
                        ep,
                        buf,
                        1,
                        null,
                        compare,
                        null,
                        result,
                        null,
                        peer,
                        remote,
                        key,
                        datatype(*width),
                        FI_CSWAP,
                        ctx,
                    )
                }
            })
        }
    }

    /// Whether the provider carries atomic `op` on words of `width` bytes, in the form
    /// (plain, fetching or compare) the transport uses.
    pub fn atomic_valid(&self, op: c_int, width: usize, fetching: bool) -> bool {
        let datatype = if width == 4 { FI_UINT32 } else { FI_UINT64 };
        let mut count = 0usize;
        // SAFETY: the endpoint is live; the valid-queries only write `count`.
        unsafe {
            let atomic = &*(*self.ep).atomic;
            let query = match (op == FI_CSWAP, fetching) {
                (true, _) => atomic.compwritevalid,
                (false, true) => atomic.readwritevalid,
                (false, false) => atomic.writevalid,
            };
            query.is_some_and(|q| q(self.ep, datatype, op, &mut count) == 0 && count >= 1)
        }
    }

    /// Takes record `slot` out and tells its owner how it ended.
    fn end(&self, slot: usize, outcome: std::result::Result<(), String>) {
        let taken = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(slot);
        let Some(mut p) = taken else {
            return;
        };
        let result = match outcome {
            Ok(()) => Ok(match p.returns {
                Returns::Nothing => Vec::new(),
                Returns::Buffer => std::mem::take(&mut p.buffer),
                Returns::Result(width) => p.result.to_ne_bytes()[..width].to_vec(),
            }),
            Err(why) => Err(failed(why)),
        };
        if let Some(done) = p.done.take() {
            done(result);
        }
    }

    /// How many operations are in flight.
    pub fn in_flight(&self) -> usize {
        let table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        table.slots.len() - table.free.len()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: closing the endpoint first stops the provider from touching any record;
        // then the CQ and AV go; the records are failed (their buffers freed) only after.
        unsafe {
            if !self.ep.is_null() {
                close(self.ep.cast(), "endpoint");
            }
            if !self.cq.is_null() {
                close(self.cq.cast(), "completion queue");
            }
            if !self.av.is_null() {
                close(self.av.cast(), "address vector");
            }
        }
        let table =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        for mut p in table.slots.into_iter().flatten() {
            if let Some(done) = p.done.take() {
                done(Err(failed("the fabric endpoint was closed".into())));
            }
        }
    }
}

/// The error of an operation the provider reported failed, for `why`.
pub(crate) fn failed(why: String) -> Error {
    Error::Os {
        context: "fabric operation",
        message: why,
    }
}
