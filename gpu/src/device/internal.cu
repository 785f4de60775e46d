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

