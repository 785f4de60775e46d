/*
 * ctx.c: communication contexts.
 *
 *   ok ctx create      ctx_create with options 0, PRIVATE, SERIALIZED, NOSTORE; ctx_destroy
 *                      (a failed creation gives SHMEM_CTX_INVALID, which destroy ignores)
 *   ok ctx rma         every RMA TYPENAME through a context: put get p g iput iget put_nbi
 *                      get_nbi, completed by shmem_ctx_quiet; sized and mem forms
 *   ok ctx amo         every AMO TYPENAME through a context (fetch set swap compare_swap
 *                      fetch_inc inc fetch_add add, bitwise, the _nbi fetching forms)
 *   ok ctx order       ctx_fence orders a data put before a flag put; ctx_quiet completes
 *                      put_nbi before a get on another context; SHMEM_CTX_DEFAULT works
 *   ok ctx signal      shmem_ctx_TYPENAME_put_signal(_nbi) and ctx_putmem_signal
 *   ok ctx generic     the C11 names with a leading context
 *   ok ctx team        ctx_get_team; team_create_ctx on the even PEs: PE arguments are team
 *                      PE numbers (1.5; skipped on OSHMEM, which has no teams)
 */
#include "check.h"

#define NE 8
static shmem_ctx_t ctx;

#define TEST_CTX_RMA(T, N)                                                                     \
    static void test_rma_##N(void)                                                             \
    {                                                                                          \
        T *dst = shmem_calloc(2 * NE, sizeof(T)), *src = shmem_malloc(NE * sizeof(T)), loc[2 * NE]; \
        int next = next_pe(), prev = prev_pe();                                                \
        for (int i = 0; i < NE; i++)                                                           \
            src[i] = (T)VAL(me, i);                                                            \
        shmem_barrier_all();                                                                   \
        shmem_ctx_##N##_put(ctx, dst, src, NE, next);                                          \
        shmem_ctx_##N##_p(ctx, &dst[NE], (T)VAL(me, 11), next);                                \
        shmem_ctx_quiet(ctx);                                                                  \
        shmem_barrier_all();                                                                   \
        for (int i = 0; i < NE; i++)                                                           \
            CHECK_EQ(dst[i], (T)VAL(prev, i), "shmem_ctx_" #N "_put: dst[%d]", i);             \
        CHECK_EQ(dst[NE], (T)VAL(prev, 11), "shmem_ctx_" #N "_p");                             \
        shmem_ctx_##N##_get(ctx, loc, src, NE, next);                                          \
        for (int i = 0; i < NE; i++)                                                           \
            CHECK_EQ(loc[i], (T)VAL(next, i), "shmem_ctx_" #N "_get: loc[%d]", i);             \
        CHECK_EQ(shmem_ctx_##N##_g(ctx, &src[3], next), (T)VAL(next, 3), "shmem_ctx_" #N "_g"); \
        shmem_barrier_all();                                                                   \
        for (int i = 0; i < 2 * NE; i++)                                                       \
            dst[i] = (T)0, loc[i] = (T)0;                                                      \
        shmem_barrier_all();                                                                   \
        shmem_ctx_##N##_iput(ctx, dst, src, 3, 2, 4, next);                                    \
        shmem_ctx_quiet(ctx);                                                                  \
        shmem_barrier_all();                                                                   \
        for (int j = 0; j < 12; j++)                                                           \
            CHECK_EQ(dst[j], (T)(j % 3 ? 0 : VAL(prev, 2 * (j / 3))), "shmem_ctx_" #N "_iput: dst[%d]", j); \
        shmem_ctx_##N##_iget(ctx, loc, src, 2, 2, 4, next);                                    \
        for (int j = 0; j < 8; j++)                                                            \
            CHECK_EQ(loc[j], (T)(j % 2 ? 0 : VAL(next, j)), "shmem_ctx_" #N "_iget: loc[%d]", j); \
        shmem_barrier_all();                                                                   \
        shmem_ctx_##N##_put_nbi(ctx, dst + NE, src, NE, next);                                 \
        shmem_ctx_##N##_get_nbi(ctx, loc, src, NE, next);                                      \
        shmem_ctx_quiet(ctx);                                                                  \
        for (int i = 0; i < NE; i++)                                                           \
            CHECK_EQ(loc[i], (T)VAL(next, i), "shmem_ctx_" #N "_get_nbi: loc[%d]", i);         \
        shmem_barrier_all();                                                                   \
        for (int i = 0; i < NE; i++)                                                           \
            CHECK_EQ(dst[NE + i], (T)VAL(prev, i), "shmem_ctx_" #N "_put_nbi: dst[%d]", NE + i); \
        shmem_barrier_all();                                                                   \
        shmem_free(src);                                                                       \
        shmem_free(dst);                                                                       \
    }
RMA_TYPES(TEST_CTX_RMA)

static uint64_t sz_src[32], sz_dst[64];
#define TEST_CTX_SIZED(BITS, BYTES)                                                            \
    static void test_sized_##BITS(void)                                                        \
    {                                                                                          \
        unsigned char *s = (unsigned char *)sz_src, *d = (unsigned char *)sz_dst, loc[256];    \
        int next = next_pe(), prev = prev_pe();                                                \
        for (int i = 0; i < 4 * BYTES; i++)                                                    \
            s[i] = (unsigned char)VAL(me, i);                                                  \
        memset(sz_dst, 0, sizeof sz_dst);                                                      \
        shmem_barrier_all();                                                                   \
        shmem_ctx_put##BITS(ctx, d, s, 2, next);                                               \
        shmem_ctx_put##BITS##_nbi(ctx, d + 2 * BYTES, s + 2 * BYTES, 2, next);                 \
        shmem_ctx_quiet(ctx);                                                                  \
        shmem_barrier_all();                                                                   \
        for (int i = 0; i < 4 * BYTES; i++)                                                    \
            CHECK_EQ(d[i], (unsigned char)VAL(prev, i), "shmem_ctx_put" #BITS "(_nbi): byte %d", i); \
        memset(loc, 0, sizeof loc);                                                            \
        shmem_ctx_get##BITS(ctx, loc, s, 2, next);                                             \
        shmem_ctx_get##BITS##_nbi(ctx, loc + 2 * BYTES, s + 2 * BYTES, 2, next);               \
        shmem_ctx_quiet(ctx);                                                                  \
        for (int i = 0; i < 4 * BYTES; i++)                                                    \
            CHECK_EQ(loc[i], (unsigned char)VAL(next, i), "shmem_ctx_get" #BITS "(_nbi): byte %d", i); \
        shmem_barrier_all();                                                                   \
    }
#define TEST_CTX_STRIDED(BITS, BYTES)                                                          \
    static void test_strided_##BITS(void)                                                      \
    {                                                                                          \
        unsigned char *s = (unsigned char *)sz_src, *d = (unsigned char *)sz_dst, loc[256];    \
        int next = next_pe(), prev = prev_pe();                                                \
        memset(sz_dst, 0, sizeof sz_dst);                                                      \
        memset(loc, 0, sizeof loc);                                                            \
        shmem_barrier_all();                                                                   \
        shmem_ctx_iput##BITS(ctx, d, s, 2, 1, 3, next);                                        \
        shmem_ctx_quiet(ctx);                                                                  \
        shmem_ctx_iget##BITS(ctx, loc, s, 1, 2, 2, next);                                      \
        shmem_barrier_all();                                                                   \
        for (int e = 0; e < 3; e++)                                                            \
            for (int b = 0; b < BYTES; b++) {                                                  \
                CHECK_EQ(d[2 * e * BYTES + b], (unsigned char)VAL(prev, e * BYTES + b),        \
                         "shmem_ctx_iput" #BITS ": element %d byte %d", e, b);                 \
                CHECK_EQ(d[(2 * e + 1) * BYTES + b], 0, "shmem_ctx_iput" #BITS ": gap %d", e);  \
            }                                                                                  \
        for (int e = 0; e < 2; e++)                                                            \
            for (int b = 0; b < BYTES; b++)                                                    \
                CHECK_EQ(loc[e * BYTES + b], (unsigned char)VAL(next, 2 * e * BYTES + b),      \
                         "shmem_ctx_iget" #BITS ": element %d byte %d", e, b);                 \
        shmem_barrier_all();                                                                   \
    }
TEST_CTX_SIZED(8, 1)
TEST_CTX_SIZED(16, 2)
TEST_CTX_SIZED(32, 4)
TEST_CTX_SIZED(64, 8)
TEST_CTX_SIZED(128, 16)
TEST_CTX_SIZED(mem, 1)
TEST_CTX_STRIDED(8, 1)
TEST_CTX_STRIDED(16, 2)
TEST_CTX_STRIDED(32, 4)
TEST_CTX_STRIDED(64, 8)
TEST_CTX_STRIDED(128, 16)

/* Every PE on PE 0's word through its context; then single-writer checks on the next PE. */
#define TEST_CTX_AMO(T, N)                                                                     \
    static void test_amo_##N(void)                                                             \
    {                                                                                          \
        T *x = shmem_calloc(2, sizeof(T)), f = (T)0;                                           \
        int next = next_pe();                                                                  \
        shmem_ctx_##N##_atomic_inc(ctx, x, 0);                                                 \
        (void)shmem_ctx_##N##_atomic_fetch_inc(ctx, x, 0);                                     \
        shmem_ctx_##N##_atomic_add(ctx, x, (T)2, 0);                                           \
        (void)shmem_ctx_##N##_atomic_fetch_add(ctx, x, (T)3, 0);                               \
        shmem_ctx_quiet(ctx);                                                                  \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(shmem_ctx_##N##_atomic_fetch(ctx, x, 0), (T)(7 * npes), "ctx " #N " inc/fetch_inc/add/fetch_add total"); \
        shmem_ctx_##N##_atomic_set(ctx, &x[1], (T)(me + 1), next);                             \
        shmem_ctx_quiet(ctx);                                                                  \
        CHECK_EQ(shmem_ctx_##N##_atomic_swap(ctx, &x[1], (T)(me + 2), next), (T)(me + 1), "shmem_ctx_" #N "_atomic_swap"); \
        if (!(CSWAP_SKIPPED(T)))                                                               \
            CHECK_EQ(shmem_ctx_##N##_atomic_compare_swap(ctx, &x[1], (T)(me + 2), (T)(me + 3), next), \
                     (T)(me + 2), "shmem_ctx_" #N "_atomic_compare_swap");                     \
        else                                                                                   \
            shmem_ctx_##N##_atomic_set(ctx, &x[1], (T)(me + 3), next);                         \
        shmem_ctx_##N##_atomic_fetch_nbi(ctx, &f, &x[1], next);                                \
        shmem_ctx_quiet(ctx);                                                                  \
        CHECK_EQ(f, (T)(me + 3), "shmem_ctx_" #N "_atomic_fetch_nbi");                         \
        shmem_ctx_##N##_atomic_fetch_add_nbi(ctx, &f, &x[1], (T)4, next);                      \
        shmem_ctx_quiet(ctx);                                                                  \
        shmem_ctx_##N##_atomic_fetch_inc_nbi(ctx, &f, &x[1], next);                            \
        shmem_ctx_quiet(ctx);                                                                  \
        CHECK_EQ(f, (T)(me + 7), "shmem_ctx_" #N "_atomic_fetch_add_nbi then fetch_inc_nbi");  \
        shmem_ctx_##N##_atomic_swap_nbi(ctx, &f, &x[1], (T)1, next);                           \
        shmem_ctx_quiet(ctx);                                                                  \
        CHECK_EQ(f, (T)(me + 8), "shmem_ctx_" #N "_atomic_swap_nbi");                          \
        if (!(CSWAP_SKIPPED(T))) {                                                             \
            shmem_ctx_##N##_atomic_compare_swap_nbi(ctx, &f, &x[1], (T)1, (T)9, next);         \
            shmem_ctx_quiet(ctx);                                                              \
            CHECK_EQ(f, (T)1, "shmem_ctx_" #N "_atomic_compare_swap_nbi");                     \
        }                                                                                      \
        shmem_barrier_all();                                                                   \
        shmem_free(x);                                                                         \
    }
#define TEST_CTX_BITAMO(T, N)                                                                  \
    static void test_bitamo_##N(void)                                                          \
    {                                                                                          \
        T *x = shmem_calloc(1, sizeof(T)), f = (T)0;                                           \
        int next = next_pe();                                                                  \
        shmem_ctx_##N##_atomic_or(ctx, x, (T)12, next);                                        \
        shmem_ctx_fence(ctx);                                                                  \
        shmem_ctx_##N##_atomic_and(ctx, x, (T)10, next);                                       \
        shmem_ctx_fence(ctx);                                                                  \
        shmem_ctx_##N##_atomic_xor(ctx, x, (T)3, next);                                        \
        shmem_ctx_quiet(ctx);                                                                  \
        CHECK_EQ(shmem_ctx_##N##_atomic_fetch_or(ctx, x, (T)16, next), (T)11, "ctx " #N " or/and/xor"); \
        CHECK_EQ(shmem_ctx_##N##_atomic_fetch_and(ctx, x, (T)25, next), (T)27, "shmem_ctx_" #N "_atomic_fetch_or"); \
        CHECK_EQ(shmem_ctx_##N##_atomic_fetch_xor(ctx, x, (T)1, next), (T)25, "shmem_ctx_" #N "_atomic_fetch_and"); \
        shmem_ctx_##N##_atomic_fetch_or_nbi(ctx, &f, x, (T)0, next);                           \
        shmem_ctx_quiet(ctx);                                                                  \
        CHECK_EQ(f, (T)24, "shmem_ctx_" #N "_atomic_fetch_xor / fetch_or_nbi");                \
        shmem_ctx_##N##_atomic_fetch_and_nbi(ctx, &f, x, (T)8, next);                          \
        shmem_ctx_quiet(ctx);                                                                  \
        CHECK_EQ(f, (T)24, "shmem_ctx_" #N "_atomic_fetch_and_nbi");                           \
        shmem_ctx_##N##_atomic_fetch_xor_nbi(ctx, &f, x, (T)8, next);                          \
        shmem_ctx_quiet(ctx);                                                                  \
        CHECK_EQ(f, (T)8, "shmem_ctx_" #N "_atomic_fetch_xor_nbi");                            \
        shmem_barrier_all();                                                                   \
        CHECK_EQ(*x, (T)0, "ctx " #N " bitwise: final word");                                  \
        shmem_barrier_all();                                                                   \
        shmem_free(x);                                                                         \
    }
AMO_TYPES(TEST_CTX_AMO)
BITAMO_TYPES(TEST_CTX_BITAMO)

static void test_order(void)
{
    long *data = shmem_calloc(32, sizeof(long)), src[32];
    int *flag = shmem_calloc(1, sizeof(int));
    int next = next_pe(), prev = prev_pe();
    shmem_ctx_t other;
    CHECK_EQ(shmem_ctx_create(0, &other), 0, "a second context");
    for (int round = 1; round <= 3; round++) {
        for (int i = 0; i < 32; i++)
            src[i] = round * 100L + me * 32 + i;
        shmem_ctx_long_put(ctx, data, src, 32, next);
        shmem_ctx_fence(ctx);
        shmem_ctx_int_p(ctx, flag, round, next);
        shmem_int_wait_until(flag, SHMEM_CMP_EQ, round);
        for (int i = 0; i < 32; i++)
            CHECK_EQ(data[i], round * 100L + prev * 32 + i, "data behind ctx_fence, round %d [%d]", round, i);
        shmem_barrier_all();
    }
    /* ctx_quiet completes this context's nonblocking put: a get through another sees it */
    for (int i = 0; i < 32; i++)
        src[i] = -i - me;
    shmem_ctx_long_put_nbi(ctx, data, src, 32, next);
    shmem_ctx_quiet(ctx);
    CHECK_EQ(shmem_ctx_long_g(other, &data[31], next), -31L - me, "get through another context after ctx_quiet");
    shmem_barrier_all();
    /* the default context */
    shmem_ctx_int_p(SHMEM_CTX_DEFAULT, flag, 99, next);
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);
    shmem_barrier_all();
    CHECK_EQ(*flag, 99, "shmem_ctx_int_p on SHMEM_CTX_DEFAULT");
    shmem_barrier_all();
    shmem_ctx_destroy(other);
    shmem_free(flag);
    shmem_free(data);
}

#define TEST_CTX_SIGNAL(T, N)                                                                  \
    static void test_signal_##N(void)                                                          \
    {                                                                                          \
        T *dst = shmem_calloc(NE, sizeof(T)), src[NE];                                         \
        uint64_t *sig = shmem_calloc(2, sizeof(uint64_t));                                     \
        int next = next_pe(), prev = prev_pe();                                                \
        for (int i = 0; i < NE; i++)                                                           \
            src[i] = (T)VAL(me, i);                                                            \
        shmem_ctx_##N##_put_signal(ctx, dst, src, NE / 2, sig, 5, SHMEM_SIGNAL_SET, next);     \
        shmem_ctx_##N##_put_signal_nbi(ctx, dst + NE / 2, src + NE / 2, NE / 2, &sig[1], 3, SHMEM_SIGNAL_ADD, next); \
        shmem_ctx_quiet(ctx);                                                                  \
        shmem_signal_wait_until(sig, SHMEM_CMP_EQ, 5);                                         \
        shmem_signal_wait_until(&sig[1], SHMEM_CMP_EQ, 3);                                     \
        for (int i = 0; i < NE; i++)                                                           \
            CHECK_EQ(dst[i], (T)VAL(prev, i), "shmem_ctx_" #N "_put_signal(_nbi): dst[%d]", i); \
        shmem_barrier_all();                                                                   \
        shmem_free(sig);                                                                       \
        shmem_free(dst);                                                                       \
    }
RMA_TYPES(TEST_CTX_SIGNAL)

static void test_signal_mem(void)
{
    unsigned char *dst = shmem_calloc(64, 1), src[64];
    uint64_t *sig = shmem_calloc(1, sizeof(uint64_t));
    for (int i = 0; i < 64; i++)
        src[i] = (unsigned char)VAL(me, i);
    shmem_ctx_putmem_signal(ctx, dst, src, 32, sig, 1, SHMEM_SIGNAL_ADD, next_pe());
    shmem_ctx_putmem_signal_nbi(ctx, dst + 32, src + 32, 32, sig, 1, SHMEM_SIGNAL_ADD, next_pe());
    shmem_signal_wait_until(sig, SHMEM_CMP_EQ, 2);
    for (int i = 0; i < 64; i++)
        CHECK_EQ(dst[i], (unsigned char)VAL(prev_pe(), i), "shmem_ctx_putmem_signal(_nbi): byte %d", i);
    shmem_ctx_quiet(ctx);
    shmem_barrier_all();
    shmem_free(sig);
    shmem_free(dst);
}

static double gd[4];
static long gl;
static void test_generic(void)
{
    double v[4] = {1.5, 2.5, 3.5, 4.5 + me}, w[4];
    shmem_put(ctx, gd, v, 4, next_pe());
    shmem_p(ctx, &gd[0], 0.25, next_pe());
    shmem_atomic_add(ctx, &gl, 2L, 0);
    shmem_ctx_quiet(ctx);
    shmem_barrier_all();
    shmem_get(ctx, w, gd, 4, me);
    CHECK_EQ(w[0], 0.25, "shmem_p (ctx)");
    CHECK_EQ(w[3], 4.5 + prev_pe(), "shmem_put (ctx)");
    CHECK_EQ(shmem_g(ctx, &gd[1], next_pe()), 2.5, "shmem_g (ctx)");
    CHECK_EQ(shmem_atomic_fetch(ctx, &gl, 0), 2L * npes, "shmem_atomic_add/fetch (ctx)");
    shmem_barrier_all();
}

#ifndef FSH_TEST_OSHMEM
static int tword[2];
static void test_team_ctx(void)
{
    shmem_team_t t = SHMEM_TEAM_INVALID, even = SHMEM_TEAM_INVALID;
    CHECK_EQ(shmem_ctx_get_team(ctx, &t), 0, "ctx_get_team (created context)");
    CHECK(t == SHMEM_TEAM_WORLD, "ctx_get_team: a shmem_ctx_create context is on SHMEM_TEAM_WORLD");
    CHECK_EQ(shmem_ctx_get_team(SHMEM_CTX_DEFAULT, &t), 0, "ctx_get_team (default context)");
    CHECK(t == SHMEM_TEAM_WORLD, "ctx_get_team: SHMEM_CTX_DEFAULT is on SHMEM_TEAM_WORLD");
    CHECK(shmem_ctx_get_team(SHMEM_CTX_INVALID, &t) != 0, "ctx_get_team(SHMEM_CTX_INVALID) gave 0");
    CHECK(t == SHMEM_TEAM_INVALID, "ctx_get_team(SHMEM_CTX_INVALID) did not set SHMEM_TEAM_INVALID");
    int size = (npes + 1) / 2;
    CHECK_EQ(shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 2, size, NULL, 0, &even), 0, "split even");
    if (even != SHMEM_TEAM_INVALID) {
        shmem_ctx_t tc = SHMEM_CTX_INVALID;
        int tme = shmem_team_my_pe(even), tnext = (tme + 1) % size, tprev = (tme + size - 1) % size;
        CHECK_EQ(shmem_team_create_ctx(even, 0, &tc), 0, "team_create_ctx(even)");
        CHECK_EQ(shmem_ctx_get_team(tc, &t), 0, "ctx_get_team (team context)");
        CHECK(t == even, "ctx_get_team gives the team the context was made on");
        tword[0] = -1;
        shmem_team_sync(even);
        /* team PE number tnext, i.e. world PE 2 * tnext */
        shmem_ctx_int_p(tc, &tword[0], 1000 + tme, tnext);
        shmem_ctx_quiet(tc);
        shmem_team_sync(even);
        CHECK_EQ(tword[0], 1000 + tprev, "p through a team context to team PE %d", tnext);
        CHECK_EQ(shmem_ctx_int_g(tc, &tword[0], tnext), 1000 + tme, "g through a team context");
        shmem_ctx_int_atomic_add(tc, &tword[1], 1, 0); /* team PE 0 is world PE 0 */
        shmem_ctx_quiet(tc);
        shmem_team_sync(even);
        CHECK_EQ(shmem_ctx_int_atomic_fetch(tc, &tword[1], 0), size, "fetch_add on team PE 0 through team contexts");
        shmem_team_sync(even);
        shmem_ctx_destroy(tc);
        shmem_team_destroy(even);
    }
    shmem_barrier_all();
}
#endif

int main(void)
{
    static const long opts[] = {0, SHMEM_CTX_PRIVATE, SHMEM_CTX_SERIALIZED, SHMEM_CTX_NOSTORE,
                                SHMEM_CTX_PRIVATE | SHMEM_CTX_SERIALIZED};
#ifdef FSH_TEST_OSHMEM
    /* OSHMEM 4.1 corrupts its heap when a PRIVATE | SERIALIZED context is destroyed (the crash
     * comes later, in shmem_finalize); that combination is left out there */
    const int n_opts = 4;
#else
    const int n_opts = 5;
#endif
    test_init();
    for (int i = 0; i < n_opts; i++) {
        shmem_ctx_t c = SHMEM_CTX_INVALID;
        CHECK_EQ(shmem_ctx_create(opts[i], &c), 0, "shmem_ctx_create(%ld)", opts[i]);
        CHECK(c != SHMEM_CTX_INVALID && c != SHMEM_CTX_DEFAULT, "shmem_ctx_create(%ld) handle", opts[i]);
        shmem_ctx_destroy(c);
    }
#ifndef FSH_TEST_OSHMEM
    /* OpenSHMEM 1.5: a failed creation sets the handle to SHMEM_CTX_INVALID, and destroying
     * that does nothing (the create, fall back, destroy pattern of portable programs) */
    shmem_ctx_t failed = SHMEM_CTX_DEFAULT;
    CHECK(shmem_ctx_create(-1L, &failed) != 0, "shmem_ctx_create(-1) succeeded");
    CHECK(failed == SHMEM_CTX_INVALID, "a failed shmem_ctx_create left its handle");
    shmem_ctx_destroy(failed);
    failed = SHMEM_CTX_DEFAULT;
    CHECK(shmem_team_create_ctx(SHMEM_TEAM_INVALID, 0, &failed) != 0,
          "shmem_team_create_ctx(SHMEM_TEAM_INVALID) succeeded");
    CHECK(failed == SHMEM_CTX_INVALID, "a failed shmem_team_create_ctx left its handle");
    shmem_ctx_destroy(SHMEM_CTX_INVALID);
    ok("ctx create: a failed creation gives SHMEM_CTX_INVALID, which destroy ignores");
#endif
    CHECK_EQ(shmem_ctx_create(SHMEM_CTX_SERIALIZED, &ctx), 0, "the test context");
#ifdef FSH_TEST_OSHMEM
    ok("ctx create: options 0 PRIVATE SERIALIZED NOSTORE, destroy (PRIVATE|SERIALIZED skipped on "
       "OSHMEM)");
#else
    ok("ctx create: options 0 PRIVATE SERIALIZED NOSTORE PRIVATE|SERIALIZED, destroy");
#endif
#define RUN(T, N) test_rma_##N();
    RMA_TYPES(RUN)
#undef RUN
    test_sized_8(), test_sized_16(), test_sized_32(), test_sized_64(), test_sized_128(), test_sized_mem();
    test_strided_8(), test_strided_16(), test_strided_32(), test_strided_64(), test_strided_128();
    ok("ctx rma: put get p g iput iget put_nbi get_nbi (24 TYPENAMEs), sized and mem");
#define RUN(T, N) test_amo_##N();
    AMO_TYPES(RUN)
#undef RUN
#define RUN(T, N) test_bitamo_##N();
    BITAMO_TYPES(RUN)
#undef RUN
    ok("ctx amo: standard, bitwise and _nbi fetching AMOs through a context");
    test_order();
    ok("ctx order: ctx_fence, ctx_quiet, SHMEM_CTX_DEFAULT");
#define RUN(T, N) test_signal_##N();
    RMA_TYPES(RUN)
#undef RUN
    test_signal_mem();
    ok("ctx signal: ctx put_signal(_nbi) 24 TYPENAMEs, ctx putmem_signal(_nbi)");
    test_generic();
    ok("ctx generic: C11 shmem_put/p/get/g/atomic_* with a context");
#ifndef FSH_TEST_OSHMEM
    test_team_ctx();
    ok("ctx team: ctx_get_team, team_create_ctx with team PE numbers");
#else
    ok("ctx team (skipped on OSHMEM: it has no teams)");
#endif
    shmem_ctx_destroy(ctx);
    shmem_finalize();
    return 0;
}
