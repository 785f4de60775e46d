/* What network.cuh takes from ferroshmem_device.cuh, for a host build: plain C++ threads
 * stand in for GPU threads, GCC atomics for the PTX ones, sequentially consistent fences
 * for the GPU's. Used by tests/network/posting.cpp. */
#ifndef FSH_HOST_SHIM_H
#define FSH_HOST_SHIM_H

#define __device__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define FSH_IBGDA_FN static inline
#define FSH_IBGDA_ACQUIRE() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#define FSH_NETWORK 1

#include <sched.h>

#include "../../src/device/ibgda.cuh"

typedef unsigned long long fsh_u64;
typedef unsigned int fsh_u32;
typedef unsigned long long fsh_size_t;

enum { FSH_OP_NETWORK = 99 };

struct fsh_host_state_t {
    fsh_u64 net;
    int n_pes;
};
extern fsh_host_state_t fsh_state;

/* The debug report: what the harness's check reads. */
void fsh__report(int op, int pe, const void *addr, fsh_size_t bytes);

static inline fsh_u64 fsh__local_base() { return 0; }

static inline fsh_u32 fsh__atom_cas(fsh_u32 *a, fsh_u32 cmp, fsh_u32 v) {
    __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
static inline fsh_u64 fsh__atom_cas(fsh_u64 *a, fsh_u64 cmp, fsh_u64 v) {
    __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
static inline fsh_u64 fsh__atom_add(fsh_u64 *a, fsh_u64 v) {
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
static inline fsh_u32 fsh__atom_exch(fsh_u32 *a, fsh_u32 v) {
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);
}
static inline void fsh__fence_sys() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void fsh__fence_gpu() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
/* Threads outnumber CPUs here: a spinning one gives its CPU away. */
static inline void fsh__spin() { sched_yield(); }

template <typename T> struct fsh__bits_of { typedef fsh_u64 U; };
template <typename U, typename T> inline U fsh__bitcast(T v) { return (U)v; }

#endif
