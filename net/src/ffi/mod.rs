//! The audited layer of libfabric calls: loading the library at run time, the objects it
//! hands out (each closed when dropped), and the operations posted to it. Every `unsafe` of
//! this crate lives here.
//!
//! # Loading
//! libfabric exports only a handful of functions (`fi_getinfo`, `fi_freeinfo`, `fi_dupinfo`,
//! `fi_fabric`, `fi_strerror`, `fi_version`); everything else its headers offer is an inline
//! call through an object's ops table. So this module loads those six with `dlopen` and calls
//! the rest through the tables, checking each table's size before it calls an entry.
//!
//! # Signals
//! Loading libfabric loads the libraries of all its providers, and one of them (PSM's
//! `libinfinipath`) installs, in its initializer, handlers for SIGTERM, SIGINT, SIGSEGV,
//! SIGBUS, SIGILL and SIGABRT that end the process with status 1. Programs' own SIGTERM
//! handlers (tokio's chains to the handler it found) would then never keep a PE alive, and a
//! PE told to stop would vanish without a word. [`Library::load`] puts back every signal
//! disposition the loading changed.
//!
//! # Operations
//! An operation owns its buffers in a `Pending` record (`objects.rs`) whose address is the
//! context libfabric returns at completion; the record lives in the endpoint's table of
//! outstanding operations until then, so that a completion, an error completion or the
//! endpoint's close ends every one of them exactly once, and nothing the provider may still
//! write is ever freed early.

// The audited layer of the fabric library: the only module of this crate allowed `unsafe`.
#![allow(unsafe_code)]

mod objects;
mod sent;
pub mod types;

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use ferroshmem_runtime::{Error, Result};

pub(crate) use objects::failed;
pub use objects::{Domain, Done, Endpoint, MemoryRegion, Operation, Refused, WaitObject};
use types::*;

/// The functions libfabric exports, loaded at run time.
pub struct Library {
    // Kept open while any pointer below may be called.
    _lib: libloading::Library,
    getinfo: unsafe extern "C" fn(
        version: u32,
        node: *const c_char,
        service: *const c_char,
        flags: u64,
        hints: *const FiInfo,
        info: *mut *mut FiInfo,
    ) -> c_int,
    freeinfo: unsafe extern "C" fn(info: *mut FiInfo),
    dupinfo: unsafe extern "C" fn(info: *const FiInfo) -> *mut FiInfo,
    fabric: unsafe extern "C" fn(
        attr: *mut FiFabricAttr,
        fabric: *mut *mut FidFabric,
        context: *mut c_void,
    ) -> c_int,
    strerror: unsafe extern "C" fn(errnum: c_int) -> *const c_char,
    version: unsafe extern "C" fn() -> u32,
}

/// The signals a process may handle (all but SIGKILL and SIGSTOP, below the real-time ones).
fn catchable_signals() -> impl Iterator<Item = c_int> {
    (1..libc::SIGRTMIN()).filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP)
}

/// The current disposition of `signal`, if it can be read.
fn disposition(signal: c_int) -> Option<libc::sigaction> {
    // SAFETY: an all-zero `sigaction` is a valid value of the plain C struct.
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the disposition into `now`, which lives across
    // the call.
    (unsafe { libc::sigaction(signal, std::ptr::null(), &mut now) } == 0).then_some(now)
}

/// Runs `load` (a `dlopen`), then puts back the disposition of every signal that the loaded
/// libraries' initializers changed (see the module's documentation). A handler another
/// thread of the process installed while `load` runs would be undone too.
fn keeping_signal_dispositions<T>(load: impl FnOnce() -> T) -> T {
    let before: Vec<(c_int, libc::sigaction)> = catchable_signals()
        .filter_map(|s| Some((s, disposition(s)?)))
        .collect();
    let loaded = load();
    for (signal, old) in before {
        let Some(now) = disposition(signal) else {
            continue;
        };
        if now.sa_sigaction != old.sa_sigaction || now.sa_flags != old.sa_flags {
            // SAFETY: `old` is the disposition this process had for `signal` just before,
            // read by `sigaction` itself; putting it back installs no new code.
            unsafe { libc::sigaction(signal, &old, std::ptr::null_mut()) };
            tracing::debug!(
                signal,
                "put back the signal handler that loading libfabric replaced"
            );
        }
    }
    loaded
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library").finish_non_exhaustive()
    }
}

/// The names the library is looked for under.
const NAMES: [&str; 2] = ["libfabric.so.1", "libfabric.so"];

/// The variable that names the library's file instead (a site's own libfabric build).
pub const LIBRARY_VAR: &str = "FERROSHMEM_FABRIC_LIBRARY";

impl Library {
    /// Loads libfabric: the file `FERROSHMEM_FABRIC_LIBRARY` names, else `libfabric.so.1`
    /// from the loader's search path.
    ///
    /// # Errors
    /// [`Error::Config`] saying what to install when it cannot be found or lacks a function.
    pub fn load() -> Result<Library> {
        let chosen = std::env::var(LIBRARY_VAR).ok().filter(|v| !v.is_empty());
        let names: Vec<String> = match &chosen {
            Some(path) => vec![path.clone()],
            None => NAMES.iter().map(|n| n.to_string()).collect(),
        };
        let missing = |why: String| {
            Error::Config(format!(
                "the fabric library libfabric ({}) could not be loaded: {why}; a job whose PEs span \
                 hosts needs it: install libfabric (Debian and Ubuntu: apt-get install libfabric1), \
                 or name its file in {LIBRARY_VAR}",
                names.join(" or ")
            ))
        };
        let mut last = String::new();
        for name in &names {
            // SAFETY: loading libfabric runs its initializers and those of the provider
            // libraries it links, which set up their own state and signal handlers; the
            // handlers are put back as they were.
            match keeping_signal_dispositions(|| unsafe { libloading::Library::new(name) }) {
                Ok(lib) => return Self::bind(lib).map_err(missing),
                Err(e) => last = e.to_string(),
            }
        }
        Err(missing(last))
    }

    fn bind(lib: libloading::Library) -> std::result::Result<Library, String> {
        // SAFETY: each symbol is looked up by its exported name and given the type the
        // libfabric 1.x headers declare for it; the library stays loaded in `_lib`.
        unsafe {
            let getinfo = *lib.get(b"fi_getinfo\0").map_err(|e| e.to_string())?;
            let freeinfo = *lib.get(b"fi_freeinfo\0").map_err(|e| e.to_string())?;
            let dupinfo = *lib.get(b"fi_dupinfo\0").map_err(|e| e.to_string())?;
            let fabric = *lib.get(b"fi_fabric\0").map_err(|e| e.to_string())?;
            let strerror = *lib.get(b"fi_strerror\0").map_err(|e| e.to_string())?;
            let version = *lib.get(b"fi_version\0").map_err(|e| e.to_string())?;
            Ok(Library {
                _lib: lib,
                getinfo,
                freeinfo,
                dupinfo,
                fabric,
                strerror,
                version,
            })
        }
    }

    /// The library's API version as `(major, minor)`.
    pub fn version(&self) -> (u32, u32) {
        // SAFETY: `fi_version` takes no arguments and only returns a constant.
        let v = unsafe { (self.version)() };
        (v >> 16, v & 0xffff)
    }

    /// The message of libfabric error number `errnum` (positive).
    pub fn strerror(&self, errnum: isize) -> String {
        // SAFETY: `fi_strerror` returns a pointer to a static string for any number.
        let text = unsafe { (self.strerror)(errnum as c_int) };
        if text.is_null() {
            return format!("libfabric error {errnum}");
        }
        // SAFETY: a non-null result is a NUL-terminated static string.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    /// An error of call `what` that returned `rc` (negative).
    fn fail(&self, what: &str, rc: isize) -> Error {
        Error::Os {
            context: "fabric",
            message: format!("{what} failed: {} ({rc})", self.strerror(-rc)),
        }
    }
}

/// What the transport asks of a provider.
#[derive(Debug, Clone)]
pub struct Hints {
    /// The provider (`tcp;ofi_rxm`, `verbs;ofi_rxm`, `efa`, `cxi`, …); `None`: any.
    pub provider: Option<String>,
    /// The address this endpoint binds to (an IP address), if one is given.
    pub node: Option<String>,
    /// The provider's domain (a NIC, say `mlx5_0`), if one is asked for; `None`: any.
    pub domain: Option<String>,
}

/// The provider chosen: the first `fi_info` that libfabric offered for the hints, owned.
pub struct Info {
    lib: std::sync::Arc<Library>,
    info: *mut FiInfo,
}

// SAFETY: `Info` is only read after `getinfo` returns, and libfabric's info structures are
// plain heap data with no thread affinity.
unsafe impl Send for Info {}
// SAFETY: as above: `&Info` only reads.
unsafe impl Sync for Info {}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: `info` came from `fi_getinfo` and is freed once, here.
        unsafe { (self.lib.freeinfo)(self.info) }
    }
}

fn owned_c(text: &str, what: &str) -> Result<CString> {
    CString::new(text).map_err(|_| Error::Config(format!("{what} {text:?} holds a NUL byte")))
}

impl Info {
    /// Asks libfabric for a provider with reliable-datagram endpoints, RMA and atomics,
    /// remote CQ data and thread safety, with manual progress: the endpoint's progress thread
    /// drives it from its wait on the completion queue, which also serves a sleeping
    /// target's memory.
    ///
    /// # Errors
    /// [`Error::Config`] when no provider offers that.
    pub fn get(lib: &std::sync::Arc<Library>, hints: &Hints) -> Result<Info> {
        let (rc, found) = query(lib, hints, FI_ATOMIC)?;
        if rc != 0 || found.is_null() {
            return Err(Error::Config(format!(
                "no fabric provider offers what ferroshmem needs (reliable datagrams, RMA, \
                 64-bit atomics, thread safety) for provider {:?}: {} (set \
                 FERROSHMEM_FABRIC_PROVIDER, e.g. 'tcp;ofi_rxm', 'verbs;ofi_rxm', 'efa', 'cxi')",
                hints.provider.as_deref().unwrap_or("any"),
                lib.strerror(-(rc as isize))
            )));
        }
        Ok(Info {
            lib: lib.clone(),
            info: found,
        })
    }

    /// The largest RMA write whose bytes this info's provider places at the target in the
    /// order the writes were posted (`max_order_waw_size`), as it tells for an endpoint
    /// like this one's (same provider, domain and address) without atomics: `ofi_rxm` tells
    /// of no order at all once atomics are asked for, as its atomics are messages outside
    /// the order of RMA operations (the transport orders the two classes itself, see
    /// `crate::lane`).
    ///
    /// # Errors
    /// [`Error::Config`] when the provider offers no such endpoint to ask.
    pub fn ordered_write_bytes(&self, hints: &Hints) -> Result<usize> {
        // SAFETY: a returned info has its domain attributes, whose name is null or a
        // NUL-terminated string owned by the info.
        let domain = unsafe { c_text((*(*self.info).domain_attr).name) };
        let exact = Hints {
            provider: Some(self.provider()),
            node: hints.node.clone(),
            domain: Some(domain).filter(|d| !d.is_empty()),
        };
        let (rc, found) = query(&self.lib, &exact, 0)?;
        let ordered = (!found.is_null()).then(|| {
            // SAFETY: a returned info has its endpoint attributes; it is freed once, here.
            unsafe {
                let ordered = (*(*found).ep_attr).max_order_waw_size;
                (self.lib.freeinfo)(found);
                ordered
            }
        });
        let why = match (rc, ordered) {
            (0, Some(ordered)) => return Ok(ordered),
            (0, None) => "it offered none".to_string(),
            _ => self.lib.strerror(-(rc as isize)),
        };
        Err(Error::Config(format!(
            "fabric provider {} does not tell in which order it places writes (asked for an \
             endpoint without atomics): {why}",
            self.provider(),
        )))
    }

    /// The provider's name.
    pub fn provider(&self) -> String {
        // SAFETY: a returned info has its fabric attributes, whose provider name is a
        // NUL-terminated string owned by the info.
        unsafe { c_text((*(*self.info).fabric_attr).prov_name) }
    }

    /// Whether the provider wants target addresses as virtual addresses (else offsets), and
    /// whether it picks keys itself, and whether regions must be bound to the endpoint.
    pub fn mr_mode(&self) -> c_int {
        // SAFETY: a returned info has its domain attributes.
        unsafe { (*(*self.info).domain_attr).mr_mode }
    }
}

/// `fi_getinfo` for `hints`: reliable-datagram endpoints with RMA, remote CQ data, thread
/// safety and manual progress, and the capabilities `extra` (`FI_ATOMIC` or none). Returns
/// its return code and the infos found (null where none), which the caller frees.
fn query(lib: &std::sync::Arc<Library>, hints: &Hints, extra: u64) -> Result<(c_int, *mut FiInfo)> {
    let (major, minor) = lib.version();
    let version = API_VERSION.min((major << 16) | minor);
    let provider = hints
        .provider
        .as_deref()
        .map(|p| owned_c(p, "fabric provider"))
        .transpose()?;
    let node = hints
        .node
        .as_deref()
        .map(|n| owned_c(n, "fabric address"))
        .transpose()?;
    let domain_name = hints
        .domain
        .as_deref()
        .map(|d| owned_c(d, "fabric domain"))
        .transpose()?;
    let service = c"0";
    // SAFETY: `fi_dupinfo(NULL)` allocates a zeroed info with every attribute structure;
    // the fields written below are part of the ABI 1.6 prefix this crate declares, and the
    // strings handed over are duplicated so that `fi_freeinfo` may free them.
    unsafe {
        let h = (lib.dupinfo)(std::ptr::null());
        if h.is_null() {
            return Err(lib.fail("fi_dupinfo", -12));
        }
        (*h).caps = FI_RMA | FI_MSG | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | extra;
        (*h).mode = FI_CONTEXT | FI_CONTEXT2;
        (*(*h).ep_attr).ep_type = FI_EP_RDM;
        let domain = &mut *(*h).domain_attr;
        domain.mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
        domain.threading = FI_THREAD_SAFE;
        domain.data_progress = FI_PROGRESS_MANUAL;
        // Writes land in order, and a get sees the writes posted before it; atomics
        // likewise among themselves. Across the two classes nothing is ordered (rxm
        // offers no more): the transport waits for one before it posts the other.
        (*(*h).tx_attr).msg_order = match extra & FI_ATOMIC {
            0 => FI_ORDER_RMA,
            _ => FI_ORDER_RMA | FI_ORDER_ATOMIC,
        };
        (*(*h).tx_attr).op_flags = FI_DELIVERY_COMPLETE;
        if let Some(p) = &provider {
            (*(*h).fabric_attr).prov_name = libc_strdup(p);
        }
        if let Some(d) = &domain_name {
            domain.name = libc_strdup(d);
        }
        let mut found: *mut FiInfo = std::ptr::null_mut();
        let (node_ptr, flags) = match &node {
            Some(n) => (n.as_ptr(), FI_SOURCE),
            None => (std::ptr::null(), 0),
        };
        let service_ptr = if node.is_some() {
            service.as_ptr()
        } else {
            std::ptr::null()
        };
        let rc = (lib.getinfo)(version, node_ptr, service_ptr, flags, h, &mut found);
        (lib.freeinfo)(h);
        Ok((rc, found))
    }
}

/// Duplicates `text` with the C allocator, for fields `fi_freeinfo` frees.
fn libc_strdup(text: &CStr) -> *mut c_char {
    // SAFETY: `text` is NUL-terminated; `strdup` returns memory `free` may release.
    unsafe { libc::strdup(text.as_ptr()) }
}

/// A NUL-terminated C string, copied (empty for null).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
unsafe fn c_text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
