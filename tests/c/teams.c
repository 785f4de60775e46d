/*
 * teams.c: teams (OpenSHMEM 1.5). OSHMEM 4.1 has no teams: built against it, this program
 * only reports that it was skipped.
 *
 *   ok teams predefined    SHMEM_TEAM_WORLD and SHMEM_TEAM_SHARED: my_pe, n_pes, translate_pe
 *                          both ways; SHMEM_TEAM_INVALID gives -1; out-of-range PEs give -1
 *   ok teams split_strided the even PEs (start 0, stride 2): members, numbering, translate_pe,
 *                          team_sync, a put between members, sum_reduce and broadcast on the
 *                          team with team-relative root; a split of that team (world stride 4);
 *                          an invalid triplet fails on every PE
 *   ok teams config        num_contexts set through split_strided comes back from get_config
 *   ok teams split_2d      xrange 2: x-teams are rows, y-teams columns; numbering, translate,
 *                          team_sync and a reduction on each
 *   ok teams team_ptr      shmem_team_ptr is NULL or a working pointer to the team PE's object
 *   ok teams stride        negative stride (1.5 leaves it open; 1.6 allows it, reversing the
 *                          order) and stride 0 with size 1: either a correct team or a failure
 *                          on every PE; the program says which
 */
#include "check.h"

#ifndef FSH_TEST_OSHMEM

static int x_word[4]; /* symmetric */
static int red_src, red_dst, rc_word;

/* Checks that rc is the same on every PE (rc_word is symmetric). */
static void check_same_rc(int rc, const char *what)
{
    rc_word = rc != 0;
    shmem_barrier_all();
    for (int p = 0; p < npes; p++)
        CHECK_EQ(shmem_int_g(&rc_word, p), rc_word, "%s: PE %d's return disagrees", what, p);
    shmem_barrier_all();
}

static void test_predefined(void)
{
    CHECK_EQ(shmem_team_my_pe(SHMEM_TEAM_WORLD), me, "team_my_pe(WORLD)");
    CHECK_EQ(shmem_team_n_pes(SHMEM_TEAM_WORLD), npes, "team_n_pes(WORLD)");
    CHECK_EQ(shmem_team_my_pe(SHMEM_TEAM_INVALID), -1, "team_my_pe(INVALID)");
    CHECK_EQ(shmem_team_n_pes(SHMEM_TEAM_INVALID), -1, "team_n_pes(INVALID)");
    CHECK_EQ(shmem_team_translate_pe(SHMEM_TEAM_WORLD, me, SHMEM_TEAM_WORLD), me,
             "translate_pe(WORLD, me, WORLD)");
    CHECK_EQ(shmem_team_translate_pe(SHMEM_TEAM_WORLD, npes, SHMEM_TEAM_WORLD), -1,
             "translate_pe(WORLD, n_pes, WORLD)");
    CHECK_EQ(shmem_team_translate_pe(SHMEM_TEAM_WORLD, -1, SHMEM_TEAM_WORLD), -1,
             "translate_pe(WORLD, -1, WORLD)");
    CHECK_EQ(shmem_team_translate_pe(SHMEM_TEAM_INVALID, 0, SHMEM_TEAM_WORLD), -1,
             "translate_pe(INVALID, 0, WORLD)");
    CHECK_EQ(shmem_team_translate_pe(SHMEM_TEAM_WORLD, 0, SHMEM_TEAM_INVALID), -1,
             "translate_pe(WORLD, 0, INVALID)");
    int sn = shmem_team_n_pes(SHMEM_TEAM_SHARED), sm = shmem_team_my_pe(SHMEM_TEAM_SHARED);
    CHECK(sn >= 1 && sn <= npes, "team_n_pes(SHARED) = %d", sn);
    CHECK(sm >= 0 && sm < sn, "team_my_pe(SHARED) = %d of %d", sm, sn);
    CHECK_EQ(shmem_team_translate_pe(SHMEM_TEAM_SHARED, sm, SHMEM_TEAM_WORLD), me,
             "translate_pe(SHARED, my shared PE, WORLD)");
    CHECK_EQ(shmem_team_translate_pe(SHMEM_TEAM_WORLD, me, SHMEM_TEAM_SHARED), sm,
             "translate_pe(WORLD, me, SHARED)");
    /* the shared team's PEs reach each other's symmetric heap objects by load and store */
    int *heap = shmem_malloc(sizeof(int));
    for (int i = 0; i < sn; i++) {
        int w = shmem_team_translate_pe(SHMEM_TEAM_SHARED, i, SHMEM_TEAM_WORLD);
        CHECK(w >= 0 && w < npes, "translate_pe(SHARED, %d, WORLD) = %d", i, w);
        CHECK(shmem_team_ptr(SHMEM_TEAM_SHARED, heap, i) != NULL,
              "shmem_team_ptr(SHARED, heap object, %d) is NULL", i);
        CHECK(shmem_ptr(heap, w) != NULL, "shmem_ptr(heap object, %d) is NULL for a SHARED PE", w);
    }
    shmem_free(heap);
    if (me == 0)
        printf("# SHMEM_TEAM_SHARED has %d of %d PEs\n", sn, npes);
    ok("teams predefined: WORLD SHARED INVALID, my_pe n_pes translate_pe");
}

/* Members of the team of world PEs 0, S, 2S, ...: checks numbering and translation. */
static void check_strided(shmem_team_t t, int S, int size, const char *what)
{
    int member = me % S == 0 && me / S < size;
    if (!member) {
        CHECK(t == SHMEM_TEAM_INVALID, "%s: non-member PE got a team", what);
        return;
    }
    CHECK(t != SHMEM_TEAM_INVALID, "%s: member got SHMEM_TEAM_INVALID", what);
    CHECK_EQ(shmem_team_my_pe(t), me / S, "%s: team_my_pe", what);
    CHECK_EQ(shmem_team_n_pes(t), size, "%s: team_n_pes", what);
    for (int i = 0; i < size; i++)
        CHECK_EQ(shmem_team_translate_pe(t, i, SHMEM_TEAM_WORLD), i * S, "%s: translate_pe(team, %d, WORLD)", what, i);
    CHECK_EQ(shmem_team_translate_pe(SHMEM_TEAM_WORLD, me, t), me / S, "%s: translate_pe(WORLD, me, team)", what);
    if (npes > 1 && S > 1)
        CHECK_EQ(shmem_team_translate_pe(SHMEM_TEAM_WORLD, 1, t), -1, "%s: translate_pe(WORLD, 1, team)", what);
    CHECK_EQ(shmem_team_translate_pe(t, size, SHMEM_TEAM_WORLD), -1, "%s: translate_pe(team, size, WORLD)", what);
}

/* Communication inside a team of world PEs 0, S, 2S, ... (members only). */
static void use_team(shmem_team_t t, int S, int size, const char *what)
{
    int tme = shmem_team_my_pe(t), to = shmem_team_translate_pe(t, (tme + 1) % size, SHMEM_TEAM_WORLD);
    int from = ((tme + size - 1) % size) * S;
    x_word[0] = -1;
    CHECK_EQ(shmem_team_sync(t), 0, "%s: team_sync", what);
    shmem_int_p(&x_word[0], me, to);
    shmem_quiet();
    CHECK_EQ(shmem_team_sync(t), 0, "%s: team_sync", what);
    CHECK_EQ(x_word[0], from, "%s: p from the previous team member", what);
    red_src = me;
    CHECK_EQ(shmem_team_sync(t), 0, "%s: team_sync", what);
    CHECK_EQ(shmem_int_sum_reduce(t, &red_dst, &red_src, 1), 0, "%s: sum_reduce", what);
    CHECK_EQ(red_dst, S * size * (size - 1) / 2, "%s: sum_reduce of world PE numbers", what);
    CHECK_EQ(shmem_int_broadcast(t, &red_dst, &red_src, 1, size - 1), 0, "%s: broadcast", what);
    CHECK_EQ(red_dst, (size - 1) * S, "%s: broadcast from team PE %d", what, size - 1);
    CHECK_EQ(shmem_team_sync(t), 0, "%s: team_sync", what);
}

static void test_split_strided(void)
{
    shmem_team_t even = SHMEM_TEAM_INVALID, quad = SHMEM_TEAM_INVALID, bad = SHMEM_TEAM_WORLD;
    int size = (npes + 1) / 2;
    int rc = shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 2, size, NULL, 0, &even);
    CHECK_EQ(rc, 0, "split_strided(WORLD, 0, 2, %d)", size);
    check_strided(even, 2, size, "even PEs");
    if (even != SHMEM_TEAM_INVALID) {
        use_team(even, 2, size, "even PEs");
        int qsize = (size + 1) / 2;
        rc = shmem_team_split_strided(even, 0, 2, qsize, NULL, 0, &quad);
        CHECK_EQ(rc, 0, "split_strided(even, 0, 2, %d)", qsize);
        check_strided(quad, 4, qsize, "every 4th PE (split of the even PEs)");
        if (quad != SHMEM_TEAM_INVALID) {
            for (int i = 0; i < qsize; i++)
                CHECK_EQ(shmem_team_translate_pe(quad, i, even), 2 * i, "translate_pe(quad, %d, even)", i);
            use_team(quad, 4, qsize, "every 4th PE");
            shmem_team_destroy(quad);
        }
        shmem_team_destroy(even);
    }
    shmem_barrier_all();
    rc = shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, npes + 1, NULL, 0, &bad);
    CHECK(rc != 0, "split_strided(WORLD, 0, 1, n_pes + 1) succeeded");
    CHECK(bad == SHMEM_TEAM_INVALID, "an invalid triplet gave a team");
    check_same_rc(rc, "split_strided with an invalid triplet");
    ok("teams split_strided: even PEs, a split of a split, invalid triplet");
}

static void test_config(void)
{
    shmem_team_config_t cfg = {.num_contexts = 2}, got = {.num_contexts = -1};
    shmem_team_t t = SHMEM_TEAM_INVALID;
    int rc = shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, npes, &cfg, SHMEM_TEAM_NUM_CONTEXTS, &t);
    CHECK_EQ(rc, 0, "split_strided with num_contexts 2");
    CHECK_EQ(shmem_team_get_config(t, SHMEM_TEAM_NUM_CONTEXTS, &got), 0, "team_get_config");
    CHECK_EQ(got.num_contexts, 2, "team_get_config: num_contexts");
    CHECK_EQ(shmem_team_my_pe(t), me, "whole-world split: team_my_pe");
    shmem_ctx_t c[2];
    for (int i = 0; i < 2; i++)
        CHECK_EQ(shmem_team_create_ctx(t, 0, &c[i]), 0, "team_create_ctx %d of num_contexts 2", i);
    for (int i = 0; i < 2; i++)
        shmem_ctx_destroy(c[i]);
    CHECK_EQ(shmem_team_get_config(SHMEM_TEAM_WORLD, SHMEM_TEAM_NUM_CONTEXTS, &got), 0, "team_get_config(WORLD)");
    CHECK(shmem_team_get_config(SHMEM_TEAM_INVALID, SHMEM_TEAM_NUM_CONTEXTS, &got) != 0, "team_get_config(INVALID) gave 0");
    shmem_team_destroy(t);
    ok("teams config: num_contexts through split_strided and get_config");
}

static void test_split_2d(void)
{
    int xr = npes >= 2 ? 2 : 1, x = me % xr, y = me / xr;
    int xsize = npes - y * xr < xr ? npes - y * xr : xr, ysize = (npes - x + xr - 1) / xr;
    shmem_team_t xt = SHMEM_TEAM_INVALID, yt = SHMEM_TEAM_INVALID;
    int rc = shmem_team_split_2d(SHMEM_TEAM_WORLD, xr, NULL, 0, &xt, NULL, 0, &yt);
    CHECK_EQ(rc, 0, "split_2d(WORLD, %d)", xr);
    CHECK(xt != SHMEM_TEAM_INVALID && yt != SHMEM_TEAM_INVALID, "split_2d gave an invalid team");
    CHECK_EQ(shmem_team_my_pe(xt), x, "x-team: team_my_pe");
    CHECK_EQ(shmem_team_n_pes(xt), xsize, "x-team: team_n_pes");
    CHECK_EQ(shmem_team_my_pe(yt), y, "y-team: team_my_pe");
    CHECK_EQ(shmem_team_n_pes(yt), ysize, "y-team: team_n_pes");
    for (int i = 0; i < xsize; i++)
        CHECK_EQ(shmem_team_translate_pe(xt, i, SHMEM_TEAM_WORLD), y * xr + i, "translate_pe(x-team, %d, WORLD)", i);
    for (int i = 0; i < ysize; i++)
        CHECK_EQ(shmem_team_translate_pe(yt, i, SHMEM_TEAM_WORLD), i * xr + x, "translate_pe(y-team, %d, WORLD)", i);
    CHECK_EQ(shmem_team_sync(xt), 0, "team_sync(x-team)");
    CHECK_EQ(shmem_team_sync(yt), 0, "team_sync(y-team)");
    red_src = me;
    shmem_barrier_all();
    CHECK_EQ(shmem_int_sum_reduce(xt, &red_dst, &red_src, 1), 0, "sum_reduce(x-team)");
    CHECK_EQ(red_dst, xsize * y * xr + xsize * (xsize - 1) / 2, "sum_reduce over my row");
    CHECK_EQ(shmem_team_sync(xt), 0, "team_sync(x-team)");
    CHECK_EQ(shmem_int_sum_reduce(yt, &red_dst, &red_src, 1), 0, "sum_reduce(y-team)");
    CHECK_EQ(red_dst, ysize * x + xr * ysize * (ysize - 1) / 2, "sum_reduce over my column");
    shmem_barrier_all();
    shmem_team_destroy(xt);
    shmem_team_destroy(yt);
    ok("teams split_2d: rows and columns, numbering, translate, sync, reductions");
}

static void test_team_ptr(void)
{
    int next = next_pe(), prev = prev_pe();
    int *mine = shmem_team_ptr(SHMEM_TEAM_WORLD, x_word, me), *p = shmem_team_ptr(SHMEM_TEAM_WORLD, x_word, next);
    CHECK(mine == NULL || mine == x_word, "team_ptr(WORLD, x, me) is neither NULL nor x");
    x_word[1] = -1;
    x_word[2] = p != NULL;
    shmem_barrier_all();
    if (p)
        p[1] = 500 + me;
    shmem_barrier_all();
    CHECK_EQ(x_word[1], shmem_int_g(&x_word[2], prev) ? 500 + prev : -1, "store through team_ptr by PE %d", prev);
    shmem_barrier_all();
    ok("teams team_ptr: NULL or a pointer that stores to the team PE");
}

static void test_strides(void)
{
    shmem_team_t rev = SHMEM_TEAM_WORLD, one = SHMEM_TEAM_WORLD;
    int rc = shmem_team_split_strided(SHMEM_TEAM_WORLD, npes - 1, -1, npes, NULL, 0, &rev);
    check_same_rc(rc, "split_strided with stride -1");
    if (rc == 0) {
        CHECK(rev != SHMEM_TEAM_INVALID, "stride -1: every PE is a member");
        CHECK_EQ(shmem_team_my_pe(rev), npes - 1 - me, "stride -1: team_my_pe");
        CHECK_EQ(shmem_team_translate_pe(rev, 0, SHMEM_TEAM_WORLD), npes - 1, "stride -1: translate_pe(rev, 0, WORLD)");
        red_src = me;
        CHECK_EQ(shmem_int_broadcast(rev, &red_dst, &red_src, 1, 0), 0, "stride -1: broadcast");
        CHECK_EQ(red_dst, npes - 1, "stride -1: broadcast from team PE 0 (world PE n_pes - 1)");
        shmem_team_destroy(rev);
    } else
        CHECK(rev == SHMEM_TEAM_INVALID, "stride -1 failed but gave a team");
    rc = shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 0, 1, NULL, 0, &one);
    check_same_rc(rc, "split_strided with stride 0, size 1");
    if (rc == 0) {
        CHECK((me == 0) == (one != SHMEM_TEAM_INVALID), "stride 0, size 1: membership");
        if (me == 0) {
            CHECK_EQ(shmem_team_n_pes(one), 1, "stride 0, size 1: team_n_pes");
            shmem_team_destroy(one);
        }
    } else
        CHECK(one == SHMEM_TEAM_INVALID, "stride 0 failed but gave a team");
    shmem_barrier_all();
    if (me == 0)
        printf("# split_strided: stride -1 %s, stride 0 with size 1 %s\n",
               rev != SHMEM_TEAM_INVALID ? "makes the reversed team" : "is refused",
               rc == 0 ? "makes a one-PE team" : "is refused");
    ok("teams stride: negative and zero strides give a correct team or fail everywhere");
}

int main(void)
{
    test_init();
    test_predefined();
    test_split_strided();
    test_config();
    test_split_2d();
    test_team_ptr();
    test_strides();
    shmem_finalize();
    return 0;
}

#else /* FSH_TEST_OSHMEM */

int main(void)
{
    test_init();
    ok("teams (skipped on OSHMEM: it has no teams)");
    shmem_finalize();
    return 0;
}

#endif
