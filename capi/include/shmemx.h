/*
 * shmemx.h: ferroshmem's extensions to the OpenSHMEM 1.5 C API (libferroshmem_c).
 *
 * The shmemx_ names are routines that OpenSHMEM 1.6 adds (under their shmem_ names there):
 *
 *   shmemx_TYPENAME_ibput / ibget   blocked strided put and get: nblocks blocks of bsize
 *                                   contiguous elements, block i going from source + i * sst
 *                                   to dest + i * dst (strides in elements)
 *   shmemx_signal_add / set         update a remote signal word without a put
 *   shmemx_pe_quiet                 quiet only the operations to the given PEs
 *   shmemx_TYPENAME_sum_inscan      prefix sums over a team: PE i of the team gets the sum of
 *   shmemx_TYPENAME_sum_exscan      source over PEs 0..i (inscan) or 0..i-1 (exscan; PE 0
 *                                   gets zeros); dest may be source; 0, or -1 on an error
 *
 * In C11 the type-generic shmemx_ibput / shmemx_ibget select the typed routine by dest,
 * shmemx_sum_inscan / shmemx_sum_exscan by dest (after the team); in C++ they are overloads.
 */
#ifndef FERROSHMEM_SHMEMX_H
#define FERROSHMEM_SHMEMX_H

#include <shmem.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FSHMEMX_DECL_IB(T, N, S)                                                               \
    void shmemx_##N##_ibput(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst,           \
                            size_t bsize, size_t nblocks, int pe);                            \
    void shmemx_##N##_ibget(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst,           \
                            size_t bsize, size_t nblocks, int pe);
FSHMEM_RMA_TYPES(FSHMEMX_DECL_IB, )
#undef FSHMEMX_DECL_IB

void shmemx_signal_add(uint64_t *sig_addr, uint64_t signal, int pe);
void shmemx_signal_set(uint64_t *sig_addr, uint64_t signal, int pe);

void shmemx_pe_quiet(const int *target_pes, size_t npes);

#define FSHMEMX_DECL_SCAN(T, N, S)                                                             \
    int shmemx_##N##S(shmem_team_t team, T *dest, const T *source, size_t nelems);
FSHMEM_ARITHRED_TYPES(FSHMEMX_DECL_SCAN, _sum_inscan)
FSHMEM_ARITHRED_TYPES(FSHMEMX_DECL_SCAN, _sum_exscan)
#undef FSHMEMX_DECL_SCAN

#ifdef __cplusplus
} /* extern "C" */
#endif

#if defined(__cplusplus) && __cplusplus >= 201103L
/* C++: the generic names as overloads (see shmem_cxx.h) */
#define FSHMEMX_CXX(T, N, S) FSHMEM_CXX_FORWARD(shmemx##S, shmemx_##N##S, T *)
#define FSHMEMX_CXX_TEAM(T, N, S) FSHMEM_CXX_FORWARD2(shmemx##S, shmemx_##N##S, shmem_team_t, T *)
FSHMEM_G_RMA(FSHMEMX_CXX, _ibput)
FSHMEM_G_RMA(FSHMEMX_CXX, _ibget)
FSHMEM_G_ARITHRED(FSHMEMX_CXX_TEAM, _sum_inscan)
FSHMEM_G_ARITHRED(FSHMEMX_CXX_TEAM, _sum_exscan)
#undef FSHMEMX_CXX_TEAM
#undef FSHMEMX_CXX
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define FSHMEMX_GA(T, N, S) T *: shmemx_##N##S,
#define shmemx_ibput(...)                                                                      \
    FSHMEM_GEN(FSHMEM_G_RMA, FSHMEMX_GA, _ibput, FSHMEM_ARG0, __VA_ARGS__)
#define shmemx_ibget(...)                                                                      \
    FSHMEM_GEN(FSHMEM_G_RMA, FSHMEMX_GA, _ibget, FSHMEM_ARG0, __VA_ARGS__)
#define shmemx_sum_inscan(...)                                                                 \
    FSHMEM_GEN(FSHMEM_G_ARITHRED, FSHMEMX_GA, _sum_inscan, FSHMEM_ARG1, __VA_ARGS__)
#define shmemx_sum_exscan(...)                                                                 \
    FSHMEM_GEN(FSHMEM_G_ARITHRED, FSHMEMX_GA, _sum_exscan, FSHMEM_ARG1, __VA_ARGS__)
#endif

#endif /* FERROSHMEM_SHMEMX_H */
