// Warp and block calls of the device library in the shapes that need care, and the answers
// NVSHMEM gives at the edges.

// A block of 256 threads fills `stage` (each thread the 4 ints that another thread's 16-byte
// chunk of the copy takes, the last warp late), then puts it to `dest` on `pe`: the block
// must meet before copying.
extern "C" __global__ void block_put_after_writes(int* stage, int* dest, int pe) {
    unsigned t = threadIdx.x, n = blockDim.x;
    if (t >= n - 32) {
        long long until = clock64() + 200000;
        while (clock64() < until) {}
    }
    unsigned mirror = n - 1 - t;
    for (int k = 0; k < 4; ++k) stage[4 * mirror + k] = 5000 + 4 * mirror + k;
    fsh_put_block(dest, stage, 4 * n, pe);
    if (t == 0) fsh_quiet();
}

// A warp of 16 threads (a block smaller than a warp) puts 128 ints.
extern "C" __global__ void half_warp_put(int* dest, const int* src, int pe) {
    fsh_put_warp(dest, src, 128, pe);
    if (threadIdx.x == 0) fsh_quiet();
}

// fsh_wait_until_any over nothing answers SIZE_MAX.
extern "C" __global__ void wait_any_of_nothing(unsigned long long* out, const int* ivars) {
    *out = (unsigned long long)fsh_wait_until_any(ivars, 0, (const int*)0, FSH_CMP_EQ, 0);
}
