// Kernels of the dependent_launch scenario (compiled with the device library prepended).

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Lets the kernel behind it start at once, then spins `cycles` SM clock cycles, notes the
// time in times[0] and writes `value` to *word.
extern "C" __global__ void slow_writer(unsigned long long* word, unsigned long long value, long long cycles,
                                       unsigned long long* times) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
    times[0] = now_ns();
    *(volatile unsigned long long*)word = value;
}

// Notes when it started in times[1] (the word after times[0]), waits for the kernel ahead of it (griddepcontrol.wait),
// then copies *word into *seen.
extern "C" __global__ void waiting_reader(const unsigned long long* word, unsigned long long* seen,
                                          unsigned long long* times) {
    times[1] = now_ns();
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    *seen = *(const volatile unsigned long long*)word;
}
