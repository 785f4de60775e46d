/*
 * signal.c: put-with-signal and signal words (OpenSHMEM 1.5).
 *
 *   ok signal set       every RMA TYPENAME: shmem_TYPENAME_put_signal (SET) to the next PE; it
 *                       waits with shmem_signal_wait_until (EQ), then checks the data and
 *                       shmem_signal_fetch
 *   ok signal add       every PE's shmem_TYPENAME_put_signal_nbi (ADD 1) into its own slot on
 *                       PE 0; PE 0 waits for GE n_pes and checks every slot
 *   ok signal sized     put8..put128_signal(_nbi), putmem_signal(_nbi), SET and ADD
 *   ok signal order     a 1 MiB putmem_signal_nbi: when the signal is seen the data is there
 *   ok signal cmp       signal_wait_until with NE, GT, GE, LT, LE returns the word's value
 *   ok signal shmemx    ferroshmem's shmemx_signal_add and shmemx_signal_set
 * Signal words come from shmem_malloc_with_hints(SHMEM_MALLOC_SIGNAL_REMOTE) and shmem_calloc.
 */
#include "check.h"

#ifndef FSH_TEST_OSHMEM
#include <shmemx.h>
#endif

#define NE 8
static uint64_t *sig;   /* one signal word per PE, hinted */
static uint64_t round_; /* a new value for every SET round, the same on all PEs */

/* Round value r from PE pe: distinct across rounds and PEs, never 0. */
#define SIGVAL(r, pe) (((uint64_t)(r) << 16) | (uint64_t)((pe) + 1))

#define TEST_SET(T, N)                                                                         \
    static void test_set_##N(int nbi)                                                          \
    {                                                                                          \
        T *dst = shmem_calloc(NE, sizeof(T)), src[NE];                                         \
        int next = next_pe(), prev = prev_pe();                                                \
        uint64_t r = ++round_;                                                                 \
        for (int i = 0; i < NE; i++)                                                           \
            src[i] = (T)VAL(me, i + (int)r);                                                   \
        if (nbi) {                                                                             \
            shmem_##N##_put_signal_nbi(dst, src, NE, sig, SIGVAL(r, me), SHMEM_SIGNAL_SET, next); \
            shmem_quiet();                                                                     \
        } else                                                                                 \
            shmem_##N##_put_signal(dst, src, NE, sig, SIGVAL(r, me), SHMEM_SIGNAL_SET, next);  \
        uint64_t got = shmem_signal_wait_until(sig, SHMEM_CMP_EQ, SIGVAL(r, prev));            \
        CHECK(got == SIGVAL(r, prev), "shmem_signal_wait_until (EQ) returned %llx",            \
              (unsigned long long)got);                                                        \
        CHECK(shmem_signal_fetch(sig) == SIGVAL(r, prev), "shmem_signal_fetch after " #N);     \
        for (int i = 0; i < NE; i++)                                                           \
            CHECK_EQ(dst[i], (T)VAL(prev, i + (int)r), "shmem_" #N "_put_signal%s: dst[%d]",  \
                     nbi ? "_nbi" : "", i);                                                    \
        shmem_barrier_all();                                                                   \
        shmem_free(dst);                                                                       \
    }
RMA_TYPES(TEST_SET)

#define TEST_ADD(T, N)                                                                         \
    static void test_add_##N(int nbi)                                                          \
    {                                                                                          \
        T *dst = shmem_calloc((size_t)NE * npes, sizeof(T)), src[NE];                          \
        uint64_t *ctr = shmem_calloc(1, sizeof(uint64_t));                                     \
        for (int i = 0; i < NE; i++)                                                           \
            src[i] = (T)VAL(me, i);                                                            \
        if (nbi) {                                                                             \
            shmem_##N##_put_signal_nbi(dst + NE * me, src, NE, ctr, 1, SHMEM_SIGNAL_ADD, 0);   \
            shmem_quiet();                                                                     \
        } else                                                                                 \
            shmem_##N##_put_signal(dst + NE * me, src, NE, ctr, 1, SHMEM_SIGNAL_ADD, 0);       \
        if (me == 0) {                                                                         \
            uint64_t got = shmem_signal_wait_until(ctr, SHMEM_CMP_GE, (uint64_t)npes);         \
            CHECK(got == (uint64_t)npes, "signal after %d adds is %llu", npes,                 \
                  (unsigned long long)got);                                                    \
            for (int p = 0; p < npes; p++)                                                     \
                for (int i = 0; i < NE; i++)                                                   \
                    CHECK_EQ(dst[NE * p + i], (T)VAL(p, i), "shmem_" #N "_put_signal%s ADD: PE %d's slot [%d]", \
                             nbi ? "_nbi" : "", p, i);                                         \
        }                                                                                      \
        shmem_barrier_all();                                                                   \
        shmem_free(ctr);                                                                       \
        shmem_free(dst);                                                                       \
    }
RMA_TYPES(TEST_ADD)

/* Sized and byte forms: BITS is 8..128 or mem; BYTES the size of one element. */
#define TEST_SIZED(BITS, BYTES)                                                                \
    static void test_sized_##BITS(void)                                                        \
    {                                                                                          \
        unsigned char *dst = shmem_calloc(4 * (size_t)(BYTES) * (npes + 1), 1), src[4 * 16];   \
        uint64_t *ctr = shmem_calloc(1, sizeof(uint64_t));                                     \
        size_t n = 4 * (size_t)(BYTES);                                                        \
        int next = next_pe(), prev = prev_pe();                                                \
        uint64_t r = ++round_;                                                                 \
        for (size_t i = 0; i < n; i++)                                                         \
            src[i] = (unsigned char)VAL(me, i);                                                \
        shmem_put##BITS##_signal(dst, src, 4, sig, SIGVAL(r, me), SHMEM_SIGNAL_SET, next);     \
        shmem_signal_wait_until(sig, SHMEM_CMP_EQ, SIGVAL(r, prev));                           \
        for (size_t i = 0; i < n; i++)                                                         \
            CHECK_EQ(dst[i], (unsigned char)VAL(prev, i), "shmem_put" #BITS "_signal: byte %zu", i); \
        shmem_put##BITS##_signal_nbi(dst + n * (size_t)(me + 1), src, 4, ctr, 2, SHMEM_SIGNAL_ADD, 0); \
        shmem_quiet();                                                                         \
        if (me == 0) {                                                                         \
            shmem_signal_wait_until(ctr, SHMEM_CMP_EQ, 2 * (uint64_t)npes);                    \
            for (int p = 0; p < npes; p++)                                                     \
                for (size_t i = 0; i < n; i++)                                                 \
                    CHECK_EQ(dst[n * (size_t)(p + 1) + i], (unsigned char)VAL(p, i),           \
                             "shmem_put" #BITS "_signal_nbi ADD: PE %d's byte %zu", p, i);     \
        }                                                                                      \
        shmem_barrier_all();                                                                   \
        shmem_free(ctr);                                                                       \
        shmem_free(dst);                                                                       \
    }
TEST_SIZED(8, 1)
TEST_SIZED(16, 2)
TEST_SIZED(32, 4)
TEST_SIZED(64, 8)
TEST_SIZED(128, 16)
TEST_SIZED(mem, 1)

/* The signal comes after the data: a large transfer, checked as soon as the signal is seen. */
#define BIG (1 << 20)
static void test_order(void)
{
    unsigned char *dst = shmem_malloc(BIG), *src = malloc(BIG);
    int next = next_pe(), prev = prev_pe();
    uint64_t r = ++round_;
    for (size_t i = 0; i < BIG; i++)
        src[i] = (unsigned char)(i * 13 + (size_t)me);
    shmem_putmem_signal_nbi(dst, src, BIG, sig, SIGVAL(r, me), SHMEM_SIGNAL_SET, next);
    shmem_signal_wait_until(sig, SHMEM_CMP_EQ, SIGVAL(r, prev));
    for (size_t i = 0; i < BIG; i += 4093)
        CHECK_EQ(dst[i], (unsigned char)(i * 13 + (size_t)prev), "1 MiB putmem_signal_nbi: byte %zu", i);
    CHECK_EQ(dst[BIG - 1], (unsigned char)((BIG - 1) * 13 + (size_t)prev), "last byte");
    shmem_quiet();
    shmem_barrier_all();
    free(src);
    shmem_free(dst);
}

/* signal_wait_until with each comparison, on a word the next PE sets with put_signal. */
static void test_cmp(void)
{
    static const int cmps[] = {SHMEM_CMP_NE, SHMEM_CMP_GT, SHMEM_CMP_GE, SHMEM_CMP_LT, SHMEM_CMP_LE};
    /* start values and the value each cmp waits against; the put brings 50 */
    static const uint64_t start[] = {7, 7, 7, 90, 90}, against[] = {7, 49, 50, 51, 50};
    uint64_t *w = shmem_calloc(1, sizeof(uint64_t));
    int prev = prev_pe(), one = 1;
    int *d = shmem_calloc(1, sizeof(int));
    for (int c = 0; c < 5; c++) {
        *w = start[c];
        shmem_barrier_all();
        shmem_int_put_signal(d, &one, 1, w, 50, SHMEM_SIGNAL_SET, prev);
        uint64_t got = shmem_signal_wait_until(w, cmps[c], against[c]);
        CHECK(got == 50, "shmem_signal_wait_until (cmp %d against %llu) returned %llu", cmps[c],
              (unsigned long long)against[c], (unsigned long long)got);
        shmem_barrier_all();
    }
    shmem_free(d);
    shmem_free(w);
}

#ifndef FSH_TEST_OSHMEM
static void test_shmemx(void)
{
    uint64_t *w = shmem_calloc(1, sizeof(uint64_t));
    shmemx_signal_add(w, (uint64_t)me + 1, 0);
    if (me == 0) {
        uint64_t want = (uint64_t)npes * (npes + 1) / 2;
        CHECK(shmem_signal_wait_until(w, SHMEM_CMP_EQ, want) == want, "shmemx_signal_add sum");
    }
    shmem_barrier_all();
    shmemx_signal_set(w, 1000 + (uint64_t)me, next_pe());
    shmem_signal_wait_until(w, SHMEM_CMP_EQ, 1000 + (uint64_t)prev_pe());
    CHECK(shmem_signal_fetch(w) == 1000 + (uint64_t)prev_pe(), "shmemx_signal_set");
    shmem_barrier_all();
    shmem_free(w);
}
#endif

int main(void)
{
    test_init();
    sig = shmem_malloc_with_hints(sizeof(uint64_t), SHMEM_MALLOC_SIGNAL_REMOTE);
    CHECK(sig != NULL, "shmem_malloc_with_hints(8, SIGNAL_REMOTE) gave NULL");
    *sig = 0;
    shmem_barrier_all();
#define RUN(T, N) test_set_##N(0); test_set_##N(1);
    RMA_TYPES(RUN)
    ok("signal set: put_signal and put_signal_nbi SET, signal_wait_until EQ, signal_fetch; 24 "
       "TYPENAMEs");
#undef RUN
#define RUN(T, N) test_add_##N(0); test_add_##N(1);
    RMA_TYPES(RUN)
    ok("signal add: put_signal and put_signal_nbi ADD from every PE to PE 0; 24 TYPENAMEs");
    test_sized_8();
    test_sized_16();
    test_sized_32();
    test_sized_64();
    test_sized_128();
    test_sized_mem();
    ok("signal sized: put8..put128_signal(_nbi), putmem_signal(_nbi)");
    test_order();
    ok("signal order: 1 MiB putmem_signal_nbi, data complete when the signal is seen");
    test_cmp();
    ok("signal cmp: signal_wait_until NE GT GE LT LE");
#ifndef FSH_TEST_OSHMEM
    test_shmemx();
    ok("signal shmemx: shmemx_signal_add shmemx_signal_set");
#else
    ok("signal shmemx (skipped on OSHMEM: ferroshmem extensions)");
#endif
    shmem_free(sig);
    shmem_finalize();
    return 0;
}
