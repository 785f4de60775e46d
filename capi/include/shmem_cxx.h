/*
 * shmem_cxx.h: the type-generic names of OpenSHMEM 1.5's C11 interfaces, for C++ (libferroshmem_c).
 *
 * Included by shmem.h when compiled as C++11 or later; not meant to be included directly. Each
 * generic name (shmem_put, shmem_atomic_fetch_add, shmem_sum_reduce, shmem_wait_until, ...) is a
 * set of overloads, one per type of the routine's table (the tables of the C11 _Generic forms:
 * only types distinct in C), each forwarding to the typed routine; the RMA, AMO and signalling
 * names also take a leading shmem_ctx_t, the collectives a leading shmem_team_t. A type outside
 * the table has no overload, so the call fails to compile, as in C11.
 */
#ifndef FERROSHMEM_SHMEM_CXX_H
#define FERROSHMEM_SHMEM_CXX_H

/* An overload of generic name shmem##S for T, its first argument a T * (or a const T *, _C),
 * forwarding the rest to shmem_##N##S; _CTX: with a leading context, to shmem_ctx_##N##S. */
#define FSHMEM_CXX_FORWARD(NAME, TARGET, FIRST)                                                \
    template <typename... A>                                                                   \
    inline auto NAME(FIRST p, A... rest)->decltype(TARGET(p, rest...)) {                       \
        return TARGET(p, rest...);                                                             \
    }
#define FSHMEM_CXX_FORWARD2(NAME, TARGET, HANDLE, FIRST)                                       \
    template <typename... A>                                                                   \
    inline auto NAME(HANDLE h, FIRST p, A... rest)->decltype(TARGET(h, p, rest...)) {          \
        return TARGET(h, p, rest...);                                                          \
    }
#define FSHMEM_CXX(T, N, S) FSHMEM_CXX_FORWARD(shmem##S, shmem_##N##S, T *)
#define FSHMEM_CXX_C(T, N, S) FSHMEM_CXX_FORWARD(shmem##S, shmem_##N##S, const T *)
#define FSHMEM_CXX_V(T, N, S) FSHMEM_CXX_FORWARD(shmem##S, shmem_##N##S, volatile T *)
#define FSHMEM_CXX_CTX(T, N, S) FSHMEM_CXX_FORWARD2(shmem##S, shmem_ctx_##N##S, shmem_ctx_t, T *)
#define FSHMEM_CXX_CTX_C(T, N, S)                                                              \
    FSHMEM_CXX_FORWARD2(shmem##S, shmem_ctx_##N##S, shmem_ctx_t, const T *)
#define FSHMEM_CXX_TEAM(T, N, S) FSHMEM_CXX_FORWARD2(shmem##S, shmem_##N##S, shmem_team_t, T *)

/* A family with and without a context */
#define FSHMEM_CXX_BOTH(TABLE, S) TABLE(FSHMEM_CXX, S) TABLE(FSHMEM_CXX_CTX, S)
#define FSHMEM_CXX_BOTH_C(TABLE, S) TABLE(FSHMEM_CXX_C, S) TABLE(FSHMEM_CXX_CTX_C, S)

/* RMA and signalling put */
FSHMEM_CXX_BOTH(FSHMEM_G_RMA, _put)
FSHMEM_CXX_BOTH(FSHMEM_G_RMA, _get)
FSHMEM_CXX_BOTH(FSHMEM_G_RMA, _p)
FSHMEM_CXX_BOTH_C(FSHMEM_G_RMA, _g)
FSHMEM_CXX_BOTH(FSHMEM_G_RMA, _iput)
FSHMEM_CXX_BOTH(FSHMEM_G_RMA, _iget)
FSHMEM_CXX_BOTH(FSHMEM_G_RMA, _put_nbi)
FSHMEM_CXX_BOTH(FSHMEM_G_RMA, _get_nbi)
FSHMEM_CXX_BOTH(FSHMEM_G_RMA, _put_signal)
FSHMEM_CXX_BOTH(FSHMEM_G_RMA, _put_signal_nbi)

/* AMOs */
FSHMEM_CXX_BOTH_C(FSHMEM_G_EXTAMO, _atomic_fetch)
FSHMEM_CXX_BOTH(FSHMEM_G_EXTAMO, _atomic_set)
FSHMEM_CXX_BOTH(FSHMEM_G_EXTAMO, _atomic_swap)
FSHMEM_CXX_BOTH(FSHMEM_G_EXTAMO, _atomic_fetch_nbi)
FSHMEM_CXX_BOTH(FSHMEM_G_EXTAMO, _atomic_swap_nbi)
FSHMEM_CXX_BOTH(FSHMEM_G_AMO, _atomic_compare_swap)
FSHMEM_CXX_BOTH(FSHMEM_G_AMO, _atomic_fetch_inc)
FSHMEM_CXX_BOTH(FSHMEM_G_AMO, _atomic_inc)
FSHMEM_CXX_BOTH(FSHMEM_G_AMO, _atomic_fetch_add)
FSHMEM_CXX_BOTH(FSHMEM_G_AMO, _atomic_add)
FSHMEM_CXX_BOTH(FSHMEM_G_AMO, _atomic_compare_swap_nbi)
FSHMEM_CXX_BOTH(FSHMEM_G_AMO, _atomic_fetch_inc_nbi)
FSHMEM_CXX_BOTH(FSHMEM_G_AMO, _atomic_fetch_add_nbi)
FSHMEM_CXX_BOTH(FSHMEM_G_BITAMO, _atomic_fetch_and)
FSHMEM_CXX_BOTH(FSHMEM_G_BITAMO, _atomic_and)
FSHMEM_CXX_BOTH(FSHMEM_G_BITAMO, _atomic_fetch_or)
FSHMEM_CXX_BOTH(FSHMEM_G_BITAMO, _atomic_or)
FSHMEM_CXX_BOTH(FSHMEM_G_BITAMO, _atomic_fetch_xor)
FSHMEM_CXX_BOTH(FSHMEM_G_BITAMO, _atomic_xor)
FSHMEM_CXX_BOTH(FSHMEM_G_BITAMO, _atomic_fetch_and_nbi)
FSHMEM_CXX_BOTH(FSHMEM_G_BITAMO, _atomic_fetch_or_nbi)
FSHMEM_CXX_BOTH(FSHMEM_G_BITAMO, _atomic_fetch_xor_nbi)

/* Collectives on teams */
FSHMEM_G_RMA(FSHMEM_CXX_TEAM, _broadcast)
FSHMEM_G_RMA(FSHMEM_CXX_TEAM, _collect)
FSHMEM_G_RMA(FSHMEM_CXX_TEAM, _fcollect)
FSHMEM_G_RMA(FSHMEM_CXX_TEAM, _alltoall)
FSHMEM_G_RMA(FSHMEM_CXX_TEAM, _alltoalls)
FSHMEM_G_BITRED(FSHMEM_CXX_TEAM, _and_reduce)
FSHMEM_G_BITRED(FSHMEM_CXX_TEAM, _or_reduce)
FSHMEM_G_BITRED(FSHMEM_CXX_TEAM, _xor_reduce)
FSHMEM_G_MINMAXRED(FSHMEM_CXX_TEAM, _max_reduce)
FSHMEM_G_MINMAXRED(FSHMEM_CXX_TEAM, _min_reduce)
FSHMEM_G_ARITHRED(FSHMEM_CXX_TEAM, _sum_reduce)
FSHMEM_G_ARITHRED(FSHMEM_CXX_TEAM, _prod_reduce)

/* shmem_sync on a team (the C11 form); the deprecated active-set shmem_sync, a C routine,
 * is the other overload */
inline int shmem_sync(shmem_team_t team) { return shmem_team_sync(team); }

/* Point-to-point synchronization (shmem_wait_until on a long is also the C routine of that
 * name, which C++ prefers to the overload: the same routine) */
FSHMEM_G_SYNC(FSHMEM_CXX, _wait_until)
FSHMEM_G_SYNC(FSHMEM_CXX, _wait_until_all)
FSHMEM_G_SYNC(FSHMEM_CXX, _wait_until_any)
FSHMEM_G_SYNC(FSHMEM_CXX, _wait_until_some)
FSHMEM_G_SYNC(FSHMEM_CXX, _wait_until_all_vector)
FSHMEM_G_SYNC(FSHMEM_CXX, _wait_until_any_vector)
FSHMEM_G_SYNC(FSHMEM_CXX, _wait_until_some_vector)
FSHMEM_G_SYNC(FSHMEM_CXX, _test)
FSHMEM_G_SYNC(FSHMEM_CXX, _test_all)
FSHMEM_G_SYNC(FSHMEM_CXX, _test_any)
FSHMEM_G_SYNC(FSHMEM_CXX, _test_some)
FSHMEM_G_SYNC(FSHMEM_CXX, _test_all_vector)
FSHMEM_G_SYNC(FSHMEM_CXX, _test_any_vector)
FSHMEM_G_SYNC(FSHMEM_CXX, _test_some_vector)

/* Deprecated generic names (OpenSHMEM 1.3), on the types the C11 forms take; a volatile
 * word for shmem_wait (whose long form is the C routine of that name) */
FSHMEM_OLDEXTAMO_TYPES(FSHMEM_CXX_C, _fetch)
FSHMEM_OLDEXTAMO_TYPES(FSHMEM_CXX, _set)
FSHMEM_OLDEXTAMO_TYPES(FSHMEM_CXX, _swap)
FSHMEM_OLDAMO_TYPES(FSHMEM_CXX, _cswap)
FSHMEM_OLDAMO_TYPES(FSHMEM_CXX, _finc)
FSHMEM_OLDAMO_TYPES(FSHMEM_CXX, _inc)
FSHMEM_OLDAMO_TYPES(FSHMEM_CXX, _fadd)
FSHMEM_OLDAMO_TYPES(FSHMEM_CXX, _add)
FSHMEM_OLDWAIT_TYPES(FSHMEM_CXX_V, _wait)

#undef FSHMEM_CXX_BOTH_C
#undef FSHMEM_CXX_BOTH

#endif /* FERROSHMEM_SHMEM_CXX_H */
