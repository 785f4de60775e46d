// ferroshmem ep: the kernels of low-latency dispatch and combine (appended to kernels.cu).
//
// Dispatch sends every (token, slot) pair to its expert's PE directly: a row into the
// receiver's staging area of (local expert, source PE), at a place the sender takes from its
// own per-expert counter; the grid's last block then tells every receiver, per expert, how
// many rows it sent ((call << 32) | count, one signal word per (local expert, source)). The
// receive kernel (the hook) waits for its experts' signals and packs each expert's rows in
// source order. Combine sends each packed row back to its token's PE, into the place of its
// (token, slot); the last block signals every source; the source waits for every PE and sums
// each token's rows weighted by its top-k weights.

// The first index of a refused token's row that is out of range or repeats an earlier one.
__device__ __forceinline__ int ep_ll_first_bad(const long long* row, int k, int experts) {
    for (int j = 0; j < k; ++j) {
        bool repeated = false;
        for (int i = 0; i < j; ++i) repeated |= row[i] == row[j] && row[j] >= 0;
        if (row[j] < -1 || row[j] >= experts || repeated) {
            long long e = row[j];
            return (int)(e < -2147483647ll ? -2147483647ll : (e > 2147483647ll ? 2147483647ll : e));
        }
    }
    return 0;
}

// Sends each (token, slot) pair to its expert (a warp a pair). staging: [L][n][T] rows,
// staging_src: [L][n][T] (token * k + slot), counts: per expert (zero between calls), signals:
// [L][n] words on each receiver.
extern "C" __global__ void ep_ll_send(const ep_v4* x, const long long* topk, int tokens, int hidden, int k,
                                      int experts, int max_tokens, ep_v4* staging, int* staging_src, int* counts,
                                      int* bad, int* status_out, unsigned* blocks_done, fsh_u64* signals,
                                      fsh_u64 call_and_rejected) {
    // The host refused this PE's input (then it passes no tokens): bit 0.
    fsh_u64 call = call_and_rejected >> 1;
    bool rejected = call_and_rejected & 1;
    int n = fsh_n_pes(), me = fsh_my_pe(), local = experts / n;
    int lane = threadIdx.x & 31, warps = blockDim.x >> 5, pieces = hidden / 8;
    long long pairs = (long long)tokens * k;
    for (long long p = (long long)blockIdx.x * warps + (threadIdx.x >> 5); p < pairs; p += (long long)gridDim.x * warps) {
        long long e = topk[p];
        if (e < -1 || e >= experts) {
            if (lane == 0) atomicMin(bad, (int)(p / k));
            continue;
        }
        if (e < 0) continue;
        int r = (int)(e / local), le = (int)(e % local);
        int slot = 0;
        if (lane == 0) slot = atomicAdd(&counts[e], 1);
        slot = __shfl_sync(0xffffffffu, slot, 0);
        // A token naming an expert twice would overflow its staging rows.
        if (slot >= max_tokens) {
            if (lane == 0) atomicMin(bad, (int)(p / k));
            continue;
        }
        long long at = ((long long)le * n + me) * max_tokens + slot;
        ep_copy_row((ep_v4*)fsh_ptr(staging + at * pieces, r), x + (p / k) * pieces, pieces, lane);
        if (lane == 0) *(int*)fsh_ptr(staging_src + at, r) = (int)p;
    }
    // The grid's last block tells every receiver of every expert (a thread an expert).
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system();
        last = atomicAdd(blocks_done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence_system();
    // A refused input (an expert out of range or named twice) moves nothing anywhere: every
    // signal says so (bit 31), and the host learns the first bad token from status_out.
    __shared__ int refused;
    if (threadIdx.x == 0) {
        int t = atomicExch(bad, 0x7fffffff);
        refused = rejected || t != 0x7fffffff;
        int value = refused && !rejected ? ep_ll_first_bad(topk + (long long)t * k, k, experts) : 0;
        bool in_range = value >= -1 && value < experts;
        status_out[0] = rejected ? EP_REJECTED : (!refused ? EP_OK : (in_range ? EP_DUPLICATE : EP_BAD_EXPERT));
        status_out[1] = refused && !rejected ? t : 0;
        status_out[2] = value;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
        fsh_u64 count = refused ? 0x80000000ull : (fsh_u64)min(atomicAdd(&counts[e], 0), max_tokens);
        atomicExch(&counts[e], 0);
        fsh_signal_op(signals + (long long)(e % local) * n + me, (call << 32) | count, FSH_SIGNAL_SET, e / local);
    }
    if (threadIdx.x == 0) *blocks_done = 0;
}

// The receive hook: one block per local expert. Waits for every source's signal of this call,
// packs the expert's rows in source order into packed ([L][n * T] rows), with each row's
// source PE and (token * k + slot); recv_count[le] goes to `recv_count` (device) and, with
// layout[le][s] = (offset, count), to `counts_out` (pinned host memory: L words, then
// L × n × 2).
extern "C" __global__ void ep_ll_receive(const ep_v4* staging, const int* staging_src, int hidden, int max_tokens,
                                         const fsh_u64* signals, fsh_u64 call, ep_v4* packed, int* packed_pe,
                                         int* packed_slot, int* recv_count, int* counts_out,
                                         const volatile fsh_u64* abort_word,
                                         fsh_u64* outcome) {
    __shared__ int count[EP_MAX_PES];
    __shared__ int offset[EP_MAX_PES + 1];
    __shared__ int ok;
    int n = fsh_n_pes(), le = blockIdx.x, local = gridDim.x;
    int lane = threadIdx.x & 31, warps = blockDim.x >> 5, pieces = hidden / 8;
    if (threadIdx.x == 0) ok = 1;
    __syncthreads();
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        const fsh_u64* sig = signals + (long long)le * n + s;
        unsigned spins = 0;
        fsh_u64 v;
        while (((v = fsh_signal_fetch(sig)) >> 32) < call) {
            if ((++spins & 255u) == 0 && *abort_word != 0) { ok = 0; break; }
        }
        count[s] = (v & 0x80000000ull) ? -1 : (int)(v & 0x7fffffffu);
    }
    __syncthreads();
    if (!ok) {
        if (threadIdx.x == 0) *outcome = EP_ABORTED;
        return;
    }
    // A refusing source: its count is -1 in the layout, and nothing is packed.
    if (threadIdx.x == 0) {
        offset[0] = 0;
        int refusals = 0;
        for (int s = 0; s < n; ++s) refusals += count[s] < 0;
        for (int s = 0; s < n; ++s) {
            if (refusals) count[s] = count[s] < 0 ? -1 : 0;
            offset[s + 1] = offset[s] + max(count[s], 0);
        }
        recv_count[le] = offset[n];
        counts_out[le] = offset[n];
        for (int s = 0; s < n; ++s) {
            counts_out[local + (le * n + s) * 2] = offset[s];
            counts_out[local + (le * n + s) * 2 + 1] = count[s];
        }
    }
    __syncthreads();
    long long base = (long long)le * n * max_tokens;
    for (int s = 0; s < n; ++s) {
        long long from = base + (long long)s * max_tokens, to = base + offset[s];
        for (int i = threadIdx.x >> 5; i < max(count[s], 0); i += warps) {
            ep_copy_row(packed + (to + i) * pieces, staging + (from + i) * pieces, pieces, lane);
            if (lane == 0) {
                packed_pe[to + i] = s;
                packed_slot[to + i] = staging_src[from + i];
            }
        }
    }
}

// Sends each packed row of y ([L][n * T] rows; recv_count[le] of them per expert) back to its
// source PE, into row (token * k + slot) of its `back` area (a grid of blocks × L); then the
// grid's last block sets this PE's combine signal on every PE to `call`.
extern "C" __global__ void ep_ll_send_back(const ep_v4* y, const int* packed_pe, const int* packed_slot,
                                           const int* recv_count, int hidden, int max_tokens, ep_v4* back,
                                           unsigned* blocks_done, fsh_u64* signals, fsh_u64 call_and_rejected) {
    // The host refused this PE's input (bit 0): nothing is sent, and the signal says so (bit 63).
    fsh_u64 call = call_and_rejected >> 1;
    bool rejected = call_and_rejected & 1;
    int n = fsh_n_pes(), me = fsh_my_pe();
    int le = blockIdx.y;
    int lane = threadIdx.x & 31, warps = blockDim.x >> 5, pieces = hidden / 8;
    long long base = (long long)le * n * max_tokens;
    int rows = rejected ? 0 : recv_count[le];
    for (int i = blockIdx.x * warps + (threadIdx.x >> 5); i < rows; i += gridDim.x * warps) {
        int s = packed_pe[base + i];
        long long slot = packed_slot[base + i];
        ep_copy_row((ep_v4*)fsh_ptr(back + slot * pieces, s), y + (base + i) * pieces, pieces, lane);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system();
        unsigned before = atomicAdd(blocks_done, 1u);
        if (before == gridDim.x * gridDim.y - 1) {
            *blocks_done = 0;
            __threadfence_system();
            fsh_u64 signal = call | (rejected ? 0x8000000000000000ull : 0ull);
            for (int pe = 0; pe < n; ++pe) fsh_signal_op(signals + me, signal, FSH_SIGNAL_SET, pe);
        }
    }
}

// Waits until every PE has sent its rows back, then sums each token's rows weighted by its
// top-k weights, in f32 in slot order, rounded to bf16 (a warp a token). Every block waits.
extern "C" __global__ void ep_ll_reduce(const ep_v4* back, const long long* topk, const float* weights, int tokens,
                                        int hidden, int k, const fsh_u64* signals, fsh_u64 call, ep_v4* out,
                                        const volatile fsh_u64* abort_word, fsh_u64* outcome) {
    __shared__ int ok;
    int n = fsh_n_pes();
    // A PE whose input was refused says so in its signal (bit 63): nobody sums (outcome 2).
    if (threadIdx.x == 0) {
        ok = 1;
        for (int s = 0; s < n && ok; ++s) {
            unsigned spins = 0;
            fsh_u64 v;
            while (((v = fsh_signal_fetch(signals + s)) & 0x7fffffffffffffffull) < call) {
                if ((++spins & 255u) == 0 && *abort_word != 0) { ok = 0; *outcome = EP_ABORTED; break; }
            }
            if (ok && (v >> 63)) { ok = 0; *outcome = EP_REFUSED; }
        }
    }
    __syncthreads();
    if (!ok) return;
    int lane = threadIdx.x & 31, warps = blockDim.x >> 5, pieces = hidden / 8;
    for (long long t = (long long)blockIdx.x * warps + (threadIdx.x >> 5); t < tokens; t += (long long)gridDim.x * warps) {
        for (int i = lane; i < pieces; i += 32) {
            float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int j = 0; j < k; ++j) {
                if (topk[t * k + j] < 0) continue;
                float w = weights[t * k + j];
                ep_v4 v = back[(t * k + j) * pieces + i];
                a[0] = __fadd_rn(a[0], __fmul_rn(w, ep_lo(v.x))); a[1] = __fadd_rn(a[1], __fmul_rn(w, ep_hi(v.x)));
                a[2] = __fadd_rn(a[2], __fmul_rn(w, ep_lo(v.y))); a[3] = __fadd_rn(a[3], __fmul_rn(w, ep_hi(v.y)));
                a[4] = __fadd_rn(a[4], __fmul_rn(w, ep_lo(v.z))); a[5] = __fadd_rn(a[5], __fmul_rn(w, ep_hi(v.z)));
                a[6] = __fadd_rn(a[6], __fmul_rn(w, ep_lo(v.w))); a[7] = __fadd_rn(a[7], __fmul_rn(w, ep_hi(v.w)));
            }
            ep_v4 o;
            o.x = ep_pack(a[0], a[1]); o.y = ep_pack(a[2], a[3]); o.z = ep_pack(a[4], a[5]); o.w = ep_pack(a[6], a[7]);
            out[t * pieces + i] = o;
        }
    }
}
