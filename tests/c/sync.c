/*
 * sync.c: point-to-point synchronization, barriers, ordering and locks.
 *
 *   ok sync wait_until    every point-to-point TYPENAME (short and ushort included): wait_until
 *                         EQ and GT on a word the previous PE sets with shmem_TYPENAME_p; then
 *                         shmem_TYPENAME_test with every comparison
 *   ok sync multi         every TYPENAME: wait_until_all/any/some and test_all/any/some, with
 *                         status masks and their _vector forms, on 4 words set by the previous PE
 *   ok sync generic       the C11 names shmem_wait_until, shmem_test, shmem_wait_until_all, ...
 *   ok sync wait          the deprecated shmem_TYPENAME_wait and shmem_wait
 *   ok sync barrier       barrier_all completes puts; quiet + sync_all; the active-set
 *                         shmem_barrier and shmem_sync on all PEs and on the even PEs
 *   ok sync fence         put data, fence, put flag: the flag's waiter sees the data
 *   ok sync lock          a counter on PE 0 read and written (g, p) under shmem_set_lock by every
 *                         PE ITERS times ends at n_pes * ITERS; shmem_test_lock
 */
#include "check.h"

#define ITERS 20

/* wait_until with EQ and GT, then test with each comparison on the value that arrived. */
#define TEST_WAIT(T, N)                                                                        \
    static void test_wait_##N(void)                                                            \
    {                                                                                          \
        T *flag = shmem_calloc(1, sizeof(T));                                                  \
        int next = next_pe(), prev = prev_pe();                                                \
        T v = (T)(prev + 1);                                                                   \
        shmem_##N##_p(flag, (T)(me + 1), next);                                                \
        shmem_##N##_wait_until(flag, SHMEM_CMP_EQ, v);                                         \
        CHECK_EQ(*flag, v, "shmem_" #N "_wait_until EQ");                                      \
        CHECK_EQ(shmem_##N##_test(flag, SHMEM_CMP_EQ, v), 1, "shmem_" #N "_test EQ");          \
        CHECK_EQ(shmem_##N##_test(flag, SHMEM_CMP_NE, v), 0, "shmem_" #N "_test NE");          \
        CHECK_EQ(shmem_##N##_test(flag, SHMEM_CMP_GT, (T)(v - 1)), 1, "shmem_" #N "_test GT"); \
        CHECK_EQ(shmem_##N##_test(flag, SHMEM_CMP_GT, v), 0, "shmem_" #N "_test GT (equal)");  \
        CHECK_EQ(shmem_##N##_test(flag, SHMEM_CMP_GE, v), 1, "shmem_" #N "_test GE");          \
        CHECK_EQ(shmem_##N##_test(flag, SHMEM_CMP_LT, (T)(v + 1)), 1, "shmem_" #N "_test LT"); \
        CHECK_EQ(shmem_##N##_test(flag, SHMEM_CMP_LT, v), 0, "shmem_" #N "_test LT (equal)");  \
        CHECK_EQ(shmem_##N##_test(flag, SHMEM_CMP_LE, v), 1, "shmem_" #N "_test LE");          \
        CHECK_EQ(shmem_##N##_test(flag, SHMEM_CMP_LE, (T)(v - 1)), 0, "shmem_" #N "_test LE (less)"); \
        shmem_barrier_all();                                                                   \
        shmem_##N##_p(flag, (T)(me + 100), next);                                              \
        shmem_##N##_wait_until(flag, SHMEM_CMP_GT, v);                                         \
        CHECK_EQ(*flag, (T)(prev + 100), "shmem_" #N "_wait_until GT");                        \
        shmem_barrier_all();                                                                   \
        shmem_free(flag);                                                                      \
    }
SYNC_TYPES(TEST_WAIT)

/* The previous PE sets words 3, 1, 0, 2 of 4 to 1 (in that order); this PE waits on them. */
#define TEST_MULTI(T, N)                                                                       \
    static void test_multi_##N(void)                                                           \
    {                                                                                          \
        T *iv = shmem_calloc(4, sizeof(T)), ones[4] = {1, 1, 1, 1}, some[4] = {1, 0, 1, 0};     \
        int next = next_pe(), none[4] = {0, 0, 0, 0}, only2[4] = {1, 1, 0, 1},                 \
            all_out[4] = {1, 1, 1, 1}, skip2[4] = {0, 0, 1, 0};                                 \
        size_t idx[4], k, i;                                                                   \
        static const int order[4] = {3, 1, 0, 2};                                              \
        for (int j = 0; j < 4; j++)                                                            \
            shmem_##N##_p(&iv[order[j]], (T)1, next);                                          \
        i = shmem_##N##_wait_until_any(iv, 4, NULL, SHMEM_CMP_EQ, (T)1);                       \
        CHECK(i < 4 && iv[i] == (T)1, "shmem_" #N "_wait_until_any gave %zu", i);              \
        k = shmem_##N##_wait_until_some(iv, 4, idx, skip2, SHMEM_CMP_EQ, (T)1);                \
        CHECK(k >= 1 && k <= 3, "shmem_" #N "_wait_until_some (status) gave %zu", k);          \
        for (size_t j = 0; j < k; j++)                                                         \
            CHECK(idx[j] < 4 && idx[j] != 2 && iv[idx[j]] == (T)1,                             \
                  "shmem_" #N "_wait_until_some: index %zu", idx[j]);                          \
        shmem_##N##_wait_until_all(iv, 4, none, SHMEM_CMP_EQ, (T)1);                           \
        for (int j = 0; j < 4; j++)                                                            \
            CHECK_EQ(iv[j], (T)1, "shmem_" #N "_wait_until_all: word %d", j);                  \
        /* all four are 1 now; everything below is determined */                              \
        CHECK_EQ(shmem_##N##_test_all(iv, 4, NULL, SHMEM_CMP_EQ, (T)1), 1, "shmem_" #N "_test_all"); \
        CHECK_EQ(shmem_##N##_test_all(iv, 4, NULL, SHMEM_CMP_NE, (T)1), 0, "shmem_" #N "_test_all NE"); \
        CHECK_EQ(shmem_##N##_test_any(iv, 4, only2, SHMEM_CMP_EQ, (T)1), 2, "shmem_" #N "_test_any (status)"); \
        CHECK(shmem_##N##_test_any(iv, 4, NULL, SHMEM_CMP_NE, (T)1) == SIZE_MAX,               \
              "shmem_" #N "_test_any with no match is not SIZE_MAX");                          \
        CHECK(shmem_##N##_wait_until_any(iv, 4, all_out, SHMEM_CMP_EQ, (T)1) == SIZE_MAX,      \
              "shmem_" #N "_wait_until_any with every word excluded is not SIZE_MAX");         \
        CHECK_EQ(shmem_##N##_test_some(iv, 4, idx, NULL, SHMEM_CMP_EQ, (T)1), 4, "shmem_" #N "_test_some"); \
        CHECK_EQ(shmem_##N##_test_some(iv, 4, idx, NULL, SHMEM_CMP_NE, (T)1), 0, "shmem_" #N "_test_some NE"); \
        shmem_##N##_wait_until_all_vector(iv, 4, NULL, SHMEM_CMP_EQ, ones);                    \
        CHECK_EQ(shmem_##N##_test_all_vector(iv, 4, NULL, SHMEM_CMP_EQ, ones), 1, "shmem_" #N "_test_all_vector"); \
        CHECK_EQ(shmem_##N##_test_all_vector(iv, 4, NULL, SHMEM_CMP_EQ, some), 0, "shmem_" #N "_test_all_vector (mixed)"); \
        i = shmem_##N##_wait_until_any_vector(iv, 4, NULL, SHMEM_CMP_EQ, some);                \
        CHECK(i == 0 || i == 2, "shmem_" #N "_wait_until_any_vector gave %zu", i);             \
        CHECK_EQ(shmem_##N##_test_any_vector(iv, 4, only2, SHMEM_CMP_EQ, some), 2, "shmem_" #N "_test_any_vector"); \
        k = shmem_##N##_test_some_vector(iv, 4, idx, NULL, SHMEM_CMP_EQ, some);                \
        CHECK(k == 2 && ((idx[0] == 0 && idx[1] == 2) || (idx[0] == 2 && idx[1] == 0)),       \
              "shmem_" #N "_test_some_vector gave %zu indices", k);                            \
        k = shmem_##N##_wait_until_some_vector(iv, 4, idx, skip2, SHMEM_CMP_EQ, some);         \
        CHECK(k == 1 && idx[0] == 0, "shmem_" #N "_wait_until_some_vector gave %zu", k);        \
        shmem_barrier_all();                                                                   \
        shmem_free(iv);                                                                        \
    }
SYNC_TYPES(TEST_MULTI)

static void test_generic(void)
{
    long *l = shmem_calloc(4, sizeof(long));
    unsigned short *us = shmem_calloc(1, sizeof(unsigned short));
    int next = next_pe(), prev = prev_pe();
    shmem_long_p(&l[1], me + 1L, next);
    shmem_ushort_p(us, (unsigned short)(me + 1), next);
    shmem_wait_until(&l[1], SHMEM_CMP_EQ, prev + 1L);
    shmem_wait_until(us, SHMEM_CMP_NE, (unsigned short)0);
    CHECK_EQ(*us, prev + 1, "shmem_wait_until (unsigned short)");
    CHECK_EQ(shmem_test(&l[1], SHMEM_CMP_EQ, prev + 1L), 1, "shmem_test (long)");
#ifndef FSH_TEST_OSHMEM
    size_t idx[4];
    long cmp[4] = {0, prev + 1L, 0, 0};
    CHECK_EQ(shmem_test_any(l, 4, NULL, SHMEM_CMP_NE, 0L), 1, "shmem_test_any (long)");
    CHECK_EQ(shmem_wait_until_some(l, 4, idx, NULL, SHMEM_CMP_GT, 0L), 1, "shmem_wait_until_some");
    shmem_wait_until_all_vector(l, 4, NULL, SHMEM_CMP_EQ, cmp);
    CHECK_EQ(shmem_test_all(l, 4, NULL, SHMEM_CMP_GE, 0L), 1, "shmem_test_all (long)");
#endif
    shmem_barrier_all();
    shmem_free(us);
    shmem_free(l);
}

/* Deprecated: wait until the word is no longer cmp_value. */
#define TEST_OLD_WAIT(T, N)                                                                    \
    static void test_old_wait_##N(void)                                                        \
    {                                                                                          \
        T *w = shmem_calloc(1, sizeof(T));                                                     \
        shmem_##N##_p(w, (T)(me + 5), next_pe());                                              \
        shmem_##N##_wait(w, (T)0);                                                             \
        CHECK_EQ(*w, (T)(prev_pe() + 5), "shmem_" #N "_wait");                                 \
        shmem_barrier_all();                                                                   \
        shmem_free(w);                                                                         \
    }
TEST_OLD_WAIT(short, short)
TEST_OLD_WAIT(int, int)
TEST_OLD_WAIT(long, long)
TEST_OLD_WAIT(long long, longlong)

static long old_word;
static void test_old_wait_untyped(void)
{
    shmem_long_p(&old_word, me + 9L, next_pe());
    shmem_wait(&old_word, 0L);
    CHECK_EQ(old_word, prev_pe() + 9L, "shmem_wait");
    shmem_barrier_all();
}

static long psync_a[SHMEM_BARRIER_SYNC_SIZE], psync_b[SHMEM_BARRIER_SYNC_SIZE];

static void test_barriers(void)
{
    int *x = shmem_calloc(2, sizeof(int));
    int next = next_pe();
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; i++)
        psync_a[i] = psync_b[i] = SHMEM_SYNC_VALUE;
    shmem_barrier_all();
    for (int round = 1; round <= 3; round++) {
        shmem_int_put(x, &round, 1, next);
        shmem_barrier_all();
        CHECK_EQ(x[0], round, "put then shmem_barrier_all, round %d", round);
        shmem_barrier_all();
        shmem_int_p(&x[1], round * 10, next);
        shmem_quiet();
        shmem_sync_all();
        CHECK_EQ(x[1], round * 10, "p, quiet, shmem_sync_all, round %d", round);
        shmem_sync_all();
    }
    /* active set of all PEs, then of the even PEs (PE_start 0, logPE_stride 1) */
    shmem_int_p(x, 77, next);
    shmem_barrier(0, 0, npes, psync_a);
    CHECK_EQ(x[0], 77, "put then shmem_barrier (all PEs)");
    shmem_barrier_all();
    int evens = (npes + 1) / 2;
    if (me % 2 == 0) {
        int to = (me + 2) % (2 * evens), from = (me - 2 + 2 * evens) % (2 * evens);
        shmem_int_p(x, 1000 + me, to);
        shmem_barrier(0, 1, evens, psync_b);
        CHECK_EQ(x[0], 1000 + from, "put then shmem_barrier (even PEs)");
        shmem_int_p(&x[1], 2000 + me, to);
        shmem_quiet();
        shmem_sync(0, 1, evens, psync_a);
        CHECK_EQ(x[1], 2000 + from, "put, quiet, shmem_sync (even PEs)");
    }
    shmem_barrier_all();
    shmem_sync(0, 0, npes, psync_b);
    shmem_barrier_all();
    shmem_free(x);
}

/* fence orders two puts to the same PE: whoever sees the flag sees the data. */
static void test_fence(void)
{
    long *data = shmem_calloc(64, sizeof(long));
    int *flag = shmem_calloc(1, sizeof(int));
    long src[64];
    int prev = prev_pe();
    for (int round = 1; round <= 5; round++) {
        for (int i = 0; i < 64; i++)
            src[i] = round * 1000L + me * 64 + i;
        shmem_long_put(data, src, 64, next_pe());
        shmem_fence();
        shmem_int_p(flag, round, next_pe());
        shmem_int_wait_until(flag, SHMEM_CMP_EQ, round);
        for (int i = 0; i < 64; i++)
            CHECK_EQ(data[i], round * 1000L + prev * 64 + i, "data behind a fence, round %d, [%d]", round, i);
        shmem_barrier_all();
    }
    shmem_free(flag);
    shmem_free(data);
}

static long lock, lock2;
static int counter;

static void test_locks(void)
{
    for (int i = 0; i < ITERS; i++) {
        shmem_set_lock(&lock);
        int v = shmem_int_g(&counter, 0);
        shmem_int_p(&counter, v + 1, 0);
        shmem_clear_lock(&lock); /* completes the p before the lock goes to another PE */
    }
    shmem_barrier_all();
    CHECK_EQ(shmem_int_g(&counter, 0), npes * ITERS, "counter under shmem_set_lock");
    shmem_barrier_all();
    /* test_lock: held by PE 0, it fails for everyone else; then each takes it by polling */
    if (me == 0)
        shmem_set_lock(&lock2);
    shmem_barrier_all();
    if (me != 0)
        CHECK_EQ(shmem_test_lock(&lock2), 1, "shmem_test_lock on a lock PE 0 holds");
    shmem_barrier_all();
    if (me == 0)
        shmem_clear_lock(&lock2);
    shmem_barrier_all();
    while (shmem_test_lock(&lock2))
        ;
    int v = shmem_int_g(&counter, 0);
    shmem_int_p(&counter, v + 1, 0);
    shmem_clear_lock(&lock2);
    shmem_barrier_all();
    CHECK_EQ(shmem_int_g(&counter, 0), npes * (ITERS + 1), "counter under shmem_test_lock");
    shmem_barrier_all();
}

int main(void)
{
    test_init();
#define RUN(T, N) test_wait_##N();
    SYNC_TYPES(RUN)
    ok("sync wait_until: wait_until EQ GT and test with every cmp, 14 TYPENAMEs");
#undef RUN
#define RUN(T, N) test_multi_##N();
    SYNC_TYPES(RUN)
    ok("sync multi: wait_until/test _all _any _some and _vector, status masks, 14 TYPENAMEs");
    test_generic();
    ok("sync generic: C11 shmem_wait_until shmem_test (and the 1.5 multi forms)");
    test_old_wait_short();
    test_old_wait_int();
    test_old_wait_long();
    test_old_wait_longlong();
    test_old_wait_untyped();
    ok("sync wait: deprecated shmem_short/int/long/longlong_wait and shmem_wait");
    test_barriers();
    ok("sync barrier: barrier_all, quiet + sync_all, active-set shmem_barrier and shmem_sync");
    test_fence();
    ok("sync fence: data put before a fence is seen with the flag put after it");
    test_locks();
    ok("sync lock: set_lock/clear_lock counter, test_lock");
    shmem_finalize();
    return 0;
}
