// ferroshmem_device.cuh: ferroshmem's device library, prepended to kernels compiled through
// ferroshmem's NVRTC helper (GpuPe::compile). Self-contained: no toolkit header, atomics and
// fences in inline PTX. Symmetric addresses are this PE's own addresses in its view of the
// GPU heap; PE p's copy lies (p - my_pe) * stride bytes away. The state below is written by
// ferroshmem into every module it loads.
#ifndef FERROSHMEM_DEVICE_CUH
#define FERROSHMEM_DEVICE_CUH

typedef unsigned long long fsh_u64;
typedef long long fsh_i64;
typedef unsigned int fsh_u32;
typedef unsigned long long fsh_size_t;

struct fsh_state_t {
    fsh_u64 view_base; // PE 0's heap in this PE's view
    fsh_u64 stride;    // bytes from one PE's heap to the next
    fsh_u64 header;    // bytes reserved for ferroshmem at the start of each heap
    fsh_u64 report;    // this PE's debug report (FSH_SYNC_REPORT in its own header)
    int my_pe;
    int n_pes;
    int debug;
    int reserved;
    fsh_u64 net;       // per-PE send queues of the network path (fsh_qp_t[n_pes]), 0 if none
};

__constant__ fsh_state_t fsh_state;

#ifndef FSH_DEBUG
#define FSH_DEBUG 0
#endif

// Whether the network path (network.cuh) is compiled in. GpuPe::compile sets it to whether
// the PE's job spans nodes: on one node no device function carries the branch and call of the
// network path, which cost the mapped path registers (the bandwidth kernels' 32 registers
// became 74) and about 10 us per launch of 32 x 1024 threads. The host refuses to load a
// module compiled without it on a PE whose job spans nodes (fsh_network_path says which).
#ifndef FSH_NETWORK
#define FSH_NETWORK 1
#endif
__constant__ int fsh_network_path = FSH_NETWORK;

enum { FSH_CMP_EQ = 0, FSH_CMP_NE = 1, FSH_CMP_GT = 2, FSH_CMP_LE = 3, FSH_CMP_LT = 4, FSH_CMP_GE = 5 };
enum { FSH_SIGNAL_SET = 9, FSH_SIGNAL_ADD = 10 };
enum { FSH_TEAM_WORLD = 0 };

// Operation codes of debug reports (ferroshmem's Rust side names them).
enum {
    FSH_OP_PTR = 1, FSH_OP_P, FSH_OP_G, FSH_OP_PUT, FSH_OP_GET, FSH_OP_PUT_SIGNAL,
    FSH_OP_SIGNAL_OP, FSH_OP_ATOMIC, FSH_OP_WAIT, FSH_OP_SIGNAL_WAIT, FSH_OP_NETWORK
};

// Header layout (offsets from the start of each PE's heap), as in gpu/src/heap.rs.
#define FSH_SYNC_EPOCH 0ull
#define FSH_SYNC_FLAGS 4096ull
#define FSH_SYNC_GRID 8192ull
#define FSH_SYNC_REPORT 16384ull

// ---------------------------------------------------------------- PTX primitives

__device__ __forceinline__ fsh_u32 fsh__ld_relaxed(const fsh_u32* a) {
    fsh_u32 v; asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(a) : "memory"); return v;
}
__device__ __forceinline__ fsh_u64 fsh__ld_relaxed(const fsh_u64* a) {
    fsh_u64 v; asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(a) : "memory"); return v;
}
__device__ __forceinline__ fsh_u32 fsh__ld_acquire(const fsh_u32* a) {
    fsh_u32 v; asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(a) : "memory"); return v;
}
__device__ __forceinline__ fsh_u64 fsh__ld_acquire(const fsh_u64* a) {
    fsh_u64 v; asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(a) : "memory"); return v;
}
__device__ __forceinline__ void fsh__st_relaxed(fsh_u32* a, fsh_u32 v) {
    asm volatile("st.relaxed.sys.u32 [%0], %1;" :: "l"(a), "r"(v) : "memory");
}
__device__ __forceinline__ void fsh__st_relaxed(fsh_u64* a, fsh_u64 v) {
    asm volatile("st.relaxed.sys.u64 [%0], %1;" :: "l"(a), "l"(v) : "memory");
}
__device__ __forceinline__ void fsh__st_release(fsh_u64* a, fsh_u64 v) {
    asm volatile("st.release.sys.u64 [%0], %1;" :: "l"(a), "l"(v) : "memory");
}

__device__ __forceinline__ void fsh__red_add_release(fsh_u64* a, fsh_u64 v) {
    asm volatile("red.release.sys.add.u64 [%0], %1;" :: "l"(a), "l"(v) : "memory");
}

// Atomics name the global state space, after converting their generic address (every address
// they take is global: the heaps, the debug report, queues in GPU or mapped host memory). A
// generic `atom` compiles to a test of the address with a shared-memory fallback loop, and one
// thread's fetching atomics then wait for each other: on an H100, a loop of 64-bit fetch-adds
// on the heap took 0.300 us each generic, 0.055 global. FSH__ON_GLOBAL(I) runs instruction I
// with register fsh_g holding operand %1 (the address) converted.
#define FSH__ON_GLOBAL(I) "{ .reg .u64 fsh_g; cvta.to.global.u64 fsh_g, %1; " I " }"
#define FSH__ATOM(NAME, OP, BT, U, C)                                                      \
    __device__ __forceinline__ U NAME(U* a, U v) {                                         \
        U r;                                                                               \
        asm volatile(FSH__ON_GLOBAL("atom.relaxed.sys.global." OP "." BT " %0, [fsh_g], %2;") \
                     : "=" C(r) : "l"(a), C(v) : "memory");                                \
        return r;                                                                          \
    }
FSH__ATOM(fsh__atom_add, "add", "u32", fsh_u32, "r")
FSH__ATOM(fsh__atom_add, "add", "u64", fsh_u64, "l")
FSH__ATOM(fsh__atom_exch, "exch", "b32", fsh_u32, "r")
FSH__ATOM(fsh__atom_exch, "exch", "b64", fsh_u64, "l")
FSH__ATOM(fsh__atom_and, "and", "b32", fsh_u32, "r")
FSH__ATOM(fsh__atom_and, "and", "b64", fsh_u64, "l")
FSH__ATOM(fsh__atom_or, "or", "b32", fsh_u32, "r")
FSH__ATOM(fsh__atom_or, "or", "b64", fsh_u64, "l")
FSH__ATOM(fsh__atom_xor, "xor", "b32", fsh_u32, "r")
FSH__ATOM(fsh__atom_xor, "xor", "b64", fsh_u64, "l")
FSH__ATOM(fsh__atom_fadd, "add", "f32", float, "f")
FSH__ATOM(fsh__atom_fadd, "add", "f64", double, "d")
#undef FSH__ATOM

__device__ __forceinline__ fsh_u32 fsh__atom_cas(fsh_u32* a, fsh_u32 cmp, fsh_u32 v) {
    fsh_u32 r;
    asm volatile(FSH__ON_GLOBAL("atom.relaxed.sys.global.cas.b32 %0, [fsh_g], %2, %3;")
                 : "=r"(r) : "l"(a), "r"(cmp), "r"(v) : "memory");
    return r;
}
__device__ __forceinline__ fsh_u64 fsh__atom_cas(fsh_u64* a, fsh_u64 cmp, fsh_u64 v) {
    fsh_u64 r;
    asm volatile(FSH__ON_GLOBAL("atom.relaxed.sys.global.cas.b64 %0, [fsh_g], %2, %3;")
                 : "=l"(r) : "l"(a), "l"(cmp), "l"(v) : "memory");
    return r;
}
#undef FSH__ON_GLOBAL

__device__ __forceinline__ void fsh__fence_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ __forceinline__ void fsh__fence_sc_sys() { asm volatile("fence.sc.sys;" ::: "memory"); }
__device__ __forceinline__ void fsh__fence_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
// One turn of a spin loop (nothing on the GPU; a host build of the network path, where
// threads stand in for GPU threads, gives the CPU away here).
__device__ __forceinline__ void fsh__spin() {}

__device__ __forceinline__ unsigned fsh__thread_rank() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
__device__ __forceinline__ unsigned fsh__block_threads() { return blockDim.x * blockDim.y * blockDim.z; }
__device__ __forceinline__ unsigned fsh__lane() { return fsh__thread_rank() & 31u; }
// The threads of this thread's warp: 32, or fewer in a block of fewer than 32 threads or in
// the block's partial last warp (warps are cut from the linear thread rank).
__device__ __forceinline__ unsigned fsh__warp_size() {
    unsigned left = fsh__block_threads() - (fsh__thread_rank() & ~31u);
    return left < 32u ? left : 32u;
}
__device__ __forceinline__ unsigned fsh__warp_mask() {
    unsigned n = fsh__warp_size();
    return n == 32u ? 0xffffffffu : (1u << n) - 1u;
}

// Same-size unsigned type of each element type, and bit casts between them.
template <typename T> struct fsh__bits_of;
template <> struct fsh__bits_of<int> { typedef fsh_u32 U; };
template <> struct fsh__bits_of<unsigned int> { typedef fsh_u32 U; };
template <> struct fsh__bits_of<long> { typedef fsh_u64 U; };
template <> struct fsh__bits_of<unsigned long> { typedef fsh_u64 U; };
template <> struct fsh__bits_of<long long> { typedef fsh_u64 U; };
template <> struct fsh__bits_of<unsigned long long> { typedef fsh_u64 U; };
template <> struct fsh__bits_of<float> { typedef fsh_u32 U; };
template <> struct fsh__bits_of<double> { typedef fsh_u64 U; };

template <typename To, typename From> __device__ __forceinline__ To fsh__bitcast(From v) {
    union { From f; To t; } u;
    u.f = v;
    return u.t;
}

// ---------------------------------------------------------------- state, addressing, checks

__device__ __forceinline__ int fsh_my_pe() { return fsh_state.my_pe; }
__device__ __forceinline__ int fsh_n_pes() { return fsh_state.n_pes; }
__device__ __forceinline__ int fsh_team_my_pe(int team) { return team == FSH_TEAM_WORLD ? fsh_state.my_pe : -1; }
__device__ __forceinline__ int fsh_team_n_pes(int team) { return team == FSH_TEAM_WORLD ? fsh_state.n_pes : -1; }

__device__ __forceinline__ fsh_u64 fsh__local_base() {
    return fsh_state.view_base + (fsh_u64)fsh_state.my_pe * fsh_state.stride;
}

// Records the first failed check of this PE in the debug report (read by the host).
__device__ __noinline__ void fsh__report(int op, int pe, const void* addr, fsh_size_t bytes) {
    fsh_u64* r = (fsh_u64*)fsh_state.report;
    if (r == 0) return;
    if (fsh__atom_cas(r, 0ull, (fsh_u64)op) == 0ull) {
        r[1] = (fsh_u64)(fsh_i64)pe;
        r[2] = (fsh_u64)addr;
        r[3] = bytes;
        r[4] = (fsh_u64)blockIdx.x | ((fsh_u64)blockIdx.y << 32) | ((fsh_u64)blockIdx.z << 48);
        r[5] = (fsh_u64)threadIdx.x | ((fsh_u64)threadIdx.y << 21) | ((fsh_u64)threadIdx.z << 42);
        fsh__fence_sc_sys();
    }
}

// Whether [p, p + bytes) lies in this PE's user heap and pe names a PE, and, for atomics,
// signals and waits (whose `bytes` is the word's size), whether p is aligned to the word
// (debug builds only).
__device__ __forceinline__ bool fsh__check(int op, int pe, const void* p, fsh_size_t bytes) {
#if FSH_DEBUG
    fsh_u64 lo = fsh__local_base() + fsh_state.header;
    fsh_u64 hi = fsh__local_base() + fsh_state.stride;
    fsh_u64 a = (fsh_u64)p;
    bool word = op == FSH_OP_ATOMIC || op == FSH_OP_SIGNAL_OP || op == FSH_OP_SIGNAL_WAIT || op == FSH_OP_WAIT;
    if (pe < 0 || pe >= fsh_state.n_pes || a < lo || a > hi || bytes > hi - a || (word && bytes != 0 && a % bytes != 0)) {
        fsh__report(op, pe, p, bytes);
        return false;
    }
#endif
    return true;
}

// The address of symmetric `p` on PE `pe`, or 0 when a debug check failed.
__device__ __forceinline__ void* fsh__peer(const void* p, int pe, int op, fsh_size_t bytes) {
    if (!fsh__check(op, pe, p, bytes)) return 0;
    return (void*)((const char*)p + ((fsh_i64)pe - fsh_state.my_pe) * (fsh_i64)fsh_state.stride);
}

// Whether an address from fsh__peer marks a failed debug check: never without debug checks,
// so that callers keep no test of the address itself (which the compiler cannot drop: in a
// program built by nvcc on an H100, a null test around one thread's fetch-adds on device
// memory made each wait for the one before, 0.186 against 0.032 us).
__device__ __forceinline__ bool fsh__refused(const void* r) { return FSH_DEBUG && r == 0; }

// The network path (network.cuh, after this file): PEs on other nodes, reached through their
// send queues instead of a mapping.
struct fsh_qp_t;
__device__ __forceinline__ fsh_qp_t* fsh__qp(int pe);
__device__ __noinline__ void fsh__net_rdma(int pe, bool write, void* local, const void* remote, fsh_size_t bytes, bool wait);
__device__ __noinline__ fsh_u64 fsh__net_g(int pe, const void* remote, fsh_u32 bytes);
__device__ __noinline__ fsh_u64 fsh__net_amo(int pe, const void* remote, fsh_u32 family, fsh_u32 width, fsh_u64 value, fsh_u64 compare, bool fetch);
__device__ __noinline__ void fsh__net_set(int pe, const void* remote, fsh_u64 value);
__device__ __noinline__ void fsh__net_quiet();
template <typename T> __device__ __forceinline__ fsh_u64 fsh__net_word(T v);

// nvshmem_ptr: a load/store address of symmetric `p` on PE `pe`, or null for a PE on
// another node (no mapping: reach it through the RMA and atomic functions).
__device__ __forceinline__ void* fsh_ptr(const void* p, int pe) {
    if (fsh__qp(pe)) return 0;
    return fsh__peer(p, pe, FSH_OP_PTR, 1);
}

// ---------------------------------------------------------------- copies

struct alignas(16) fsh__v4 { fsh_u32 x, y, z, w; };

// Copies n bytes, work shared by `size` threads of which this is `rank`.
__device__ __forceinline__ void fsh__copy(void* dst, const void* src, fsh_size_t n, unsigned rank, unsigned size) {
    char* d = (char*)dst;
    const char* s = (const char*)src;
    fsh_size_t done = 0;
    if ((((fsh_u64)d | (fsh_u64)s) & 15) == 0) {
        fsh_size_t n16 = n >> 4;
        fsh__v4* d4 = (fsh__v4*)d;
        const fsh__v4* s4 = (const fsh__v4*)s;
        fsh_size_t i = rank;
        for (; i + 3 * (fsh_size_t)size < n16; i += 4 * (fsh_size_t)size) {
            fsh__v4 a = s4[i], b = s4[i + size], c = s4[i + 2 * size], e = s4[i + 3 * size];
            d4[i] = a; d4[i + size] = b; d4[i + 2 * size] = c; d4[i + 3 * size] = e;
        }
        for (; i < n16; i += size) d4[i] = s4[i];
        done = n16 << 4;
    } else if ((((fsh_u64)d | (fsh_u64)s) & 7) == 0) {
        fsh_size_t n8 = n >> 3;
        for (fsh_size_t i = rank; i < n8; i += size) ((fsh_u64*)d)[i] = ((const fsh_u64*)s)[i];
        done = n8 << 3;
    }
    for (fsh_size_t j = done + rank; j < n; j += size) d[j] = s[j];
}

// ---------------------------------------------------------------- RMA

template <typename T> __device__ __forceinline__ void fsh_p(T* dest, T value, int pe) {
    if (fsh__qp(pe)) { if (fsh__check(FSH_OP_P, pe, dest, sizeof(T))) fsh__net_rdma(pe, true, &value, dest, sizeof(T), false); return; }
    T* r = (T*)fsh__peer(dest, pe, FSH_OP_P, sizeof(T));
    if (!fsh__refused(r)) *(volatile T*)r = value;
}
template <typename T> __device__ __forceinline__ T fsh_g(const T* src, int pe) {
    if (fsh__qp(pe)) {
        if (!fsh__check(FSH_OP_G, pe, src, sizeof(T))) return T();
        fsh_u64 bits = fsh__net_g(pe, src, sizeof(T));
        T v;
        unsigned char* b = (unsigned char*)&v;
        for (unsigned i = 0; i < sizeof(T); ++i) b[i] = (unsigned char)(bits >> (8 * i));
        return v;
    }
    const T* r = (const T*)fsh__peer(src, pe, FSH_OP_G, sizeof(T));
    return fsh__refused(r) ? T() : *(const volatile T*)r;
}

// A put or get to a PE on another node, by this thread: `wait` for its completion (blocking
// forms) or leave it to fsh_quiet (`_nbi`).
__device__ __forceinline__ void fsh__net_xfer(bool write, void* local, const void* remote, fsh_size_t bytes, int pe, bool wait) {
    if (fsh__check(write ? FSH_OP_PUT : FSH_OP_GET, pe, remote, bytes)) fsh__net_rdma(pe, write, local, remote, bytes, wait);
}

__device__ __forceinline__ void fsh_putmem(void* dest, const void* src, fsh_size_t bytes, int pe) {
    if (fsh__qp(pe)) { fsh__net_xfer(true, (void*)src, dest, bytes, pe, true); return; }
    void* r = fsh__peer(dest, pe, FSH_OP_PUT, bytes);
    if (!fsh__refused(r)) fsh__copy(r, src, bytes, 0, 1);
}
__device__ __forceinline__ void fsh_putmem_nbi(void* dest, const void* src, fsh_size_t bytes, int pe) {
    if (fsh__qp(pe)) { fsh__net_xfer(true, (void*)src, dest, bytes, pe, false); return; }
    fsh_putmem(dest, src, bytes, pe);
}
// Warp and block forms: every thread of the group calls them with the same arguments. The
// group meets first (what its threads wrote to `src`, or waited for, is then seen by all) and
// after the copy. To a peer on another node, one thread of the group posts the transfer; the
// blocking forms wait for it, the `_nbi` forms leave it to fsh_quiet.
__device__ __forceinline__ void fsh__putmem_warp(void* dest, const void* src, fsh_size_t bytes, int pe, bool wait) {
    __syncwarp(fsh__warp_mask());
    if (fsh__qp(pe)) {
        if (fsh__lane() == 0) fsh__net_xfer(true, (void*)src, dest, bytes, pe, wait);
        __syncwarp(fsh__warp_mask());
        return;
    }
    void* r = fsh__peer(dest, pe, FSH_OP_PUT, bytes);
    if (!fsh__refused(r)) fsh__copy(r, src, bytes, fsh__lane(), fsh__warp_size());
    __syncwarp(fsh__warp_mask());
}
__device__ __forceinline__ void fsh_putmem_warp(void* dest, const void* src, fsh_size_t bytes, int pe) { fsh__putmem_warp(dest, src, bytes, pe, true); }
__device__ __forceinline__ void fsh_putmem_nbi_warp(void* dest, const void* src, fsh_size_t bytes, int pe) { fsh__putmem_warp(dest, src, bytes, pe, false); }
__device__ __forceinline__ void fsh__putmem_block(void* dest, const void* src, fsh_size_t bytes, int pe, bool wait) {
    __syncthreads();
    if (fsh__qp(pe)) {
        if (fsh__thread_rank() == 0) fsh__net_xfer(true, (void*)src, dest, bytes, pe, wait);
        __syncthreads();
        return;
    }
    void* r = fsh__peer(dest, pe, FSH_OP_PUT, bytes);
    if (!fsh__refused(r)) fsh__copy(r, src, bytes, fsh__thread_rank(), fsh__block_threads());
    __syncthreads();
}
__device__ __forceinline__ void fsh_putmem_block(void* dest, const void* src, fsh_size_t bytes, int pe) { fsh__putmem_block(dest, src, bytes, pe, true); }
__device__ __forceinline__ void fsh_putmem_nbi_block(void* dest, const void* src, fsh_size_t bytes, int pe) { fsh__putmem_block(dest, src, bytes, pe, false); }

__device__ __forceinline__ void fsh_getmem(void* dest, const void* src, fsh_size_t bytes, int pe) {
    if (fsh__qp(pe)) { fsh__net_xfer(false, dest, src, bytes, pe, true); return; }
    const void* r = fsh__peer(src, pe, FSH_OP_GET, bytes);
    if (!fsh__refused(r)) fsh__copy(dest, r, bytes, 0, 1);
}
__device__ __forceinline__ void fsh_getmem_nbi(void* dest, const void* src, fsh_size_t bytes, int pe) {
    if (fsh__qp(pe)) { fsh__net_xfer(false, dest, src, bytes, pe, false); return; }
    fsh_getmem(dest, src, bytes, pe);
}
__device__ __forceinline__ void fsh__getmem_warp(void* dest, const void* src, fsh_size_t bytes, int pe, bool wait) {
    __syncwarp(fsh__warp_mask());
    if (fsh__qp(pe)) {
        if (fsh__lane() == 0) fsh__net_xfer(false, dest, src, bytes, pe, wait);
        __syncwarp(fsh__warp_mask());
        return;
    }
    const void* r = fsh__peer(src, pe, FSH_OP_GET, bytes);
    if (!fsh__refused(r)) fsh__copy(dest, r, bytes, fsh__lane(), fsh__warp_size());
    __syncwarp(fsh__warp_mask());
}
__device__ __forceinline__ void fsh_getmem_warp(void* dest, const void* src, fsh_size_t bytes, int pe) { fsh__getmem_warp(dest, src, bytes, pe, true); }
__device__ __forceinline__ void fsh_getmem_nbi_warp(void* dest, const void* src, fsh_size_t bytes, int pe) { fsh__getmem_warp(dest, src, bytes, pe, false); }
__device__ __forceinline__ void fsh__getmem_block(void* dest, const void* src, fsh_size_t bytes, int pe, bool wait) {
    __syncthreads();
    if (fsh__qp(pe)) {
        if (fsh__thread_rank() == 0) fsh__net_xfer(false, dest, src, bytes, pe, wait);
        __syncthreads();
        return;
    }
    const void* r = fsh__peer(src, pe, FSH_OP_GET, bytes);
    if (!fsh__refused(r)) fsh__copy(dest, r, bytes, fsh__thread_rank(), fsh__block_threads());
    __syncthreads();
}
__device__ __forceinline__ void fsh_getmem_block(void* dest, const void* src, fsh_size_t bytes, int pe) { fsh__getmem_block(dest, src, bytes, pe, true); }
__device__ __forceinline__ void fsh_getmem_nbi_block(void* dest, const void* src, fsh_size_t bytes, int pe) { fsh__getmem_block(dest, src, bytes, pe, false); }

// Typed forms: nelems elements of T.
#define FSH__TYPED(NAME, MEM)                                                                      \
    template <typename T> __device__ __forceinline__ void NAME(T* dest, const T* src, fsh_size_t nelems, int pe) { \
        MEM(dest, src, nelems * sizeof(T), pe);                                                   \
    }
FSH__TYPED(fsh_put, fsh_putmem)
FSH__TYPED(fsh_put_nbi, fsh_putmem_nbi)
FSH__TYPED(fsh_put_warp, fsh_putmem_warp)
FSH__TYPED(fsh_put_nbi_warp, fsh_putmem_nbi_warp)
FSH__TYPED(fsh_put_block, fsh_putmem_block)
FSH__TYPED(fsh_put_nbi_block, fsh_putmem_nbi_block)
FSH__TYPED(fsh_get, fsh_getmem)
FSH__TYPED(fsh_get_nbi, fsh_getmem_nbi)
FSH__TYPED(fsh_get_warp, fsh_getmem_warp)
FSH__TYPED(fsh_get_nbi_warp, fsh_getmem_nbi_warp)
FSH__TYPED(fsh_get_block, fsh_getmem_block)
FSH__TYPED(fsh_get_nbi_block, fsh_getmem_nbi_block)
#undef FSH__TYPED

// ---------------------------------------------------------------- ordering

// Orders this thread's puts, AMOs and signals (nvshmem_fence). To PEs on other nodes it
// completes them (as fsh_quiet): the `cpu` NIC handler's target lands a batch's writes in
// any order, where a ConnectX queue pair keeps them in order.
__device__ __forceinline__ void fsh_fence() {
    fsh__fence_sys();
    if (FSH_NETWORK && fsh_state.net) fsh__net_quiet();
}
// Completes this thread's puts, AMOs and signals: visible everywhere after it, and before
// any later access of this thread (nvshmem_quiet; sequentially consistent, as NVSHMEM's).
// Operations to PEs on other nodes complete when their CQEs come back.
__device__ __forceinline__ void fsh_quiet() {
    fsh__fence_sc_sys();
    if (FSH_NETWORK && fsh_state.net) fsh__net_quiet();
}

// ---------------------------------------------------------------- signals

// Updates a signal word already translated to the target PE. Release semantics: this
// thread's earlier writes are visible to whoever sees the update.
__device__ __forceinline__ void fsh__signal_update(fsh_u64* r, fsh_u64 value, int op) {
    if (op == FSH_SIGNAL_ADD) fsh__red_add_release(r, value);
    else fsh__st_release(r, value);
}

// To a PE on another node a set is a fenced 8-byte inline RDMA write (fsh__net_set): shown
// after the queue's earlier writes, and, under the `cpu` NIC handler, a copy at the target
// rather than a kernel of the target's, which its own waiting kernels could hold back. An add
// is a network atomic.
__device__ __forceinline__ void fsh__net_signal(fsh_u64* sig, fsh_u64 value, int op, int pe) {
    if (!fsh__check(FSH_OP_SIGNAL_OP, pe, sig, 8)) return;
    if (op == FSH_SIGNAL_ADD) fsh__net_amo(pe, sig, FSH_IBGDA_AMO_SIGNAL_ADD, 8, value, 0, false);
    else fsh__net_set(pe, sig, value);
}

__device__ __forceinline__ void fsh_signal_op(fsh_u64* sig, fsh_u64 value, int op, int pe) {
    if (fsh__qp(pe)) {
        fsh__net_signal(sig, value, op, pe);
        return;
    }
    fsh_u64* r = (fsh_u64*)fsh__peer(sig, pe, FSH_OP_SIGNAL_OP, 8);
    if (!fsh__refused(r)) fsh__signal_update(r, value, op);
}

// A put-with-signal to a PE on another node: the write, then the signal on the same queue
// (executed in order); a blocking form waits for the write.
__device__ __forceinline__ void fsh__net_put_signal(void* dest, const void* src, fsh_size_t bytes, fsh_u64* sig, fsh_u64 signal, int sig_op, int pe, bool wait) {
    if (!fsh__check(FSH_OP_PUT_SIGNAL, pe, dest, bytes)) return;
    fsh__net_rdma(pe, true, (void*)src, dest, bytes, wait);
    fsh_signal_op(sig, signal, sig_op, pe);
}

__device__ __forceinline__ void fsh_putmem_signal(void* dest, const void* src, fsh_size_t bytes, fsh_u64* sig, fsh_u64 signal, int sig_op, int pe) {
    if (fsh__qp(pe)) { fsh__net_put_signal(dest, src, bytes, sig, signal, sig_op, pe, true); return; }
    void* r = fsh__peer(dest, pe, FSH_OP_PUT_SIGNAL, bytes);
    if (fsh__refused(r)) return;
    fsh__copy(r, src, bytes, 0, 1);
    fsh_signal_op(sig, signal, sig_op, pe);
}
__device__ __forceinline__ void fsh_putmem_signal_nbi(void* dest, const void* src, fsh_size_t bytes, fsh_u64* sig, fsh_u64 signal, int sig_op, int pe) {
    if (fsh__qp(pe)) { fsh__net_put_signal(dest, src, bytes, sig, signal, sig_op, pe, false); return; }
    fsh_putmem_signal(dest, src, bytes, sig, signal, sig_op, pe);
}
__device__ __forceinline__ void fsh__putmem_signal_warp(void* dest, const void* src, fsh_size_t bytes, fsh_u64* sig, fsh_u64 signal, int sig_op, int pe, bool wait) {
    __syncwarp(fsh__warp_mask());
    if (fsh__qp(pe)) {
        if (fsh__lane() == 0) fsh__net_put_signal(dest, src, bytes, sig, signal, sig_op, pe, wait);
        __syncwarp(fsh__warp_mask());
        return;
    }
    void* r = fsh__peer(dest, pe, FSH_OP_PUT_SIGNAL, bytes);
    if (!fsh__refused(r)) fsh__copy(r, src, bytes, fsh__lane(), fsh__warp_size());
    fsh__fence_sys();
    __syncwarp(fsh__warp_mask());
    if (!fsh__refused(r) && fsh__lane() == 0) { fsh__fence_sys(); fsh_signal_op(sig, signal, sig_op, pe); }
    __syncwarp(fsh__warp_mask());
}
__device__ __forceinline__ void fsh_putmem_signal_warp(void* dest, const void* src, fsh_size_t bytes, fsh_u64* sig, fsh_u64 signal, int sig_op, int pe) { fsh__putmem_signal_warp(dest, src, bytes, sig, signal, sig_op, pe, true); }
__device__ __forceinline__ void fsh_putmem_signal_nbi_warp(void* dest, const void* src, fsh_size_t bytes, fsh_u64* sig, fsh_u64 signal, int sig_op, int pe) { fsh__putmem_signal_warp(dest, src, bytes, sig, signal, sig_op, pe, false); }
__device__ __forceinline__ void fsh__putmem_signal_block(void* dest, const void* src, fsh_size_t bytes, fsh_u64* sig, fsh_u64 signal, int sig_op, int pe, bool wait) {
    __syncthreads();
    if (fsh__qp(pe)) {
        if (fsh__thread_rank() == 0) fsh__net_put_signal(dest, src, bytes, sig, signal, sig_op, pe, wait);
        __syncthreads();
        return;
    }
    void* r = fsh__peer(dest, pe, FSH_OP_PUT_SIGNAL, bytes);
    if (!fsh__refused(r)) fsh__copy(r, src, bytes, fsh__thread_rank(), fsh__block_threads());
    fsh__fence_sys();
    __syncthreads();
    if (!fsh__refused(r) && fsh__thread_rank() == 0) { fsh__fence_sys(); fsh_signal_op(sig, signal, sig_op, pe); }
    __syncthreads();
}
__device__ __forceinline__ void fsh_putmem_signal_block(void* dest, const void* src, fsh_size_t bytes, fsh_u64* sig, fsh_u64 signal, int sig_op, int pe) { fsh__putmem_signal_block(dest, src, bytes, sig, signal, sig_op, pe, true); }
__device__ __forceinline__ void fsh_putmem_signal_nbi_block(void* dest, const void* src, fsh_size_t bytes, fsh_u64* sig, fsh_u64 signal, int sig_op, int pe) { fsh__putmem_signal_block(dest, src, bytes, sig, signal, sig_op, pe, false); }
#define FSH__TYPED_SIG(NAME, MEM)                                                                  \
    template <typename T> __device__ __forceinline__ void NAME(T* dest, const T* src, fsh_size_t nelems, fsh_u64* sig, fsh_u64 signal, int sig_op, int pe) { \
        MEM(dest, src, nelems * sizeof(T), sig, signal, sig_op, pe);                              \
    }
FSH__TYPED_SIG(fsh_put_signal, fsh_putmem_signal)
FSH__TYPED_SIG(fsh_put_signal_nbi, fsh_putmem_signal_nbi)
FSH__TYPED_SIG(fsh_put_signal_warp, fsh_putmem_signal_warp)
FSH__TYPED_SIG(fsh_put_signal_nbi_warp, fsh_putmem_signal_nbi_warp)
FSH__TYPED_SIG(fsh_put_signal_block, fsh_putmem_signal_block)
FSH__TYPED_SIG(fsh_put_signal_nbi_block, fsh_putmem_signal_nbi_block)
#undef FSH__TYPED_SIG

template <typename T> __device__ __forceinline__ bool fsh__cmp(T a, int cmp, T b) {
    switch (cmp) {
    case FSH_CMP_EQ: return a == b;
    case FSH_CMP_NE: return a != b;
    case FSH_CMP_GT: return a > b;
    case FSH_CMP_LE: return a <= b;
    case FSH_CMP_LT: return a < b;
    case FSH_CMP_GE: return a >= b;
    default: return false;
    }
}

// This PE's signal word (nvshmem_signal_fetch).
__device__ __forceinline__ fsh_u64 fsh_signal_fetch(const fsh_u64* sig) {
    if (!fsh__check(FSH_OP_SIGNAL_WAIT, fsh_state.my_pe, sig, 8)) return 0;
    return fsh__ld_acquire(sig);
}

// Waits until this PE's signal satisfies `cmp value`; returns it (nvshmem_signal_wait_until).
__device__ __forceinline__ fsh_u64 fsh_signal_wait_until(const fsh_u64* sig, int cmp, fsh_u64 value) {
    if (!fsh__check(FSH_OP_SIGNAL_WAIT, fsh_state.my_pe, sig, 8)) return 0;
    fsh_u64 v;
    while (!fsh__cmp(v = fsh__ld_acquire(sig), cmp, value)) {}
    return v;
}

// ---------------------------------------------------------------- point-to-point sync

template <typename T> __device__ __forceinline__ T fsh__load_sync(const T* ivar) {
    typedef typename fsh__bits_of<T>::U U;
    return fsh__bitcast<T>(fsh__ld_relaxed((const U*)ivar));
}

// Waits until this PE's ivar satisfies `cmp value` (nvshmem_wait_until).
template <typename T> __device__ __forceinline__ void fsh_wait_until(const T* ivar, int cmp, T value) {
    if (!fsh__check(FSH_OP_WAIT, fsh_state.my_pe, ivar, sizeof(T))) return;
    while (!fsh__cmp(fsh__load_sync(ivar), cmp, value)) {}
    fsh__fence_sys();
}
// Whether this PE's ivar satisfies `cmp value` now (nvshmem_test).
template <typename T> __device__ __forceinline__ int fsh_test(const T* ivar, int cmp, T value) {
    if (!fsh__check(FSH_OP_WAIT, fsh_state.my_pe, ivar, sizeof(T))) return 0;
    int ok = fsh__cmp(fsh__load_sync(ivar), cmp, value);
    if (ok) fsh__fence_sys();
    return ok;
}
// Waits until every ivars[i] with status[i] == 0 (status may be 0) satisfies the comparison.
template <typename T> __device__ __forceinline__ void fsh_wait_until_all(const T* ivars, fsh_size_t n, const int* status, int cmp, T value) {
    for (fsh_size_t i = 0; i < n; ++i)
        if (!status || !status[i]) fsh_wait_until(ivars + i, cmp, value);
}
// Waits until some ivars[i] with status[i] == 0 satisfies the comparison; returns its index
// (SIZE_MAX, ~0, when every entry is excluded or n is 0, as OpenSHMEM says).
template <typename T> __device__ __forceinline__ fsh_size_t fsh_wait_until_any(const T* ivars, fsh_size_t n, const int* status, int cmp, T value) {
    bool any = false;
    for (fsh_size_t i = 0; i < n; ++i) any = any || !status || !status[i];
    if (!any) return ~(fsh_size_t)0;
    for (;;)
        for (fsh_size_t i = 0; i < n; ++i)
            if ((!status || !status[i]) && fsh_test(ivars + i, cmp, value)) return i;
}
// Whether every ivars[i] with status[i] == 0 satisfies the comparison now.
template <typename T> __device__ __forceinline__ int fsh_test_all(const T* ivars, fsh_size_t n, const int* status, int cmp, T value) {
    for (fsh_size_t i = 0; i < n; ++i)
        if ((!status || !status[i]) && !fsh_test(ivars + i, cmp, value)) return 0;
    return 1;
}

// ---------------------------------------------------------------- barriers

// Dissemination barrier among all PEs, run by one thread per PE: in round k, PE i writes the
// epoch into round k's flag of PE i + 2^k and waits for its own flag of round k.
__device__ __noinline__ void fsh__sync_all_thread() {
    int n = fsh_state.n_pes, me = fsh_state.my_pe;
    fsh_u64 base = fsh__local_base();
    volatile fsh_u64* epoch_p = (volatile fsh_u64*)(base + FSH_SYNC_EPOCH);
    fsh_u64 epoch = *epoch_p + 1;
    *epoch_p = epoch;
    int round = 0;
    for (int dist = 1; dist < n; dist <<= 1, ++round) {
        int to = (me + dist) % n;
        fsh_u64 flag = base + FSH_SYNC_FLAGS + 64ull * round;
        if (fsh__qp(to)) fsh__net_set(to, (const void*)flag, epoch);
        else fsh__st_release((fsh_u64*)(flag + ((fsh_i64)to - me) * (fsh_i64)fsh_state.stride), epoch);
        while (fsh__ld_acquire((const fsh_u64*)flag) < epoch) {}
    }
}

// Synchronizes the PEs (one thread per PE calls it; nvshmem_sync_all).
__device__ __forceinline__ void fsh_sync_all() { fsh__sync_all_thread(); }
// Completes this thread's operations, then synchronizes the PEs (nvshmem_barrier_all).
__device__ __forceinline__ void fsh_barrier_all() { fsh_quiet(); fsh__sync_all_thread(); }

__device__ __forceinline__ void fsh_sync_all_warp() { __syncwarp(); if (fsh__lane() == 0) fsh__sync_all_thread(); __syncwarp(); }
__device__ __forceinline__ void fsh_barrier_all_warp() { fsh_quiet(); __syncwarp(); if (fsh__lane() == 0) fsh_barrier_all(); __syncwarp(); }
__device__ __forceinline__ void fsh_sync_all_block() { __syncthreads(); if (fsh__thread_rank() == 0) fsh__sync_all_thread(); __syncthreads(); }
__device__ __forceinline__ void fsh_barrier_all_block() { fsh_quiet(); __syncthreads(); if (fsh__thread_rank() == 0) fsh_barrier_all(); __syncthreads(); }

// Synchronizes every thread of a cooperatively launched grid (GpuModule::launch_cooperative).
__device__ __noinline__ void fsh_grid_sync() {
    __syncthreads();
    if (fsh__thread_rank() == 0) {
        fsh_u32 blocks = gridDim.x * gridDim.y * gridDim.z;
        fsh_u64 base = fsh__local_base();
        fsh_u32* count = (fsh_u32*)(base + FSH_SYNC_GRID);
        fsh_u32* gen = (fsh_u32*)(base + FSH_SYNC_GRID + 64);
        fsh_u32 g = fsh__ld_acquire(gen);
        fsh__fence_gpu();
        if (fsh__atom_add(count, 1u) == blocks - 1) {
            fsh__st_relaxed(count, 0u);
            fsh__fence_gpu();
            fsh__atom_add(gen, 1u);
        } else {
            while (fsh__ld_acquire(gen) == g) {}
        }
        fsh__fence_gpu();
    }
    __syncthreads();
}

// Every thread of a cooperative grid calls these: the grid meets, one thread synchronizes the
// PEs, the grid meets again.
__device__ __forceinline__ void fsh_sync_all_grid() {
    fsh_grid_sync();
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && fsh__thread_rank() == 0) fsh__sync_all_thread();
    fsh_grid_sync();
}
__device__ __forceinline__ void fsh_barrier_all_grid() {
    fsh_quiet();
    fsh_grid_sync();
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && fsh__thread_rank() == 0) fsh_barrier_all();
    fsh_grid_sync();
}

#endif // FERROSHMEM_DEVICE_CUH
