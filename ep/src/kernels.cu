// ferroshmem ep: the kernels of normal-mode dispatch and combine, compiled with the device
// library prepended (GpuPe::compile). Rows are bf16 (16 bits each), moved in 16-byte pieces.
//
// A dispatch is: ep_layout (where each token goes), ep_exchange (every PE's counts to every
// PE, then a snapshot for the host), ep_dispatch (rows, sources and top-k to the receivers,
// then each PE's last block tells the receivers), ep_wait (until every sender has told).
// A combine is: ep_exchange (every PE's input is in place), ep_combine (each token's rows
// read back from the PEs that received it, summed in f32 in PE order), ep_wait (until every
// PE has read this PE's rows, so that they may be overwritten).
//
// Every wait gives up when the host writes a non-zero abort word (pinned host memory), and
// then says so in the call's outcome word.
//
// A PE on another node (compiled in where the job spans nodes: FSH_NETWORK) has no mapping:
// fsh_ptr is null for it. What goes there is staged in this PE's symmetric heap (the network
// part of the region) and put with the device library's network path; what comes from there
// is fetched into a per-warp staging slot. Each block completes its transfers (fsh_quiet)
// before it counts itself done, so the signals that follow find the data in place.

#define EP_MAX_PES 64
// Threads of a block of the row-moving kernels (kernels.rs launches them so): the network
// path's functions need the register cap this gives.
#define EP_ROW_THREADS 512
#define EP_MAX_EXPERTS 1024
#define EP_ROW_HEAD 3
#define EP_OK 0
#define EP_BAD_EXPERT 1
#define EP_REJECTED 2
#define EP_DUPLICATE 3
#define EP_ABORTED 1
#define EP_REFUSED 2

struct __align__(16) ep_v4 { unsigned x, y, z, w; };

__device__ __forceinline__ float ep_lo(unsigned v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float ep_hi(unsigned v) { return __uint_as_float(v & 0xffff0000u); }

// f32 to bf16, to nearest, ties to even (as Bf16::from_f32).
__device__ __forceinline__ unsigned ep_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return ((u >> 16) | 0x40u) & 0xffffu;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

__device__ __forceinline__ unsigned ep_pack(float lo, float hi) { return ep_bf16(lo) | (ep_bf16(hi) << 16); }

// Waits until every PE's word of this PE's counter (a word per source, each set to the
// source's call number) reaches call `target`; false if the host aborted first.
__device__ __forceinline__ bool ep_wait_counter(const fsh_u64* counter, fsh_u64 target, const volatile fsh_u64* abort_word) {
    unsigned spins = 0;
    for (int s = 0; s < fsh_n_pes(); ++s) {
        while (fsh_signal_fetch(counter + s) < target) {
            if ((++spins & 255u) == 0 && *abort_word != 0) return false;
        }
    }
    return true;
}

// Copies one row of 16-byte pieces, the 32 lanes of a warp sharing it, `DEPTH` loads in
// flight per lane (the last batch of a row partly).
template <int DEPTH = 4>
__device__ __forceinline__ void ep_copy_row(ep_v4* dst, const ep_v4* src, int pieces, int lane) {
    for (int i = lane; i < pieces; i += 32 * DEPTH) {
        ep_v4 v[DEPTH];
#pragma unroll
        for (int u = 0; u < DEPTH; ++u)
            if (i + 32 * u < pieces) v[u] = src[i + 32 * u];
#pragma unroll
        for (int u = 0; u < DEPTH; ++u)
            if (i + 32 * u < pieces) dst[i + 32 * u] = v[u];
    }
}

// Copies one row to m places, the 32 lanes of a warp sharing it: each piece is read once.
__device__ __forceinline__ void ep_fan_out(ep_v4* const* dst, int m, const ep_v4* src, int pieces, int lane) {
    int i = lane;
    for (; i + 96 < pieces; i += 128) {
        ep_v4 a = src[i], b = src[i + 32], c = src[i + 64], d = src[i + 96];
        for (int j = 0; j < m; ++j) {
            ep_v4* to = dst[j];
            to[i] = a; to[i + 32] = b; to[i + 64] = c; to[i + 96] = d;
        }
    }
    for (; i < pieces; i += 32) {
        ep_v4 a = src[i];
        for (int j = 0; j < m; ++j) dst[j][i] = a;
    }
}

__device__ __forceinline__ void ep_add(float* a, ep_v4 v) {
    a[0] += ep_lo(v.x); a[1] += ep_hi(v.x); a[2] += ep_lo(v.y); a[3] += ep_hi(v.y);
    a[4] += ep_lo(v.z); a[5] += ep_hi(v.z); a[6] += ep_lo(v.w); a[7] += ep_hi(v.w);
}

__device__ __forceinline__ ep_v4 ep_pack4(const float* a) {
    ep_v4 o;
    o.x = ep_pack(a[0], a[1]); o.y = ep_pack(a[2], a[3]); o.z = ep_pack(a[4], a[5]); o.w = ep_pack(a[6], a[7]);
    return o;
}

// One block per destination PE (gridDim.x == n_pes, blockDim.x a multiple of 32). Writes, in
// `row` (this PE's row of the dispatch table): the head (block 0: status, first bad token,
// its value), the tokens sent to each PE, the (token, slot) pairs of each expert; and
// send_pos[t * n + r]: token t's place among the tokens sent to PE r, or -1.
extern "C" __global__ void ep_layout(const long long* topk, int tokens, int k, int experts, int rejected,
                                     int* row, int* send_pos) {
    __shared__ int warp_sums[32];
    __shared__ int expert_counts[EP_MAX_EXPERTS];
    __shared__ int running;
    __shared__ int first_bad;
    int n = gridDim.x, r = blockIdx.x, tid = threadIdx.x;
    int local = experts / n;
    long long lo = (long long)r * local, hi = lo + local;
    int lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
    if (tid == 0) { running = 0; first_bad = 0x7fffffff; }
    for (int i = tid; i < local; i += blockDim.x) expert_counts[i] = 0;
    __syncthreads();
    for (int start = 0; start < tokens; start += blockDim.x) {
        int t = start + tid;
        int hit = 0;
        if (t < tokens) {
            for (int j = 0; j < k; ++j) {
                long long e = topk[(long long)t * k + j];
                if (e >= lo && e < hi) { hit = 1; atomicAdd(&expert_counts[e - lo], 1); }
                if (r == 0 && (e < -1 || e >= experts)) atomicMin(&first_bad, t);
            }
        }
        unsigned ballot = __ballot_sync(0xffffffffu, hit);
        if (lane == 0) warp_sums[warp] = __popc(ballot);
        __syncthreads();
        int offset = running;
        for (int w = 0; w < warp; ++w) offset += warp_sums[w];
        if (t < tokens) send_pos[(long long)t * n + r] = hit ? offset + __popc(ballot & ((1u << lane) - 1u)) : -1;
        __syncthreads();
        if (tid == 0) for (int w = 0; w < warps; ++w) running += warp_sums[w];
        __syncthreads();
    }
    if (tid == 0) row[EP_ROW_HEAD + r] = running;
    for (int i = tid; i < local; i += blockDim.x) row[EP_ROW_HEAD + n + lo + i] = expert_counts[i];
    if (r == 0 && tid == 0) {
        int status = rejected ? EP_REJECTED : EP_OK, token = 0, value = 0;
        if (!rejected && first_bad != 0x7fffffff) {
            status = EP_BAD_EXPERT;
            token = first_bad;
            for (int j = k - 1; j >= 0; --j) {
                long long e = topk[(long long)first_bad * k + j];
                if (e < -1 || e >= experts) value = (int)(e < -2147483647ll ? -2147483647ll : (e > 2147483647ll ? 2147483647ll : e));
            }
        }
        row[0] = status; row[1] = token; row[2] = value;
    }
}

// One block. Writes this PE's `width`-word row into row my_pe of `table` on every PE, setting
// this PE's word of each PE's counter to call `target` once its row is there; waits until
// every word of this PE's counter reaches it (every PE's row arrived); copies the table to
// `snapshot` (pinned host memory).
// Where the job spans nodes, the row is first copied to `staged` (symmetric: a put to
// another node reads its source through this PE's heap).
extern "C" __global__ void ep_exchange(const int* row, int width, int* staged, int* table, fsh_u64* counter,
                                       fsh_u64 target, int* snapshot, const volatile fsh_u64* abort_word,
                                       fsh_u64* outcome) {
    __shared__ int arrived;
    int n = fsh_n_pes(), me = fsh_my_pe();
    const int* from = row;
    if (FSH_NETWORK && staged) {
        for (int i = threadIdx.x; i < width; i += blockDim.x) staged[i] = row[i];
        from = staged; // the block put's first barrier orders these writes before it
    }
    for (int pe = 0; pe < n; ++pe)
        fsh_putmem_signal_nbi_block(table + (long long)me * width, from, (fsh_size_t)width * sizeof(int), counter + me,
                                    target, FSH_SIGNAL_SET, pe);
    if (threadIdx.x == 0) {
        fsh_quiet();
        arrived = ep_wait_counter(counter, target, abort_word);
        if (!arrived) *outcome = EP_ABORTED;
    }
    __syncthreads();
    if (!arrived) return;
    for (int i = threadIdx.x; i < n * width; i += blockDim.x) snapshot[i] = table[i];
}

// Whether any PE's row of `table` has a non-zero status (then nobody moves rows).
__device__ __forceinline__ bool ep_any_status(const int* table, int width) {
    __shared__ int any;
    if (threadIdx.x == 0) {
        any = 0;
        for (int s = 0; s < fsh_n_pes(); ++s) any |= table[(long long)s * width] != EP_OK;
    }
    __syncthreads();
    return any != 0;
}

// A kernel launched as a programmatic dependent (`launch_dependent`, compute capability 9.0
// on) may start while the kernel ahead of it on the stream still runs: it waits here, before
// it reads anything that kernel wrote, until that kernel has finished and its writes are
// visible. A no-op after a plain launch.
__device__ __forceinline__ void ep_wait_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the kernel behind this one on the stream, launched as a programmatic dependent, start
// once every block of this grid has called this or exited: its launch then overlaps this
// grid's end. Only where nothing this grid still waits for needs the multiprocessors that
// kernel's early blocks take (they wait, resident, in ep_wait_prior_grid).
__device__ __forceinline__ void ep_start_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Called by every thread of every block once the block's work is done: counts the block done
// (after this PE's writes of the block are visible, and its transfers to other nodes
// complete) and returns, on every thread, whether it was the grid's last block; the last
// block resets the count for the next launch and fences at system scope, so that its
// threads' later signals (system-scope releases) carry every counted block's writes.
//
// A block counts itself done behind a GPU-scope fence, not a system-scope one: the last
// block, on the same GPU, observes every count before it signals with system-scope releases,
// which carry the counted blocks' writes (to peers on this GPU or over NVLink) along with its
// own (the memory model's cumulativity; DeepEP's low-latency kernels count the same way).
__device__ __forceinline__ bool ep_last_block(unsigned* blocks_done) {
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {
        if (FSH_NETWORK) fsh_quiet();
        __threadfence();
        last = atomicAdd(blocks_done, 1u) == gridDim.x * gridDim.y - 1;
        if (last) {
            *blocks_done = 0;
            __threadfence_system();
        }
    }
    __syncthreads();
    return last != 0;
}

// Called by every thread of every block at the end: the grid's last block to finish sets this
// PE's word of `counter` on every PE to `value` (ep_last_block), a thread a PE; returns, on
// every thread, whether its block was that last one. Sets, not adds: to a PE on another node
// a set is a write, where an add would be an atomic, a kernel on the target's GPU under the
// `cpu` NIC handler, which the target's own waiting kernel could hold back. The signals go
// out a thread each: one after another, each release cost a low-latency combine of 8 PEs
// about 5 µs.
__device__ __forceinline__ bool ep_tell_all(unsigned* blocks_done, fsh_u64* counter, fsh_u64 value) {
    if (!ep_last_block(blocks_done)) return false;
    for (int pe = threadIdx.x; pe < fsh_n_pes(); pe += blockDim.x)
        fsh_signal_op(counter + fsh_my_pe(), value, FSH_SIGNAL_SET, pe);
    return true;
}

// Where a dispatch's rows land on their receivers (symmetric addresses; row `at` of each).
struct ep_received {
    ep_v4* x;
    float* scales;
    int* src;
    long long* topk;
    float* weights;
};

// Token t's experts made local to PE r (-1 for others) and their weights (0 for others),
// written by the warp's lanes into `idx` and `w` (k each).
__device__ __forceinline__ void ep_local_topk(long long* idx, float* w, const long long* topk, const float* weights,
                                              long long t, int k, long long lo, int local, int lane) {
    for (int j = lane; j < k; j += 32) {
        long long e = topk[t * k + j];
        bool here = e >= lo && e < lo + local;
        idx[j] = here ? e - lo : -1;
        w[j] = here ? weights[t * k + j] : 0.0f;
    }
}

// Token t's index, local top-k, weights and scales, stored into row `at` of mapped PE r.
__device__ __forceinline__ void ep_store_meta(const ep_received& to, long long at, int r, long long t,
                                              const long long* topk, const float* weights, const float* scales,
                                              int k, int local, int scale_count, int lane) {
    ep_local_topk((long long*)fsh_ptr(to.topk + at * k, r), (float*)fsh_ptr(to.weights + at * k, r), topk, weights,
                  t, k, (long long)r * local, local, lane);
    if (lane == 0) *(int*)fsh_ptr(to.src + at, r) = (int)t;
    float* sc = scale_count ? (float*)fsh_ptr(to.scales + at * scale_count, r) : 0;
    for (int j = lane; j < scale_count; j += 32) sc[j] = scales[t * scale_count + j];
}

// Token t to its `remote` receivers on other nodes (PE remote_pe[i], row remote_at[i]): its
// row and scales staged once (`staged_rows`, a record per token), its local top-k and weights
// staged per receiver (`staged_meta`, k records per token), each part put by the warp.
__device__ void ep_send_remote(const int* remote_pe, const long long* remote_at, int remote, long long t,
                               const ep_v4* x, const float* scales, const long long* topk, const float* weights,
                               int pieces, int scale_count, int k, int local, const ep_received& to,
                               unsigned char* staged_rows, unsigned char* staged_meta, int lane) {
    long long record = (pieces * 16 + scale_count * 4 + 15) & ~15, meta = (k * 12 + 15) & ~15;
    ep_v4* row = (ep_v4*)(staged_rows + t * record);
    float* row_scales = (float*)(row + pieces);
    ep_copy_row(row, x + t * pieces, pieces, lane);
    for (int j = lane; j < scale_count; j += 32) row_scales[j] = scales[t * scale_count + j];
    for (int i = 0; i < remote; ++i) {
        int r = remote_pe[i];
        long long at = remote_at[i];
        long long* idx = (long long*)(staged_meta + (t * k + i) * meta);
        float* w = (float*)(idx + k);
        ep_local_topk(idx, w, topk, weights, t, k, (long long)r * local, local, lane);
        fsh_putmem_nbi_warp(to.x + at * pieces, row, (fsh_size_t)pieces * 16, r);
        if (scale_count) fsh_putmem_nbi_warp(to.scales + at * scale_count, row_scales, (fsh_size_t)scale_count * 4, r);
        fsh_putmem_nbi_warp(to.topk + at * k, idx, (fsh_size_t)k * 8, r);
        fsh_putmem_nbi_warp(to.weights + at * k, w, (fsh_size_t)k * 4, r);
        if (lane == 0) fsh_p(to.src + at, (int)t, r);
    }
}

// Sends each token to every PE that has one of its experts (a warp a token): its row
// (`pieces` 16-byte pieces: bf16, or fp8 with `scale_count` scales), its index, its experts
// made local to the receiver (-1 for others) and their weights (0 for others). PE s's rows
// land after the rows of PEs before it (the dispatch table's counts).
// rows[t * n + r] (the handle) is where token t lies on PE r, or -1.
extern "C" __global__ void __launch_bounds__(EP_ROW_THREADS) ep_dispatch(const ep_v4* x, const float* scales, const long long* topk,
                                       const float* weights, int tokens, int pieces, int scale_count, int k,
                                       int experts, const int* send_pos, const int* table, int width,
                                       ep_v4* recv_x, float* recv_scales, int* recv_src, long long* recv_topk,
                                       float* recv_weights, int* rows, unsigned* blocks_done, fsh_u64* counter,
                                       fsh_u64 call, unsigned char* staged_rows, unsigned char* staged_meta) {
    __shared__ int base[EP_MAX_PES];
    int n = fsh_n_pes(), me = fsh_my_pe(), local = experts / n;
    for (int r = threadIdx.x; r < n; r += blockDim.x) {
        int b = 0;
        for (int s = 0; s < me; ++s) b += table[(long long)s * width + EP_ROW_HEAD + r];
        base[r] = b;
    }
    bool skip = ep_any_status(table, width);
    int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    ep_received to = {recv_x, recv_scales, recv_src, recv_topk, recv_weights};
    ep_v4* dst[EP_MAX_PES];
    int remote_pe[EP_MAX_PES];
    long long remote_at[EP_MAX_PES];
    for (long long t = (long long)blockIdx.x * warps + (threadIdx.x >> 5); !skip && t < tokens;
         t += (long long)gridDim.x * warps) {
        int m = 0, remote = 0;
        for (int r = 0; r < n; ++r) {
            int pos = send_pos[t * n + r];
            long long at = pos < 0 ? -1 : (long long)base[r] + pos;
            if (lane == 0) rows[t * n + r] = (int)at;
            if (at < 0) continue;
            ep_v4* row = (ep_v4*)fsh_ptr(recv_x + at * pieces, r);
            if (FSH_NETWORK && !row) {
                remote_pe[remote] = r;
                remote_at[remote++] = at;
                continue;
            }
            dst[m++] = row;
            ep_store_meta(to, at, r, t, topk, weights, scales, k, local, scale_count, lane);
        }
        ep_fan_out(dst, m, x + t * pieces, pieces, lane);
        if (FSH_NETWORK && remote)
            ep_send_remote(remote_pe, remote_at, remote, t, x, scales, topk, weights, pieces, scale_count, k, local,
                           to, staged_rows, staged_meta, lane);
    }
    ep_tell_all(blocks_done, counter, call);
}

// One thread: waits until every word of this PE's counter reaches call `target`.
extern "C" __global__ void ep_wait(const fsh_u64* counter, fsh_u64 target, const volatile fsh_u64* abort_word,
                                   fsh_u64* outcome) {
    if (!ep_wait_counter(counter, target, abort_word)) *outcome = EP_ABORTED;
}

// Each token of this PE (a warp a token) summed from the rows the PEs that received it give
// back (`y`, the receive region, read on each PE), in f32 in PE order, rounded to bf16.
// A row on a PE of another node is fetched first into the warp's staging slot (`fetched`:
// fetch_rows rows per warp of the grid).
extern "C" __global__ void __launch_bounds__(EP_ROW_THREADS) ep_combine(const ep_v4* y, const int* rows, int tokens, int hidden, const int* table,
                                      ep_v4* out, unsigned* blocks_done, fsh_u64* counter, fsh_u64 call,
                                      ep_v4* fetched, int fetch_rows) {
    int n = fsh_n_pes();
    bool skip = ep_any_status(table, EP_ROW_HEAD);
    int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    int pieces = hidden / 8;
    const ep_v4* from[EP_MAX_PES];
    for (long long t = (long long)blockIdx.x * warps + (threadIdx.x >> 5); !skip && t < tokens;
         t += (long long)gridDim.x * warps) {
        int m = 0, remote = 0;
        ep_v4* slot = fetched + ((long long)blockIdx.x * warps + (threadIdx.x >> 5)) * fetch_rows * pieces;
        for (int r = 0; r < n; ++r) {
            int at = rows[t * n + r];
            if (at < 0) continue;
            const ep_v4* row = (const ep_v4*)fsh_ptr(y + (long long)at * pieces, r);
            if (FSH_NETWORK && !row) {
                ep_v4* into = slot + (long long)remote++ * pieces;
                fsh_getmem_nbi_warp(into, y + (long long)at * pieces, (fsh_size_t)pieces * 16, r);
                row = into;
            }
            from[m++] = row;
        }
        if (FSH_NETWORK && remote) {
            if (lane == 0) fsh_quiet(); // the lane that posted the fetches
            __syncwarp();
        }
        // Two pieces a lane at a time, so that each lane has 2·m loads in flight.
        int i = lane;
        for (; i + 32 < pieces; i += 64) {
            float a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int j = 0; j < m; ++j) {
                ep_v4 v = from[j][i], w = from[j][i + 32];
                ep_add(a, v);
                ep_add(b, w);
            }
            out[t * pieces + i] = ep_pack4(a);
            out[t * pieces + i + 32] = ep_pack4(b);
        }
        for (; i < pieces; i += 32) {
            float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int j = 0; j < m; ++j) ep_add(a, from[j][i]);
            out[t * pieces + i] = ep_pack4(a);
        }
    }
    ep_tell_all(blocks_done, counter, call);
}

// Copies `pieces` 16-byte pieces (a combine input into the receive region), a warp a row.
extern "C" __global__ void __launch_bounds__(EP_ROW_THREADS) ep_copy(ep_v4* dst, const ep_v4* src, long long rows, int pieces) {
    int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    for (long long r = (long long)blockIdx.x * warps + (threadIdx.x >> 5); r < rows; r += (long long)gridDim.x * warps)
        ep_copy_row(dst + r * pieces, src + r * pieces, pieces, lane);
}
