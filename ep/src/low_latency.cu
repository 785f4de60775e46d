// ferroshmem ep: the kernels of low-latency dispatch and combine (appended to kernels.cu).
//
// Dispatch sends every (token, slot) pair straight to its expert's PE: the row lands packed
// among the expert's rows, at a place taken from the receiver's per-expert place counter (a
// remote atomic), with its source PE and (token * k + slot) beside it; the sender's grid's
// last block then tells every receiver, per expert, how many rows it sent ((call << 32) |
// count, one signal word per (local expert, source)). The receive is one block per PE that
// waits for its experts' signals and publishes the counts: a kernel of its own (the receive
// hook), or the send grid's last block once it has signalled (a dispatch without a hook).
// Combine sends each row back to its token's PE, into the place of its (token, slot); the last
// block signals every source; the source waits (one block) for every PE, then sums each
// token's rows weighted by its top-k weights.
//
// A buffer that pulls (`pull`, the host's choice) combines in place without sending anything
// to PEs of its node: each source reads its rows where they lie, at the places its dispatch
// noted (`sent_places`). Each block of its reduce then counts itself on every PE of the node
// (`reduced`). The next dispatch writes its BF16 rows into the other of two areas (the host
// alternates them), so that none lands where a reduce may still read; a captured round, whose
// replays write one area, first waits until every PE of the node has read what this PE's
// combines left (one block, ep_ll_wait_reduced).
//
// Call numbers live in device memory (`calls`: dispatches, then combines received so far),
// read by each kernel and advanced by the call's waiting kernel, so that a CUDA graph of a
// round can be replayed.
//
// Only one block of a PE ever spins: PEs sharing a GPU must not fill it with waiting blocks
// while the blocks they wait for have nowhere to run.
//
// To a PE on another node (fsh_ptr null; FSH_NETWORK) rows are staged in this PE's heap and
// put by the warp into the receiver's landing records of (expert, this source), at places this
// PE numbers itself; each block completes its transfers before it counts itself done. The
// receiver, once every signal is in, moves the landed rows in behind the rows of its own
// node's senders (ep_ll_gather). So nothing crosses nodes but writes: under the `cpu` NIC
// handler a remote atomic is a kernel on the receiver's GPU, which the receiver's waiting
// kernels could hold back for good.

// Kernel clocks (`Buffer::clock_kernels`): while `ep_clocks_on` is set, each low-latency kernel
// keeps the earliest start and the latest end of its blocks (their first threads', on the
// GPU's %globaltimer, in ns) in words 2 * slot and 2 * slot + 1 of `ep_clocks`; the host
// resets them (start all ones, end 0) between readings.
#define EP_CLOCK_WAIT_REDUCED 0
#define EP_CLOCK_SEND 1
#define EP_CLOCK_RECEIVE 2
#define EP_CLOCK_GATHER 3
#define EP_CLOCK_SEND_BACK 4
#define EP_CLOCK_REDUCE 5
#define EP_CLOCKS 6
__device__ unsigned long long ep_clocks_on;
__device__ unsigned long long ep_clocks[2 * EP_CLOCKS];

__device__ __forceinline__ unsigned long long ep_clock_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Stamps its block's start when made and its end when the kernel's scope ends (any return).
struct ep_clock {
    int slot;
    __device__ explicit ep_clock(int s) : slot(s) {
        if (ep_clocks_on && threadIdx.x == 0) atomicMin(&ep_clocks[2 * slot], ep_clock_now());
    }
    __device__ ~ep_clock() {
        if (ep_clocks_on && threadIdx.x == 0) atomicMax(&ep_clocks[2 * slot + 1], ep_clock_now());
    }
};

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

// Whether slot j of a token's row repeats an earlier slot's expert.
__device__ __forceinline__ bool ep_ll_repeats(const long long* row, int j) {
    for (int i = 0; i < j; ++i)
        if (row[i] == row[j]) return true;
    return false;
}

// e4m3 codes of two values (satfinite, to nearest even): `lo` in the low byte.
__device__ __forceinline__ unsigned ep_e4m3x2(float lo, float hi) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

// Casts piece `sub` of group `g` (16 pieces of a bf16 row, 128 elements) to e4m3, its half-warp
// sharing the group's amax (every lane of the warp must call it; lanes past `groups` only
// join the shuffle). The group's scale is amax / 448, amax at least 1e-4.
__device__ __forceinline__ void ep_cast_piece(unsigned char* dst, float* scales, ep_v4 v, int g, int groups, int sub) {
    float f[8] = {ep_lo(v.x), ep_hi(v.x), ep_lo(v.y), ep_hi(v.y), ep_lo(v.z), ep_hi(v.z), ep_lo(v.w), ep_hi(v.w)};
    float amax = 0.0f;
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
    for (int o = 8; o >= 1; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    amax = fmaxf(amax, 1e-4f);
    if (g >= groups) return;
    float inverse = 448.0f / amax;
    unsigned w0 = ep_e4m3x2(__fmul_rn(f[0], inverse), __fmul_rn(f[1], inverse));
    unsigned w1 = ep_e4m3x2(__fmul_rn(f[2], inverse), __fmul_rn(f[3], inverse));
    unsigned w2 = ep_e4m3x2(__fmul_rn(f[4], inverse), __fmul_rn(f[5], inverse));
    unsigned w3 = ep_e4m3x2(__fmul_rn(f[6], inverse), __fmul_rn(f[7], inverse));
    uint2 out;
    out.x = w0 | (w1 << 16);
    out.y = w2 | (w3 << 16);
    *(uint2*)(dst + (long long)(g * 16 + sub) * 8) = out;
    if (sub == 0) scales[g] = amax / 448.0f;
}

// Groups of a row a half-warp loads before casting any (loads in flight per lane).
#define EP_CAST_BATCH 4

// Casts a bf16 row (`pieces` 16-byte pieces, a multiple of 16) to e4m3 with one scale per
// 128 elements: each half-warp takes a group of 16 pieces, loading EP_CAST_BATCH groups
// before it casts them.
__device__ __forceinline__ void ep_cast_row(unsigned char* dst, float* scales, const ep_v4* src, int pieces, int lane) {
    int groups = pieces / 16, sub = lane & 15, half = lane >> 4;
    for (int g0 = 0; g0 < groups; g0 += 2 * EP_CAST_BATCH) {
        ep_v4 v[EP_CAST_BATCH];
#pragma unroll
        for (int b = 0; b < EP_CAST_BATCH; ++b) {
            int g = g0 + 2 * b + half;
            v[b] = g < groups ? src[g * 16 + sub] : ep_v4{0, 0, 0, 0};
        }
#pragma unroll
        for (int b = 0; b < EP_CAST_BATCH; ++b) ep_cast_piece(dst, scales, v[b], g0 + 2 * b + half, groups, sub);
    }
}

// Pair p's row into landing record `at` of PE r on another node (a BF16 row's bytes; an FP8
// row then its scales): cast (with `fp8`) or copied into the pair's staging row of this PE's
// heap, put by the warp, its slot beside it.
__device__ void ep_ll_put_landing(const ep_v4* row, int pieces, int fp8, unsigned char* stage, long long at, int r,
                                  long long p, unsigned char* landing, int* landing_slot, int lane) {
    unsigned char* record = landing + at * pieces * 16;
    if (fp8) {
        ep_cast_row(stage, (float*)(stage + (long long)pieces * 8), row, pieces, lane);
        fsh_putmem_nbi_warp(record, stage, (fsh_size_t)pieces * 8 + (fsh_size_t)(pieces / 16) * 4, r);
    } else {
        ep_copy_row((ep_v4*)stage, row, pieces, lane);
        fsh_putmem_nbi_warp(record, stage, (fsh_size_t)pieces * 16, r);
    }
    if (lane == 0) fsh_p(landing_slot + at, (int)p, r);
}

// What the blocks of one reduce add to its PE's `reduced` word on each PE of the node, in all
// (ep_ll_count_reduced): a PE's grid size need not be known to the PEs that wait for it.
#define EP_LL_REDUCED_SHARE (1ull << 20)

// Waits (one block) until every PE of this node has read the rows the combines this PE has
// done left in place (reduced[s] >= calls[1] shares: each PE's reduce counts them), then lets
// the send, launched as its programmatic dependent, start. Gives up when the host says so.
extern "C" __global__ void ep_ll_wait_reduced(const fsh_u64* reduced, const fsh_u64* calls,
                                              const volatile fsh_u64* abort_word, fsh_u64* outcome) {
    ep_clock clock(EP_CLOCK_WAIT_REDUCED);
    fsh_u64 combines = calls[1] * EP_LL_REDUCED_SHARE;
    for (int s = threadIdx.x; s < fsh_n_pes(); s += blockDim.x) {
        if (!fsh_ptr(reduced, s)) continue;
        unsigned spins = 0;
        while (fsh_signal_fetch(reduced + s) < combines) {
            if ((++spins & 255u) == 0 && *abort_word != 0) {
                *outcome = EP_ABORTED;
                break;
            }
        }
    }
    __syncthreads();
    ep_start_next_grid();
}

// Declared here for ep_ll_send's last block; defined with the receive hook below.
__device__ void ep_ll_receive_block(int local, const fsh_u64* signals, fsh_u64* calls, fsh_u64* places,
                                    int* recv_count, int* counts_out, const volatile fsh_u64* abort_word,
                                    fsh_u64* outcome, int* landed);

// Sends each (token, slot) pair to its expert (a warp a pair). places: [L] 64-bit counters on
// each receiver; packed: [L][n * T] rows with packed_pe, packed_slot beside them (with `fp8`,
// each warp casts its pair's row straight into packed_fp8, [L][n * T][hidden] bytes, with
// packed_scales: a kernel ahead to cast each token once cost more than the casts it saved);
// counts: rows sent per expert (zero between calls); bad: the first refused token (INT_MAX
// between calls); signals: [L][n] words on each receiver; landing,
// landing_slot: [L][n][T] records on each receiver for rows from other nodes (0 on one node);
// sent_places: each pair's place among its expert's rows (read by the combine's reduce).
// Where the buffer pulls it is launched as ep_ll_wait_reduced's programmatic dependent and
// first waits for that kernel.
// With `receive` (a dispatch without a hook), the last block then receives as the hook would
// (ep_ll_receive_block, with the arguments after it): one kernel boundary fewer.
extern "C" __global__ void __launch_bounds__(EP_ROW_THREADS) ep_ll_send(const ep_v4* x, const long long* topk, int tokens, int pieces, int k,
                                      int experts, int max_tokens, fsh_u64* places, ep_v4* packed, int* packed_pe,
                                      int* packed_slot, int fp8, unsigned char* packed_fp8, float* packed_scales,
                                      int* counts, int* bad, int* status_out, unsigned* blocks_done,
                                      fsh_u64* signals, int rejected, fsh_u64* calls,
                                      unsigned char* staged, unsigned char* landing, int* landing_slot,
                                      int receive, int* recv_count, int* counts_out,
                                      const volatile fsh_u64* abort_word, fsh_u64* outcome, int* landed,
                                      int* sent_places) {
    ep_clock clock(EP_CLOCK_SEND);
    // `rejected`: the host refused this PE's input (then it passes no tokens).
    ep_wait_prior_grid();
    fsh_u64 call = calls[0] + 1;
    int n = fsh_n_pes(), me = fsh_my_pe(), local = experts / n;
    int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    long long pairs = (long long)tokens * k, rows = (long long)n * max_tokens;
    for (long long p = (long long)blockIdx.x * warps + (threadIdx.x >> 5); p < pairs; p += (long long)gridDim.x * warps) {
        long long e = topk[p];
        bool refused = e < -1 || e >= experts || (e >= 0 && ep_ll_repeats(topk + (p / k) * k, (int)(p % k)));
        if (refused) {
            if (lane == 0) atomicMin(bad, (int)(p / k));
            continue;
        }
        if (e < 0) continue;
        int r = (int)(e / local), le = (int)(e % local);
        bool lands = FSH_NETWORK && !fsh_ptr(places + le, r);
        unsigned place = 0;
        if (lane == 0) {
            unsigned sent = (unsigned)atomicAdd(&counts[e], 1);
            place = lands ? sent : (unsigned)fsh_atomic_fetch_add(places + le, (fsh_u64)1, r);
        }
        place = __shfl_sync(0xffffffffu, place, 0);
        if (lane == 0) sent_places[p] = (int)place;
        if (lands) {
            long long at = ((long long)le * n + me) * max_tokens + place;
            ep_ll_put_landing(x + (p / k) * pieces, pieces, fp8, staged + p * pieces * 16, at, r, p, landing,
                              landing_slot, lane);
            continue;
        }
        long long at = (long long)le * rows + place;
        if (fp8)
            ep_cast_row((unsigned char*)fsh_ptr(packed_fp8 + at * pieces * 8, r),
                        (float*)fsh_ptr(packed_scales + at * (pieces / 16), r), x + (p / k) * pieces, pieces, lane);
        else
            ep_copy_row((ep_v4*)fsh_ptr(packed + at * pieces, r), x + (p / k) * pieces, pieces, lane);
        if (lane == 0) {
            *(int*)fsh_ptr(packed_pe + at, r) = me;
            *(int*)fsh_ptr(packed_slot + at, r) = (int)p;
        }
    }
    // The grid's last block tells every receiver of every expert (a thread an expert).
    if (!ep_last_block(blocks_done)) return;
    // A refused input (an expert out of range or named twice) is said in every signal (bit
    // 31): the receivers then take no rows at all, and the host learns the first bad token
    // from status_out.
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
        fsh_u64 count = (fsh_u64)atomicExch(&counts[e], 0);
        if (refused) count = 0x80000000ull;
        fsh_signal_op(signals + (long long)(e % local) * n + me, (call << 32) | count, FSH_SIGNAL_SET, e / local);
    }
    if (receive) ep_ll_receive_block(local, signals, calls, places, recv_count, counts_out, abort_word, outcome, landed);
}

// Where each source's landed rows for one local expert go (`landed`: place, rows per source):
// after the rows of this node's senders (which took places 0.. from the place counter), in
// source order. `counts`: the expert's rows per source.
__device__ void ep_ll_place_landed(const int* counts, int n, int refusals, const fsh_u64* signals, int* landed) {
    int at = 0;
    for (int s = 0; s < n; ++s)
        if (fsh_ptr(signals, s)) at += max(counts[s], 0);
    for (int s = 0; s < n; ++s) {
        int rows = refusals || fsh_ptr(signals, s) ? 0 : max(counts[s], 0);
        landed[2 * s] = at;
        landed[2 * s + 1] = rows;
        at += rows;
    }
}

// The receive, by one block: waits for every (local expert, source) signal of this call;
// writes the rows per local expert to `recv_count` (device) and, with the rows per (expert,
// source), to `counts_out` (pinned host memory: L words, then L × n, -1 for a refusing
// source); clears the place counters for the next call. A refusal anywhere: no rows at all.
// Where the job spans nodes, `landed` gets per (local expert, source) the place among the
// expert's rows where that source's landed rows go and how many (0 for a source on this node:
// its rows are in place already). Run by the receive hook's kernel, or by the send grid's
// last block when the dispatch has no hook.
__device__ void ep_ll_receive_block(int local, const fsh_u64* signals, fsh_u64* calls, fsh_u64* places,
                                    int* recv_count, int* counts_out, const volatile fsh_u64* abort_word,
                                    fsh_u64* outcome, int* landed) {
    __shared__ int ok, refusals;
    int n = fsh_n_pes();
    fsh_u64 call = calls[0] + 1;
    if (threadIdx.x == 0) { ok = 1; refusals = 0; }
    __syncthreads();
    if (threadIdx.x == 0) calls[0] = call; // every thread has read it
    for (int i = threadIdx.x; i < local * n; i += blockDim.x) {
        unsigned spins = 0;
        fsh_u64 v;
        while (((v = fsh_signal_fetch(signals + i)) >> 32) < call) {
            if ((++spins & 255u) == 0 && *abort_word != 0) { ok = 0; break; }
        }
        bool refused = (v & 0x80000000ull) != 0;
        counts_out[local + i] = refused ? -1 : (int)(v & 0x7fffffffu);
        if (refused) atomicAdd(&refusals, 1);
    }
    __syncthreads();
    if (!ok) {
        if (threadIdx.x == 0) *outcome = EP_ABORTED;
        for (int i = threadIdx.x; FSH_NETWORK && landed && i < local * n; i += blockDim.x) landed[2 * i + 1] = 0;
        return;
    }
    for (int le = threadIdx.x; le < local; le += blockDim.x) {
        int total = 0;
        for (int s = 0; s < n; ++s) total += max(counts_out[local + le * n + s], 0);
        if (refusals) total = 0;
        recv_count[le] = total;
        counts_out[le] = total;
        places[le] = 0;
        if (FSH_NETWORK && landed) ep_ll_place_landed(counts_out + local + le * n, n, refusals, signals, landed + 2 * le * n);
    }
}

// The receive hook (a dispatch's later half): one block, as ep_ll_receive_block.
extern "C" __global__ void ep_ll_receive(int local, const fsh_u64* signals, fsh_u64* calls, fsh_u64* places,
                                         int* recv_count, int* counts_out, const volatile fsh_u64* abort_word,
                                         fsh_u64* outcome, int* landed) {
    ep_clock clock(EP_CLOCK_RECEIVE);
    ep_ll_receive_block(local, signals, calls, places, recv_count, counts_out, abort_word, outcome, landed);
}

// Moves the rows that PEs on other nodes put into this PE's landing records ([L][n][T], as
// `landed` places them) among the packed rows, with their source and slot, so that they lie
// as rows from this node's senders do. A warp a record; records past a part's rows are skipped.
extern "C" __global__ void __launch_bounds__(EP_ROW_THREADS) ep_ll_gather(int local, const int* landed, const unsigned char* landing,
                                        const int* landing_slot, int pieces, int max_tokens, int fp8, ep_v4* packed,
                                        unsigned char* packed_fp8, float* packed_scales, int* packed_pe,
                                        int* packed_slot) {
    ep_clock clock(EP_CLOCK_GATHER);
    int n = fsh_n_pes(), lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    long long rows = (long long)n * max_tokens, records = (long long)local * rows;
    for (long long w = (long long)blockIdx.x * warps + (threadIdx.x >> 5); w < records; w += (long long)gridDim.x * warps) {
        long long part = w / max_tokens;
        int i = (int)(w % max_tokens);
        if (i >= landed[2 * part + 1]) continue;
        long long at = (part / n) * rows + landed[2 * part] + i;
        const unsigned char* record = landing + w * pieces * 16;
        if (fp8) {
            ep_copy_row((ep_v4*)(packed_fp8 + at * pieces * 8), (const ep_v4*)record, pieces / 2, lane);
            const float* scales = (const float*)(record + (long long)pieces * 8);
            for (int j = lane; j < pieces / 16; j += 32) packed_scales[at * (pieces / 16) + j] = scales[j];
        } else {
            ep_copy_row(packed + at * pieces, (const ep_v4*)record, pieces, lane);
        }
        if (lane == 0) {
            packed_pe[at] = (int)(part % n);
            packed_slot[at] = landing_slot[w];
        }
    }
}

// A combine signal: the call in the low 62 bits, bit 63 for a refused input, bit 62 for a
// combine in place (its rows are read where they lie by the PEs of its node).
#define EP_LL_CALL_BITS 0x3fffffffffffffffull
#define EP_LL_IN_PLACE 0x4000000000000000ull

// Waits (one block) until every PE has sent its rows back for combine `call`, then advances
// the combine's call word; `refused` (device) says whether one refused its input (then nobody
// sums; outcome 2).
__device__ void ep_ll_wait_back(const fsh_u64* signals, fsh_u64 call, fsh_u64* calls, int* refused,
                                const volatile fsh_u64* abort_word, fsh_u64* outcome) {
    __shared__ int ok, any;
    if (threadIdx.x == 0) { ok = 1; any = 0; }
    __syncthreads();
    for (int s = threadIdx.x; s < fsh_n_pes(); s += blockDim.x) {
        unsigned spins = 0;
        fsh_u64 v;
        while (((v = fsh_signal_fetch(signals + s)) & EP_LL_CALL_BITS) < call) {
            if ((++spins & 255u) == 0 && *abort_word != 0) { ok = 0; break; }
        }
        if (v >> 63) any = 1;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        calls[1] = call;
        *refused = any || !ok;
        if (!ok) *outcome = EP_ABORTED;
        else if (any) *outcome = EP_REFUSED;
    }
}

// Sends each packed row of y ([L][n * T] rows; recv_count[le] of them per expert) back to its
// source PE, into row (token * k + slot) of its `back` area (a grid of blocks × L), but for a
// source of this node when the buffer pulls and y is the packed rows (a combine in place: that
// source reads the row where it lies); then the grid's last block sets this PE's combine
// signal on every PE to `call` (bit 62 in place) and waits for every PE's (the only block that
// waits: the others have finished), then lets the reduce, launched as its programmatic
// dependent, start. A row for another node is put from its own packed row (copied there first
// when y is the caller's buffer).
extern "C" __global__ void __launch_bounds__(EP_ROW_THREADS) ep_ll_send_back(const ep_v4* y, const int* packed_pe, const int* packed_slot,
                                           const int* recv_count, int hidden, int max_tokens, ep_v4* back,
                                           unsigned* blocks_done, fsh_u64* signals, int rejected,
                                           fsh_u64* calls, ep_v4* packed, int* refused,
                                           const volatile fsh_u64* abort_word, fsh_u64* outcome, int pull) {
    ep_clock clock(EP_CLOCK_SEND_BACK);
    // `rejected`: the host refused this PE's input: nothing is sent, and the signal says so (bit 63).
    fsh_u64 call = calls[1] + 1;
    int n = fsh_n_pes();
    int le = blockIdx.y;
    int lane = threadIdx.x & 31, warps = blockDim.x >> 5, pieces = hidden / 8;
    bool in_place = pull && y == packed;
    long long base = (long long)le * n * max_tokens;
    int rows = rejected ? 0 : recv_count[le];
    for (int i = blockIdx.x * warps + (threadIdx.x >> 5); i < rows; i += gridDim.x * warps) {
        int s = packed_pe[base + i];
        long long slot = packed_slot[base + i];
        ep_v4* to = (ep_v4*)fsh_ptr(back + slot * pieces, s);
        const ep_v4* from = y + (base + i) * pieces;
        if (FSH_NETWORK && !to) {
            ep_v4* stage = packed + (base + i) * pieces;
            if (stage != from) ep_copy_row(stage, from, pieces, lane);
            fsh_putmem_nbi_warp(back + slot * pieces, stage, (fsh_size_t)pieces * 16, s);
        } else if (!in_place) {
            ep_copy_row<8>(to, from, pieces, lane);
        }
    }
    fsh_u64 signal = call | (rejected ? 0x8000000000000000ull : 0ull) | (in_place ? EP_LL_IN_PLACE : 0ull);
    if (!ep_tell_all(blocks_done, signals, signal)) return;
    ep_ll_wait_back(signals, call, calls, refused, abort_word, outcome);
    // Every other block has counted itself done and the wait is over: the reduce may start.
    ep_start_next_grid();
}

// The PEs of this node that combined in place (their combine signal's bit 62), as a set of PE
// numbers (n ≤ 64) shared by the block.
__device__ unsigned long long ep_ll_in_place_pes(const fsh_u64* signals) {
    __shared__ unsigned long long pes;
    if (threadIdx.x == 0) pes = 0;
    __syncthreads();
    for (int s = threadIdx.x; s < fsh_n_pes(); s += blockDim.x)
        if (fsh_ptr(signals, s) && (((const volatile fsh_u64*)signals)[s] & EP_LL_IN_PLACE)) atomicOr(&pes, 1ull << s);
    __syncthreads();
    return pes;
}

// Slot `pair` (token * k + slot, expert e) of a token's row: where it lies on the expert's PE
// if that PE combined in place (`in_place`), at the place the dispatch noted (`place`, held
// among the expert's rows even where the caller's top-k is not the dispatch's), else this PE's
// `back` row.
__device__ __forceinline__ const ep_v4* ep_ll_slot_row(const ep_v4* back, const ep_v4* packed, int place, long long e,
                                                      long long pair, int local, long long rows, int pieces,
                                                      unsigned long long in_place) {
    int r = (int)(e / local);
    if (!((in_place >> r) & 1)) return back + pair * pieces;
    long long at = min(max((long long)place, 0ll), rows - 1);
    return (const ep_v4*)fsh_ptr(packed + ((e % local) * rows + at) * pieces, r);
}

// Counts this block on every PE of this node (its share of EP_LL_REDUCED_SHARE in this PE's
// `reduced` word) once it has read all it reads: every load has returned (its sum is stored)
// before the barrier, so a relaxed add may follow.
__device__ __forceinline__ void ep_ll_count_reduced(fsh_u64* reduced) {
    __syncthreads();
    fsh_u64 b = blockIdx.x, blocks = gridDim.x;
    fsh_u64 share = (b + 1) * EP_LL_REDUCED_SHARE / blocks - b * EP_LL_REDUCED_SHARE / blocks;
    for (int s = threadIdx.x; s < fsh_n_pes(); s += blockDim.x) {
        fsh_u64* word = (fsh_u64*)fsh_ptr(reduced + fsh_my_pe(), s);
        if (word) asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(word), "l"(share) : "memory");
    }
}

// Where a reduce finds its rows: this PE's `back` rows, and, where the buffer pulls, the
// packed rows of the PEs of this node that combined in place (`in_place`), at the places the
// dispatch noted (`sent_places`; `local` experts a PE, `max_tokens`).
struct ep_ll_rows {
    const ep_v4* back;
    const ep_v4* packed;
    const int* sent_places;
    unsigned long long in_place;
    int local;
    int max_tokens;
};

// Slot `lane` of token t (lanes below k; k <= 32) of a pulling reduce: its row's address
// and weight, 0 for an empty slot. The lanes load their slots' words together (the place
// too, whether or not the slot's PE combined in place), so that a token's rows are found in
// one round of loads rather than one a batch of slots.
__device__ __forceinline__ unsigned long long ep_ll_lane_slot(const ep_ll_rows& rows, const long long* topk,
                                                              const float* weights, long long t, int k, int pieces,
                                                              long long expert_rows, int lane, float* weight) {
    *weight = 0.0f;
    if (lane >= k) return 0;
    long long pair = t * k + lane;
    long long e = topk[pair];
    float w = weights[pair];
    int place = rows.sent_places[pair];
    if (e < 0) return 0;
    *weight = w;
    return (unsigned long long)ep_ll_slot_row(rows.back, rows.packed, place, e, pair, rows.local, expert_rows, pieces,
                                              rows.in_place);
}

// Sums each token's rows weighted by its top-k weights, in f32 in slot order, rounded to
// bf16, unless `refused`. A warp takes 32 pieces of one token at a time, so that the few
// tokens of a low-latency call still spread over every warp of the grid; each lane loads a
// batch of BATCH slots' pieces before adding any, so that its loads overlap. PULL: rows of
// PEs in `rows.in_place` are read where they lie, found first by the warp's lanes
// (ep_ll_lane_slot) and shared by shuffles; else all are `back` rows, found a batch at a time
// (the addresses need no place: one round of loads fewer than finding them first).
template <int BATCH, bool PULL>
__device__ __forceinline__ void ep_ll_sum_rows(const ep_ll_rows& rows, const long long* topk, const float* weights,
                                               int tokens, int hidden, int k, const int* refused, ep_v4* out) {
    int lane = threadIdx.x & 31, warps = blockDim.x >> 5, pieces = hidden / 8;
    long long expert_rows = (long long)fsh_n_pes() * rows.max_tokens;
    long long chunks = (pieces + 31) / 32, work = *refused ? 0 : (long long)tokens * chunks;
    for (long long w = (long long)blockIdx.x * warps + (threadIdx.x >> 5); w < work; w += (long long)gridDim.x * warps) {
        long long t = w / chunks;
        int i = (int)(w % chunks) * 32 + lane;
        // A lane past the row's end still shares its slot where the warp shuffles.
        if (!PULL && i >= pieces) continue;
        float slot_weight = 0.0f;
        unsigned long long slot_row =
            PULL ? ep_ll_lane_slot(rows, topk, weights, t, k, pieces, expert_rows, lane, &slot_weight) : 0;
        float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int j0 = 0; j0 < k; j0 += BATCH) {
            ep_v4 v[BATCH];
            float weight[BATCH];
            bool taken[BATCH];
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                int j = j0 + u;
                const ep_v4* row;
                if (PULL) {
                    row = (const ep_v4*)__shfl_sync(0xffffffffu, slot_row, j & 31);
                    weight[u] = __shfl_sync(0xffffffffu, slot_weight, j & 31);
                    taken[u] = j < k && row != nullptr;
                } else {
                    long long e = j < k ? topk[t * k + j] : -1;
                    taken[u] = e >= 0;
                    weight[u] = taken[u] ? weights[t * k + j] : 0.0f;
                    row = !taken[u] ? nullptr : rows.back + (t * k + j) * pieces;
                }
                v[u] = taken[u] && (!PULL || i < pieces) ? row[i] : ep_v4{0, 0, 0, 0};
            }
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                if (!taken[u]) continue;
                a[0] = __fadd_rn(a[0], __fmul_rn(weight[u], ep_lo(v[u].x))); a[1] = __fadd_rn(a[1], __fmul_rn(weight[u], ep_hi(v[u].x)));
                a[2] = __fadd_rn(a[2], __fmul_rn(weight[u], ep_lo(v[u].y))); a[3] = __fadd_rn(a[3], __fmul_rn(weight[u], ep_hi(v[u].y)));
                a[4] = __fadd_rn(a[4], __fmul_rn(weight[u], ep_lo(v[u].z))); a[5] = __fadd_rn(a[5], __fmul_rn(weight[u], ep_hi(v[u].z)));
                a[6] = __fadd_rn(a[6], __fmul_rn(weight[u], ep_lo(v[u].w))); a[7] = __fadd_rn(a[7], __fmul_rn(weight[u], ep_hi(v[u].w)));
            }
        }
        if (i < pieces) out[t * pieces + i] = ep_pack4(a);
    }
}

// The reduce of a buffer that pushes: every row is one of this PE's `back` rows (ep_ll_sum_rows,
// eight slots' loads in flight). Launched as the send-back's programmatic dependent, it first
// waits for the send-back to finish.
extern "C" __global__ void __launch_bounds__(EP_ROW_THREADS) ep_ll_reduce(const ep_v4* back, const long long* topk, const float* weights, int tokens,
                                        int hidden, int k, const int* refused, ep_v4* out) {
    ep_clock clock(EP_CLOCK_REDUCE);
    ep_wait_prior_grid();
    ep_ll_rows rows = {back, nullptr, nullptr, 0ull, 1, 0};
    ep_ll_sum_rows<8, false>(rows, topk, weights, tokens, hidden, k, refused, out);
}

// The reduce of a buffer that pulls: rows of PEs of this node that combined in place are read
// where they lie (ep_ll_sum_rows, four slots' loads in flight: two blocks a multiprocessor
// within 64 registers), then the block counts itself read on every PE of the node
// (ep_ll_count_reduced). Launched as the send-back's programmatic dependent, it first waits
// for the send-back to finish.
extern "C" __global__ void __launch_bounds__(EP_ROW_THREADS, 2) ep_ll_reduce_pull(const ep_v4* back, const long long* topk, const float* weights, int tokens,
                                        int hidden, int k, const int* refused, ep_v4* out, const ep_v4* packed,
                                        const int* sent_places, const fsh_u64* signals, int local, int max_tokens,
                                        fsh_u64* reduced) {
    ep_clock clock(EP_CLOCK_REDUCE);
    ep_wait_prior_grid();
    ep_ll_rows rows = {back, packed, sent_places, ep_ll_in_place_pes(signals), local, max_tokens};
    ep_ll_sum_rows<4, true>(rows, topk, weights, tokens, hidden, k, refused, out);
    ep_ll_count_reduced(reduced);
}
