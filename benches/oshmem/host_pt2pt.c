/*
 * host_pt2pt.c: the OpenSHMEM counterpart of benches/host_pt2pt.rs, for comparing ferroshmem
 * with Open MPI's OSHMEM (scripts/compare-oshmem). Same figures, same method (warm-up, then
 * the median of --reps timed batches, timed on PE 0), same output lines:
 *
 *   RESULT <name> <size_bytes> <value> <unit>
 *
 *   put_quiet   8 B shmem_putmem to PE 1, then shmem_quiet          us per op
 *   get         8 B shmem_getmem from PE 1                          us per op
 *   fetch_add   shmem_longlong_atomic_fetch_add on PE 1             us per op
 *   pingpong    shmem_longlong_p + shmem_longlong_wait_until, one-way = round trip / 2,
 *               each batch on a flag of its own
 *   put_bw      back-to-back shmem_putmem_nbi of the size, one shmem_quiet at the end, GB/s
 *   barrier_all shmem_barrier_all on both PEs                       us per op
 *
 * Build and run:
 *   oshcc -O2 -o target/oshmem_host_pt2pt benches/oshmem/host_pt2pt.c
 *   oshrun --allow-run-as-root --oversubscribe --mca osc ^rdma -np 2 target/oshmem_host_pt2pt
 *
 * The bandwidth buffers are page-aligned, as in the Rust benchmark.
 *
 * Options: --iters N, --warmup N, --reps N, --bw-mib N (as the Rust benchmark); other
 * arguments are ignored.
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZE (16L << 20)
#define MAX_REPS 101
#define N_SIZES 7
/* Ping-pong flags, one per batch in turn, a page and a line apart (see pingpong_flag). */
#define PINGPONG_FLAGS 16
#define PINGPONG_FLAG_STRIDE ((4096 + 64) / (long)sizeof(long long))

static const long bw_sizes[N_SIZES] = {4L << 10,  16L << 10, 64L << 10, 256L << 10,
                                       1L << 20,  4L << 20,  16L << 20};

struct figure {
    const char *name;
    long size;
    double value;
    const char *unit;
};

static struct figure figures[16];
static int n_figures;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *samples, long n)
{
    qsort(samples, (size_t)n, sizeof(double), compare_doubles);
    return samples[n / 2];
}

static void add_figure(const char *name, long size, double value, const char *unit)
{
    figures[n_figures++] = (struct figure){name, size, value, unit};
}

/*
 * The ping-pong flag of call i (counted from 1, as PER_OP counts): the warm-up's and the first
 * batch's flag 0, then one flag per batch in turn, each on a page and at a line offset of its
 * own (where a flag's line sits alone moved the one-way time by a third on an Intel Xeon VM).
 */
static long long *pingpong_flag(long long *flags, long long i, long warm, long n)
{
    long long batch = i > warm ? (i - warm - 1) / n : 0;
    return flags + (batch % PINGPONG_FLAGS) * PINGPONG_FLAG_STRIDE;
}

static void check(const char *what, long long got, long long want)
{
    if (got != want) {
        fprintf(stderr, "host_pt2pt: %s: read %lld, expected %lld\n", what, got, want);
        shmem_global_exit(1);
    }
}

/*
 * Runs the statements after the plan with `i` = 1, 2, ... counting on across `warm` untimed
 * runs and `reps` timed batches of `n` runs; stores in `out` the median seconds per run.
 */
#define PER_OP(out, warm, n, reps, ...)                                    \
    do {                                                                   \
        double samples_[MAX_REPS];                                         \
        long long i = 0;                                                   \
        for (long k_ = 0; k_ < (warm); k_++) {                             \
            i++;                                                           \
            __VA_ARGS__;                                                   \
        }                                                                  \
        for (long r_ = 0; r_ < (reps); r_++) {                             \
            double start_ = now();                                         \
            for (long k_ = 0; k_ < (n); k_++) {                            \
                i++;                                                       \
                __VA_ARGS__;                                               \
            }                                                              \
            samples_[r_] = (now() - start_) / (double)(n);                 \
        }                                                                  \
        (void)i;                                                           \
        (out) = median(samples_, (reps));                                  \
    } while (0)

static long parse_option(int argc, char **argv, const char *name, long fallback, long min)
{
    size_t len = strlen(name);
    for (int a = 1; a < argc; a++) {
        const char *value = NULL;
        if (strcmp(argv[a], name) == 0 && a + 1 < argc)
            value = argv[a + 1];
        else if (strncmp(argv[a], name, len) == 0 && argv[a][len] == '=')
            value = argv[a] + len + 1;
        if (value) {
            char *end;
            long v = strtol(value, &end, 10);
            if (*end != '\0' || v < min) {
                fprintf(stderr, "host_pt2pt: %s %s: expected a whole number >= %ld\n", name,
                        value, min);
                exit(2);
            }
            return v;
        }
    }
    return fallback;
}

int main(int argc, char **argv)
{
    long iters = parse_option(argc, argv, "--iters", 100000, 1);
    long warmup = parse_option(argc, argv, "--warmup", 10000, 0);
    long reps = parse_option(argc, argv, "--reps", 5, 1);
    long bw_bytes = parse_option(argc, argv, "--bw-mib", 256, 1) << 20;
    if (reps > MAX_REPS) {
        fprintf(stderr, "host_pt2pt: --reps is at most %d\n", MAX_REPS);
        return 2;
    }

    shmem_init();
    int me = shmem_my_pe(), peer = 1 - me;
    if (shmem_n_pes() != 2) {
        if (me == 0)
            fprintf(stderr, "host_pt2pt needs exactly 2 PEs, not %d\n", shmem_n_pes());
        shmem_finalize();
        return 1;
    }
    long long *word = shmem_calloc(1, sizeof(long long));
    long long *counter = shmem_calloc(1, sizeof(long long));
    long long *flags = shmem_calloc(PINGPONG_FLAGS * PINGPONG_FLAG_STRIDE, sizeof(long long));
    char *big = shmem_align(4096, MAX_SIZE);
    char *src = aligned_alloc(4096, MAX_SIZE);
    if (!word || !counter || !flags || !big || !src) {
        fprintf(stderr, "host_pt2pt: out of memory\n");
        shmem_global_exit(1);
    }
    for (long b = 0; b < MAX_SIZE; b++)
        src[b] = (char)b;
    long long calls = warmup + iters * reps;
    double t;
    shmem_barrier_all();

    if (me == 0) {
        PER_OP(t, warmup, iters, reps, shmem_putmem(word, &i, sizeof i, 1); shmem_quiet());
        add_figure("put_quiet", 8, t * 1e6, "us");
        check("put_quiet", shmem_longlong_g(word, 1), calls);

        long long got = 0;
        PER_OP(t, warmup, iters, reps, shmem_getmem(&got, word, sizeof got, 1));
        add_figure("get", 8, t * 1e6, "us");
        check("get", got, calls);

        PER_OP(t, warmup, iters, reps, shmem_longlong_atomic_fetch_add(counter, 1, 1));
        add_figure("fetch_add", 8, t * 1e6, "us");
        check("fetch_add", shmem_longlong_g(counter, 1), calls);
    }
    shmem_barrier_all();

    if (me == 0) {
        PER_OP(t, warmup, iters, reps, long long *flag = pingpong_flag(flags, i, warmup, iters);
               shmem_longlong_p(flag, i, peer); shmem_longlong_wait_until(flag, SHMEM_CMP_GE, i));
    } else {
        PER_OP(t, warmup, iters, reps, long long *flag = pingpong_flag(flags, i, warmup, iters);
               shmem_longlong_wait_until(flag, SHMEM_CMP_GE, i); shmem_longlong_p(flag, i, peer));
    }
    add_figure("pingpong", 8, t / 2 * 1e6, "us");
    shmem_barrier_all();

    if (me == 0) {
        for (int s = 0; s < N_SIZES; s++) {
            long size = bw_sizes[s];
            long puts = bw_bytes / size < 4 ? 4 : bw_bytes / size;
            PER_OP(t, 1, 1, reps, for (long p = 0; p < puts; p++) shmem_putmem_nbi(big, src, size, 1);
                   shmem_quiet());
            add_figure("put_bw", size, (double)(size * puts) / t / 1e9, "GB/s");
        }
        char tail;
        shmem_getmem(&tail, big + MAX_SIZE - 1, 1, 1);
        check("put_bw", tail, src[MAX_SIZE - 1]);
    }
    shmem_barrier_all();

    PER_OP(t, warmup, iters, reps, shmem_barrier_all());
    add_figure("barrier_all", 0, t * 1e6, "us");

    if (me == 0) {
        printf("# OSHMEM host_pt2pt: 2 PEs; median of %ld batches (%ld latency iterations, %ld MiB "
               "per bandwidth batch)\n",
               reps, iters, bw_bytes >> 20);
        const char *last = "";
        for (int f = 0; f < n_figures; f++) {
            const char *what = strcmp(figures[f].unit, "us") == 0 ? "latency" : "bandwidth";
            if (strcmp(figures[f].name, last) != 0) {
                printf("\n#%s %s\n%-12s%s(%s)\n", figures[f].name, what, "size(B)", what,
                       figures[f].unit);
                last = figures[f].name;
            }
            printf("%-12ld%.3f\n", figures[f].size, figures[f].value);
        }
        printf("\n");
        for (int f = 0; f < n_figures; f++)
            printf("RESULT %s %ld %.4f %s\n", figures[f].name, figures[f].size, figures[f].value,
                   figures[f].unit);
    }
    free(src);
    shmem_free(big);
    shmem_free(flags);
    shmem_free(counter);
    shmem_free(word);
    shmem_finalize();
    return 0;
}
