/*
 * host_collectives.c: the OpenSHMEM counterpart of benches/host_collectives.rs, for comparing
 * ferroshmem's collectives with Open MPI's OSHMEM (scripts/compare-oshmem-collectives). Same
 * figures, same method, same output lines:
 *
 *   RESULT <name> <size_bytes> <value> <unit>
 *
 *   barrier     shmem_barrier_all                                        us per call
 *   broadcast   shmem_broadcast32 from PE 0, size = bytes broadcast      us, or GB/s
 *   fcollect    shmem_fcollect32, size = bytes each PE contributes       us, or GB/s
 *   alltoall    shmem_alltoall32, size = bytes each PE sends each PE     us, or GB/s
 *   reduce      shmem_int_sum_to_all, size = bytes reduced               us, or GB/s
 *
 * Method (OSU micro-benchmark style): every PE times each call alone, with a barrier_all
 * between calls that is not timed; a batch of --iters calls gives a PE's mean time per call;
 * a PE's figure is the median over --reps batches after --warmup untimed calls; the figure
 * printed is the mean of the PEs' figures. Sizes up to 4 KiB are reported as latency (us),
 * larger ones as bandwidth in GB/s (10^9 bytes/s) of the bytes one PE ends up with in its
 * destination: size for broadcast and reduce, n_pes * size for fcollect and alltoall.
 *
 * Build and run:
 *   oshcc -O2 -o target/oshmem/host_collectives benches/oshmem/host_collectives.c
 *   oshrun --allow-run-as-root --oversubscribe --mca osc ^rdma -np 2 target/oshmem/host_collectives
 *
 * Options: --iters N (calls per batch of a latency size, default 2000), --warmup N (default
 * 200), --reps N (default 5), --bw-mib N (MiB moved per batch of a bandwidth size, default 64),
 * --only NAME (that collective alone: barrier, broadcast, fcollect, alltoall or reduce); other
 * arguments are ignored.
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_REPS 101
#define MAX_PES 64
#define N_SIZES 6
#define MAX_BLOCK (8L << 20)
#define LATENCY_MAX 4096

static const long sizes[N_SIZES] = {4, 256, 4096, 64L << 10, 1L << 20, 8L << 20};

enum op { BARRIER, BROADCAST, FCOLLECT, ALLTOALL, REDUCE };
static const char *names[] = {"barrier", "broadcast", "fcollect", "alltoall", "reduce"};

static long psync[SHMEM_REDUCE_SYNC_SIZE > SHMEM_COLLECT_SYNC_SIZE ? SHMEM_REDUCE_SYNC_SIZE
                                                                   : SHMEM_COLLECT_SYNC_SIZE];
static double gathered[MAX_PES];

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
                fprintf(stderr, "host_collectives: %s %s: expected a whole number >= %ld\n",
                        name, value, min);
                exit(2);
            }
            return v;
        }
    }
    return fallback;
}

static int *dest, *source, *work;

/* One call of `op` moving `size` bytes (per PE block for fcollect and alltoall). */
static void call(enum op op, long size, int npes)
{
    int n = (int)(size / 4);
    switch (op) {
    case BARRIER:
        shmem_barrier_all();
        break;
    case BROADCAST:
        shmem_broadcast32(dest, source, (size_t)n, 0, 0, 0, npes, psync);
        break;
    case FCOLLECT:
        shmem_fcollect32(dest, source, (size_t)n, 0, 0, npes, psync);
        break;
    case ALLTOALL:
        shmem_alltoall32(dest, source, (size_t)n, 0, 0, npes, psync);
        break;
    case REDUCE:
        shmem_int_sum_to_all(dest, source, n, 0, 0, npes, work, psync);
        break;
    }
}

/* Checks the destination after the last call, so that a broken collective cannot pass. */
static void verify(enum op op, long size, int me, int npes)
{
    long n = size / 4;
    for (long i = 0; i < n; i++) {
        long want = 0;
        long got;
        switch (op) {
        case BARRIER:
            return;
        case BROADCAST:
            if (me == 0)
                return; /* OpenSHMEM 1.4: the root's dest is not written */
            want = i;
            got = dest[i];
            break;
        case FCOLLECT:
            for (int p = 0; p < npes; p++) {
                got = dest[p * n + i];
                if (got != p * 1000 + i % 1000)
                    goto bad;
            }
            continue;
        case ALLTOALL:
            for (int p = 0; p < npes; p++) {
                got = dest[p * n + i];
                if (got != p * 1000 + me * 10 + i % 10)
                    goto bad;
            }
            continue;
        case REDUCE:
            for (int p = 0; p < npes; p++)
                want += p * 1000 + i % 1000;
            got = dest[i];
            break;
        }
        if (got != want) {
        bad:
            fprintf(stderr, "host_collectives: %s of %ld bytes: PE %d element %ld is %ld\n",
                    names[op], size, me, i, got);
            shmem_global_exit(1);
        }
    }
}

static void fill(enum op op, long size, int me, int npes)
{
    long n = size / 4;
    if (op == ALLTOALL) {
        for (int p = 0; p < npes; p++)
            for (long i = 0; i < n; i++)
                source[p * n + i] = (int)(me * 1000 + p * 10 + i % 10);
    } else if (op == BROADCAST) {
        for (long i = 0; i < n; i++)
            source[i] = (int)i;
    } else {
        for (long i = 0; i < n; i++)
            source[i] = (int)(me * 1000 + i % 1000);
    }
}

/* The collective named by --only NAME (one of names[]), or -1 when none was given: the others
 * are skipped, e.g. to profile one (and OSHMEM's other collectives across hosts take
 * minutes). An unknown name is a usage error. */
static int only_op(int argc, char **argv)
{
    for (int a = 1; a + 1 < argc; a++) {
        if (strcmp(argv[a], "--only") != 0)
            continue;
        for (int op = BARRIER; op <= REDUCE; op++)
            if (strcmp(argv[a + 1], names[op]) == 0)
                return op;
        fprintf(stderr, "host_collectives: --only %s: expected barrier, broadcast, fcollect, "
                        "alltoall or reduce\n", argv[a + 1]);
        exit(2);
    }
    return -1;
}

int main(int argc, char **argv)
{
    long iters = parse_option(argc, argv, "--iters", 2000, 1);
    long warmup = parse_option(argc, argv, "--warmup", 200, 0);
    long reps = parse_option(argc, argv, "--reps", 5, 1);
    long bw_bytes = parse_option(argc, argv, "--bw-mib", 64, 1) << 20;
    int only = only_op(argc, argv);
    if (reps > MAX_REPS) {
        fprintf(stderr, "host_collectives: --reps is at most %d\n", MAX_REPS);
        return 2;
    }
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    if (npes > MAX_PES) {
        if (me == 0)
            fprintf(stderr, "host_collectives: at most %d PEs\n", MAX_PES);
        shmem_finalize();
        return 1;
    }
    for (size_t i = 0; i < sizeof psync / sizeof psync[0]; i++)
        psync[i] = SHMEM_SYNC_VALUE;
    dest = shmem_align(4096, MAX_BLOCK * npes);
    source = shmem_align(4096, MAX_BLOCK * npes);
    work = shmem_align(4096, MAX_BLOCK / 2 + 64);
    if (!dest || !source || !work) {
        fprintf(stderr, "host_collectives: out of symmetric memory\n");
        shmem_global_exit(1);
    }
    memset(dest, 0, MAX_BLOCK * npes);
    shmem_barrier_all();
    if (me == 0)
        printf("# OSHMEM host_collectives: %d PEs; per call, mean over PEs of each PE's median "
               "of %ld batches\n",
               npes, reps);
    for (int op = BARRIER; op <= REDUCE; op++) {
        if (only >= 0 && op != only)
            continue;
        for (int s = 0; s < N_SIZES; s++) {
            long size = op == BARRIER ? 0 : sizes[s];
            if (op == BARRIER && s > 0)
                break;
            long moved = (op == FCOLLECT || op == ALLTOALL) ? size * npes : size;
            long n = size <= LATENCY_MAX ? iters : bw_bytes / (moved > 0 ? moved : 1);
            if (n < 4)
                n = 4;
            long warm = size <= LATENCY_MAX ? warmup : 2;
            fill(op, size, me, npes);
            shmem_barrier_all();
            double samples[MAX_REPS];
            for (long k = 0; k < warm; k++) {
                call(op, size, npes);
                shmem_barrier_all();
            }
            for (long r = 0; r < reps; r++) {
                double total = 0;
                for (long k = 0; k < n; k++) {
                    double start = now();
                    call(op, size, npes);
                    total += now() - start;
                    shmem_barrier_all();
                }
                samples[r] = total / (double)n;
            }
            verify(op, size, me, npes);
            qsort(samples, (size_t)reps, sizeof(double), compare_doubles);
            double mine = samples[reps / 2];
            shmem_double_p(&gathered[me], mine, 0);
            shmem_barrier_all();
            if (me == 0) {
                double mean = 0;
                for (int p = 0; p < npes; p++)
                    mean += gathered[p] / npes;
                if (size <= LATENCY_MAX)
                    printf("RESULT %s %ld %.4f us\n", names[op], size, mean * 1e6);
                else
                    printf("RESULT %s %ld %.4f GB/s\n", names[op], size,
                           (double)moved / mean / 1e9);
                fflush(stdout);
            }
            shmem_barrier_all();
        }
    }
    shmem_free(work);
    shmem_free(source);
    shmem_free(dest);
    shmem_finalize();
    return 0;
}
