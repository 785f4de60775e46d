/*
 * edges.c: what programs written for other OpenSHMEM libraries do at the edges of the spec.
 *
 *   ok edges zero-length   RMA, strided, non-blocking and collective calls of 0 elements with
 *                          NULL pointers move nothing and end nothing (Sandia OpenSHMEM's
 *                          zero_comm and nop_collectives tests)
 *   ok edges sync          shmem_sync on a team (the C11 form) and the 4-argument active-set form
 *
 * Around every zero-length call, a guard buffer's contents are checked: nothing may be written.
 */
#include "check.h"

#define NG 8 /* guard elements */

static long psync[SHMEM_SYNC_SIZE];
static long pwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];

/* Fills the guard with this PE's pattern; every PE's guard is full before anyone moves on. */
static void arm(long *guard)
{
    for (int i = 0; i < NG; i++)
        guard[i] = VAL(me, i);
    shmem_barrier_all();
}

/* Checks that nothing wrote into the guard since `arm`. */
static void untouched(const long *guard, const char *what)
{
    shmem_barrier_all();
    for (int i = 0; i < NG; i++)
        CHECK_EQ(guard[i], (long)VAL(me, i), "%s wrote guard[%d]", what, i);
}

static void test_zero_rma(long *guard)
{
    int next = next_pe();
    long local[NG];
    arm(guard);
    shmem_putmem(NULL, NULL, 0, next);
    shmem_getmem(NULL, NULL, 0, next);
    shmem_putmem_nbi(NULL, NULL, 0, next);
    shmem_getmem_nbi(NULL, NULL, 0, next);
    shmem_long_put(NULL, NULL, 0, next);
    shmem_long_get(NULL, NULL, 0, next);
    shmem_long_put_nbi(NULL, NULL, 0, next);
    shmem_long_get_nbi(NULL, NULL, 0, next);
    shmem_long_iput(NULL, NULL, 1, 1, 0, next);
    shmem_long_iget(NULL, NULL, 1, 1, 0, next);
    shmem_put64(NULL, NULL, 0, next);
    shmem_get32(NULL, NULL, 0, next);
    shmem_ctx_long_put(SHMEM_CTX_DEFAULT, NULL, NULL, 0, next);
    /* A zero-length call on a symmetric address with a local buffer moves nothing either. */
    shmem_long_put(guard, local, 0, next);
    shmem_long_get(local, guard, 0, next);
    shmem_quiet();
    untouched(guard, "a zero-length RMA");
}

static void test_zero_collectives(long *guard)
{
    arm(guard);
    shmem_broadcast(SHMEM_TEAM_WORLD, (long *)NULL, (long *)NULL, 0, 0);
    shmem_long_fcollect(SHMEM_TEAM_WORLD, NULL, NULL, 0);
    shmem_long_collect(SHMEM_TEAM_WORLD, NULL, NULL, 0);
    shmem_long_alltoall(SHMEM_TEAM_WORLD, NULL, NULL, 0);
    shmem_long_alltoalls(SHMEM_TEAM_WORLD, NULL, NULL, 1, 1, 0);
    shmem_long_sum_reduce(SHMEM_TEAM_WORLD, NULL, NULL, 0);
    shmem_long_max_reduce(SHMEM_TEAM_WORLD, NULL, NULL, 0);
    shmem_broadcastmem(SHMEM_TEAM_WORLD, NULL, NULL, 0, 0);
    shmem_fcollectmem(SHMEM_TEAM_WORLD, NULL, NULL, 0);
    shmem_collectmem(SHMEM_TEAM_WORLD, NULL, NULL, 0);
    shmem_alltoallmem(SHMEM_TEAM_WORLD, NULL, NULL, 0);
    untouched(guard, "a zero-length team collective");
    shmem_broadcast64(NULL, NULL, 0, 0, 0, 0, npes, psync);
    shmem_barrier_all();
    shmem_fcollect64(NULL, NULL, 0, 0, 0, npes, psync);
    shmem_barrier_all();
    shmem_collect64(NULL, NULL, 0, 0, 0, npes, psync);
    shmem_barrier_all();
    shmem_alltoall64(NULL, NULL, 0, 0, 0, npes, psync);
    shmem_barrier_all();
    shmem_long_sum_to_all(NULL, NULL, 0, 0, 0, npes, pwrk, psync);
    untouched(guard, "a zero-length active-set collective");
}

/* A collective that moves data right after the zero-length ones works: they left every team
 * in step. */
static void test_after(long *guard)
{
    long *dst = shmem_calloc((size_t)npes, sizeof(long));
    long *src = shmem_malloc(sizeof(long));
    CHECK(dst && src, "shmem_calloc/shmem_malloc gave NULL");
    *src = VAL(me, 3);
    shmem_barrier_all();
    shmem_long_fcollect(SHMEM_TEAM_WORLD, dst, src, 1);
    for (int p = 0; p < npes; p++)
        CHECK_EQ(dst[p], (long)VAL(p, 3), "fcollect after the zero-length calls: dst[%d]", p);
    shmem_free(src);
    shmem_free(dst);
    untouched(guard, "the fcollect after the zero-length calls");
}

static void test_sync(void)
{
    static long turn[2];
    int next = next_pe(), prev = prev_pe();
    for (int round = 1; round <= 3; round++) {
        shmem_long_p(&turn[0], round * 10 + me, next);
        shmem_quiet();
        CHECK_EQ(shmem_sync(SHMEM_TEAM_WORLD), 0, "shmem_sync(SHMEM_TEAM_WORLD)");
        CHECK_EQ(turn[0], (long)(round * 10 + prev), "p, quiet, shmem_sync(team), round %d", round);
        shmem_sync(SHMEM_TEAM_WORLD);
        shmem_long_p(&turn[1], round * 20 + me, next);
        shmem_quiet();
        shmem_sync(0, 0, npes, psync);
        CHECK_EQ(turn[1], (long)(round * 20 + prev), "p, quiet, active-set shmem_sync, round %d",
                 round);
        shmem_sync(0, 0, npes, psync);
    }
}

int main(void)
{
    test_init();
    for (int i = 0; i < SHMEM_SYNC_SIZE; i++)
        psync[i] = SHMEM_SYNC_VALUE;
    long *guard = shmem_malloc(NG * sizeof(long));
    CHECK(guard != NULL, "shmem_malloc gave NULL");
    test_zero_rma(guard);
    test_zero_collectives(guard);
    test_after(guard);
    ok("edges zero-length: RMA, strided, nbi, ctx, team and active-set collectives, reductions");
    test_sync();
    ok("edges sync: shmem_sync(team) and shmem_sync(PE_start, logPE_stride, PE_size, pSync)");
    shmem_free(guard);
    shmem_finalize();
    return 0;
}
