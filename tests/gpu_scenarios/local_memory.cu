// Kernels of the local_memory scenario (compiled with the device library prepended).

// Spins until the host sets *flag, then writes 1 to *outcome; gives up after `cycles` SM
// clock cycles and writes 2.
extern "C" __global__ void wait_for_host(const volatile unsigned long long* flag, volatile unsigned long long* outcome,
                                         long long cycles) {
    long long start = clock64();
    while (*flag == 0) {
        if (clock64() - start > cycles) {
            *outcome = 2;
            return;
        }
    }
    *outcome = 1;
}

// Uses 4 KiB of local memory per thread: above the 1 KiB a context starts with, and above
// what the other scenarios' kernels need (so that none of them has grown it first).
extern "C" __global__ void wide_locals(unsigned long long* out, int n) {
    volatile unsigned long long scratch[512];
    for (int i = 0; i < 512; ++i) scratch[i] = (unsigned long long)i * n + threadIdx.x;
    unsigned long long sum = 0;
    for (int i = 0; i < 512; ++i) sum += scratch[(i * 7) & 511];
    if (threadIdx.x == 0 && blockIdx.x == 0) *out = sum;
}
