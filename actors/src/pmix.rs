//! The audited layer of PMIx calls: a small client of the launcher's PMIx server (Open MPI's
//! `mpirun`, Slurm's `srun --mpi=pmix`), loaded at run time, through which PE 0 hands the
//! bootstrap root's address and the job's secret to PEs on other hosts. One of the two
//! modules of this crate allowed `unsafe` (with `crate::exit`).
//!
//! # Loading
//! `libpmix.so.2` (OpenPMIx; Debian's `libpmix2`, which Open MPI 4.1 uses) is opened with
//! `dlopen` on first use and stays loaded for the life of the process: PMIx starts a progress
//! thread and plugins of its own, which must never outlive the code they run. `cargo build`
//! needs no PMIx; a process that is not a PMIx client never loads it.
//!
//! # Layouts
//! Only the few types the calls below pass are declared, as OpenPMIx 4 lays them out
//! (`include/pmix_common.h`): `pmix_proc_t` (a 256-byte namespace and a 32-bit rank, 260
//! bytes), `pmix_value_t` (a 16-bit type tag and a 24-byte union, 32 bytes) and `pmix_info_t`
//! (a 512-byte key, 32-bit flags and a value, 552 bytes). Their sizes are checked when this
//! module compiles.
//!
//! # Blocking
//! Every call blocks the calling thread (PMIx hands the work to its own progress thread and
//! waits for it): async code runs them with `spawn_blocking`. [`Client::lookup`] waits at most
//! the time it is given, which PMIx enforces at its server (`PMIX_TIMEOUT`). A server may
//! answer "not found" at once when the process asked has not stored the key yet (Open MPI's
//! does for a process of its own node): the caller asks again.

// The audited layer of the PMIx library.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::OnceLock;
use std::time::Duration;

use ferroshmem_runtime::{Error, Result};

/// The variable that names the PMIx library's file instead (a site's own OpenPMIx build).
pub const LIBRARY_VAR: &str = "FERROSHMEM_PMIX_LIBRARY";

/// The names the library is looked for under.
const NAMES: [&str; 2] = ["libpmix.so.2", "libpmix.so"];

const MAX_NSLEN: usize = 255;
const MAX_KEYLEN: usize = 511;
/// `PMIX_SUCCESS`.
const SUCCESS: c_int = 0;
/// `PMIX_ERR_NOT_FOUND`.
const ERR_NOT_FOUND: c_int = -46;
/// `PMIX_GLOBAL`: the value is visible to every process of the job, on every node.
const SCOPE_GLOBAL: u8 = 3;
/// `PMIX_STRING`.
const TYPE_STRING: u16 = 3;
/// `PMIX_INT`.
const TYPE_INT: u16 = 6;
/// `PMIX_TIMEOUT`: seconds (an `int`) before the server gives up on the request.
const KEY_TIMEOUT: &[u8] = b"pmix.timeout";

/// `pmix_proc_t`: a process of a namespace.
#[repr(C)]
#[derive(Clone, Copy)]
struct Proc {
    nspace: [c_char; MAX_NSLEN + 1],
    rank: u32,
}

/// The members of `pmix_value_t`'s union this module reads or writes; `words` gives the union
/// its full size (its largest members are 24 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
union ValueData {
    string: *mut c_char,
    integer: c_int,
    words: [u64; 3],
}

/// `pmix_value_t`: a tagged value.
#[repr(C)]
struct Value {
    kind: u16,
    data: ValueData,
}

/// `pmix_info_t`: a directive (key and value) qualifying a call.
#[repr(C)]
struct Info {
    key: [c_char; MAX_KEYLEN + 1],
    flags: u32,
    value: Value,
}

const _: () = assert!(std::mem::size_of::<Proc>() == 260);
const _: () = assert!(std::mem::size_of::<Value>() == 32);
const _: () = assert!(std::mem::align_of::<Value>() == 8);
const _: () = assert!(std::mem::size_of::<Info>() == 552);
const _: () = assert!(std::mem::offset_of!(Info, value) == 520);

impl Info {
    /// The `PMIX_TIMEOUT` directive: `seconds`, at least one (zero would mean no limit).
    fn timeout(seconds: u64) -> Info {
        let mut key = [0 as c_char; MAX_KEYLEN + 1];
        for (k, &b) in key.iter_mut().zip(KEY_TIMEOUT) {
            *k = b as c_char;
        }
        Info {
            key,
            flags: 0,
            value: Value {
                kind: TYPE_INT,
                data: ValueData {
                    integer: seconds.clamp(1, c_int::MAX as u64) as c_int,
                },
            },
        }
    }
}

/// The functions of libpmix this client calls.
struct Functions {
    // Kept open for the life of the process (see the module's documentation).
    _lib: libloading::Library,
    init: unsafe extern "C" fn(proc_: *mut Proc, info: *mut Info, ninfo: usize) -> c_int,
    finalize: unsafe extern "C" fn(info: *const Info, ninfo: usize) -> c_int,
    put: unsafe extern "C" fn(scope: u8, key: *const c_char, value: *mut Value) -> c_int,
    commit: unsafe extern "C" fn() -> c_int,
    get: unsafe extern "C" fn(
        proc_: *const Proc,
        key: *const c_char,
        info: *const Info,
        ninfo: usize,
        value: *mut *mut Value,
    ) -> c_int,
    error_string: unsafe extern "C" fn(status: c_int) -> *const c_char,
    value_destruct: unsafe extern "C" fn(value: *mut Value),
}

impl Functions {
    fn load() -> std::result::Result<Functions, String> {
        let chosen = std::env::var(LIBRARY_VAR).ok().filter(|v| !v.is_empty());
        let names: Vec<String> = match chosen {
            Some(path) => vec![path],
            None => NAMES.iter().map(|n| n.to_string()).collect(),
        };
        let mut last = String::new();
        for name in &names {
            // SAFETY: loading libpmix runs its initializers, which only set up its own state
            // (its progress thread starts in PMIx_Init).
            match unsafe { libloading::Library::new(name) } {
                Ok(lib) => return Self::bind(lib),
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!(
            "{} could not be loaded: {last}",
            names.join(" or ")
        ))
    }

    fn bind(lib: libloading::Library) -> std::result::Result<Functions, String> {
        let missing = |e: libloading::Error| format!("libpmix lacks a function: {e}");
        // SAFETY: each symbol is looked up by its exported name and given the type OpenPMIx's
        // `pmix.h` declares for it (`pmix_status_t` is an `int`, `pmix_scope_t` a `uint8_t`,
        // `pmix_key_t` arguments decay to `const char *`); the library stays loaded in `_lib`.
        unsafe {
            Ok(Functions {
                init: *lib.get(b"PMIx_Init\0").map_err(missing)?,
                finalize: *lib.get(b"PMIx_Finalize\0").map_err(missing)?,
                put: *lib.get(b"PMIx_Put\0").map_err(missing)?,
                commit: *lib.get(b"PMIx_Commit\0").map_err(missing)?,
                get: *lib.get(b"PMIx_Get\0").map_err(missing)?,
                error_string: *lib.get(b"PMIx_Error_string\0").map_err(missing)?,
                value_destruct: *lib.get(b"PMIx_Value_destruct\0").map_err(missing)?,
                _lib: lib,
            })
        }
    }

    /// Loads the library once per process.
    fn get() -> std::result::Result<&'static Functions, String> {
        static LOADED: OnceLock<std::result::Result<Functions, String>> = OnceLock::new();
        LOADED
            .get_or_init(Functions::load)
            .as_ref()
            .map_err(Clone::clone)
    }

    fn describe(&self, status: c_int) -> String {
        // SAFETY: PMIx_Error_string returns a pointer to a static string for any status.
        let text = unsafe { (self.error_string)(status) };
        if text.is_null() {
            return format!("PMIx status {status}");
        }
        // SAFETY: a non-null result is a NUL-terminated static string.
        let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
        format!("{text} ({status})")
    }
}

/// This process as a client of the launcher's PMIx server, from [`Client::init`] until dropped
/// (`PMIx_Finalize`).
pub struct Client {
    functions: &'static Functions,
    me: Proc,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("rank", &self.me.rank)
            .finish_non_exhaustive()
    }
}

fn key(name: &str) -> Result<CString> {
    if name.len() > MAX_KEYLEN {
        return Err(Error::Bootstrap(format!("PMIx key {name:?} is too long")));
    }
    CString::new(name).map_err(|_| Error::Bootstrap(format!("PMIx key {name:?} holds a NUL")))
}

impl Client {
    /// Loads libpmix and connects to the PMIx server that started this process (blocks).
    ///
    /// # Errors
    /// [`Error::Config`] when libpmix cannot be loaded; [`Error::Bootstrap`] when PMIx_Init
    /// fails (no server, or this process was not started as its client).
    pub fn init() -> Result<Client> {
        let functions = Functions::get().map_err(|why| {
            Error::Config(format!(
                "PMIx is not available: {why}; install OpenPMIx (Debian and Ubuntu: apt-get \
                 install libpmix2), or name its file in {LIBRARY_VAR}"
            ))
        })?;
        let mut me = Proc {
            nspace: [0; MAX_NSLEN + 1],
            rank: 0,
        };
        // SAFETY: `me` is a valid pmix_proc_t that PMIx_Init fills in; no directives are
        // passed (a null array of length 0).
        let rc = unsafe { (functions.init)(&mut me, std::ptr::null_mut(), 0) };
        if rc != SUCCESS {
            return Err(Error::Bootstrap(format!(
                "PMIx_Init failed: {}",
                functions.describe(rc)
            )));
        }
        Ok(Client { functions, me })
    }

    /// This process's rank in its PMIx namespace.
    pub fn rank(&self) -> u32 {
        self.me.rank
    }

    /// Stores `value` under `key` for every process of the job, on every node, and commits
    /// it to the server (blocks).
    ///
    /// # Errors
    /// [`Error::Bootstrap`] naming the call that failed.
    pub fn publish(&self, name: &str, value: &str) -> Result<()> {
        let key = key(name)?;
        let text =
            CString::new(value).map_err(|_| Error::Bootstrap("a PMIx value holds a NUL".into()))?;
        let mut value = Value {
            kind: TYPE_STRING,
            data: ValueData {
                string: text.as_ptr().cast_mut(),
            },
        };
        // SAFETY: `key` and the string `value` points to are NUL-terminated and live across
        // the call; PMIx_Put copies the value before it returns and never writes through it.
        let rc = unsafe { (self.functions.put)(SCOPE_GLOBAL, key.as_ptr(), &mut value) };
        if rc != SUCCESS {
            return Err(Error::Bootstrap(format!(
                "PMIx_Put of {name} failed: {}",
                self.functions.describe(rc)
            )));
        }
        // SAFETY: PMIx_Commit takes no arguments.
        let rc = unsafe { (self.functions.commit)() };
        if rc != SUCCESS {
            return Err(Error::Bootstrap(format!(
                "PMIx_Commit failed: {}",
                self.functions.describe(rc)
            )));
        }
        Ok(())
    }

    /// The string that the process of rank `rank` in this namespace stored under `key`,
    /// waiting up to `timeout` for it to be stored (blocks); `None` when the server says it
    /// is not there (yet).
    ///
    /// # Errors
    /// [`Error::Bootstrap`] when it is not there in time, or is not a string.
    pub fn lookup(&self, rank: u32, name: &str, timeout: Duration) -> Result<Option<String>> {
        let key = key(name)?;
        let target = Proc { rank, ..self.me };
        let wait = Info::timeout(timeout.as_secs_f64().ceil() as u64);
        let mut found: *mut Value = std::ptr::null_mut();
        // SAFETY: `target`, `key` and the one directive live across the call; on success
        // PMIx_Get stores in `found` a value it allocated, which is released below.
        let rc = unsafe { (self.functions.get)(&target, key.as_ptr(), &wait, 1, &mut found) };
        if rc == ERR_NOT_FOUND {
            return Ok(None);
        }
        if rc != SUCCESS || found.is_null() {
            return Err(Error::Bootstrap(format!(
                "PMIx_Get of {name} from rank {rank} failed: {}",
                self.functions.describe(rc)
            )));
        }
        // SAFETY: `found` is the non-null value PMIx_Get returned: its tag says which member
        // of the union is set, and a string member is NUL-terminated or null.
        let text = unsafe {
            let value = &*found;
            (value.kind == TYPE_STRING && !value.data.string.is_null()).then(|| {
                CStr::from_ptr(value.data.string)
                    .to_string_lossy()
                    .into_owned()
            })
        };
        // SAFETY: PMIx_Get allocated `found` with malloc (OpenPMIx's PMIX_VALUE_RELEASE:
        // destruct, then free); it is not used after this.
        unsafe {
            (self.functions.value_destruct)(found);
            libc::free(found.cast());
        }
        text.map(Some).ok_or_else(|| {
            Error::Bootstrap(format!("PMIx value {name} of rank {rank} is not a string"))
        })
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: this client called PMIx_Init successfully and finalizes once; no
        // directives are passed.
        let rc = unsafe { (self.functions.finalize)(std::ptr::null(), 0) };
        if rc != SUCCESS {
            tracing::debug!("PMIx_Finalize: {}", self.functions.describe(rc));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_directive_is_laid_out_as_pmix_reads_it() {
        let info = Info::timeout(0);
        // SAFETY: the directive was built with its integer member set.
        let seconds = unsafe { info.value.data.integer };
        assert_eq!(seconds, 1, "0 would mean no limit");
        assert_eq!(info.value.kind, TYPE_INT);
        let key: Vec<u8> = info
            .key
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        assert_eq!(key, KEY_TIMEOUT);
    }

    #[test]
    fn a_key_too_long_or_with_a_nul_is_refused() {
        assert!(key(&"k".repeat(MAX_KEYLEN + 1)).is_err());
        assert!(key("a\0b").is_err());
        assert!(key("ferroshmem.root").is_ok());
    }
}
