//! Kernels that use the device library: [`GpuPe::compile`] prepends `ferroshmem_device.cuh`
//! (with `atomics.cuh` and `network.cuh`) to CUDA C source, compiles it with NVRTC for the
//! PE's GPU, loads it into the PE's context and writes the device state (`fsh_state`: heap
//! view, stride, PE numbers, debug report) into the module. [`GpuModule::launch`] runs its
//! kernels; [`GpuModule::check`] turns a debug-mode report (a bad PE or a non-symmetric
//! address seen on the device) into an error.

// Kernel launches: a public unsafe API (only the caller can vouch for a kernel's arguments).
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use bytemuck::{Pod, Zeroable};
use cudarc::driver::CudaStream;
use ferroshmem_runtime::{Error, GpuError, Result};

use crate::driver::{self, Function, LaunchDims, LaunchKind, Module};
use crate::pe::GpuPe;

/// The device library's source, as prepended to every module.
pub const DEVICE_HEADER: &str = concat!(
    "#define FSH_IBGDA_FN __device__ __forceinline__\n",
    "#define FSH_IBGDA_ACQUIRE() asm volatile(\"fence.acq_rel.sys;\" ::: \"memory\")\n",
    include_str!("device/ibgda.cuh"),
    include_str!("device/ferroshmem_device.cuh"),
    include_str!("device/atomics.cuh"),
    include_str!("device/network.cuh"),
);
const INTERNAL_SOURCE: &str = include_str!("device/internal.cu");

/// Header offset of each PE's debug report (`FSH_SYNC_REPORT` in the device library).
pub(crate) const REPORT_OFFSET: usize = 16384;
/// Bytes of the debug report.
const REPORT_BYTES: usize = 64;

/// The device state of `ferroshmem_device.cuh` (`fsh_state_t`), field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct DeviceState {
    pub view_base: u64,
    pub stride: u64,
    pub header: u64,
    pub report: u64,
    pub my_pe: i32,
    pub n_pes: i32,
    pub debug: i32,
    pub reserved: i32,
    pub net: u64,
}

/// How [`GpuPe::compile`] builds a module.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// Device-library checks (bad PEs, non-symmetric addresses) on or off; `None` follows
    /// `FERROSHMEM_DEVICE_DEBUG`.
    pub debug: Option<bool>,
    /// Further NVRTC options (`-DNAME=1`, `--use_fast_math`, …).
    pub options: Vec<String>,
}

/// A kernel argument: any plain value of at most 8 bytes (pointers are `u64` addresses).
#[derive(Debug, Clone, Copy)]
pub struct KernelArg(u64);

macro_rules! kernel_arg {
    ($($t:ty),*) => {$(
        impl From<$t> for KernelArg {
            fn from(v: $t) -> Self {
                let mut slot = [0u8; 8];
                let b = bytemuck::bytes_of(&v);
                slot[..b.len()].copy_from_slice(b);
                KernelArg(u64::from_le_bytes(slot))
            }
        }
    )*};
}
kernel_arg!(u64, i64, u32, i32, f32, f64, usize, isize, u16, i16, u8, i8);

/// Compiles CUDA C with NVRTC for compute capability `cc`; returns the PTX.
fn nvrtc(source: &str, cc: (i32, i32), extra: &[String]) -> Result<String> {
    // NVRTC takes C strings: a NUL byte would cut them short (and cudarc panics on one).
    if source.contains('\0') || extra.iter().any(|o| o.contains('\0')) {
        return Err(Error::InvalidArgument(
            "CUDA source and compile options may not contain NUL bytes".into(),
        ));
    }
    let mut options = vec![
        format!("--gpu-architecture=sm_{}{}", cc.0, cc.1),
        "--std=c++17".to_string(),
    ];
    options.extend(extra.iter().cloned());
    let opts = cudarc::nvrtc::CompileOptions {
        options,
        ..Default::default()
    };
    match std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(source, opts)) {
        Err(_) => Err(Error::no_gpu(
            "the NVRTC library (libnvrtc) could not be loaded",
        )),
        Ok(Err(cudarc::nvrtc::CompileError::CompileError { log, .. })) => {
            Err(Error::Gpu(GpuError::Compile {
                log: log.to_string_lossy().into_owned(),
            }))
        }
        Ok(Err(e)) => Err(Error::cuda(format!("NVRTC: {e}"))),
        Ok(Ok(ptx)) => Ok(ptx.to_src()),
    }
}

/// Compiles `source` with the device library prepended, as [`GpuPe::compile_ptx`] does, for
/// compute capability `cc`, with the device library's network path where `network` (a job
/// that spans nodes) and its checks where `options.debug` says (off when `None`). Needs NVRTC
/// only, no GPU: a library's tests check that its kernels compile this way where no GPU is.
///
/// # Errors
/// [`GpuError::NoGpu`] where NVRTC cannot be loaded, [`GpuError::Compile`] with NVRTC's log.
pub fn compile_library_ptx(
    source: &str,
    cc: (i32, i32),
    network: bool,
    options: &CompileOptions,
) -> Result<String> {
    let full = format!(
        "{}{DEVICE_HEADER}\n#line 1 \"kernel.cu\"\n{source}\n",
        library_defines(options.debug.unwrap_or(false), network)
    );
    nvrtc(&full, cc, &options.options)
}

/// A loaded module of one PE, with the device library's state in place.
#[derive(Debug)]
pub struct GpuModule {
    module: Module,
    functions: Mutex<HashMap<String, Function>>,
    report: u64,
    ctx: Arc<cudarc::driver::CudaContext>,
    /// Whether the GPU takes programmatic dependent launches (compute capability 9.0 on).
    dependent_launch: bool,
}

/// Whether a GPU of compute capability `cc` takes programmatic dependent launches.
fn takes_dependent_launch(cc: (i32, i32)) -> bool {
    cc.0 >= 9
}

impl GpuPe {
    /// Compiles `source` (CUDA C; `extern "C" __global__` kernels) with the device library
    /// prepended, for this PE's GPU, and loads it. Blocking (NVRTC takes tens to hundreds of
    /// milliseconds): call it from set-up code or `spawn_blocking`.
    pub fn compile(&self, source: &str, options: &CompileOptions) -> Result<GpuModule> {
        let ptx = self.compile_ptx(source, options)?;
        self.load_ptx(&ptx)
    }

    /// Compiles `source` as [`GpuPe::compile`] does, without loading it: the PTX, which
    /// [`GpuPe::load_ptx`] loads into any PE of the job on a GPU of the same model (a library
    /// compiles its kernels once per process this way). Blocking, like `compile`.
    pub fn compile_ptx(&self, source: &str, options: &CompileOptions) -> Result<String> {
        let options = CompileOptions {
            debug: Some(options.debug.unwrap_or(self.device_debug())),
            ..options.clone()
        };
        compile_library_ptx(
            source,
            self.device().compute_capability(),
            self.spans_nodes(),
            &options,
        )
    }

    /// Loads PTX that was compiled with the device library (by [`GpuPe::compile`] on any PE
    /// of the same GPU model) and writes this PE's device state into it.
    pub fn load_ptx(&self, ptx: &str) -> Result<GpuModule> {
        let module = Module::load(self.context(), ptx)?;
        self.check_network_path(&module)?;
        let (at, bytes) = module.global("fsh_state")?;
        let state = self.device_state();
        if bytes != std::mem::size_of::<DeviceState>() {
            return Err(Error::cuda(format!(
                "the module's fsh_state has {bytes} bytes, ferroshmem expects {}: was it compiled with this version's device library?",
                std::mem::size_of::<DeviceState>()
            )));
        }
        driver::copy_from_host(at, bytemuck::bytes_of(&state))?;
        Ok(GpuModule {
            module,
            functions: Mutex::new(HashMap::new()),
            report: self.report_addr(),
            ctx: self.context().clone(),
            dependent_launch: takes_dependent_launch(self.device().compute_capability()),
        })
    }

    /// Refuses a module compiled without the network path (on a PE of a job on one node) on
    /// this PE, if its job spans nodes: its device functions would treat every peer as mapped.
    fn check_network_path(&self, module: &Module) -> Result<()> {
        if !self.spans_nodes() {
            return Ok(());
        }
        let compiled_in = match module.global("fsh_network_path") {
            Ok((at, 4)) => {
                let mut word = [0u8; 4];
                driver::copy_to_host(&mut word, at)?;
                i32::from_le_bytes(word) != 0
            }
            _ => false,
        };
        match compiled_in {
            true => Ok(()),
            false => Err(Error::Gpu(GpuError::NoNetworkPath { pe: self.my_pe() })),
        }
    }
}

/// The device library's configuration lines, ahead of its source: its debug checks, and
/// whether the network path is compiled in (only where the job spans nodes).
fn library_defines(debug: bool, network: bool) -> String {
    format!(
        "#define FSH_DEBUG {}\n#define FSH_NETWORK {}\n",
        i32::from(debug),
        i32::from(network)
    )
}

impl GpuModule {
    fn function(&self, name: &str) -> Result<Function> {
        let mut cache = self.functions.lock().expect("function cache");
        if let Some(f) = cache.get(name) {
            return Ok(*f);
        }
        let f = self.module.function(name)?;
        cache.insert(name.to_string(), f);
        Ok(f)
    }

    /// Launches kernel `name` on `stream` (a stream of this PE's GPU).
    ///
    /// # Safety
    /// `args` must match the kernel's parameters in number and type, and every memory the
    /// kernel touches (local buffers, host-mapped memory) must stay valid and unaliased by
    /// Rust references until the stream has executed it.
    pub unsafe fn launch(
        &self,
        name: &str,
        dims: LaunchDims,
        stream: &CudaStream,
        args: &[KernelArg],
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.launch_with(name, dims, stream, args, LaunchKind::Plain) }
    }

    /// As [`GpuModule::launch`], cooperatively: every block is resident at once, which the
    /// `_grid` barriers of the device library need.
    ///
    /// # Safety
    /// As [`GpuModule::launch`].
    pub unsafe fn launch_cooperative(
        &self,
        name: &str,
        dims: LaunchDims,
        stream: &CudaStream,
        args: &[KernelArg],
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.launch_with(name, dims, stream, args, LaunchKind::Cooperative) }
    }

    /// As [`GpuModule::launch`], as a programmatic dependent of the kernel ahead of it on
    /// `stream`: on a GPU of compute capability 9.0 on, the kernel may start (and wait,
    /// resident) once every block of that kernel has exited or executed
    /// `griddepcontrol.launch_dependents`, which hides the launch behind that kernel's end;
    /// elsewhere it is a plain launch. The kernel must execute `griddepcontrol.wait` (a no-op
    /// after a plain launch) before it reads anything the kernel ahead writes, and the kernel
    /// ahead should let it start only where nothing it waits for needs the multiprocessors
    /// the early blocks hold.
    ///
    /// # Safety
    /// As [`GpuModule::launch`], and the kernel waits as said before it reads what the
    /// kernel ahead of it writes.
    pub unsafe fn launch_dependent(
        &self,
        name: &str,
        dims: LaunchDims,
        stream: &CudaStream,
        args: &[KernelArg],
    ) -> Result<()> {
        let kind = match self.dependent_launch {
            true => LaunchKind::Dependent,
            false => LaunchKind::Plain,
        };
        // SAFETY: forwarded contract.
        unsafe { self.launch_with(name, dims, stream, args, kind) }
    }

    unsafe fn launch_with(
        &self,
        name: &str,
        dims: LaunchDims,
        stream: &CudaStream,
        args: &[KernelArg],
        kind: LaunchKind,
    ) -> Result<()> {
        let f = self.function(name)?;
        driver::bind(&self.ctx)?;
        let mut slots: Vec<u64> = args.iter().map(|a| a.0).collect();
        let mut params: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|s| (s as *mut u64).cast::<c_void>())
            .collect();
        // SAFETY: the slots outlive the call (the driver copies parameters at launch); the
        // rest is the caller's contract.
        unsafe { driver::launch(f, dims, stream.cu_stream(), &mut params, kind) }.map_err(|e| {
            match e {
                Error::Gpu(GpuError::Driver(what)) => Error::cuda(format!("{name}: {what}")),
                other => other,
            }
        })
    }

    /// Runs the internal kernel `fsh_k_amo` of this module (one of [`InternalKernels`]) on
    /// `stream`: atomic `kind` with `operands` (`device/internal.cu` says which) on the
    /// `width`-byte word at `addr`, its old value into `old`. The caller has checked that
    /// `addr` is a word of this PE's GPU heap aligned to `width`, and keeps `old` to itself
    /// until the stream has run the kernel.
    pub(crate) fn launch_amo(
        &self,
        stream: &CudaStream,
        word: (u64, i32),
        kind: i32,
        operands: [u64; 4],
        old: &crate::driver::Pinned,
    ) -> Result<()> {
        let [a, b, c, d] = operands;
        let args: [KernelArg; 8] = [
            word.0.into(),
            word.1.into(),
            kind.into(),
            a.into(),
            b.into(),
            c.into(),
            d.into(),
            old.addr().into(),
        ];
        // SAFETY: fsh_k_amo takes (u64, int, int, u64 × 4, u64) as passed; the word lies in
        // the PE's heap, aligned, and `old` is pinned device-mapped memory no one else uses
        // until the stream has run the kernel (the caller's contract above).
        unsafe { self.launch("fsh_k_amo", LaunchDims::linear(1, 1), stream, &args) }
    }

    /// The debug report of this PE's device-library checks since the last call, cleared:
    /// `Err` describing the first bad call (operation, PE, address, block and thread), or
    /// `Ok` when none failed. Call it after the kernels have completed.
    pub fn check(&self) -> Result<()> {
        driver::bind(&self.ctx)?;
        match take_report(self.report)? {
            Some(text) => Err(Error::Gpu(GpuError::DeviceCheck(text))),
            None => Ok(()),
        }
    }

    /// The `u64` words of global variable `name` of this module, read on `stream` after the
    /// work queued on it before (this waits for the stream).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the module has no such global or its size is not a
    /// whole number of words; a driver error.
    pub fn read_global_words(&self, name: &str, stream: &CudaStream) -> Result<Vec<u64>> {
        let (at, bytes) = self.global_words(name)?;
        let mut words = vec![0u64; bytes / 8];
        driver::copy_to_host_on(bytemuck::cast_slice_mut(&mut words), at, stream.cu_stream())?;
        Ok(words)
    }

    /// Writes `words` into the first words of global variable `name` of this module on
    /// `stream`, after the work queued on it before (`words` are copied before this returns).
    ///
    /// # Errors
    /// As [`GpuModule::read_global_words`], and [`Error::OutOfBounds`] when the global holds
    /// fewer words.
    pub fn write_global_words(&self, name: &str, words: &[u64], stream: &CudaStream) -> Result<()> {
        let (at, bytes) = self.global_words(name)?;
        if words.len() > bytes / 8 {
            return Err(Error::OutOfBounds {
                what: "module global",
                needed: words.len(),
                available: bytes / 8,
            });
        }
        driver::copy_from_host_async(at, bytemuck::cast_slice(words), stream.cu_stream())
    }

    /// The address and size of global `name`, a whole number of words; the context bound.
    fn global_words(&self, name: &str) -> Result<(u64, usize)> {
        driver::bind(&self.ctx)?;
        let (at, bytes) = self
            .module
            .global(name)
            .map_err(|_| Error::InvalidArgument(format!("the module has no global {name:?}")))?;
        if bytes % 8 != 0 {
            return Err(Error::InvalidArgument(format!(
                "global {name:?} has {bytes} bytes, not a whole number of words"
            )));
        }
        Ok((at, bytes))
    }
}

const OPS: [&str; 11] = [
    "fsh_ptr",
    "fsh_p",
    "fsh_g",
    "fsh_put",
    "fsh_get",
    "fsh_put_signal",
    "fsh_signal_op",
    "an atomic",
    "fsh_wait_until/fsh_test",
    "fsh_signal_wait_until/fsh_signal_fetch",
    "a network operation",
];

/// `FSH_OP_NETWORK`: a WQE to a PE on another node completed in error.
const OP_NETWORK: u64 = 11;

/// Reads and clears the debug report at device address `at`.
fn take_report(at: u64) -> Result<Option<String>> {
    let mut raw = [0u8; REPORT_BYTES];
    driver::copy_to_host(&mut raw, at)?;
    let word = |i: usize| u64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    let op = word(0);
    if op == 0 {
        return Ok(None);
    }
    driver::copy_from_host(at, &[0u8; REPORT_BYTES])?;
    let pe = word(1) as i64;
    let (addr, bytes) = (word(2), word(3));
    let block = |w: u64| (w & 0xffff_ffff, (w >> 32) & 0xffff, w >> 48);
    let thread = |w: u64| (w & 0x1f_ffff, (w >> 21) & 0x1f_ffff, w >> 42);
    let (b, t) = (block(word(4)), thread(word(5)));
    let name = OPS.get(op as usize - 1).copied().unwrap_or("a device call");
    if op == OP_NETWORK {
        return Ok(Some(format!(
            "{name} to PE {pe} completed in error (block ({}, {}, {}), thread ({}, {}, {})): CQE syndrome {bytes:#04x} {}",
            b.0, b.1, b.2, t.0, t.1, t.2,
            crate::ibgda::Syndrome::name(bytes as u8)
        )));
    }
    Ok(Some(format!(
        "device-library check failed in {name} (block ({}, {}, {}), thread ({}, {}, {})): PE {pe}, address {addr:#x}, {bytes} bytes: the PE is out of range, the address is not in this PE's symmetric GPU heap, or an atomic, signal or wait word is misaligned",
        b.0, b.1, b.2, t.0, t.1, t.2
    )))
}

/// The kernels behind the on-stream operations of one PE.
#[derive(Debug)]
pub(crate) struct InternalKernels {
    pub module: GpuModule,
}

/// The internal kernels' PTX per compute capability, compiled once per process: `None` until
/// a compile succeeds (a failed one is tried again by the next caller). The lock is held
/// while compiling, so that a caller arriving during a compile waits for it.
type InternalPtx = Arc<Mutex<Option<String>>>;

/// What the internal kernels' PTX is compiled for: a compute capability, and whether the
/// network path is in it.
type InternalTarget = ((i32, i32), bool);

fn internal_ptx_slot(cc: (i32, i32), network: bool) -> InternalPtx {
    static SLOTS: std::sync::OnceLock<Mutex<HashMap<InternalTarget, InternalPtx>>> =
        std::sync::OnceLock::new();
    SLOTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry((cc, network))
        .or_default()
        .clone()
}

/// The internal kernels' PTX for compute capability `cc`, with the network path or without,
/// compiled now if no earlier call compiled it.
fn internal_ptx(cc: (i32, i32), network: bool) -> Result<String> {
    let slot = internal_ptx_slot(cc, network);
    let mut ptx = slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(done) = ptx.as_ref() {
        return Ok(done.clone());
    }
    let compiled = compile_library_ptx(INTERNAL_SOURCE, cc, network, &CompileOptions::default())?;
    *ptx = Some(compiled.clone());
    Ok(compiled)
}

impl InternalKernels {
    /// Starts compiling the internal kernels for compute capability `cc` (with the network
    /// path where `network`) on a thread of its own (NVRTC only: no driver call, so it cannot
    /// disturb a stream capture of the caller's), so that the first on-stream operation finds
    /// them compiled instead of compiling on an async worker. A failure here is left for that
    /// first use to report.
    pub fn precompile(cc: (i32, i32), network: bool) {
        let started = std::thread::Builder::new()
            .name("fsh-gpu-nvrtc".into())
            .spawn(move || {
                if let Err(e) = internal_ptx(cc, network) {
                    tracing::debug!("compiling the internal GPU kernels ahead failed: {e}");
                }
            });
        if let Err(e) = started {
            tracing::debug!("no thread to compile the internal GPU kernels ahead: {e}");
        }
    }

    /// Loads the internal kernels into `ctx`, a context of `pe`'s GPU other than the PE's own
    /// (its services' context, see `driver::service_context`), without the PE's device state:
    /// for `fsh_k_amo`, which uses none.
    pub fn load_into(pe: &GpuPe, ctx: &Arc<cudarc::driver::CudaContext>) -> Result<Self> {
        let ptx = internal_ptx(pe.device().compute_capability(), pe.spans_nodes())?;
        Ok(InternalKernels {
            module: GpuModule {
                module: Module::load(ctx, &ptx)?,
                functions: Mutex::default(),
                report: pe.report_addr(),
                ctx: ctx.clone(),
                dependent_launch: takes_dependent_launch(pe.device().compute_capability()),
            },
        })
    }

    /// Loads the internal kernels into `pe`'s context (compiling them first if no one has).
    pub fn load(pe: &GpuPe) -> Result<Self> {
        let ptx = internal_ptx(pe.device().compute_capability(), pe.spans_nodes())?;
        Ok(InternalKernels {
            module: pe.load_ptx(&ptx)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{compile_library_ptx, CompileOptions, INTERNAL_SOURCE};
    use ferroshmem_runtime::{Error, GpuError};

    /// A NUL byte in the source or an option is refused as bad input before NVRTC is
    /// called (it was reported as NVRTC missing), whether or not NVRTC loads here.
    #[test]
    fn a_nul_byte_is_refused_as_bad_input() {
        let nul_source = compile_library_ptx("int a;\0", (9, 0), false, &CompileOptions::default());
        let nul_option = CompileOptions {
            options: vec!["-DX=1\0".into()],
            ..CompileOptions::default()
        };
        let nul_option = compile_library_ptx("int a;", (9, 0), false, &nul_option);
        for got in [nul_source, nul_option] {
            match got {
                Err(Error::InvalidArgument(why)) => assert!(why.contains("NUL"), "{why}"),
                other => panic!("a NUL byte: {other:?}"),
            }
        }
    }

    /// The device library and its internal kernels (collectives, waits, the network path's
    /// helpers) compile for the H200 (sm_90) on one node and across nodes, with the checks
    /// on and off: what every PE does at set-up, checked where NVRTC is but no GPU (skipped
    /// where NVRTC is not).
    #[test]
    fn the_library_compiles_under_nvrtc_on_one_node_and_across_nodes() {
        for (network, debug) in [(false, false), (false, true), (true, false), (true, true)] {
            let Some(ptx) = sm90_ptx_or_skip(INTERNAL_SOURCE, network, debug) else {
                return;
            };
            assert!(ptx.contains(".entry "), "no kernel in the PTX");
        }
    }

    /// `source` compiled with the device library for sm_90 (the network path and the checks
    /// where asked), or `None`, saying so, where NVRTC cannot be loaded here.
    fn sm90_ptx_or_skip(source: &str, network: bool, debug: bool) -> Option<String> {
        let options = CompileOptions {
            debug: Some(debug),
            ..CompileOptions::default()
        };
        match compile_library_ptx(source, (9, 0), network, &options) {
            Err(Error::Gpu(GpuError::NoGpu(why))) => {
                eprintln!("skipping: {why}");
                None
            }
            Err(e) => panic!("network {network}, debug {debug}: {e}"),
            Ok(ptx) => Some(ptx),
        }
    }

    /// One thread's fetching atomics overlap only where nothing makes each wait for the one
    /// before: every `atom` names the global state space (a generic one compiles to an address
    /// test with a shared-memory fallback loop), and without checks no test of the peer's
    /// address is left (a null test was one). Read in the PTX of a kernel that does a fetch-add
    /// and a compare-and-swap on one node: two global atomics, and comparisons only where the
    /// checks are compiled in.
    #[test]
    fn atomics_name_global_memory_and_test_no_address_without_checks() {
        const KERNEL: &str = r#"extern "C" __global__ void two_atomics(fsh_u64* d, fsh_u64* out, int pe) {
    out[0] = fsh_atomic_fetch_add(d, 1ull, pe);
    out[1] = fsh_atomic_compare_swap(d + 1, 0ull, 1ull, pe);
}"#;
        for debug in [false, true] {
            let Some(ptx) = sm90_ptx_or_skip(KERNEL, false, debug) else {
                return;
            };
            let body = entry_body(&ptx, "two_atomics");
            let atoms: Vec<&str> = body
                .match_indices("atom.")
                .map(|(at, _)| &body[at..])
                .collect();
            assert_eq!(atoms.len(), 2, "two atomics expected in {body}");
            for atom in atoms {
                assert!(
                    atom.starts_with("atom.relaxed.sys.global."),
                    "a generic atomic: {}",
                    atom.lines().next().unwrap_or(atom)
                );
            }
            assert_eq!(
                body.contains("setp."),
                debug,
                "comparisons in the kernel with checks {}: {body}",
                if debug { "on (none found)" } else { "off" }
            );
        }
    }

    /// The PTX of kernel `name`, from its `.entry` to its closing brace.
    fn entry_body<'p>(ptx: &'p str, name: &str) -> &'p str {
        let start = ptx
            .find(&format!(".entry {name}("))
            .expect("the kernel's entry in the PTX");
        let body = &ptx[start..];
        &body[..body.find("\n}").map_or(body.len(), |end| end + 2)]
    }
}
