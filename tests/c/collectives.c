/*
 * collectives.c: collectives on teams (OpenSHMEM 1.5) and the deprecated active-set forms.
 *
 *   ok collectives team         every RMA TYPENAME on SHMEM_TEAM_WORLD: broadcast (root's dest
 *                               updated too), fcollect, collect (PE p gives p % 3 + 1 elements),
 *                               alltoall, alltoalls (dst 2, sst 3); and the mem forms
 *   ok collectives reduce       every reduction TYPENAME and op: and/or/xor, max/min/sum/prod,
 *                               sum in place (dest == source); complexf/complexd sum and prod;
 *                               the C11 names shmem_sum_reduce etc.
 *   ok collectives active-set   broadcast32/64, collect32/64, fcollect32/64, alltoall32/64,
 *                               alltoalls32/64 on all PEs
 *   ok collectives to_all       *_to_all for int, long (every op) and double (max min sum prod),
 *                               on all PEs and on the even PEs (PE_start 0, logPE_stride 1)
 *   ok collectives scan         ferroshmem's shmemx_TYPENAME_sum_inscan/exscan (OpenSHMEM
 *                               1.6) for int, long, double (and long double on x86-64), in
 *                               place and not, and the C11 shmemx_sum_inscan on the world and
 *                               on a team of the odd PEs
 *   ok collectives long double  (x86-64) sum, max and min of long double keep its 64-bit
 *                               significand (values a double cannot hold), C11 names
 * long double also runs through the reduce and to_all checks on x86-64.
 */
#include "check.h"
#include <complex.h>
#ifndef FSH_TEST_OSHMEM
#include <shmemx.h>
#endif

#define NE 6  /* elements per PE in the team collectives */
#define NR 5  /* elements reduced */

/* Element e that PE s sends to PE d in the all-to-alls (distinct for up to 4 PEs in a char). */
#define AV(s, d, e) (((s) * npes + (d)) * NE + (e) + 1)

#define TEST_TEAM(T, N)                                                                        \
    static void test_team_##N(void)                                                            \
    {                                                                                          \
        size_t cap = (size_t)npes * NE * 3;                                                    \
        T *src = shmem_malloc(cap * sizeof(T)), *dst = shmem_malloc(cap * sizeof(T));          \
        int root = npes - 1, rc, off = 0;                                                      \
        for (int i = 0; i < NE; i++)                                                           \
            src[i] = (T)VAL(me, i);                                                            \
        for (size_t i = 0; i < cap; i++)                                                       \
            dst[i] = (T)0;                                                                     \
        shmem_barrier_all();                                                                   \
        rc = shmem_##N##_broadcast(SHMEM_TEAM_WORLD, dst, src, NE, root);                      \
        CHECK_EQ(rc, 0, "shmem_" #N "_broadcast return");                                      \
        for (int i = 0; i < NE; i++)                                                           \
            CHECK_EQ(dst[i], (T)VAL(root, i), "shmem_" #N "_broadcast: dst[%d]", i);           \
        shmem_barrier_all();                                                                   \
        rc = shmem_##N##_fcollect(SHMEM_TEAM_WORLD, dst, src, NE);                             \
        CHECK_EQ(rc, 0, "shmem_" #N "_fcollect return");                                       \
        for (int p = 0; p < npes; p++)                                                         \
            for (int i = 0; i < NE; i++)                                                       \
                CHECK_EQ(dst[p * NE + i], (T)VAL(p, i), "shmem_" #N "_fcollect: PE %d's [%d]", p, i); \
        for (size_t i = 0; i < cap; i++)                                                       \
            dst[i] = (T)0;                                                                     \
        shmem_barrier_all();                                                                   \
        rc = shmem_##N##_collect(SHMEM_TEAM_WORLD, dst, src, (size_t)(me % 3 + 1));            \
        CHECK_EQ(rc, 0, "shmem_" #N "_collect return");                                        \
        for (int p = 0; p < npes; off += p % 3 + 1, p++)                                       \
            for (int i = 0; i < p % 3 + 1; i++)                                                \
                CHECK_EQ(dst[off + i], (T)VAL(p, i), "shmem_" #N "_collect: PE %d's [%d]", p, i); \
        CHECK_EQ(dst[off], (T)0, "shmem_" #N "_collect wrote past the total");                 \
        shmem_barrier_all();                                                                   \
        for (int p = 0; p < npes; p++)                                                         \
            for (int e = 0; e < NE; e++)                                                       \
                src[p * NE + e] = (T)AV(me, p, e);                                             \
        shmem_barrier_all();                                                                   \
        rc = shmem_##N##_alltoall(SHMEM_TEAM_WORLD, dst, src, NE);                             \
        CHECK_EQ(rc, 0, "shmem_" #N "_alltoall return");                                       \
        for (int p = 0; p < npes; p++)                                                         \
            for (int e = 0; e < NE; e++)                                                       \
                CHECK_EQ(dst[p * NE + e], (T)AV(p, me, e), "shmem_" #N "_alltoall: from PE %d [%d]", p, e); \
        for (size_t i = 0; i < cap; i++)                                                       \
            dst[i] = (T)0, src[i] = (T)0;                                                      \
        for (int p = 0; p < npes; p++)                                                         \
            for (int e = 0; e < 2; e++)                                                        \
                src[(p * 2 + e) * 3] = (T)AV(me, p, e);                                        \
        shmem_barrier_all();                                                                   \
        rc = shmem_##N##_alltoalls(SHMEM_TEAM_WORLD, dst, src, 2, 3, 2);                       \
        CHECK_EQ(rc, 0, "shmem_" #N "_alltoalls return");                                      \
        for (int j = 0; j < 4 * npes; j++)                                                     \
            CHECK_EQ(dst[j], (T)(j % 2 ? 0 : AV(j / 4, me, (j / 2) % 2)),                      \
                     "shmem_" #N "_alltoalls: dst[%d]", j);                                    \
        shmem_barrier_all();                                                                   \
        shmem_free(dst);                                                                       \
        shmem_free(src);                                                                       \
    }
RMA_TYPES(TEST_TEAM)

static void test_team_mem(void)
{
    size_t cap = (size_t)npes * 64;
    unsigned char *src = shmem_malloc(cap), *dst = shmem_calloc(cap, 1);
    int root = npes / 2;
    for (int i = 0; i < 64; i++)
        src[i] = (unsigned char)VAL(me, i);
    shmem_barrier_all();
    CHECK_EQ(shmem_broadcastmem(SHMEM_TEAM_WORLD, dst, src, 13, root), 0, "broadcastmem");
    for (int i = 0; i < 13; i++)
        CHECK_EQ(dst[i], (unsigned char)VAL(root, i), "shmem_broadcastmem: byte %d", i);
    shmem_barrier_all();
    CHECK_EQ(shmem_fcollectmem(SHMEM_TEAM_WORLD, dst, src, 7), 0, "fcollectmem");
    for (int i = 0; i < 7 * npes; i++)
        CHECK_EQ(dst[i], (unsigned char)VAL(i / 7, i % 7), "shmem_fcollectmem: byte %d", i);
    shmem_barrier_all();
    CHECK_EQ(shmem_collectmem(SHMEM_TEAM_WORLD, dst, src, (size_t)me + 1), 0, "collectmem");
    for (int p = 0, off = 0; p < npes; off += p + 1, p++)
        for (int i = 0; i <= p; i++)
            CHECK_EQ(dst[off + i], (unsigned char)VAL(p, i), "shmem_collectmem: PE %d's byte %d", p, i);
    shmem_barrier_all();
    for (int p = 0; p < npes; p++)
        for (int e = 0; e < 3; e++)
            src[p * 3 + e] = (unsigned char)(me * 40 + p * 4 + e);
    shmem_barrier_all();
    CHECK_EQ(shmem_alltoallmem(SHMEM_TEAM_WORLD, dst, src, 3), 0, "alltoallmem");
    for (int p = 0; p < npes; p++)
        for (int e = 0; e < 3; e++)
            CHECK_EQ(dst[p * 3 + e], (unsigned char)(p * 40 + me * 4 + e), "shmem_alltoallmem: from PE %d byte %d", p, e);
    shmem_barrier_all();
    for (int p = 0; p < npes; p++)
        src[p * 2 * 2] = (unsigned char)(me * 40 + p * 4), src[(p * 2 + 1) * 2] = (unsigned char)(me * 40 + p * 4 + 1);
    memset(dst, 0, cap);
    shmem_barrier_all();
    CHECK_EQ(shmem_alltoallsmem(SHMEM_TEAM_WORLD, dst, src, 3, 2, 2), 0, "alltoallsmem");
    for (int p = 0; p < npes; p++)
        for (int e = 0; e < 2; e++)
            CHECK_EQ(dst[(p * 2 + e) * 3], (unsigned char)(p * 40 + me * 4 + e), "shmem_alltoallsmem: from PE %d element %d", p, e);
    shmem_barrier_all();
    shmem_free(dst);
    shmem_free(src);
}

/* Reduction inputs: bitwise BV, max/min/sum RV (1..11), prod PV (1..3). */
#define BV(p, i) ((p + 1) * 37 + (i) * 11)
#define RV(p, i) (((p) * 7 + (i) * 3) % 11 + 1)
#define PV(p, i) (((p) + (i)) % 3 + 1)

#define RED_RUN(T, N, OP, GEN, FOLD)                                                           \
    do {                                                                                       \
        for (int i = 0; i < NR; i++)                                                           \
            src[i] = (T)GEN(me, i), dst[i] = (T)0;                                             \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(shmem_##N##_##OP##_reduce(SHMEM_TEAM_WORLD, dst, src, NR), 0,                 \
                 "shmem_" #N "_" #OP "_reduce return");                                        \
        for (int i = 0; i < NR; i++) {                                                         \
            T a = (T)GEN(0, i);                                                                \
            for (int p = 1; p < npes; p++) {                                                   \
                T b = (T)GEN(p, i);                                                            \
                a = (T)(FOLD);                                                                 \
            }                                                                                  \
            CHECK_EQ(dst[i], a, "shmem_" #N "_" #OP "_reduce: [%d]", i);                       \
        }                                                                                      \
        shmem_barrier_all();                                                                   \
    } while (0)

#define TEST_BITRED(T, N)                                                                      \
    static void test_bitred_##N(void)                                                          \
    {                                                                                          \
        T *src = shmem_malloc(NR * sizeof(T)), *dst = shmem_malloc(NR * sizeof(T));           \
        RED_RUN(T, N, and, BV, a & b);                                                         \
        RED_RUN(T, N, or, BV, a | b);                                                          \
        RED_RUN(T, N, xor, BV, a ^ b);                                                         \
        shmem_free(dst);                                                                       \
        shmem_free(src);                                                                       \
    }
#define TEST_ARITHRED(T, N)                                                                    \
    static void test_arithred_##N(void)                                                        \
    {                                                                                          \
        T *src = shmem_malloc(NR * sizeof(T)), *dst = shmem_malloc(NR * sizeof(T));           \
        RED_RUN(T, N, max, RV, a > b ? a : b);                                                 \
        RED_RUN(T, N, min, RV, a < b ? a : b);                                                 \
        RED_RUN(T, N, sum, RV, a + b);                                                         \
        RED_RUN(T, N, prod, PV, a * b);                                                        \
        for (int i = 0; i < NR; i++)                                                           \
            src[i] = (T)RV(me, i);                                                             \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(shmem_##N##_sum_reduce(SHMEM_TEAM_WORLD, src, src, NR), 0, "in place");       \
        for (int i = 0; i < NR; i++) {                                                         \
            T a = (T)0;                                                                        \
            for (int p = 0; p < npes; p++)                                                     \
                a = (T)(a + (T)RV(p, i));                                                      \
            CHECK_EQ(src[i], a, "shmem_" #N "_sum_reduce in place: [%d]", i);                  \
        }                                                                                      \
        shmem_barrier_all();                                                                   \
        shmem_free(dst);                                                                       \
        shmem_free(src);                                                                       \
    }
BITRED_TYPES(TEST_BITRED)
ARITHRED_TYPES(TEST_ARITHRED)

#define TEST_COMPLEXRED(T, N, MK)                                                              \
    static void test_complexred_##N(void)                                                      \
    {                                                                                          \
        T *src = shmem_malloc(NR * sizeof(T)), *dst = shmem_malloc(NR * sizeof(T)), s, p;      \
        for (int op = 0; op < 2; op++) {                                                       \
            for (int i = 0; i < NR; i++)                                                       \
                src[i] = MK(me + 1, i - 2);                                                    \
            shmem_barrier_all();                                                               \
            if (op == 0)                                                                       \
                CHECK_EQ(shmem_##N##_sum_reduce(SHMEM_TEAM_WORLD, dst, src, NR), 0, "sum");    \
            else                                                                               \
                CHECK_EQ(shmem_##N##_prod_reduce(SHMEM_TEAM_WORLD, dst, src, NR), 0, "prod");  \
            for (int i = 0; i < NR; i++) {                                                     \
                s = MK(0, 0), p = MK(1, 0);                                                    \
                for (int q = 0; q < npes; q++)                                                 \
                    s += MK(q + 1, i - 2), p *= MK(q + 1, i - 2);                              \
                T want = op ? p : s;                                                           \
                CHECK(dst[i] == want, "shmem_" #N "_%s_reduce: [%d] is %g%+gi, want %g%+gi",   \
                      op ? "prod" : "sum", i, (double)creal(dst[i]), (double)cimag(dst[i]),    \
                      (double)creal(want), (double)cimag(want));                               \
            }                                                                                  \
            shmem_barrier_all();                                                               \
        }                                                                                      \
        shmem_free(dst);                                                                       \
        shmem_free(src);                                                                       \
    }
/* a + bi from small integers, exactly (CMPLX is not in every <complex.h>) */
#define MKF(a, b) ((float)(a) + (float)(b) * (float _Complex)I)
#define MKD(a, b) ((double)(a) + (double)(b) * (double _Complex)I)
TEST_COMPLEXRED(float _Complex, complexf, MKF)
TEST_COMPLEXRED(double _Complex, complexd, MKD)

#ifndef FSH_TEST_OSHMEM
static int gi_src[NR], gi_dst[NR];
static double gd_src[NR], gd_dst[NR];
static void test_generic_reduce(void)
{
    for (int i = 0; i < NR; i++)
        gi_src[i] = RV(me, i), gd_src[i] = RV(me, i);
    shmem_barrier_all();
    shmem_sum_reduce(SHMEM_TEAM_WORLD, gi_dst, gi_src, NR);
    shmem_max_reduce(SHMEM_TEAM_WORLD, gd_dst, gd_src, NR);
    for (int i = 0; i < NR; i++) {
        int s = 0;
        double m = 0;
        for (int p = 0; p < npes; p++)
            s += RV(p, i), m = RV(p, i) > m ? RV(p, i) : m;
        CHECK_EQ(gi_dst[i], s, "shmem_sum_reduce (int): [%d]", i);
        CHECK_EQ(gd_dst[i], m, "shmem_max_reduce (double): [%d]", i);
    }
    shmem_barrier_all();
    shmem_broadcast(SHMEM_TEAM_WORLD, gi_dst, gi_src, NR, 0);
    CHECK_EQ(gi_dst[NR - 1], RV(0, NR - 1), "shmem_broadcast (int)");
    shmem_barrier_all();
}
#endif

#ifndef FSH_TEST_OSHMEM
/* The sum scans: PE p of the team gets the sum of RV over the team's PEs before it (and p,
 * inclusive), where team PE j is world PE start + j * stride. */
#define TEST_SCAN(T, N)                                                                        \
    static T scan_src_##N[NR], scan_dst_##N[NR];                                               \
    static void test_scan_##N(shmem_team_t team, int start, int stride)                        \
    {                                                                                          \
        int p = shmem_team_my_pe(team);                                                        \
        for (int inclusive = 1; inclusive >= 0; inclusive--) {                                 \
            for (int i = 0; i < NR; i++)                                                       \
                scan_src_##N[i] = (T)RV(me, i);                                                \
            shmem_team_sync(team);                                                             \
            T *dest = inclusive ? scan_dst_##N : scan_src_##N;                                 \
            int rc = inclusive ? shmemx_##N##_sum_inscan(team, dest, scan_src_##N, NR)         \
                               : shmemx_##N##_sum_exscan(team, dest, scan_src_##N, NR);        \
            CHECK_EQ(rc, 0, "shmemx_" #N "_sum_%sscan", inclusive ? "in" : "ex");              \
            for (int i = 0; i < NR; i++) {                                                     \
                T want = 0;                                                                    \
                for (int j = 0; j < p + inclusive; j++)                                        \
                    want += (T)RV(start + j * stride, i);                                      \
                CHECK_EQ(dest[i], want, "shmemx_" #N "_sum_%sscan: [%d]",                      \
                         inclusive ? "in" : "ex", i);                                          \
            }                                                                                  \
            shmem_team_sync(team);                                                             \
        }                                                                                      \
    }
TEST_SCAN(int, int)
TEST_SCAN(long, long)
TEST_SCAN(double, double)
#if defined(__x86_64__)
TEST_SCAN(long double, longdouble)

/* long double reductions keep its 64-bit significand: PE p gives 1 + (p + 1) * 2^-62, whose
 * sum over up to 4 PEs is exact in long double (in any order) and not in double. */
static long double ld_src[2], ld_dst[2];
static void test_longdouble_precision(void)
{
    const long double e = 0x1p-62L;
    ld_src[0] = 1.0L + (me + 1) * e;
    ld_src[1] = -ld_src[0];
    shmem_barrier_all();
    CHECK_EQ(shmem_longdouble_sum_reduce(SHMEM_TEAM_WORLD, ld_dst, ld_src, 2), 0, "sum");
    long double want = npes + npes * (npes + 1) / 2 * e;
    CHECK_EQ(ld_dst[0], want, "shmem_longdouble_sum_reduce: 64-bit significands");
    CHECK_EQ((double)want, (double)npes, "the low bits are below a double's");
    CHECK_EQ(ld_dst[1], -want, "shmem_longdouble_sum_reduce: [1]");
    shmem_barrier_all();
    shmem_max_reduce(SHMEM_TEAM_WORLD, ld_dst, ld_src, 2);
    CHECK_EQ(ld_dst[0], 1.0L + npes * e, "shmem_max_reduce (long double)");
    CHECK_EQ(ld_dst[1], -(1.0L + e), "shmem_max_reduce (long double): [1]");
    shmem_barrier_all();
    shmem_min_reduce(SHMEM_TEAM_WORLD, ld_dst, ld_src, 1);
    CHECK_EQ(ld_dst[0], 1.0L + e, "shmem_min_reduce (long double)");
    shmem_barrier_all();
}
#endif

static void test_scans(void)
{
    test_scan_int(SHMEM_TEAM_WORLD, 0, 1);
    test_scan_long(SHMEM_TEAM_WORLD, 0, 1);
    test_scan_double(SHMEM_TEAM_WORLD, 0, 1);
#if defined(__x86_64__)
    test_scan_longdouble(SHMEM_TEAM_WORLD, 0, 1);
    test_longdouble_precision();
#endif
    shmem_team_t odd = SHMEM_TEAM_INVALID;
    if (npes >= 2)
        shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 2, npes / 2, NULL, 0, &odd);
    if (odd != SHMEM_TEAM_INVALID) {
        test_scan_long(odd, 1, 2);
        for (int i = 0; i < NR; i++)
            gi_src[i] = RV(me, i);
        shmem_team_sync(odd);
        shmemx_sum_inscan(odd, gi_dst, gi_src, NR);
        for (int i = 0; i < NR; i++) {
            int s = 0;
            for (int j = 0; j <= shmem_team_my_pe(odd); j++)
                s += RV(1 + 2 * j, i);
            CHECK_EQ(gi_dst[i], s, "shmemx_sum_inscan (int) on the odd PEs: [%d]", i);
        }
        shmem_team_destroy(odd);
    }
    shmem_barrier_all();
}
#endif

/* ---- deprecated active-set collectives ---------------------------------------------------- */

#define SYNC_MAX 64
static long psync[2][SYNC_MAX];
static int psync_turn;
/* Alternating pSync arrays; callers still put a barrier between collectives. */
static long *next_psync(void) { return psync[psync_turn ^= 1]; }

static uint64_t as_src[64], as_dst[64 * 8];

#define TEST_ACTIVESET(B, U)                                                                   \
    static void test_activeset_##B(void)                                                       \
    {                                                                                          \
        U *src = (U *)as_src, *dst = (U *)as_dst;                                              \
        int root = npes - 1;                                                                   \
        for (int i = 0; i < 32; i++)                                                           \
            src[i] = (U)VAL(me, i);                                                            \
        memset(as_dst, 0, sizeof as_dst);                                                      \
        shmem_barrier_all();                                                                   \
        shmem_broadcast##B(dst, src, 5, root, 0, 0, npes, next_psync());                       \
        if (me != root)                                                                        \
            for (int i = 0; i < 5; i++)                                                        \
                CHECK_EQ(dst[i], (U)VAL(root, i), "shmem_broadcast" #B ": [%d]", i);           \
        shmem_barrier_all();                                                                   \
        shmem_fcollect##B(dst, src, 4, 0, 0, npes, next_psync());                              \
        for (int i = 0; i < 4 * npes; i++)                                                     \
            CHECK_EQ(dst[i], (U)VAL(i / 4, i % 4), "shmem_fcollect" #B ": [%d]", i);           \
        shmem_barrier_all();                                                                   \
        shmem_collect##B(dst, src, (size_t)(me % 3 + 1), 0, 0, npes, next_psync());            \
        for (int p = 0, off = 0; p < npes; off += p % 3 + 1, p++)                              \
            for (int i = 0; i < p % 3 + 1; i++)                                                \
                CHECK_EQ(dst[off + i], (U)VAL(p, i), "shmem_collect" #B ": PE %d's [%d]", p, i); \
        shmem_barrier_all();                                                                   \
        for (int p = 0; p < npes; p++)                                                         \
            for (int e = 0; e < 2; e++)                                                        \
                src[p * 2 + e] = (U)AV(me, p, e);                                              \
        shmem_barrier_all();                                                                   \
        shmem_alltoall##B(dst, src, 2, 0, 0, npes, next_psync());                              \
        for (int p = 0; p < npes; p++)                                                         \
            for (int e = 0; e < 2; e++)                                                        \
                CHECK_EQ(dst[p * 2 + e], (U)AV(p, me, e), "shmem_alltoall" #B ": from PE %d [%d]", p, e); \
        memset(as_src, 0, sizeof as_src);                                                      \
        memset(as_dst, 0, sizeof as_dst);                                                      \
        for (int p = 0; p < npes; p++)                                                         \
            for (int e = 0; e < 2; e++)                                                        \
                src[(p * 2 + e) * 3] = (U)AV(me, p, e);                                        \
        shmem_barrier_all();                                                                   \
        shmem_alltoalls##B(dst, src, 2, 3, 2, 0, 0, npes, next_psync());                       \
        for (int j = 0; j < 4 * npes; j++)                                                     \
            CHECK_EQ(dst[j], (U)(j % 2 ? 0 : AV(j / 4, me, (j / 2) % 2)),                      \
                     "shmem_alltoalls" #B ": dst[%d]", j);                                     \
        shmem_barrier_all();                                                                   \
    }
TEST_ACTIVESET(32, uint32_t)
TEST_ACTIVESET(64, uint64_t)

/* *_to_all on the active set (0, logstride, size): members reduce, every PE barriers after. */
#define TOALL(T, N, OP, GEN, FOLD)                                                             \
    static void toall_##N##_##OP(int logstride, int size)                                      \
    {                                                                                          \
        static T src[NR], dst[NR], wrk[NR / 2 + 1 + SHMEM_REDUCE_MIN_WRKDATA_SIZE];            \
        int stride = 1 << logstride;                                                           \
        for (int i = 0; i < NR; i++)                                                           \
            src[i] = (T)GEN(me, i), dst[i] = (T)0;                                             \
        shmem_barrier_all();                                                                   \
        if (me % stride == 0 && me / stride < size) {                                          \
            shmem_##N##_##OP##_to_all(dst, src, NR, 0, logstride, size, wrk, next_psync());    \
            for (int i = 0; i < NR; i++) {                                                     \
                T a = (T)GEN(0, i);                                                            \
                for (int p = stride; p < size * stride; p += stride) {                         \
                    T b = (T)GEN(p, i);                                                        \
                    a = (T)(FOLD);                                                             \
                }                                                                              \
                CHECK_EQ(dst[i], a, "shmem_" #N "_" #OP "_to_all (stride %d, %d PEs): [%d]",   \
                         stride, size, i);                                                     \
            }                                                                                  \
        }                                                                                      \
        shmem_barrier_all();                                                                   \
    }
#define TOALL_ARITH(T, N)                                                                      \
    TOALL(T, N, max, RV, a > b ? a : b) TOALL(T, N, min, RV, a < b ? a : b)                   \
    TOALL(T, N, sum, RV, a + b) TOALL(T, N, prod, PV, a * b)
#define TOALL_BIT(T, N)                                                                        \
    TOALL(T, N, and, BV, a & b) TOALL(T, N, or, BV, a | b) TOALL(T, N, xor, BV, a ^ b)
TOALL_ARITH(int, int)
TOALL_ARITH(long, long)
TOALL_ARITH(double, double)
#if defined(__x86_64__) && !defined(FSH_TEST_OSHMEM)
TOALL_ARITH(long double, longdouble)
#endif
TOALL_BIT(int, int)
TOALL_BIT(long, long)

static void run_toall(int logstride, int size)
{
#define RUN_OPS(N) toall_##N##_max(logstride, size); toall_##N##_min(logstride, size); \
    toall_##N##_sum(logstride, size); toall_##N##_prod(logstride, size);
    RUN_OPS(int)
    RUN_OPS(long)
    RUN_OPS(double)
#if defined(__x86_64__) && !defined(FSH_TEST_OSHMEM)
    RUN_OPS(longdouble)
#endif
    toall_int_and(logstride, size);
    toall_int_or(logstride, size);
    toall_int_xor(logstride, size);
    toall_long_and(logstride, size);
    toall_long_or(logstride, size);
    toall_long_xor(logstride, size);
}

int main(void)
{
    test_init();
    for (int i = 0; i < SYNC_MAX; i++)
        psync[0][i] = psync[1][i] = SHMEM_SYNC_VALUE;
    shmem_barrier_all();
#define RUN(T, N) test_team_##N();
    RMA_TYPES(RUN)
    test_team_mem();
    ok("collectives team: broadcast fcollect collect alltoall alltoalls, 24 TYPENAMEs and mem");
#undef RUN
#define RUN(T, N) test_bitred_##N();
    BITRED_TYPES(RUN)
#undef RUN
#define RUN(T, N) test_arithred_##N();
    ARITHRED_TYPES(RUN)
    test_complexred_complexf();
    test_complexred_complexd();
#ifndef FSH_TEST_OSHMEM
    test_generic_reduce();
    ok("collectives reduce: and or xor (14 TYPENAMEs), max min sum prod (24 and long double on x86-64), in place, "
       "complexf complexd, C11 names");
#else
    ok("collectives reduce: and or xor (14 TYPENAMEs), max min sum prod (24 and long double on x86-64), in place, "
       "complexf complexd (C11 names skipped on OSHMEM)");
#endif
    test_activeset_32();
    test_activeset_64();
    ok("collectives active-set: broadcast collect fcollect alltoall alltoalls 32 and 64");
    run_toall(0, npes);
    if (npes >= 2)
        run_toall(1, (npes + 1) / 2);
    ok(npes >= 2 ? "collectives to_all: int long double (and long double), all PEs and the even PEs"
                 : "collectives to_all: int long double (and long double), all PEs (1 PE: no strided set)");
#ifndef FSH_TEST_OSHMEM
    test_scans();
    ok(npes >= 2 ? "collectives scan: int long double long-double, in place, C11 name, world and odd PEs"
                 : "collectives scan: int long double long-double, in place, world (1 PE: no odd team)");
#if defined(__x86_64__)
    ok("collectives long double: sum max min keep 64-bit significands, C11 names");
#endif
#endif
    shmem_finalize();
    return 0;
}
