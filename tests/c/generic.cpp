/*
 * generic.cpp: the type-generic names from C++ (shmem_cxx.h: overloads over the C11 tables),
 * written as C++ users write them, inside templates over the element type.
 *
 *   ok generic rma          shmem_put/get/p/g/iput/iget/put_nbi/get_nbi/put_signal, with and
 *                           without a context, for int, long, double, unsigned char
 *   ok generic amo          shmem_atomic_fetch/set/swap/compare_swap/fetch_inc/inc/fetch_add/add
 *                           and the bitwise forms, with and without a context, for int, long,
 *                           unsigned long long (fetch/set/swap also double)
 *   ok generic collectives  shmem_broadcast, fcollect, sum/max reduce on SHMEM_TEAM_WORLD;
 *                           shmemx_sum_inscan
 *   ok generic sync         shmem_wait_until, shmem_test, shmem_test_any
 *   ok generic deprecated   the deprecated generic names (shmem_add, shmem_fetch, shmem_wait, ...)
 *   ok generic complex      complex reductions, typed and generic; shmem_sync on a team
 *
 * Built with `ferroshmem c++ -std=c++17`; a failed check prints "FAIL line PE n: what" and ends
 * the job with shmem_global_exit(1).
 */
#include <shmem.h>
#include <shmemx.h>

#include <cstdio>

static int me, npes;

#define CHECK(cond, what)                                                                      \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            std::fprintf(stderr, "FAIL %d PE %d: %s\n", __LINE__, me, what);                   \
            std::fflush(stderr);                                                               \
            shmem_global_exit(1);                                                              \
        }                                                                                      \
    } while (0)

static void ok(const char *what)
{
    shmem_barrier_all();
    if (me == 0)
        std::printf("ok generic %s\n", what);
    std::fflush(stdout);
}

template <typename T> static T value(int pe, int i) { return static_cast<T>(pe * 5 + i + 1); }

/* Symmetric arrays of T: one set per type, allocated once. */
template <typename T> struct Sym {
    T *a, *b;
    Sym() : a(static_cast<T *>(shmem_calloc(8, sizeof(T)))), b(static_cast<T *>(shmem_calloc(8 * 8, sizeof(T)))) {}
};

template <typename T> static void test_rma(shmem_ctx_t ctx)
{
    static Sym<T> s;
    int next = (me + 1) % npes, prev = (me + npes - 1) % npes;
    T mine[8], got[8];
    for (int i = 0; i < 8; i++)
        mine[i] = value<T>(me, i);
    shmem_put(s.a, mine, 4, next);
    shmem_put(ctx, s.a + 4, mine + 4, 4, next);
    shmem_ctx_quiet(ctx);
    shmem_barrier_all();
    shmem_get(got, s.a, 4, me);
    shmem_get(ctx, got + 4, s.a + 4, 4, me);
    for (int i = 0; i < 8; i++)
        CHECK(got[i] == value<T>(prev, i), "shmem_put then shmem_get");
    CHECK(shmem_g(s.a + 2, me) == value<T>(prev, 2), "shmem_g");
    CHECK(shmem_g(ctx, s.a + 3, me) == value<T>(prev, 3), "shmem_g with a context");
    shmem_barrier_all();
    shmem_p(s.a, value<T>(me, 7), next);
    shmem_p(ctx, s.a + 1, value<T>(me, 6), next);
    shmem_iput(s.b, mine, 2, 1, 4, next);
    shmem_put_nbi(s.b + 16, mine, 8, next);
    shmem_put_nbi(ctx, s.b + 24, mine, 8, next);
    shmem_ctx_quiet(ctx);
    shmem_barrier_all();
    CHECK(s.a[0] == value<T>(prev, 7) && s.a[1] == value<T>(prev, 6), "shmem_p");
    for (int i = 0; i < 4; i++)
        CHECK(s.b[2 * i] == value<T>(prev, i), "shmem_iput");
    shmem_iget(got, s.b, 1, 2, 4, me);
    shmem_get_nbi(got + 4, s.b + 20, 4, me);
    shmem_get_nbi(ctx, got + 6, s.b + 30, 2, me);
    shmem_quiet();
    shmem_ctx_quiet(ctx);
    for (int i = 0; i < 4; i++)
        CHECK(got[i] == value<T>(prev, i), "shmem_iget");
    CHECK(got[4] == value<T>(prev, 4) && got[7] == value<T>(prev, 7), "shmem_get_nbi");
    static uint64_t *sig = static_cast<uint64_t *>(shmem_calloc(1, sizeof(uint64_t)));
    shmem_barrier_all();
    shmem_put_signal(s.b + 40, mine, 8, sig, 1, SHMEM_SIGNAL_ADD, next);
    shmem_signal_wait_until(sig, SHMEM_CMP_GE, 1);
    CHECK(s.b[47] == value<T>(prev, 7), "shmem_put_signal");
    *sig = 0;
    shmem_barrier_all();
}

template <typename T> static void test_amo(shmem_ctx_t ctx)
{
    static Sym<T> s;
    int next = (me + 1) % npes;
    shmem_barrier_all();
    shmem_atomic_add(s.a, T(2), next);
    shmem_atomic_inc(ctx, s.a, next);
    shmem_ctx_quiet(ctx);
    shmem_barrier_all();
    CHECK(shmem_atomic_fetch(s.a, me) == T(3), "shmem_atomic_add, shmem_atomic_inc");
    CHECK(shmem_atomic_fetch_add(s.a, T(4), me) == T(3), "shmem_atomic_fetch_add");
    CHECK(shmem_atomic_fetch_inc(ctx, s.a, me) == T(7), "shmem_atomic_fetch_inc with a context");
    CHECK(shmem_atomic_compare_swap(s.a, T(8), T(1), me) == T(8), "shmem_atomic_compare_swap");
    CHECK(shmem_atomic_swap(s.a, T(6), me) == T(1), "shmem_atomic_swap");
    shmem_atomic_set(ctx, s.a + 1, T(12), me);
    shmem_ctx_quiet(ctx);
    CHECK(shmem_atomic_fetch(ctx, s.a + 1, me) == T(12), "shmem_atomic_set, fetch with a context");
    shmem_barrier_all();
}

template <typename T> static void test_bitwise()
{
    static Sym<T> s;
    shmem_barrier_all();
    shmem_atomic_set(s.a, T(0xf0), me);
    shmem_atomic_or(s.a, T(0x0f), me);
    CHECK(shmem_atomic_fetch_and(s.a, T(0x3c), me) == T(0xff), "shmem_atomic_or, fetch_and");
    shmem_atomic_xor(s.a, T(0x01), me);
    CHECK(shmem_atomic_fetch(s.a, me) == T(0x3d), "shmem_atomic_xor");
    shmem_barrier_all();
}

template <typename T> static void test_float_amo()
{
    static Sym<T> s;
    shmem_barrier_all();
    shmem_atomic_set(s.a, T(1.5), me);
    CHECK(shmem_atomic_swap(s.a, T(2.5), me) == T(1.5), "shmem_atomic_swap (float)");
    CHECK(shmem_atomic_fetch(s.a, me) == T(2.5), "shmem_atomic_fetch (float)");
    shmem_barrier_all();
}

template <typename T> static void test_collectives()
{
    static Sym<T> s;
    for (int i = 0; i < 8; i++)
        s.a[i] = value<T>(me, i);
    shmem_barrier_all();
    shmem_broadcast(SHMEM_TEAM_WORLD, s.b, s.a, 8, 0);
    CHECK(s.b[5] == value<T>(0, 5), "shmem_broadcast");
    shmem_barrier_all();
    shmem_fcollect(SHMEM_TEAM_WORLD, s.b, s.a, 1);
    for (int p = 0; p < npes && p < 8; p++)
        CHECK(s.b[p] == value<T>(p, 0), "shmem_fcollect");
    shmem_barrier_all();
    shmem_sum_reduce(SHMEM_TEAM_WORLD, s.b, s.a, 2);
    T sum = 0, prefix = 0;
    for (int p = 0; p < npes; p++)
        sum += value<T>(p, 1), prefix += p <= me ? value<T>(p, 1) : T(0);
    CHECK(s.b[1] == sum, "shmem_sum_reduce");
    shmem_max_reduce(SHMEM_TEAM_WORLD, s.b, s.a, 2);
    CHECK(s.b[0] == value<T>(npes - 1, 0), "shmem_max_reduce");
    shmemx_sum_inscan(SHMEM_TEAM_WORLD, s.b, s.a, 2);
    CHECK(s.b[1] == prefix, "shmemx_sum_inscan");
    shmem_barrier_all();
}

template <typename T> static void test_sync()
{
    static Sym<T> s;
    int next = (me + 1) % npes;
    shmem_barrier_all();
    shmem_atomic_set(s.a + 3, T(9), next);
    shmem_wait_until(s.a + 3, SHMEM_CMP_EQ, T(9));
    CHECK(shmem_test(s.a + 3, SHMEM_CMP_GE, T(9)) == 1, "shmem_test");
    CHECK(shmem_test_any(s.a, 4, nullptr, SHMEM_CMP_EQ, T(9)) == 3, "shmem_test_any");
    shmem_barrier_all();
}

/* The complex reductions, typed and generic (GCC and Clang take _Complex in C++), and
 * shmem_sync on a team, as C++ programs written for Sandia OpenSHMEM call them. */
static void test_complex_and_sync()
{
    static fshmem_complexd_t src[2], dst[2], wrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
    static long psync[SHMEM_REDUCE_SYNC_SIZE];
    for (long &p : psync)
        p = SHMEM_SYNC_VALUE;
    __real__ src[0] = me + 1;
    __imag__ src[0] = 1;
    src[1] = src[0];
    CHECK(shmem_sync(SHMEM_TEAM_WORLD) == 0, "shmem_sync(SHMEM_TEAM_WORLD)");
    shmem_sum_reduce(SHMEM_TEAM_WORLD, dst, src, 2);
    CHECK(__real__ dst[1] == npes * (npes + 1) / 2 && __imag__ dst[1] == npes,
          "shmem_sum_reduce on complexd");
    dst[0] = dst[1] = 0;
    shmem_barrier_all();
    shmem_complexd_sum_to_all(dst, src, 2, 0, 0, npes, wrk, psync);
    CHECK(__real__ dst[0] == npes * (npes + 1) / 2 && __imag__ dst[0] == npes,
          "shmem_complexd_sum_to_all");
    shmem_barrier_all();
}

/* The deprecated generic names (OpenSHMEM 1.3), as older C++ programs call them. */
static void test_old_generic()
{
    static int i;
    static long l;
    static double d;
    static short s;
    int next = (me + 1) % npes;
    shmem_barrier_all();
    shmem_add(&i, 2, next);
    shmem_inc(&l, next);
    shmem_barrier_all();
    CHECK(i == 2 && l == 1, "shmem_add, shmem_inc");
    shmem_barrier_all();
    CHECK(shmem_fadd(&i, 3, next) == 2 && shmem_finc(&l, next) == 1, "shmem_fadd, shmem_finc");
    shmem_barrier_all();
    CHECK(shmem_cswap(&i, 5, 9, next) == 5, "shmem_cswap");
    shmem_set(&d, 1.5, next);
    shmem_barrier_all();
    CHECK(shmem_fetch(&d, next) == 1.5 && shmem_swap(&d, 2.5, next) == 1.5, "shmem_fetch, swap");
    shmem_barrier_all();
    shmem_p(&s, short(7), next);
    shmem_wait(&s, short(0));
    CHECK(s == 7, "shmem_wait on a short");
    shmem_barrier_all();
}

int main()
{
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    shmem_ctx_t ctx;
    CHECK(shmem_ctx_create(0, &ctx) == 0, "shmem_ctx_create");
    test_rma<int>(ctx);
    test_rma<long>(ctx);
    test_rma<double>(ctx);
    test_rma<unsigned char>(ctx);
    ok("rma: put get p g iput iget put_nbi get_nbi put_signal, int long double uchar");
    test_amo<int>(ctx);
    test_amo<long>(ctx);
    test_amo<unsigned long long>(ctx);
    test_bitwise<unsigned int>();
    test_bitwise<long>();
    test_float_amo<double>();
    ok("amo: standard and extended AMOs with and without a context, bitwise, double");
    test_collectives<int>();
    test_collectives<double>();
    ok("collectives: broadcast fcollect sum/max reduce shmemx_sum_inscan, int double");
    test_sync<int>();
    test_sync<unsigned long>();
    ok("sync: wait_until test test_any, int ulong");
    test_old_generic();
    ok("deprecated: shmem_add inc fadd finc cswap set fetch swap wait");
    test_complex_and_sync();
    ok("complex: shmem_sum_reduce and shmem_complexd_sum_to_all on complexd, shmem_sync(team)");
    shmem_ctx_destroy(ctx);
    shmem_finalize();
    return 0;
}
