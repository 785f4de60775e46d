/*
 * amo.c: atomic memory operations.
 *
 *   ok amo extended     every extended-AMO TYPENAME: atomic_set, atomic_fetch, atomic_swap on
 *                       the next PE, atomic_compare_swap (failing and succeeding) for the
 *                       standard ones
 *   ok amo contention   every standard-AMO TYPENAME: all PEs fetch_inc a counter on PE 0 (each
 *                       fetched value seen exactly once), then inc, fetch_add, add; the total
 *   ok amo bitwise      every bitwise-AMO TYPENAME: or, fetch_and, fetch_xor, xor, fetch_or, and
 *                       by all PEs on one word of PE 0, each PE owning one bit
 *   ok amo nbi          the nonblocking fetching AMOs (1.5), completed by shmem_quiet
 *   ok amo generic      the C11 names shmem_atomic_*
 *   ok amo deprecated   shmem_TYPENAME_fadd/finc/add/inc/cswap/swap/fetch/set, shmem_swap
 */
#include "check.h"

#define K 10 /* operations per PE in the contention tests */


/* fetch, set, swap (extended types) and compare_swap (standard types) on the next PE's word. */
#define TEST_EXT(T, N)                                                                         \
    static void test_ext_##N(void)                                                             \
    {                                                                                          \
        T *x = shmem_calloc(1, sizeof(T));                                                     \
        int next = next_pe(), prev = prev_pe();                                                \
        shmem_##N##_atomic_set(x, (T)(me + 1), next);                                          \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(*x, (T)(prev + 1), "shmem_" #N "_atomic_set from PE %d", prev);               \
        CHECK_EQ(shmem_##N##_atomic_fetch(x, next), (T)(me + 1), "shmem_" #N "_atomic_fetch");  \
        CHECK_EQ(shmem_##N##_atomic_fetch(x, me), (T)(prev + 1), "shmem_" #N "_atomic_fetch (own)"); \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(shmem_##N##_atomic_swap(x, (T)(me + 41), next), (T)(me + 1),                  \
                 "shmem_" #N "_atomic_swap old value");                                        \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(*x, (T)(prev + 41), "shmem_" #N "_atomic_swap new value");                    \
        shmem_barrier_all();                                                                   \
        shmem_free(x);                                                                         \
    }
#define TEST_CSWAP(T, N)                                                                       \
    static void test_cswap_##N(void)                                                           \
    {                                                                                          \
        T *x = shmem_calloc(1, sizeof(T));                                                     \
        int next = next_pe(), prev = prev_pe();                                                \
        if (CSWAP_SKIPPED(T)) {                                                                \
            shmem_free(x);                                                                     \
            return;                                                                            \
        }                                                                                      \
        shmem_##N##_atomic_set(x, (T)(me + 1), next);                                          \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(shmem_##N##_atomic_compare_swap(x, (T)(me + 2), (T)(me + 7), next), (T)(me + 1), \
                 "shmem_" #N "_atomic_compare_swap (no match) old value");                     \
        CHECK_EQ(shmem_##N##_atomic_compare_swap(x, (T)(me + 1), (T)(me + 9), next), (T)(me + 1), \
                 "shmem_" #N "_atomic_compare_swap (match) old value");                        \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(*x, (T)(prev + 9), "shmem_" #N "_atomic_compare_swap new value");             \
        shmem_barrier_all();                                                                   \
        shmem_free(x);                                                                         \
    }

/* All PEs on PE 0's counter: K fetch_inc each (PE 0 marks which values came back, each must
 * come back once), then K inc, K fetch_add(2), K add(3): the total is 7 * K * npes. */
#define TEST_CONTENTION(T, N)                                                                  \
    static void test_contention_##N(void)                                                      \
    {                                                                                          \
        T *ctr = shmem_calloc(1, sizeof(T)), prev = (T)0;                                      \
        int *seen = shmem_calloc((size_t)(K * npes), sizeof(int));                             \
        for (int k = 0; k < K; k++) {                                                          \
            T v = shmem_##N##_atomic_fetch_inc(ctr, 0);                                        \
            CHECK((long double)v >= 0 && v < (T)(K * npes), "shmem_" #N "_atomic_fetch_inc gave %Lg",    \
                  (long double)v);                                                             \
            CHECK(k == 0 || v > prev, "shmem_" #N "_atomic_fetch_inc: %Lg after %Lg",          \
                  (long double)v, (long double)prev);                                          \
            prev = v;                                                                          \
            shmem_int_atomic_inc(&seen[(int)v], 0);                                            \
        }                                                                                      \
        shmem_barrier_all();                                                                   \
        if (me == 0)                                                                           \
            for (int i = 0; i < K * npes; i++)                                                 \
                CHECK_EQ(seen[i], 1, "shmem_" #N "_atomic_fetch_inc: times value %d came back", i); \
        for (int k = 0; k < K; k++) {                                                          \
            shmem_##N##_atomic_inc(ctr, 0);                                                    \
            T v = shmem_##N##_atomic_fetch_add(ctr, (T)2, 0);                                  \
            CHECK(v >= (T)(K * npes) && v < (T)(7 * K * npes), "shmem_" #N "_atomic_fetch_add gave %Lg", \
                  (long double)v);                                                             \
            shmem_##N##_atomic_add(ctr, (T)3, 0);                                              \
        }                                                                                      \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(shmem_##N##_atomic_fetch(ctr, 0), (T)(7 * K * npes),                          \
                 "counter after fetch_inc, inc, fetch_add, add (" #N ")");                     \
        shmem_barrier_all();                                                                   \
        shmem_free(seen);                                                                      \
        shmem_free(ctr);                                                                       \
    }

/* Bit of PE p in the bitwise tests (with more than 16 PEs bits are shared and only the final
 * values are checked). The word is read with fetch_or(0): OSHMEM 4.1 has no atomic_fetch on
 * int32/int64/uint32/uint64, and fetch_or is in every bitwise type. */
#define BIT(T, p) ((T)((T)1 << ((p) % 16)))
#define TEST_BITWISE(T, N)                                                                     \
    static void test_bitwise_##N(void)                                                         \
    {                                                                                          \
        T *x = shmem_calloc(1, sizeof(T)), mask = (T)0, mine = BIT(T, me), old;                \
        int unique = npes <= 16; /* each PE's bit its own */                                   \
        for (int p = 0; p < npes; p++)                                                         \
            mask = (T)(mask | BIT(T, p));                                                      \
        shmem_##N##_atomic_or(x, mine, 0);                                                     \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(shmem_##N##_atomic_fetch_or(x, (T)0, 0), mask, "shmem_" #N "_atomic_or");              \
        shmem_barrier_all();                                                                   \
        old = shmem_##N##_atomic_fetch_and(x, (T)~mine, 0);                                    \
        CHECK(!unique || (old & mine), "shmem_" #N "_atomic_fetch_and: old value lacks my bit"); \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(shmem_##N##_atomic_fetch_or(x, (T)0, 0), (T)0, "shmem_" #N "_atomic_fetch_and");       \
        shmem_barrier_all();                                                                   \
        old = shmem_##N##_atomic_fetch_xor(x, mine, 0);                                        \
        CHECK(!unique || !(old & mine), "shmem_" #N "_atomic_fetch_xor: old value has my bit"); \
        shmem_barrier_all();                                                                   \
        CHECK(!unique || shmem_##N##_atomic_fetch_or(x, (T)0, 0) == mask,                     \
              "shmem_" #N "_atomic_fetch_xor");                                                \
        shmem_barrier_all();                                                                   \
        shmem_##N##_atomic_xor(x, mine, 0);                                                    \
        shmem_barrier_all();                                                                   \
        CHECK(!unique || shmem_##N##_atomic_fetch_or(x, (T)0, 0) == (T)0, "shmem_" #N "_atomic_xor");   \
        shmem_barrier_all();                                                                   \
        if (me == 0)                                                                           \
            *x = (T)0;                                                                         \
        shmem_barrier_all();                                                                   \
        old = shmem_##N##_atomic_fetch_or(x, mine, 0);                                         \
        CHECK(!unique || !(old & mine), "shmem_" #N "_atomic_fetch_or: old value has my bit"); \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(shmem_##N##_atomic_fetch_or(x, (T)0, 0), mask, "shmem_" #N "_atomic_fetch_or");        \
        shmem_barrier_all();                                                                   \
        shmem_##N##_atomic_and(x, (T)~mine, 0);                                                \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(shmem_##N##_atomic_fetch_or(x, (T)0, 0), (T)0, "shmem_" #N "_atomic_and");             \
        shmem_barrier_all();                                                                   \
        shmem_free(x);                                                                         \
    }

/* Nonblocking fetching AMOs on the next PE's word; each result checked after shmem_quiet. */
#define TEST_NBI_EXT(T, N)                                                                     \
    static void test_nbi_ext_##N(void)                                                         \
    {                                                                                          \
        T *x = shmem_calloc(1, sizeof(T)), f = (T)0;                                           \
        int next = next_pe();                                                                  \
        shmem_##N##_atomic_set(x, (T)(me + 3), next);                                          \
        shmem_quiet();                                                                         \
        shmem_##N##_atomic_fetch_nbi(&f, x, next);                                             \
        shmem_quiet();                                                                         \
        CHECK_EQ(f, (T)(me + 3), "shmem_" #N "_atomic_fetch_nbi");                             \
        shmem_##N##_atomic_swap_nbi(&f, x, (T)(me + 5), next);                                 \
        shmem_quiet();                                                                         \
        CHECK_EQ(f, (T)(me + 3), "shmem_" #N "_atomic_swap_nbi old value");                    \
        CHECK_EQ(shmem_##N##_atomic_fetch(x, next), (T)(me + 5), "shmem_" #N "_atomic_swap_nbi"); \
        shmem_barrier_all();                                                                   \
        shmem_free(x);                                                                         \
    }
#define TEST_NBI_STD(T, N)                                                                     \
    static void test_nbi_std_##N(void)                                                         \
    {                                                                                          \
        T *x = shmem_calloc(1, sizeof(T)), f = (T)0, g = (T)0;                                 \
        int next = next_pe();                                                                  \
        shmem_##N##_atomic_set(x, (T)(me + 3), next);                                          \
        shmem_quiet();                                                                         \
        if (CSWAP_SKIPPED(T)) {                                                                \
            shmem_##N##_atomic_set(x, (T)(me + 10), next);                                     \
        } else {                                                                               \
            shmem_##N##_atomic_compare_swap_nbi(&f, x, (T)(me + 3), (T)(me + 10), next);       \
            shmem_quiet();                                                                     \
            CHECK_EQ(f, (T)(me + 3), "shmem_" #N "_atomic_compare_swap_nbi old value");        \
        }                                                                                      \
        shmem_##N##_atomic_fetch_inc_nbi(&f, x, next);                                         \
        shmem_quiet();                                                                         \
        CHECK_EQ(f, (T)(me + 10), "shmem_" #N "_atomic_fetch_inc_nbi");                        \
        shmem_##N##_atomic_fetch_add_nbi(&f, x, (T)4, next);                                   \
        shmem_##N##_atomic_fetch_add_nbi(&g, x, (T)4, next);                                   \
        shmem_quiet();                                                                         \
        CHECK(f == (T)(me + 11) || g == (T)(me + 11), "shmem_" #N "_atomic_fetch_add_nbi");    \
        CHECK_EQ(shmem_##N##_atomic_fetch(x, next), (T)(me + 19), "shmem_" #N "_atomic_fetch_add_nbi sum"); \
        shmem_barrier_all();                                                                   \
        shmem_free(x);                                                                         \
    }
#define TEST_NBI_BIT(T, N)                                                                     \
    static void test_nbi_bit_##N(void)                                                         \
    {                                                                                          \
        T *x = shmem_calloc(1, sizeof(T)), f = (T)0;                                           \
        int next = next_pe();                                                                  \
        shmem_##N##_atomic_or(x, (T)6, next);                                                 \
        shmem_quiet();                                                                         \
        shmem_##N##_atomic_fetch_and_nbi(&f, x, (T)3, next);                                   \
        shmem_quiet();                                                                         \
        CHECK_EQ(f, (T)6, "shmem_" #N "_atomic_fetch_and_nbi");                                \
        shmem_##N##_atomic_fetch_or_nbi(&f, x, (T)8, next);                                    \
        shmem_quiet();                                                                         \
        CHECK_EQ(f, (T)2, "shmem_" #N "_atomic_fetch_or_nbi");                                 \
        shmem_##N##_atomic_fetch_xor_nbi(&f, x, (T)15, next);                                  \
        shmem_quiet();                                                                         \
        CHECK_EQ(f, (T)10, "shmem_" #N "_atomic_fetch_xor_nbi");                               \
        CHECK_EQ(shmem_##N##_atomic_fetch_or(x, (T)0, next), (T)5, "shmem_" #N " word after nbi and/or/xor"); \
        shmem_barrier_all();                                                                   \
        shmem_free(x);                                                                         \
    }

#define EXT_TYPES(X) AMO_TYPES(X) X(float, float) X(double, double)
EXT_TYPES(TEST_EXT)
AMO_TYPES(TEST_CSWAP)
AMO_TYPES(TEST_CONTENTION)
BITAMO_TYPES(TEST_BITWISE)
EXT_TYPES(TEST_NBI_EXT)
AMO_TYPES(TEST_NBI_STD)
BITAMO_TYPES(TEST_NBI_BIT)

/* The C11 generic names on int, long long, unsigned long and double words of PE 0. */
static int g_i;
static long long g_ll;
static unsigned long g_ul;
static double g_d;
static void test_generic(void)
{
    shmem_atomic_set(&g_d, 1.5, 0);
    shmem_atomic_fetch_add(&g_i, 1, 0);
    shmem_atomic_add(&g_ll, 2LL, 0);
    shmem_atomic_inc(&g_ll, 0);
    (void)shmem_atomic_fetch_inc(&g_i, 0);
    shmem_atomic_or(&g_ul, 1UL << (me % 32), 0);
    shmem_barrier_all();
    CHECK_EQ(shmem_atomic_fetch(&g_i, 0), 2 * npes, "shmem_atomic_fetch_add/fetch_inc (int)");
    CHECK_EQ(shmem_atomic_fetch(&g_ll, 0), 3LL * npes, "shmem_atomic_add/inc (long long)");
    CHECK_EQ(shmem_atomic_fetch(&g_d, 0), 1.5, "shmem_atomic_set/fetch (double)");
    shmem_barrier_all();
    CHECK_EQ(shmem_atomic_swap(&g_d, 2.5, me), me == 0 ? 1.5 : 0.0, "shmem_atomic_swap (double)");
    unsigned long m = 0;
    for (int p = 0; p < npes; p++)
        m |= 1UL << (p % 32);
    CHECK_EQ(shmem_atomic_fetch_xor(&g_ul, 0UL, 0), m, "shmem_atomic_or/fetch_xor (unsigned long)");
    shmem_barrier_all();
    long long old = shmem_atomic_compare_swap(&g_ll, 3LL * npes, 6LL + me, 0);
    shmem_barrier_all();
    CHECK(old == 3LL * npes || old >= 6, "shmem_atomic_compare_swap gave %lld", old);
    CHECK(shmem_atomic_fetch(&g_ll, 0) >= 6, "shmem_atomic_compare_swap: no PE won");
    shmem_barrier_all();
#ifndef FSH_TEST_OSHMEM
    int f = 0;
    shmem_atomic_fetch_nbi(&f, &g_i, 0);
    shmem_atomic_fetch_add_nbi(SHMEM_CTX_DEFAULT, &f, &g_i, 0, 0);
    shmem_quiet();
    CHECK_EQ(f, 2 * npes, "shmem_atomic_fetch_nbi / fetch_add_nbi (ctx)");
#endif
    shmem_barrier_all();
}

/* The pre-1.4 names: every PE on PE 0's word (int, long, long long), then swap, cswap, fetch,
 * set on the next PE's word (int, long, long long, and float and double for swap/fetch/set). */
#define TEST_OLD(T, N)                                                                         \
    static void test_old_##N(void)                                                             \
    {                                                                                          \
        T *x = shmem_calloc(2, sizeof(T));                                                     \
        int next = next_pe(), prev = prev_pe();                                                \
        T v = shmem_##N##_fadd(x, (T)2, 0);                                                    \
        CHECK(v >= 0 && v < (T)(5 * npes), "shmem_" #N "_fadd gave %Lg", (long double)v);      \
        v = shmem_##N##_finc(x, 0);                                                            \
        CHECK(v >= 0 && v < (T)(5 * npes), "shmem_" #N "_finc gave %Lg", (long double)v);      \
        shmem_##N##_add(x, (T)1, 0);                                                           \
        shmem_##N##_inc(x, 0);                                                                 \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(shmem_##N##_fetch(x, 0), (T)(5 * npes), "shmem_" #N "_fadd/finc/add/inc total"); \
        shmem_##N##_set(&x[1], (T)(me + 1), next);                                             \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(x[1], (T)(prev + 1), "shmem_" #N "_set");                                     \
        shmem_barrier_all();                                                                   \
        if (CSWAP_SKIPPED(T))                                                                  \
            shmem_##N##_set(&x[1], (T)(me + 20), next);                                        \
        else                                                                                   \
            CHECK_EQ(shmem_##N##_cswap(&x[1], (T)(me + 1), (T)(me + 20), next), (T)(me + 1),   \
                     "shmem_" #N "_cswap");                                                    \
        CHECK_EQ(shmem_##N##_swap(&x[1], (T)(me + 30), next), (T)(me + 20), "shmem_" #N "_swap"); \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(x[1], (T)(prev + 30), "shmem_" #N "_swap new value");                         \
        shmem_barrier_all();                                                                   \
        shmem_free(x);                                                                         \
    }
#define TEST_OLD_FLOAT(T, N)                                                                   \
    static void test_old_##N(void)                                                             \
    {                                                                                          \
        T *x = shmem_calloc(1, sizeof(T));                                                     \
        int next = next_pe(), prev = prev_pe();                                                \
        shmem_##N##_set(x, (T)(me + 1), next);                                                 \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(shmem_##N##_fetch(x, me), (T)(prev + 1), "shmem_" #N "_set/fetch");           \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(shmem_##N##_swap(x, (T)(me + 30), next), (T)(me + 1), "shmem_" #N "_swap");   \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(*x, (T)(prev + 30), "shmem_" #N "_swap new value");                           \
        shmem_barrier_all();                                                                   \
        shmem_free(x);                                                                         \
    }
TEST_OLD(int, int)
TEST_OLD(long, long)
TEST_OLD(long long, longlong)
TEST_OLD_FLOAT(float, float)
TEST_OLD_FLOAT(double, double)

static long old_word;
static void test_old_swap(void)
{
    shmem_barrier_all();
    long old = shmem_swap(&old_word, (long)(me + 1), next_pe());
    CHECK_EQ(old, 0L, "shmem_swap old value");
    shmem_barrier_all();
    CHECK_EQ(old_word, (long)(prev_pe() + 1), "shmem_swap new value");
    shmem_barrier_all();
}

int main(void)
{
    test_init();
#define RUN(T, N) test_ext_##N();
    EXT_TYPES(RUN)
#undef RUN
#define RUN(T, N) test_cswap_##N();
    AMO_TYPES(RUN)
#ifdef FSH_TEST_OSHMEM
    ok("amo extended: set fetch swap compare_swap (skipped on OSHMEM: int32 int64 uint32 uint64 "
       "size ptrdiff, which it lacks, and 32-bit compare_swap, which it breaks)");
#else
    ok("amo extended: set fetch swap (14 TYPENAMEs) compare_swap (12)");
#endif
#undef RUN
#define RUN(T, N) test_contention_##N();
    AMO_TYPES(RUN)
    ok("amo contention: fetch_inc inc fetch_add add by every PE on PE 0");
#undef RUN
#define RUN(T, N) test_bitwise_##N();
    BITAMO_TYPES(RUN)
    ok("amo bitwise: and or xor, fetching and not, 7 TYPENAMEs");
#undef RUN
#define RUN(T, N) test_nbi_ext_##N(); test_nbi_std_##N();
    AMO_TYPES(RUN)
    test_nbi_ext_float();
    test_nbi_ext_double();
#undef RUN
#define RUN(T, N) test_nbi_bit_##N();
    BITAMO_TYPES(RUN)
    ok("amo nbi: fetch swap compare_swap fetch_inc fetch_add fetch_and fetch_or fetch_xor _nbi");
    test_generic();
    ok("amo generic: C11 shmem_atomic_* names");
    test_old_int();
    test_old_long();
    test_old_longlong();
    test_old_float();
    test_old_double();
    test_old_swap();
    ok("amo deprecated: fadd finc add inc cswap swap fetch set, shmem_swap");
    shmem_finalize();
    return 0;
}
