/*
 * rma.c: remote memory access. Every PE works on the next PE in a ring (itself at 1 PE).
 *
 *   ok rma typed     every RMA TYPENAME (24): put, get, p, g, iput, iget, put_nbi, get_nbi
 *   ok rma sized     put/get/iput/iget/put_nbi/get_nbi 8, 16, 32, 64, 128 and putmem/getmem(_nbi)
 *   ok rma generic   the C11 names shmem_put, get, p, g, iput, iget, put_nbi, get_nbi
 *   ok rma shmemx    ferroshmem's shmemx_TYPENAME_ibput/ibget and shmemx_pe_quiet
 *
 * Symmetric data comes both from shmem_malloc and from static (data segment) objects.
 */
#include "check.h"

#ifndef FSH_TEST_OSHMEM
#include <shmemx.h>
#endif

#define NE 16 /* elements per buffer */

/* The typed routines of TYPENAME N on heap buffers. Between a PE's write of its own buffer and
 * the puts that other PEs make into it there is always a barrier. */
#define TEST_TYPED(T, N)                                                                       \
    static void test_typed_##N(void)                                                           \
    {                                                                                          \
        T *dst = shmem_malloc(2 * NE * sizeof(T));                                             \
        T *src = shmem_malloc(NE * sizeof(T));                                                 \
        T loc[2 * NE];                                                                         \
        int next = next_pe(), prev = prev_pe();                                                \
        CHECK(dst && src, #N ": shmem_malloc returned NULL");                                  \
        for (int i = 0; i < NE; i++)                                                           \
            src[i] = (T)VAL(me, i);                                                            \
        for (int i = 0; i < 2 * NE; i++)                                                       \
            dst[i] = (T)0;                                                                     \
        shmem_barrier_all();                                                                   \
        shmem_##N##_put(dst, src, NE, next);                                                   \
        shmem_barrier_all();                                                                   \
        for (int i = 0; i < NE; i++)                                                           \
            CHECK_EQ(dst[i], (T)VAL(prev, i), "shmem_" #N "_put: dst[%d]", i);                 \
        CHECK_EQ(dst[NE], (T)0, "shmem_" #N "_put wrote past nelems");                         \
        shmem_##N##_get(loc, src, NE, next);                                                   \
        for (int i = 0; i < NE; i++)                                                           \
            CHECK_EQ(loc[i], (T)VAL(next, i), "shmem_" #N "_get: loc[%d]", i);                 \
        shmem_barrier_all();                                                                   \
        shmem_##N##_p(&dst[3], (T)VAL(me, 9), next);                                           \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(dst[3], (T)VAL(prev, 9), "shmem_" #N "_p");                                   \
        CHECK_EQ(shmem_##N##_g(&src[5], next), (T)VAL(next, 5), "shmem_" #N "_g");             \
        /* strided: dst[2j] = src[3j] of the previous PE, j < 5; odd dst untouched */           \
        for (int i = 0; i < 2 * NE; i++)                                                       \
            dst[i] = (T)0;                                                                     \
        shmem_barrier_all();                                                                   \
        shmem_##N##_iput(dst, src, 2, 3, 5, next);                                             \
        shmem_barrier_all();                                                                   \
        for (int j = 0; j < 10; j++)                                                           \
            CHECK_EQ(dst[j], (T)(j % 2 ? 0 : VAL(prev, 3 * (j / 2))), "shmem_" #N "_iput: dst[%d]", j); \
        for (int i = 0; i < 2 * NE; i++)                                                       \
            loc[i] = (T)0;                                                                     \
        shmem_##N##_iget(loc, src, 3, 2, 5, next);                                             \
        for (int j = 0; j < 15; j++)                                                           \
            CHECK_EQ(loc[j], (T)(j % 3 ? 0 : VAL(next, 2 * (j / 3))), "shmem_" #N "_iget: loc[%d]", j); \
        for (int i = 0; i < 2 * NE; i++)                                                       \
            dst[i] = loc[i] = (T)0;                                                            \
        shmem_barrier_all();                                                                   \
        shmem_##N##_put_nbi(dst + NE, src, NE, next);                                          \
        shmem_quiet();                                                                         \
        shmem_barrier_all();                                                                   \
        for (int i = 0; i < NE; i++)                                                           \
            CHECK_EQ(dst[NE + i], (T)VAL(prev, i), "shmem_" #N "_put_nbi: dst[%d]", NE + i);   \
        shmem_##N##_get_nbi(loc, src, NE, next);                                               \
        shmem_quiet();                                                                         \
        for (int i = 0; i < NE; i++)                                                           \
            CHECK_EQ(loc[i], (T)VAL(next, i), "shmem_" #N "_get_nbi: loc[%d]", i);             \
        shmem_barrier_all();                                                                   \
        shmem_free(dst);                                                                       \
        shmem_free(src);                                                                       \
    }
RMA_TYPES(TEST_TYPED)

/* Sized routines: BITS is 8..128 or mem; U is an unsigned type and K how many U make one element
 * (2 uint64_t for 128 bits). Data lives in static symmetric arrays here. */
#define SZ_N 8
static uint64_t sz_src[2 * SZ_N * 3], sz_dst[2 * SZ_N * 3];

#define TEST_CONTIG(BITS, U, K)                                                                \
    static void test_contig_##BITS(void)                                                       \
    {                                                                                          \
        U *src = (U *)sz_src, *dst = (U *)sz_dst, loc[K * SZ_N * 3];                           \
        int next = next_pe(), prev = prev_pe();                                                \
        size_t n = (size_t)K * SZ_N;                                                           \
        for (size_t i = 0; i < n; i++)                                                         \
            src[i] = (U)VAL(me, i);                                                            \
        memset(sz_dst, 0, sizeof sz_dst);                                                      \
        shmem_barrier_all();                                                                   \
        shmem_put##BITS(dst, src, SZ_N, next);                                                 \
        shmem_barrier_all();                                                                   \
        for (size_t i = 0; i < n; i++)                                                         \
            CHECK_EQ(dst[i], (U)VAL(prev, i), "shmem_put" #BITS ": element part %zu", i);      \
        CHECK_EQ(dst[n], (U)0, "shmem_put" #BITS " wrote past nelems");                        \
        memset(loc, 0, sizeof loc);                                                            \
        shmem_get##BITS(loc, src, SZ_N, next);                                                 \
        for (size_t i = 0; i < n; i++)                                                         \
            CHECK_EQ(loc[i], (U)VAL(next, i), "shmem_get" #BITS ": element part %zu", i);      \
        memset(sz_dst, 0, sizeof sz_dst);                                                      \
        shmem_barrier_all();                                                                   \
        shmem_put##BITS##_nbi(dst, src, SZ_N, next);                                           \
        shmem_quiet();                                                                         \
        shmem_barrier_all();                                                                   \
        for (size_t i = 0; i < n; i++)                                                         \
            CHECK_EQ(dst[i], (U)VAL(prev, i), "shmem_put" #BITS "_nbi: element part %zu", i);  \
        memset(loc, 0, sizeof loc);                                                            \
        shmem_get##BITS##_nbi(loc, src, SZ_N, next);                                           \
        shmem_quiet();                                                                         \
        for (size_t i = 0; i < n; i++)                                                         \
            CHECK_EQ(loc[i], (U)VAL(next, i), "shmem_get" #BITS "_nbi: element part %zu", i);  \
        shmem_barrier_all();                                                                   \
    }

/* Strided sized routines: element j of 4 goes from source element 2j to dest element 3j. */
#define TEST_STRIDED(BITS, U, K)                                                               \
    static void test_strided_##BITS(void)                                                      \
    {                                                                                          \
        U *src = (U *)sz_src, *dst = (U *)sz_dst, loc[K * SZ_N * 3];                           \
        int next = next_pe(), prev = prev_pe();                                                \
        for (size_t i = 0; i < (size_t)K * SZ_N; i++)                                          \
            src[i] = (U)VAL(me, i);                                                            \
        memset(sz_dst, 0, sizeof sz_dst);                                                      \
        shmem_barrier_all();                                                                   \
        shmem_iput##BITS(dst, src, 3, 2, 4, next);                                             \
        shmem_barrier_all();                                                                   \
        for (size_t e = 0; e < 12; e++)                                                        \
            for (size_t k = 0; k < K; k++)                                                     \
                CHECK_EQ(dst[e * K + k], (U)(e % 3 ? 0 : VAL(prev, (e / 3) * 2 * K + k)),      \
                         "shmem_iput" #BITS ": element %zu part %zu", e, k);                   \
        memset(loc, 0, sizeof loc);                                                            \
        shmem_iget##BITS(loc, src, 3, 2, 4, next);                                             \
        for (size_t e = 0; e < 12; e++)                                                        \
            for (size_t k = 0; k < K; k++)                                                     \
                CHECK_EQ(loc[e * K + k], (U)(e % 3 ? 0 : VAL(next, (e / 3) * 2 * K + k)),      \
                         "shmem_iget" #BITS ": element %zu part %zu", e, k);                   \
        shmem_barrier_all();                                                                   \
    }

#define SIZED(X) X(8, uint8_t, 1) X(16, uint16_t, 1) X(32, uint32_t, 1) X(64, uint64_t, 1) X(128, uint64_t, 2)
SIZED(TEST_CONTIG)
SIZED(TEST_STRIDED)
TEST_CONTIG(mem, unsigned char, 1)

/* The C11 generic names, on static symmetric arrays of a few basic types. */
#define TEST_GENERIC(T, N)                                                                     \
    static T gen_src_##N[NE], gen_dst_##N[NE];                                                 \
    static void test_generic_##N(void)                                                         \
    {                                                                                          \
        T *src = gen_src_##N, *dst = gen_dst_##N, loc[NE];                                     \
        int next = next_pe(), prev = prev_pe();                                                \
        for (int i = 0; i < NE; i++)                                                           \
            src[i] = (T)VAL(me, i), dst[i] = (T)0;                                             \
        shmem_barrier_all();                                                                   \
        shmem_put(dst, src, NE, next);                                                         \
        shmem_barrier_all();                                                                   \
        for (int i = 0; i < NE; i++)                                                           \
            CHECK_EQ(dst[i], (T)VAL(prev, i), "shmem_put (" #N "): dst[%d]", i);               \
        shmem_get(loc, src, NE, next);                                                         \
        CHECK_EQ(loc[NE - 1], (T)VAL(next, NE - 1), "shmem_get (" #N ")");                     \
        shmem_barrier_all();                                                                   \
        shmem_p(&dst[0], (T)VAL(me, 7), next);                                                 \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(dst[0], (T)VAL(prev, 7), "shmem_p (" #N ")");                                 \
        CHECK_EQ(shmem_g(&src[2], next), (T)VAL(next, 2), "shmem_g (" #N ")");                 \
        shmem_barrier_all();                                                                   \
        shmem_iput(dst, src, 2, 1, 4, next);                                                   \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(dst[6], (T)VAL(prev, 3), "shmem_iput (" #N ")");                              \
        shmem_iget(loc, src, 1, 2, 4, next);                                                   \
        CHECK_EQ(loc[3], (T)VAL(next, 6), "shmem_iget (" #N ")");                              \
        shmem_barrier_all();                                                                   \
        shmem_put_nbi(dst, src, NE, next);                                                     \
        shmem_quiet();                                                                         \
        shmem_get_nbi(loc, src, NE, next);                                                     \
        shmem_quiet();                                                                         \
        CHECK_EQ(loc[5], (T)VAL(next, 5), "shmem_get_nbi (" #N ")");                           \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(dst[9], (T)VAL(prev, 9), "shmem_put_nbi (" #N ")");                           \
        shmem_barrier_all();                                                                   \
    }
#define GENERIC_TYPES(X)                                                                       \
    X(char, char) X(signed char, schar) X(short, short) X(int, int) X(long, long)             \
    X(long long, longlong) X(unsigned char, uchar) X(unsigned short, ushort)                  \
    X(unsigned int, uint) X(unsigned long, ulong) X(unsigned long long, ulonglong)            \
    X(float, float) X(double, double) X(long double, longdouble)
GENERIC_TYPES(TEST_GENERIC)

#ifndef FSH_TEST_OSHMEM
/* shmemx_TYPENAME_ibput/ibget: nblocks blocks of bsize elements; block b goes from
 * source + b * sst to dest + b * dst. Here 3 blocks of 2, source stride 3, dest stride 4. */
#define TEST_IB(T, N)                                                                          \
    static void test_ib_##N(void)                                                              \
    {                                                                                          \
        T *dst = shmem_calloc(NE, sizeof(T)), *src = shmem_malloc(NE * sizeof(T)), loc[NE];    \
        int next = next_pe(), prev = prev_pe();                                                \
        for (int i = 0; i < NE; i++)                                                           \
            src[i] = (T)VAL(me, i), loc[i] = (T)0;                                             \
        shmem_barrier_all();                                                                   \
        shmemx_##N##_ibput(dst, src, 4, 3, 2, 3, next);                                        \
        shmem_barrier_all();                                                                   \
        for (int b = 0; b < 4; b++)                                                            \
            for (int k = 0; k < 4; k++)                                                        \
                CHECK_EQ(dst[4 * b + k], (T)(b < 3 && k < 2 ? VAL(prev, 3 * b + k) : 0),       \
                         "shmemx_" #N "_ibput: dst[%d]", 4 * b + k);                           \
        shmemx_##N##_ibget(loc, src, 4, 3, 2, 3, next);                                        \
        for (int b = 0; b < 4; b++)                                                            \
            for (int k = 0; k < 4; k++)                                                        \
                CHECK_EQ(loc[4 * b + k], (T)(b < 3 && k < 2 ? VAL(next, 3 * b + k) : 0),       \
                         "shmemx_" #N "_ibget: loc[%d]", 4 * b + k);                           \
        shmem_barrier_all();                                                                   \
        shmem_free(dst);                                                                       \
        shmem_free(src);                                                                       \
    }
RMA_TYPES(TEST_IB)

/* shmemx_pe_quiet: after it, puts to the listed PE are complete and visible to a get. */
static void test_pe_quiet(void)
{
    long *x = shmem_calloc(NE, sizeof(long));
    long v[NE];
    int next = next_pe();
    for (int i = 0; i < NE; i++)
        v[i] = VAL(me, i);
    shmem_barrier_all();
    shmem_long_put_nbi(x, v, NE, next);
    shmemx_pe_quiet(&next, 1);
    CHECK_EQ(shmem_long_g(&x[NE - 1], next), (long)VAL(me, NE - 1), "get after shmemx_pe_quiet");
    shmem_barrier_all();
    shmem_free(x);
}
#endif

int main(void)
{
    test_init();

#define RUN_TYPED(T, N) test_typed_##N();
    RMA_TYPES(RUN_TYPED)
    ok("rma typed: put get p g iput iget put_nbi get_nbi, 24 TYPENAMEs");

#define RUN_SIZED(BITS, U, K) test_contig_##BITS(); test_strided_##BITS();
    SIZED(RUN_SIZED)
    test_contig_mem();
    ok("rma sized: put/get/iput/iget/put_nbi/get_nbi 8 16 32 64 128, putmem/getmem(_nbi)");

#define RUN_GENERIC(T, N) test_generic_##N();
    GENERIC_TYPES(RUN_GENERIC)
    ok("rma generic: C11 shmem_put get p g iput iget put_nbi get_nbi, 14 types");

#ifndef FSH_TEST_OSHMEM
#define RUN_IB(T, N) test_ib_##N();
    RMA_TYPES(RUN_IB)
    test_pe_quiet();
    ok("rma shmemx: ibput ibget (24 TYPENAMEs), pe_quiet");
#else
    ok("rma shmemx (skipped on OSHMEM: ferroshmem extensions)");
#endif

    shmem_finalize();
    return 0;
}
