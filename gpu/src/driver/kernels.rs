//! Raw driver calls for kernels: loading PTX modules, looking up kernels and globals,
//! launching (plain, cooperative, or as a programmatic dependent), and capturing streams
//! into CUDA graphs.

use std::ffi::{c_void, CString};
use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::CudaContext;
use ferroshmem_runtime::{Error, Result};

use super::{bind, check};

/// A loaded module (PTX), unloaded on drop.
#[derive(Debug)]
pub(crate) struct Module {
    module: sys::CUmodule,
    ctx: Arc<CudaContext>,
}

// SAFETY: module handles may be used from any thread with the context bound.
unsafe impl Send for Module {}
// SAFETY: as above; the driver synchronizes concurrent lookups.
unsafe impl Sync for Module {}

/// A kernel of a loaded module (valid while its [`Module`] lives).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Function(sys::CUfunction);

// SAFETY: function handles may be used from any thread.
unsafe impl Send for Function {}
// SAFETY: as above.
unsafe impl Sync for Function {}

impl Module {
    /// Loads PTX text into `ctx`.
    pub fn load(ctx: &Arc<CudaContext>, ptx: &str) -> Result<Self> {
        bind(ctx)?;
        let text = CString::new(ptx).map_err(|_| Error::cuda("PTX contains a NUL byte"))?;
        let mut module = std::ptr::null_mut();
        check(
            // SAFETY: NUL-terminated PTX; valid out-pointer; context bound.
            unsafe { sys::cuModuleLoadData(&mut module, text.as_ptr().cast::<c_void>()) },
            "cuModuleLoadData",
        )?;
        let loaded = Module {
            module,
            ctx: ctx.clone(),
        };
        loaded.load_every_kernel()?;
        Ok(loaded)
    }

    /// Loads the code of every kernel of the module now. With CUDA's lazy loading (the
    /// default) a kernel's first launch loads it, and that load may wait for the whole
    /// context: for kernels of this PE, or under MPS of other processes, that may be waiting
    /// for the very kernel being launched (two PEs' kernels exchanging signals). NVIDIA's
    /// documentation warns of that deadlock; loading here, at set-up, takes the wait out of
    /// the launch.
    fn load_every_kernel(&self) -> Result<()> {
        let mut count = 0u32;
        check(
            // SAFETY: live module, valid out-pointer; context bound by the caller.
            unsafe { sys::cuModuleGetFunctionCount(&mut count, self.module) },
            "cuModuleGetFunctionCount",
        )?;
        let mut functions = vec![std::ptr::null_mut(); count as usize];
        check(
            // SAFETY: `functions` has room for `count` handles.
            unsafe { sys::cuModuleEnumerateFunctions(functions.as_mut_ptr(), count, self.module) },
            "cuModuleEnumerateFunctions",
        )?;
        let mut local_bytes = 0usize;
        for function in functions {
            // SAFETY: a handle the driver just gave for this live module.
            check(unsafe { sys::cuFuncLoad(function) }, "cuFuncLoad")?;
            let mut bytes = 0;
            check(
                // SAFETY: a loaded function of this live module, valid out-pointer.
                unsafe {
                    sys::cuFuncGetAttribute(
                        &mut bytes,
                        sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
                        function,
                    )
                },
                "cuFuncGetAttribute(LOCAL_SIZE_BYTES)",
            )?;
            local_bytes = local_bytes.max(usize::try_from(bytes).unwrap_or(0));
        }
        reserve_local_memory(local_bytes)
    }

    /// The kernel named `name` (an `extern "C"` name).
    pub fn function(&self, name: &str) -> Result<Function> {
        let cname = CString::new(name).map_err(|_| Error::InvalidArgument(name.into()))?;
        let mut f = std::ptr::null_mut();
        check(
            // SAFETY: live module, NUL-terminated name, valid out-pointer.
            unsafe { sys::cuModuleGetFunction(&mut f, self.module, cname.as_ptr()) },
            &format!("looking up kernel {name:?}"),
        )?;
        Ok(Function(f))
    }

    /// The device address and size of global `name`.
    pub fn global(&self, name: &str) -> Result<(u64, usize)> {
        let cname = CString::new(name).map_err(|_| Error::InvalidArgument(name.into()))?;
        let (mut ptr, mut bytes) = (0, 0);
        check(
            // SAFETY: live module, NUL-terminated name, valid out-pointers.
            unsafe { sys::cuModuleGetGlobal_v2(&mut ptr, &mut bytes, self.module, cname.as_ptr()) },
            &format!("looking up global {name:?}"),
        )?;
        Ok((ptr, bytes))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if bind(&self.ctx).is_ok() {
            // SAFETY: loaded by us, unloaded once.
            unsafe { sys::cuModuleUnload(self.module) };
        }
    }
}

/// Makes the bound context's per-thread stack (its local memory) hold `bytes`, now. A
/// launch of a kernel that needs more than the context holds grows it first, and growing
/// waits until every kernel of the context has finished: a launch made while another kernel
/// of the PE waits for something that only comes after that launch (a dispatch's exchange
/// waiting for a peer's counts, a receive waiting for a send queued behind it) would wait for
/// ever. Growing at load time, when no kernel of the module can be waiting yet, takes that
/// wait out of the launches.
fn reserve_local_memory(bytes: usize) -> Result<()> {
    let mut held = 0usize;
    check(
        // SAFETY: valid out-pointer; a context is bound by the caller.
        unsafe { sys::cuCtxGetLimit(&mut held, sys::CUlimit::CU_LIMIT_STACK_SIZE) },
        "cuCtxGetLimit(STACK_SIZE)",
    )?;
    if bytes <= held {
        return Ok(());
    }
    tracing::debug!(held, bytes, "growing the context's per-thread local memory");
    check(
        // SAFETY: a context is bound by the caller; the value is a byte count.
        unsafe { sys::cuCtxSetLimit(sys::CUlimit::CU_LIMIT_STACK_SIZE, bytes) },
        "cuCtxSetLimit(STACK_SIZE)",
    )
}

/// Grid, block and dynamic shared memory of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchDims {
    /// Blocks (x, y, z).
    pub grid: (u32, u32, u32),
    /// Threads per block (x, y, z).
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, bytes.
    pub shared_bytes: u32,
}

impl LaunchDims {
    /// `blocks` × `threads`, one-dimensional, no dynamic shared memory.
    pub fn linear(blocks: u32, threads: u32) -> Self {
        LaunchDims {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            shared_bytes: 0,
        }
    }
}

/// How a kernel is launched behind the work ahead of it on its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LaunchKind {
    /// In stream order: it starts once the work ahead has finished.
    Plain,
    /// In stream order, every block resident at once (the `_grid` barriers need it).
    Cooperative,
    /// A programmatic dependent launch (compute capability 9.0 on): the kernel may start
    /// once every block of the kernel ahead has exited or executed
    /// `griddepcontrol.launch_dependents`, and executes `griddepcontrol.wait` before it
    /// reads what that kernel wrote.
    Dependent,
}

/// Launches `f` on `stream` with parameters `params` (one pointer per kernel parameter,
/// each to a value of the parameter's type), as `kind` says.
///
/// # Safety
/// `params` must match the kernel's signature, and every memory the kernel touches must stay
/// valid until the stream has executed it. A `Dependent` kernel must wait
/// (`griddepcontrol.wait`) before it reads anything the kernel ahead of it writes.
pub(crate) unsafe fn launch(
    f: Function,
    dims: LaunchDims,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
    kind: LaunchKind,
) -> Result<()> {
    let (g, b) = (dims.grid, dims.block);
    let p = if params.is_empty() {
        std::ptr::null_mut()
    } else {
        params.as_mut_ptr()
    };
    let status = match kind {
        // SAFETY: forwarded contract of this function.
        LaunchKind::Cooperative => unsafe {
            sys::cuLaunchCooperativeKernel(
                f.0,
                g.0,
                g.1,
                g.2,
                b.0,
                b.1,
                b.2,
                dims.shared_bytes,
                stream,
                p,
            )
        },
        // SAFETY: forwarded contract of this function.
        LaunchKind::Plain => unsafe {
            sys::cuLaunchKernel(
                f.0,
                g.0,
                g.1,
                g.2,
                b.0,
                b.1,
                b.2,
                dims.shared_bytes,
                stream,
                p,
                std::ptr::null_mut(),
            )
        },
        LaunchKind::Dependent => {
            let mut value = sys::CUlaunchAttributeValue { pad: [0; 64] };
            value.programmaticStreamSerializationAllowed = 1;
            let mut attribute = sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                value,
            };
            let config = sys::CUlaunchConfig {
                gridDimX: g.0,
                gridDimY: g.1,
                gridDimZ: g.2,
                blockDimX: b.0,
                blockDimY: b.1,
                blockDimZ: b.2,
                sharedMemBytes: dims.shared_bytes,
                hStream: stream,
                attrs: &mut attribute,
                numAttrs: 1,
            };
            // SAFETY: `config` and its one attribute outlive the call (the driver reads them
            // during it); the rest is the forwarded contract of this function.
            unsafe { sys::cuLaunchKernelEx(&config, f.0, p, std::ptr::null_mut()) }
        }
    };
    check(status, "kernel launch")
}

/// A CUDA graph captured from a stream, instantiated and ready to launch.
///
/// A graph captured by a GPU PE keeps that PE's heap mapping and kernels alive. The symmetric
/// buffers it names are not: replaying it after one was freed writes into whatever has been
/// allocated there since (as with NVSHMEM), so free them only after the last replay.
#[derive(Debug)]
pub struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    ctx: Arc<CudaContext>,
    owner: Option<Owner>,
}

/// What a graph keeps alive besides its context (held, never read).
pub(crate) struct Owner {
    _alive: Arc<dyn std::any::Any + Send + Sync>,
}

impl Owner {
    /// Keeps `alive` alive.
    pub(crate) fn new(alive: Arc<dyn std::any::Any + Send + Sync>) -> Owner {
        Owner { _alive: alive }
    }
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Owner")
    }
}

// SAFETY: graph handles may be used from any thread with the context bound.
unsafe impl Send for Graph {}
// SAFETY: launches are serialized by the driver.
unsafe impl Sync for Graph {}

/// Starts capturing `stream` (relaxed mode).
pub(crate) fn begin_capture(stream: sys::CUstream) -> Result<()> {
    // SAFETY: live stream.
    check(
        unsafe {
            sys::cuStreamBeginCapture_v2(
                stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        },
        "cuStreamBeginCapture",
    )
}

/// Ends the capture of `stream` and instantiates the graph.
pub(crate) fn end_capture(ctx: &Arc<CudaContext>, stream: sys::CUstream) -> Result<Graph> {
    let mut graph = std::ptr::null_mut();
    check(
        // SAFETY: live stream in capture mode; valid out-pointer.
        unsafe { sys::cuStreamEndCapture(stream, &mut graph) },
        "cuStreamEndCapture",
    )?;
    let mut exec = std::ptr::null_mut();
    // SAFETY: `graph` was just captured; valid out-pointer.
    let status = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) };
    if let Err(e) = check(status, "cuGraphInstantiate") {
        // SAFETY: destroy the captured graph we own.
        unsafe { sys::cuGraphDestroy(graph) };
        return Err(e);
    }
    Ok(Graph {
        graph,
        exec,
        ctx: ctx.clone(),
        owner: None,
    })
}

impl Graph {
    /// The graph, keeping `owner` alive as long as it lives.
    pub(crate) fn owned_by(mut self, owner: Owner) -> Graph {
        self.owner = Some(owner);
        self
    }

    /// Replays the graph on `stream`.
    pub fn launch(&self, stream: &cudarc::driver::CudaStream) -> Result<()> {
        bind(&self.ctx)?;
        // SAFETY: live instantiated graph and a live stream of the caller.
        check(
            unsafe { sys::cuGraphLaunch(self.exec, stream.cu_stream()) },
            "cuGraphLaunch",
        )
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if bind(&self.ctx).is_ok() {
            // SAFETY: owned handles, destroyed once.
            unsafe {
                sys::cuGraphExecDestroy(self.exec);
                sys::cuGraphDestroy(self.graph);
            }
        }
    }
}
