/*
 * memory.c: symmetric heap management.
 *
 *   ok memory malloc            shmem_malloc gives symmetric, remotely writable memory; size 0
 *                               gives NULL (malloc and align, as 1.5 says); shmem_free(NULL)
 *   ok memory calloc            shmem_calloc zeroes count * size bytes
 *   ok memory align             shmem_align honours alignments 8 to 4096
 *   ok memory realloc           shmem_realloc keeps the contents when growing and shrinking, and
 *                               the new block is symmetric; realloc(NULL, n) allocates
 *   ok memory malloc_with_hints hints 0, ATOMICS_REMOTE, SIGNAL_REMOTE; atomics on the block
 *   ok memory churn             many blocks of mixed sizes, freed out of order, stay intact
 */
#include "check.h"

/* Fills n bytes with a pattern of (pe, salt), to put to another PE and check there. */
static void fill(unsigned char *b, size_t n, int pe, int salt)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(pe * 31 + salt * 7 + i % 251);
}

static void check_pattern(const unsigned char *b, size_t n, int pe, int salt, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(pe * 31 + salt * 7 + i % 251))
            FAIL("%s: byte %zu of %zu is %u, want %u (PE %d's pattern %d)", what, i, n, b[i],
                 (unsigned char)(pe * 31 + salt * 7 + i % 251), pe, salt);
}

/* Each PE puts its pattern into the next PE's block; checks the block from the previous PE. */
static void ring_check(unsigned char *block, size_t n, int salt, const char *what)
{
    unsigned char *buf = malloc(n ? n : 1);
    fill(buf, n, me, salt);
    shmem_barrier_all();
    shmem_putmem(block, buf, n, next_pe());
    shmem_barrier_all();
    check_pattern(block, n, prev_pe(), salt, what);
    shmem_barrier_all();
    free(buf);
}

static void test_malloc(void)
{
    static const size_t sizes[] = {1, 8, 100, 4096, 65536, 1 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        unsigned char *b = shmem_malloc(sizes[k]);
        CHECK(b != NULL, "shmem_malloc(%zu) gave NULL", sizes[k]);
        CHECK(shmem_addr_accessible(b, next_pe()), "shmem_malloc(%zu) not accessible", sizes[k]);
        ring_check(b, sizes[k], (int)k, "shmem_malloc block");
        shmem_free(b);
    }
    shmem_free(NULL);
#ifndef FSH_TEST_OSHMEM
    /* OpenSHMEM 1.5: a zero size allocates nothing and gives NULL (1.4 left it undefined) */
    CHECK(shmem_malloc(0) == NULL, "shmem_malloc(0) did not give NULL");
    CHECK(shmem_align(64, 0) == NULL, "shmem_align(64, 0) did not give NULL");
    ok("memory malloc: symmetric blocks 1 B to 1 MiB, malloc(0) and align(64, 0) are NULL, "
       "free(NULL)");
#else
    ok("memory malloc: symmetric blocks 1 B to 1 MiB, free(NULL) (malloc(0) is NULL: skipped on "
       "OSHMEM, a 1.5 rule)");
#endif
}

static void test_calloc(void)
{
    /* dirty the heap first so that zeroes are not an accident */
    unsigned char *d = shmem_malloc(8192);
    memset(d, 0xa5, 8192);
    shmem_free(d);
    for (size_t count = 1; count <= 1000; count *= 10) {
        long *c = shmem_calloc(count, sizeof(long));
        CHECK(c != NULL, "shmem_calloc(%zu, %zu) gave NULL", count, sizeof(long));
        for (size_t i = 0; i < count; i++)
            CHECK_EQ(c[i], 0L, "shmem_calloc(%zu): element %zu", count, i);
        ring_check((unsigned char *)c, count * sizeof(long), 3, "shmem_calloc block");
        shmem_free(c);
    }
    CHECK(shmem_calloc(0, 8) == NULL && shmem_calloc(8, 0) == NULL,
          "shmem_calloc with a zero count or size did not give NULL");
    ok("memory calloc: zeroed, symmetric; zero count or size is NULL");
}

static void test_align(void)
{
    for (size_t a = 8; a <= ((size_t)2 << 20); a *= 2) {
        unsigned char *pad = shmem_malloc(24); /* moves the heap off any natural alignment */
        unsigned char *b = shmem_align(a, 300);
        CHECK(b != NULL, "shmem_align(%zu, 300) gave NULL", a);
        CHECK((uintptr_t)b % a == 0, "shmem_align(%zu): %p is not aligned", a, (void *)b);
        ring_check(b, 300, (int)a % 97, "shmem_align block");
        shmem_free(b);
        shmem_free(pad);
    }
#ifndef FSH_TEST_OSHMEM
    /* An alignment past the heap's own (it starts at its size rounded up to a power of two):
     * no block, on every PE alike. */
    CHECK(shmem_align((size_t)1 << 40, 64) == NULL, "shmem_align(2^40, 64) gave a block");
#endif
    ok("memory align: alignments 8 to 2 MiB, and NULL past the heap's alignment");
}

static void test_realloc(void)
{
    unsigned char *b = shmem_realloc(NULL, 64);
    CHECK(b != NULL, "shmem_realloc(NULL, 64) gave NULL");
    fill(b, 64, me, 11);
    unsigned char *blocker = shmem_malloc(64); /* so that growing in place is unlikely */
    b = shmem_realloc(b, 100000);
    CHECK(b != NULL, "shmem_realloc to 100000 gave NULL");
    check_pattern(b, 64, me, 11, "shmem_realloc (grown): kept contents");
    ring_check(b, 100000, 12, "shmem_realloc grown block");
    fill(b, 100000, me, 13);
    b = shmem_realloc(b, 1000);
    CHECK(b != NULL, "shmem_realloc to 1000 gave NULL");
    check_pattern(b, 1000, me, 13, "shmem_realloc (shrunk): kept contents");
    ring_check(b, 1000, 14, "shmem_realloc shrunk block");
    shmem_free(b);
    shmem_free(blocker);
    ok("memory realloc: grow and shrink keep contents, blocks stay symmetric");
}

static void test_hints(void)
{
    static const long hints[] = {0, SHMEM_MALLOC_ATOMICS_REMOTE, SHMEM_MALLOC_SIGNAL_REMOTE,
                                 SHMEM_MALLOC_ATOMICS_REMOTE | SHMEM_MALLOC_SIGNAL_REMOTE};
    for (int h = 0; h < 4; h++) {
        long *c = shmem_malloc_with_hints(4 * sizeof(long), hints[h]);
        CHECK(c != NULL, "shmem_malloc_with_hints(32, %ld) gave NULL", hints[h]);
        c[0] = 0;
        shmem_barrier_all();
        shmem_long_atomic_add(&c[0], me + 1, 0);
        shmem_barrier_all();
        if (me == 0)
            CHECK_EQ(c[0], (long)npes * (npes + 1) / 2, "atomic sum on a hinted block (%ld)",
                     hints[h]);
        ring_check((unsigned char *)c, 4 * sizeof(long), h, "shmem_malloc_with_hints block");
        shmem_free(c);
    }
    CHECK(shmem_malloc_with_hints(0, 0) == NULL, "shmem_malloc_with_hints(0, 0) not NULL");
    /* Bits that name no hint are passed over, as hints the library cannot use. */
    long *u = shmem_malloc_with_hints(64, ~SHMEM_MALLOC_ATOMICS_REMOTE);
    CHECK(u != NULL, "shmem_malloc_with_hints(64, ~SHMEM_MALLOC_ATOMICS_REMOTE) gave NULL");
    ring_check((unsigned char *)u, 64, 5, "a block with unknown hint bits");
    shmem_free(u);
    ok("memory malloc_with_hints: hints 0, ATOMICS_REMOTE, SIGNAL_REMOTE, both, unknown bits");
}

/* The names before OpenSHMEM 1.2, which older programs still call. */
static void test_old_names(void)
{
    unsigned char *a = shmalloc(100);
    CHECK(a != NULL, "shmalloc(100) gave NULL");
    fill(a, 100, me, 21);
    a = shrealloc(a, 5000);
    CHECK(a != NULL, "shrealloc to 5000 gave NULL");
    check_pattern(a, 100, me, 21, "shrealloc: kept contents");
    ring_check(a, 5000, 22, "shrealloc block");
    unsigned char *b = shmemalign(8192, 300);
    CHECK(b != NULL && (uintptr_t)b % 8192 == 0, "shmemalign(8192, 300) gave %p", (void *)b);
    ring_check(b, 300, 23, "shmemalign block");
    shfree(b);
    shfree(a);
    ok("memory old names: shmalloc shrealloc shmemalign shfree");
}

/* 40 blocks of sizes 1 B to 64 KiB; every third freed, then the rest reallocated, checked in
 * between: a free must not disturb other blocks, and all PEs' heaps must stay in step. */
#define CHURN 40
static void test_churn(void)
{
    unsigned char *blk[CHURN];
    size_t len[CHURN];
    for (int i = 0; i < CHURN; i++) {
        len[i] = (size_t)1 << (i % 17);
        blk[i] = shmem_malloc(len[i]);
        CHECK(blk[i] != NULL, "churn: shmem_malloc(%zu) gave NULL", len[i]);
        fill(blk[i], len[i], me, i);
    }
    for (int i = 0; i < CHURN; i += 3) {
        shmem_free(blk[i]);
        blk[i] = NULL;
    }
    for (int i = 0; i < CHURN; i++)
        if (blk[i])
            check_pattern(blk[i], len[i], me, i, "churn: block after frees");
    for (int i = 0; i < CHURN; i += 3) {
        len[i] = 3000 + (size_t)i;
        blk[i] = shmem_calloc(1, len[i]);
        CHECK(blk[i] != NULL, "churn: shmem_calloc(1, %zu) gave NULL", len[i]);
    }
    for (int i = 0; i < CHURN; i++)
        ring_check(blk[i], len[i], i + 50, "churn: block");
    for (int i = CHURN - 1; i >= 0; i--)
        shmem_free(blk[i]);
    ok("memory churn: 40 blocks, out-of-order frees, contents intact");
}

int main(void)
{
    test_init();
    test_malloc();
    test_calloc();
    test_align();
    test_realloc();
    test_hints();
    test_churn();
    test_old_names();
    shmem_finalize();
    return 0;
}
