/*
 * oshmem_compat.h: stand-ins for OpenSHMEM 1.5 routines that Open MPI's OSHMEM 4.1 (an
 * OpenSHMEM 1.4 library) lacks, so that the tests in tests/c/ can be checked against OSHMEM.
 * Included by check.h only when FSH_TEST_OSHMEM is defined; never used with ferroshmem.
 *
 * They are built from 1.4 routines and are correct but slow: put-with-signal is a put, a fence
 * and an atomic set or add; the nonblocking fetching AMOs are blocking ones; the multi-variable
 * waits and tests poll shmem_TYPENAME_test; the team collectives and reductions work on
 * SHMEM_TEAM_WORLD only (the only team there is here), with barriers and gets. A test passing
 * through them shows that the test's expectations are right, not that OSHMEM is.
 *
 * It also replaces two OSHMEM 4.1 routines that are wrong: shmem_calloc (no barrier after
 * zeroing) and the fetching bitwise AMOs (wrong value stored).
 */
#ifndef FSH_TEST_OSHMEM_COMPAT_H
#define FSH_TEST_OSHMEM_COMPAT_H

#include <complex.h>
#include <shmem.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SHMEM_SIGNAL_SET 0
#define SHMEM_SIGNAL_ADD 1
#define SHMEM_MALLOC_ATOMICS_REMOTE 1L
#define SHMEM_MALLOC_SIGNAL_REMOTE 2L
#ifndef SHMEM_CTX_INVALID
#define SHMEM_CTX_INVALID ((shmem_ctx_t)0) /* 1.5; OSHMEM 4.1 has no name for it */
#endif

static inline void fsh_shim_die(const char *what)
{
    fprintf(stderr, "oshmem_compat.h: %s\n", what);
    shmem_global_exit(2);
}

/* OSHMEM 4.1's shmem_calloc zeroes the block after its barrier, so a put from another PE right
 * after the call can be wiped out; OpenSHMEM says the barrier comes on exit. Add it. */
static inline void *fsh_oshmem_calloc(size_t count, size_t size)
{
    void *p = shmem_calloc(count, size);
    if (count && size)
        shmem_barrier_all();
    return p;
}
#define shmem_calloc fsh_oshmem_calloc

static inline void *shmem_malloc_with_hints(size_t size, long hints)
{
    (void)hints;
    return size ? shmem_malloc(size) : NULL; /* 1.5: a zero size gives NULL */
}

static inline void shmem_pcontrol(const int level, ...) { (void)level; }

/* ---- signals ---------------------------------------------------------------------------- */

static inline void shmem_ctx_putmem_signal(shmem_ctx_t ctx, void *dest, const void *source,
                                           size_t nelems, uint64_t *sig_addr, uint64_t signal,
                                           int sig_op, int pe)
{
    shmem_ctx_putmem(ctx, dest, source, nelems, pe);
    shmem_ctx_fence(ctx);
    if (sig_op == SHMEM_SIGNAL_SET)
        shmem_ctx_ulong_atomic_set(ctx, (unsigned long *)sig_addr, signal, pe);
    else if (sig_op == SHMEM_SIGNAL_ADD)
        shmem_ctx_ulong_atomic_add(ctx, (unsigned long *)sig_addr, signal, pe);
    else
        fsh_shim_die("bad sig_op");
}

#define FSH_SHIM_SIGNAL(NAME, BYTES, TP)                                                       \
    static inline void shmem_ctx_##NAME##_signal(shmem_ctx_t ctx, TP *dest, const TP *source,  \
                                                 size_t nelems, uint64_t *sig_addr,            \
                                                 uint64_t signal, int sig_op, int pe)          \
    {                                                                                          \
        shmem_ctx_putmem_signal(ctx, dest, source, nelems * (BYTES), sig_addr, signal, sig_op, \
                                pe);                                                           \
    }                                                                                          \
    static inline void shmem_ctx_##NAME##_signal_nbi(shmem_ctx_t ctx, TP *dest,                \
                                                     const TP *source, size_t nelems,          \
                                                     uint64_t *sig_addr, uint64_t signal,      \
                                                     int sig_op, int pe)                       \
    {                                                                                          \
        shmem_ctx_putmem_signal(ctx, dest, source, nelems * (BYTES), sig_addr, signal, sig_op, \
                                pe);                                                           \
    }                                                                                          \
    static inline void shmem_##NAME##_signal(TP *dest, const TP *source, size_t nelems,        \
                                             uint64_t *sig_addr, uint64_t signal, int sig_op,  \
                                             int pe)                                           \
    {                                                                                          \
        shmem_ctx_putmem_signal(SHMEM_CTX_DEFAULT, dest, source, nelems * (BYTES), sig_addr,   \
                                signal, sig_op, pe);                                           \
    }                                                                                          \
    static inline void shmem_##NAME##_signal_nbi(TP *dest, const TP *source, size_t nelems,    \
                                                 uint64_t *sig_addr, uint64_t signal,          \
                                                 int sig_op, int pe)                           \
    {                                                                                          \
        shmem_ctx_putmem_signal(SHMEM_CTX_DEFAULT, dest, source, nelems * (BYTES), sig_addr,   \
                                signal, sig_op, pe);                                           \
    }
#define FSH_SHIM_SIGNAL_TYPED(T, N) FSH_SHIM_SIGNAL(N##_put, sizeof(T), T)
RMA_TYPES(FSH_SHIM_SIGNAL_TYPED)
FSH_SHIM_SIGNAL(put8, 1, void)
FSH_SHIM_SIGNAL(put16, 2, void)
FSH_SHIM_SIGNAL(put32, 4, void)
FSH_SHIM_SIGNAL(put64, 8, void)
FSH_SHIM_SIGNAL(put128, 16, void)

static inline void shmem_putmem_signal(void *dest, const void *source, size_t nelems,
                                       uint64_t *sig_addr, uint64_t signal, int sig_op, int pe)
{
    shmem_ctx_putmem_signal(SHMEM_CTX_DEFAULT, dest, source, nelems, sig_addr, signal, sig_op, pe);
}
static inline void shmem_putmem_signal_nbi(void *dest, const void *source, size_t nelems,
                                           uint64_t *sig_addr, uint64_t signal, int sig_op,
                                           int pe)
{
    shmem_ctx_putmem_signal(SHMEM_CTX_DEFAULT, dest, source, nelems, sig_addr, signal, sig_op, pe);
}
static inline void shmem_ctx_putmem_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source,
                                               size_t nelems, uint64_t *sig_addr,
                                               uint64_t signal, int sig_op, int pe)
{
    shmem_ctx_putmem_signal(ctx, dest, source, nelems, sig_addr, signal, sig_op, pe);
}

static inline uint64_t shmem_signal_fetch(const uint64_t *sig_addr)
{
    return shmem_ulong_atomic_fetch((const unsigned long *)sig_addr, shmem_my_pe());
}

static inline uint64_t shmem_signal_wait_until(uint64_t *sig_addr, int cmp, uint64_t cmp_value)
{
    shmem_uint64_wait_until(sig_addr, cmp, cmp_value);
    return shmem_signal_fetch(sig_addr);
}

/* ---- multi-variable waits and tests ----------------------------------------------------- */

/* Satisfying, not excluded entries of ivars (values[i] when vec, else values[0]); their
 * indices go to idx when it is not NULL. *live says whether any entry is not excluded. */
#define FSH_SHIM_P2P(T, N)                                                                     \
    static inline size_t fsh_##N##_scan(T *ivars, size_t n, const int *status, int cmp,               \
                                 const T *values, int vec, size_t *idx, int *live)             \
    {                                                                                          \
        size_t k = 0;                                                                          \
        *live = 0;                                                                             \
        for (size_t i = 0; i < n; i++) {                                                       \
            if (status && status[i])                                                           \
                continue;                                                                      \
            *live = 1;                                                                         \
            if (shmem_##N##_test(&ivars[i], cmp, values[vec ? i : 0])) {                       \
                if (idx)                                                                       \
                    idx[k] = i;                                                                \
                k++;                                                                           \
            }                                                                                  \
        }                                                                                      \
        return k;                                                                              \
    }                                                                                          \
    static inline size_t fsh_##N##_live(size_t n, const int *status)                                  \
    {                                                                                          \
        size_t k = 0;                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            k += !(status && status[i]);                                                       \
        return k;                                                                              \
    }                                                                                          \
    static inline int fsh_##N##_test_all_(T *v, size_t n, const int *s, int c, const T *x, int vec)   \
    {                                                                                          \
        int live;                                                                              \
        return fsh_##N##_scan(v, n, s, c, x, vec, NULL, &live) == fsh_##N##_live(n, s);        \
    }                                                                                          \
    static inline size_t fsh_##N##_test_any_(T *v, size_t n, const int *s, int c, const T *x,        \
                                      int vec)                                                 \
    {                                                                                          \
        size_t idx[64];                                                                        \
        int live;                                                                              \
        if (n > 64)                                                                            \
            fsh_shim_die("nelems > 64");                                                       \
        return fsh_##N##_scan(v, n, s, c, x, vec, idx, &live) ? idx[0] : SIZE_MAX;             \
    }                                                                                          \
    static inline int shmem_##N##_test_all(T *v, size_t n, const int *s, int c, T x)           \
    { return fsh_##N##_test_all_(v, n, s, c, &x, 0); }                                         \
    static inline int shmem_##N##_test_all_vector(T *v, size_t n, const int *s, int c, T *x)   \
    { return fsh_##N##_test_all_(v, n, s, c, x, 1); }                                          \
    static inline size_t shmem_##N##_test_any(T *v, size_t n, const int *s, int c, T x)        \
    { return fsh_##N##_test_any_(v, n, s, c, &x, 0); }                                         \
    static inline size_t shmem_##N##_test_any_vector(T *v, size_t n, const int *s, int c,      \
                                                     T *x)                                     \
    { return fsh_##N##_test_any_(v, n, s, c, x, 1); }                                          \
    static inline size_t shmem_##N##_test_some(T *v, size_t n, size_t *idx, const int *s,      \
                                               int c, T x)                                     \
    { int live; return fsh_##N##_scan(v, n, s, c, &x, 0, idx, &live); }                       \
    static inline size_t shmem_##N##_test_some_vector(T *v, size_t n, size_t *idx,            \
                                                      const int *s, int c, T *x)               \
    { int live; return fsh_##N##_scan(v, n, s, c, x, 1, idx, &live); }                         \
    static inline void shmem_##N##_wait_until_all(T *v, size_t n, const int *s, int c, T x)    \
    { while (!fsh_##N##_test_all_(v, n, s, c, &x, 0)) ; }                                      \
    static inline void shmem_##N##_wait_until_all_vector(T *v, size_t n, const int *s, int c,  \
                                                         T *x)                                 \
    { while (!fsh_##N##_test_all_(v, n, s, c, x, 1)) ; }                                       \
    static inline size_t shmem_##N##_wait_until_any(T *v, size_t n, const int *s, int c, T x)  \
    {                                                                                          \
        size_t i;                                                                              \
        if (!fsh_##N##_live(n, s))                                                             \
            return SIZE_MAX;                                                                   \
        while ((i = fsh_##N##_test_any_(v, n, s, c, &x, 0)) == SIZE_MAX) ;                     \
        return i;                                                                              \
    }                                                                                          \
    static inline size_t shmem_##N##_wait_until_any_vector(T *v, size_t n, const int *s,       \
                                                           int c, T *x)                        \
    {                                                                                          \
        size_t i;                                                                              \
        if (!fsh_##N##_live(n, s))                                                             \
            return SIZE_MAX;                                                                   \
        while ((i = fsh_##N##_test_any_(v, n, s, c, x, 1)) == SIZE_MAX) ;                      \
        return i;                                                                              \
    }                                                                                          \
    static inline size_t shmem_##N##_wait_until_some(T *v, size_t n, size_t *idx,             \
                                                     const int *s, int c, T x)                 \
    {                                                                                          \
        size_t k;                                                                              \
        int live;                                                                              \
        while (!(k = fsh_##N##_scan(v, n, s, c, &x, 0, idx, &live)) && live) ;                 \
        return k;                                                                              \
    }                                                                                          \
    static inline size_t shmem_##N##_wait_until_some_vector(T *v, size_t n, size_t *idx,      \
                                                            const int *s, int c, T *x)         \
    {                                                                                          \
        size_t k;                                                                              \
        int live;                                                                              \
        while (!(k = fsh_##N##_scan(v, n, s, c, x, 1, idx, &live)) && live) ;                  \
        return k;                                                                              \
    }
SYNC_TYPES(FSH_SHIM_P2P)

/* ---- fetching bitwise AMOs ------------------------------------------------------------- */

/* OSHMEM 4.1's fetching bitwise AMOs give the old value but store the wrong new one
 * (fetch_and and fetch_or leave the word as it was, fetch_xor zeroes it); the non-fetching ones
 * are right. Stand-ins: read with fetch_or(0), then the non-fetching operation. Not one atomic
 * step, but enough for the tests, where each PE changes only bits no other PE changes. */
#define FSH_FIX_FETCH_BIT_OP(T, N, OP)                                                         \
    static inline T fsh_oshmem_ctx_##N##_atomic_fetch_##OP(shmem_ctx_t c, T *d, T v, int pe)   \
    {                                                                                          \
        T old = shmem_ctx_##N##_atomic_fetch_or(c, d, (T)0, pe);                               \
        shmem_ctx_##N##_atomic_##OP(c, d, v, pe);                                              \
        return old;                                                                            \
    }                                                                                          \
    static inline T fsh_oshmem_##N##_atomic_fetch_##OP(T *d, T v, int pe)                      \
    {                                                                                          \
        return fsh_oshmem_ctx_##N##_atomic_fetch_##OP(SHMEM_CTX_DEFAULT, d, v, pe);            \
    }
#define FSH_FIX_FETCH_BIT(T, N)                                                                \
    FSH_FIX_FETCH_BIT_OP(T, N, and) FSH_FIX_FETCH_BIT_OP(T, N, or) FSH_FIX_FETCH_BIT_OP(T, N, xor)
BITAMO_TYPES(FSH_FIX_FETCH_BIT)
#define shmem_uint_atomic_fetch_and fsh_oshmem_uint_atomic_fetch_and
#define shmem_ctx_uint_atomic_fetch_and fsh_oshmem_ctx_uint_atomic_fetch_and
#define shmem_uint_atomic_fetch_or fsh_oshmem_uint_atomic_fetch_or
#define shmem_ctx_uint_atomic_fetch_or fsh_oshmem_ctx_uint_atomic_fetch_or
#define shmem_uint_atomic_fetch_xor fsh_oshmem_uint_atomic_fetch_xor
#define shmem_ctx_uint_atomic_fetch_xor fsh_oshmem_ctx_uint_atomic_fetch_xor
#define shmem_ulong_atomic_fetch_and fsh_oshmem_ulong_atomic_fetch_and
#define shmem_ctx_ulong_atomic_fetch_and fsh_oshmem_ctx_ulong_atomic_fetch_and
#define shmem_ulong_atomic_fetch_or fsh_oshmem_ulong_atomic_fetch_or
#define shmem_ctx_ulong_atomic_fetch_or fsh_oshmem_ctx_ulong_atomic_fetch_or
#define shmem_ulong_atomic_fetch_xor fsh_oshmem_ulong_atomic_fetch_xor
#define shmem_ctx_ulong_atomic_fetch_xor fsh_oshmem_ctx_ulong_atomic_fetch_xor
#define shmem_ulonglong_atomic_fetch_and fsh_oshmem_ulonglong_atomic_fetch_and
#define shmem_ctx_ulonglong_atomic_fetch_and fsh_oshmem_ctx_ulonglong_atomic_fetch_and
#define shmem_ulonglong_atomic_fetch_or fsh_oshmem_ulonglong_atomic_fetch_or
#define shmem_ctx_ulonglong_atomic_fetch_or fsh_oshmem_ctx_ulonglong_atomic_fetch_or
#define shmem_ulonglong_atomic_fetch_xor fsh_oshmem_ulonglong_atomic_fetch_xor
#define shmem_ctx_ulonglong_atomic_fetch_xor fsh_oshmem_ctx_ulonglong_atomic_fetch_xor
#define shmem_int32_atomic_fetch_and fsh_oshmem_int32_atomic_fetch_and
#define shmem_ctx_int32_atomic_fetch_and fsh_oshmem_ctx_int32_atomic_fetch_and
#define shmem_int32_atomic_fetch_or fsh_oshmem_int32_atomic_fetch_or
#define shmem_ctx_int32_atomic_fetch_or fsh_oshmem_ctx_int32_atomic_fetch_or
#define shmem_int32_atomic_fetch_xor fsh_oshmem_int32_atomic_fetch_xor
#define shmem_ctx_int32_atomic_fetch_xor fsh_oshmem_ctx_int32_atomic_fetch_xor
#define shmem_int64_atomic_fetch_and fsh_oshmem_int64_atomic_fetch_and
#define shmem_ctx_int64_atomic_fetch_and fsh_oshmem_ctx_int64_atomic_fetch_and
#define shmem_int64_atomic_fetch_or fsh_oshmem_int64_atomic_fetch_or
#define shmem_ctx_int64_atomic_fetch_or fsh_oshmem_ctx_int64_atomic_fetch_or
#define shmem_int64_atomic_fetch_xor fsh_oshmem_int64_atomic_fetch_xor
#define shmem_ctx_int64_atomic_fetch_xor fsh_oshmem_ctx_int64_atomic_fetch_xor
#define shmem_uint32_atomic_fetch_and fsh_oshmem_uint32_atomic_fetch_and
#define shmem_ctx_uint32_atomic_fetch_and fsh_oshmem_ctx_uint32_atomic_fetch_and
#define shmem_uint32_atomic_fetch_or fsh_oshmem_uint32_atomic_fetch_or
#define shmem_ctx_uint32_atomic_fetch_or fsh_oshmem_ctx_uint32_atomic_fetch_or
#define shmem_uint32_atomic_fetch_xor fsh_oshmem_uint32_atomic_fetch_xor
#define shmem_ctx_uint32_atomic_fetch_xor fsh_oshmem_ctx_uint32_atomic_fetch_xor
#define shmem_uint64_atomic_fetch_and fsh_oshmem_uint64_atomic_fetch_and
#define shmem_ctx_uint64_atomic_fetch_and fsh_oshmem_ctx_uint64_atomic_fetch_and
#define shmem_uint64_atomic_fetch_or fsh_oshmem_uint64_atomic_fetch_or
#define shmem_ctx_uint64_atomic_fetch_or fsh_oshmem_ctx_uint64_atomic_fetch_or
#define shmem_uint64_atomic_fetch_xor fsh_oshmem_uint64_atomic_fetch_xor
#define shmem_ctx_uint64_atomic_fetch_xor fsh_oshmem_ctx_uint64_atomic_fetch_xor

/* ---- nonblocking fetching AMOs (blocking here) ------------------------------------------ */

#define FSH_SHIM_EXTNBI(T, N)                                                                  \
    static inline void shmem_ctx_##N##_atomic_fetch_nbi(shmem_ctx_t c, T *f, const T *s, int pe) \
    { *f = shmem_ctx_##N##_atomic_fetch(c, s, pe); }                                           \
    static inline void shmem_ctx_##N##_atomic_swap_nbi(shmem_ctx_t c, T *f, T *d, T v, int pe) \
    { *f = shmem_ctx_##N##_atomic_swap(c, d, v, pe); }                                         \
    static inline void shmem_##N##_atomic_fetch_nbi(T *f, const T *s, int pe)                  \
    { *f = shmem_##N##_atomic_fetch(s, pe); }                                                  \
    static inline void shmem_##N##_atomic_swap_nbi(T *f, T *d, T v, int pe)                    \
    { *f = shmem_##N##_atomic_swap(d, v, pe); }
AMO_TYPES(FSH_SHIM_EXTNBI)
FSH_SHIM_EXTNBI(float, float)
FSH_SHIM_EXTNBI(double, double)

#define FSH_SHIM_STDNBI(T, N)                                                                  \
    static inline void shmem_ctx_##N##_atomic_compare_swap_nbi(shmem_ctx_t c, T *f, T *d,      \
                                                               T cond, T v, int pe)            \
    { *f = shmem_ctx_##N##_atomic_compare_swap(c, d, cond, v, pe); }                           \
    static inline void shmem_ctx_##N##_atomic_fetch_inc_nbi(shmem_ctx_t c, T *f, T *d, int pe) \
    { *f = shmem_ctx_##N##_atomic_fetch_inc(c, d, pe); }                                       \
    static inline void shmem_ctx_##N##_atomic_fetch_add_nbi(shmem_ctx_t c, T *f, T *d, T v,    \
                                                            int pe)                            \
    { *f = shmem_ctx_##N##_atomic_fetch_add(c, d, v, pe); }                                    \
    static inline void shmem_##N##_atomic_compare_swap_nbi(T *f, T *d, T cond, T v, int pe)    \
    { *f = shmem_##N##_atomic_compare_swap(d, cond, v, pe); }                                  \
    static inline void shmem_##N##_atomic_fetch_inc_nbi(T *f, T *d, int pe)                    \
    { *f = shmem_##N##_atomic_fetch_inc(d, pe); }                                              \
    static inline void shmem_##N##_atomic_fetch_add_nbi(T *f, T *d, T v, int pe)               \
    { *f = shmem_##N##_atomic_fetch_add(d, v, pe); }
AMO_TYPES(FSH_SHIM_STDNBI)

#define FSH_SHIM_BITNBI_OP(T, N, OP)                                                           \
    static inline void shmem_ctx_##N##_atomic_fetch_##OP##_nbi(shmem_ctx_t c, T *f, T *d, T v, \
                                                               int pe)                         \
    { *f = shmem_ctx_##N##_atomic_fetch_##OP(c, d, v, pe); }                                   \
    static inline void shmem_##N##_atomic_fetch_##OP##_nbi(T *f, T *d, T v, int pe)            \
    { *f = shmem_##N##_atomic_fetch_##OP(d, v, pe); }
#define FSH_SHIM_BITNBI(T, N)                                                                  \
    FSH_SHIM_BITNBI_OP(T, N, and) FSH_SHIM_BITNBI_OP(T, N, or) FSH_SHIM_BITNBI_OP(T, N, xor)
BITAMO_TYPES(FSH_SHIM_BITNBI)

/* ---- collectives and reductions on the world team --------------------------------------- */

typedef int shmem_team_t;
#define SHMEM_TEAM_WORLD 0
#define SHMEM_TEAM_INVALID (-1)

static size_t fsh_shim_nbytes; /* symmetric: this PE's contribution to a collect */

static inline void fsh_shim_world(shmem_team_t team)
{
    if (team != SHMEM_TEAM_WORLD)
        fsh_shim_die("only SHMEM_TEAM_WORLD is stood in for");
}

static inline int shmem_broadcastmem(shmem_team_t team, void *dest, const void *source,
                                     size_t nelems, int PE_root)
{
    fsh_shim_world(team);
    shmem_barrier_all();
    if (shmem_my_pe() == PE_root)
        memmove(dest, source, nelems);
    else
        shmem_getmem(dest, source, nelems, PE_root);
    shmem_barrier_all();
    return 0;
}

static inline int shmem_fcollectmem(shmem_team_t team, void *dest, const void *source,
                                    size_t nelems)
{
    fsh_shim_world(team);
    shmem_barrier_all();
    for (int p = 0; p < shmem_n_pes(); p++)
        shmem_getmem((char *)dest + (size_t)p * nelems, source, nelems, p);
    shmem_barrier_all();
    return 0;
}

static inline int shmem_collectmem(shmem_team_t team, void *dest, const void *source,
                                   size_t nelems)
{
    size_t off = 0, n;
    fsh_shim_world(team);
    fsh_shim_nbytes = nelems;
    shmem_barrier_all();
    for (int p = 0; p < shmem_n_pes(); p++) {
        shmem_getmem(&n, &fsh_shim_nbytes, sizeof n, p);
        shmem_getmem((char *)dest + off, source, n, p);
        off += n;
    }
    shmem_barrier_all();
    return 0;
}

static inline int shmem_alltoallmem(shmem_team_t team, void *dest, const void *source,
                                    size_t nelems)
{
    fsh_shim_world(team);
    shmem_barrier_all();
    for (int p = 0; p < shmem_n_pes(); p++)
        shmem_getmem((char *)dest + (size_t)p * nelems,
                     (const char *)source + (size_t)shmem_my_pe() * nelems, nelems, p);
    shmem_barrier_all();
    return 0;
}

/* Strided all-to-all of elements of `size` bytes: element e of the block from PE p lands at
 * dest element (p * nelems + e) * dst and comes from source element (me * nelems + e) * sst. */
static inline int fsh_shim_alltoalls(shmem_team_t team, void *dest, const void *source, ptrdiff_t dst,
                              ptrdiff_t sst, size_t nelems, size_t size)
{
    size_t me = (size_t)shmem_my_pe();
    fsh_shim_world(team);
    shmem_barrier_all();
    for (int p = 0; p < shmem_n_pes(); p++)
        for (size_t e = 0; e < nelems; e++)
            shmem_getmem((char *)dest + ((size_t)p * nelems + e) * (size_t)dst * size,
                         (const char *)source + (me * nelems + e) * (size_t)sst * size, size, p);
    shmem_barrier_all();
    return 0;
}
static inline int shmem_alltoallsmem(shmem_team_t team, void *dest, const void *source,
                                     ptrdiff_t dst, ptrdiff_t sst, size_t nelems)
{
    return fsh_shim_alltoalls(team, dest, source, dst, sst, nelems, 1);
}

#define FSH_SHIM_COLL(T, N)                                                                    \
    static inline int shmem_##N##_broadcast(shmem_team_t t, T *d, const T *s, size_t n,        \
                                            int root)                                          \
    { return shmem_broadcastmem(t, d, s, n * sizeof(T), root); }                               \
    static inline int shmem_##N##_collect(shmem_team_t t, T *d, const T *s, size_t n)          \
    { return shmem_collectmem(t, d, s, n * sizeof(T)); }                                       \
    static inline int shmem_##N##_fcollect(shmem_team_t t, T *d, const T *s, size_t n)         \
    { return shmem_fcollectmem(t, d, s, n * sizeof(T)); }                                      \
    static inline int shmem_##N##_alltoall(shmem_team_t t, T *d, const T *s, size_t n)         \
    { return shmem_alltoallmem(t, d, s, n * sizeof(T)); }                                      \
    static inline int shmem_##N##_alltoalls(shmem_team_t t, T *d, const T *s, ptrdiff_t dst,   \
                                            ptrdiff_t sst, size_t n)                           \
    { return fsh_shim_alltoalls(t, d, s, dst, sst, n, sizeof(T)); }
RMA_TYPES(FSH_SHIM_COLL)

/* Reduction: every PE gets every source and folds; dest is written after a barrier, so dest may
 * be source. */
#define FSH_SHIM_RED(T, N, OP, FOLD)                                                           \
    static inline int shmem_##N##_##OP##_reduce(shmem_team_t team, T *dest, const T *source,   \
                                                size_t nreduce)                                \
    {                                                                                          \
        T *acc = malloc(nreduce * sizeof(T) + 1), *in = malloc(nreduce * sizeof(T) + 1);       \
        fsh_shim_world(team);                                                                  \
        shmem_barrier_all();                                                                   \
        for (int p = 0; p < shmem_n_pes(); p++) {                                              \
            shmem_getmem(p ? in : acc, source, nreduce * sizeof(T), p);                        \
            for (size_t i = 0; p && i < nreduce; i++) {                                        \
                T a = acc[i], b = in[i];                                                       \
                acc[i] = (T)(FOLD);                                                            \
            }                                                                                  \
        }                                                                                      \
        shmem_barrier_all();                                                                   \
        memcpy(dest, acc, nreduce * sizeof(T));                                                \
        free(acc);                                                                             \
        free(in);                                                                              \
        return 0;                                                                              \
    }
#define FSH_SHIM_BITRED(T, N)                                                                  \
    FSH_SHIM_RED(T, N, and, a & b) FSH_SHIM_RED(T, N, or, a | b) FSH_SHIM_RED(T, N, xor, a ^ b)
#define FSH_SHIM_ARITHRED(T, N)                                                                \
    FSH_SHIM_RED(T, N, max, a > b ? a : b) FSH_SHIM_RED(T, N, min, a < b ? a : b)             \
    FSH_SHIM_RED(T, N, sum, a + b) FSH_SHIM_RED(T, N, prod, a * b)
BITRED_TYPES(FSH_SHIM_BITRED)
ARITHRED_TYPES(FSH_SHIM_ARITHRED)
FSH_SHIM_RED(float _Complex, complexf, sum, a + b)
FSH_SHIM_RED(float _Complex, complexf, prod, a * b)
FSH_SHIM_RED(double _Complex, complexd, sum, a + b)
FSH_SHIM_RED(double _Complex, complexd, prod, a * b)

#endif /* FSH_TEST_OSHMEM_COMPAT_H */
