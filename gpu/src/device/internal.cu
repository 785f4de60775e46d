// Kernels behind ferroshmem's on-stream operations (compiled with ferroshmem_device.cuh).

// Writes up to 16 bytes (lo, hi little-endian) at a peer-mapped address: p_on_stream.
extern "C" __global__ void fsh_k_p(fsh_u64 addr, fsh_u64 bytes, fsh_u64 lo, fsh_u64 hi) {
    fsh_u64 w[2] = {lo, hi};
    const unsigned char* s = (const unsigned char*)w;
    volatile unsigned char* d = (volatile unsigned char*)addr;
    for (fsh_u64 i = 0; i < bytes; ++i) d[i] = s[i];
    fsh_quiet();
}

// Adds to a peer's signal word after the stream's earlier work: put_signal_on_stream (add).
extern "C" __global__ void fsh_k_signal_add(fsh_u64 addr, fsh_u64 value) {
    fsh_quiet();
    fsh__atom_add((fsh_u64*)addr, value);
    fsh_quiet();
}

// Holds the stream until this PE's 64-bit word satisfies `cmp value`.
extern "C" __global__ void fsh_k_wait(fsh_u64 addr, int cmp, fsh_u64 value) {
    while (!fsh__cmp(fsh__ld_relaxed((const fsh_u64*)addr), cmp, value)) {}
    fsh__fence_sys();
}

// barrier_all_on_stream and sync_all_on_stream.
extern "C" __global__ void fsh_k_barrier_all() { fsh_barrier_all(); }
extern "C" __global__ void fsh_k_sync_all() { fsh_sync_all(); }


// Adds `add` to `old` field by field: a set bit of `boundary` is a field's top bit, and the
// carry out of it is dropped (mlx5's masked fetch-add).
__device__ __forceinline__ fsh_u64 fsh__field_add(fsh_u64 old, fsh_u64 add, fsh_u64 boundary) {
    fsh_u64 sum = 0, carry = 0;
    for (int bit = 0; bit < 64; ++bit) {
        fsh_u64 s = ((old >> bit) & 1) + ((add >> bit) & 1) + carry;
        sum |= (s & 1) << bit;
        carry = ((boundary >> bit) & 1) ? 0 : s >> 1;
    }
    return sum;
}

// The word's new value under atomic `kind` with operands a..d (gpu::nic::AmoOp's wire code:
// 0 fetch, 1 swap a, 2 compare a / swap b, 3 add a, 4 and a, 5 or a, 6 xor a, 7 masked CS
// compare a, compare mask b, swap c, swap mask d, 8 masked FA add a, boundary b).
__device__ __forceinline__ fsh_u64 fsh__amo_apply(int kind, fsh_u64 old, fsh_u64 a, fsh_u64 b, fsh_u64 c, fsh_u64 d, fsh_u64 mask) {
    switch (kind) {
    case 1: return a & mask;
    case 2: return old == (a & mask) ? (b & mask) : old;
    case 3: return (old + a) & mask;
    case 4: return old & a;
    case 5: return (old | a) & mask;
    case 6: return (old ^ a) & mask;
    case 7: return ((old & b) == (a & b)) ? (((old & ~d) | (c & d)) & mask) : old;
    case 8: return fsh__field_add(old, a, b) & mask;
    default: return old;
    }
}

// One atomic on this PE's heap word at `addr` (4 or 8 bytes wide) for a peer's NIC agent:
// a compare-and-swap loop, atomic with the PE's own kernels; the old value goes to `out`.
extern "C" __global__ void fsh_k_amo(fsh_u64 addr, int width, int kind, fsh_u64 a, fsh_u64 b, fsh_u64 c, fsh_u64 d, fsh_u64 out) {
    fsh_u64 old;
    if (width == 4) {
        fsh_u32* w = (fsh_u32*)addr;
        fsh_u32 seen = fsh__ld_relaxed(w), prev;
        for (;;) {
            fsh_u32 next = (fsh_u32)fsh__amo_apply(kind, seen, a, b, c, d, 0xffffffffull);
            if (next == seen) break;
            prev = fsh__atom_cas(w, seen, next);
            if (prev == seen) break;
            seen = prev;
        }
        old = seen;
    } else {
        fsh_u64* w = (fsh_u64*)addr;
        fsh_u64 seen = fsh__ld_relaxed(w), prev;
        for (;;) {
            fsh_u64 next = fsh__amo_apply(kind, seen, a, b, c, d, ~0ull);
            if (next == seen) break;
            prev = fsh__atom_cas(w, seen, next);
            if (prev == seen) break;
            seen = prev;
        }
        old = seen;
    }
    fsh__fence_sys();
    *(volatile fsh_u64*)out = old;
    fsh__fence_sys();
}
