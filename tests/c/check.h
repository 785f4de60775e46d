/*
 * check.h: what the C test programs in tests/c/ share.
 *
 * Each program tests one family of the OpenSHMEM 1.5 C API, checks every result on every PE and
 * prints "ok FAMILY what" (from PE 0, after a barrier, so only once every PE has passed the
 * step). A failed check prints "FAIL file:line PE n: what differed" to stderr and calls
 * shmem_global_exit(1). The programs work at any number of PEs (they are run at 1, 2 and 4).
 *
 * They build against ferroshmem's capi/include/shmem.h and, to check the tests themselves,
 * against Open MPI's OSHMEM, which implements OpenSHMEM 1.4 (tests/c/run_oshmem.sh):
 *   oshcc -std=c11 -O1 -o /tmp/rma tests/c/rma.c
 *   oshrun --allow-run-as-root --oversubscribe --mca osc ^rdma -np 2 /tmp/rma
 * Built against OSHMEM, FSH_TEST_OSHMEM is defined (from OSHMEM's own OSHMEM_MAJOR_VERSION, or
 * by -DFSH_TEST_OSHMEM). Then:
 *   - oshmem_compat.h supplies stand-ins, built from OpenSHMEM 1.4 routines, for the 1.5
 *     routines OSHMEM lacks and that the tests can do without a real implementation of teams
 *     (signals, the multi-variable waits and tests, nonblocking fetching AMOs,
 *     shmem_malloc_with_hints, team collectives and reductions on SHMEM_TEAM_WORLD): for those,
 *     an OSHMEM run checks the test's expectations, not OSHMEM;
 *   - oshmem_compat.h also works around three OSHMEM 4.1 bugs: shmem_calloc's missing exit
 *     barrier, and the fetching bitwise AMOs, which store the wrong value; and two more are
 *     avoided by skipping: 32-bit compare-and-swap smashes the caller's stack (CSWAP_SKIPPED
 *     below), and destroying a PRIVATE|SERIALIZED context corrupts the heap (ctx.c);
 *   - the checks that need teams, or routines OSHMEM 4.1 lacks outright (the standard AMOs on
 *     int32/int64/uint32/uint64/size/ptrdiff, C11 generic names added in 1.5, shmemx), are left
 *     out; each program says which in an "ok ... (skipped on OSHMEM: ...)" line.
 */
#ifndef FSH_TEST_CHECK_H
#define FSH_TEST_CHECK_H

#include <shmem.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(OSHMEM_MAJOR_VERSION) && !defined(FSH_TEST_OSHMEM)
#define FSH_TEST_OSHMEM 1
#endif

#if !defined(__STDC_VERSION__) || __STDC_VERSION__ < 201112L
#error "the tests are C11 programs (-std=c11)"
#endif

static int me, npes;

#define FAIL(...)                                                                              \
    do {                                                                                       \
        fprintf(stderr, "FAIL %s:%d PE %d: ", __FILE__, __LINE__, me);                         \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fputc('\n', stderr);                                                                   \
        fflush(stderr);                                                                        \
        shmem_global_exit(1);                                                                  \
    } while (0)

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond))                                                                           \
            FAIL(__VA_ARGS__);                                                                 \
    } while (0)

/* Checks that got == want for any real type; the message names what was compared. */
#define CHECK_EQ(got, want, ...)                                                               \
    do {                                                                                       \
        if (!((got) == (want))) {                                                              \
            fprintf(stderr, "FAIL %s:%d PE %d: ", __FILE__, __LINE__, me);                     \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, ": got %Lg, want %Lg\n", (long double)(got), (long double)(want)); \
            fflush(stderr);                                                                    \
            shmem_global_exit(1);                                                              \
        }                                                                                      \
    } while (0)

/* Reports a passed step once every PE has passed it. */
static inline void ok(const char *what)
{
    shmem_barrier_all();
    if (me == 0) {
        printf("ok %s\n", what);
        fflush(stdout);
    }
}

static inline void test_init(void)
{
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
}

static inline int next_pe(void) { return (me + 1) % npes; }
static inline int prev_pe(void) { return (me + npes - 1) % npes; }

/* Test values: small, distinct per PE and index, exact in every type of the tables
 * (npes <= 7 keeps them below 128). */
#define VAL(pe, i) ((pe) * 16 + (int)(i) % 16 + 1)

/* The test-side type tables: X(TYPE, TYPENAME). */
#define RMA_TYPES(X)                                                                           \
    X(float, float) X(double, double) X(long double, longdouble) X(char, char)                \
    X(signed char, schar) X(short, short) X(int, int) X(long, long) X(long long, longlong)    \
    X(unsigned char, uchar) X(unsigned short, ushort) X(unsigned int, uint)                   \
    X(unsigned long, ulong) X(unsigned long long, ulonglong) X(int8_t, int8)                  \
    X(int16_t, int16) X(int32_t, int32) X(int64_t, int64) X(uint8_t, uint8)                   \
    X(uint16_t, uint16) X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size)               \
    X(ptrdiff_t, ptrdiff)

/* Standard AMO types; OSHMEM 4.1 has only the first six for the standard (arithmetic) AMOs. */
#define AMO_TYPES_BASE(X)                                                                      \
    X(int, int) X(long, long) X(long long, longlong) X(unsigned int, uint)                    \
    X(unsigned long, ulong) X(unsigned long long, ulonglong)
#ifdef FSH_TEST_OSHMEM
#define AMO_TYPES(X) AMO_TYPES_BASE(X)
#else
#define AMO_TYPES(X)                                                                           \
    AMO_TYPES_BASE(X) X(int32_t, int32) X(int64_t, int64) X(uint32_t, uint32)                 \
    X(uint64_t, uint64) X(size_t, size) X(ptrdiff_t, ptrdiff)
#endif

#define BITAMO_TYPES(X)                                                                        \
    X(unsigned int, uint) X(unsigned long, ulong) X(unsigned long long, ulonglong)            \
    X(int32_t, int32) X(int64_t, int64) X(uint32_t, uint32) X(uint64_t, uint64)

#define SYNC_TYPES(X)                                                                          \
    X(short, short) X(int, int) X(long, long) X(long long, longlong)                          \
    X(unsigned short, ushort) X(unsigned int, uint) X(unsigned long, ulong)                   \
    X(unsigned long long, ulonglong) X(int32_t, int32) X(int64_t, int64)                      \
    X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size) X(ptrdiff_t, ptrdiff)

#define BITRED_TYPES(X)                                                                        \
    X(unsigned char, uchar) X(unsigned short, ushort) X(unsigned int, uint)                   \
    X(unsigned long, ulong) X(unsigned long long, ulonglong) X(int8_t, int8)                  \
    X(int16_t, int16) X(int32_t, int32) X(int64_t, int64) X(uint8_t, uint8)                   \
    X(uint16_t, uint16) X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size)

#define ARITHRED_TYPES(X)                                                                      \
    X(char, char) X(signed char, schar) X(short, short) X(int, int) X(long, long)             \
    X(long long, longlong) X(ptrdiff_t, ptrdiff) X(unsigned char, uchar)                      \
    X(unsigned short, ushort) X(unsigned int, uint) X(unsigned long, ulong)                   \
    X(unsigned long long, ulonglong) X(int8_t, int8) X(int16_t, int16) X(int32_t, int32)      \
    X(int64_t, int64) X(uint8_t, uint8) X(uint16_t, uint16) X(uint32_t, uint32)               \
    X(uint64_t, uint64) X(size_t, size) X(float, float) X(double, double) LONGDOUBLE_RED(X)

/* long double reductions exist on x86-64 only (see shmem.h). */
#if defined(__x86_64__) && !defined(FSH_TEST_OSHMEM)
#define LONGDOUBLE_RED(X) X(long double, longdouble)
#else
#define LONGDOUBLE_RED(X)
#endif

/* OSHMEM 4.1's 32-bit compare-and-swap (shmem_int/uint_atomic_compare_swap, shmem_int_cswap,
 * the ctx forms) overruns its caller's stack ("stack smashing detected"); built against OSHMEM
 * those checks are left out. */
#ifdef FSH_TEST_OSHMEM
#define CSWAP_SKIPPED(T) (sizeof(T) == 4)
#else
#define CSWAP_SKIPPED(T) 0
#endif

#ifdef FSH_TEST_OSHMEM
#include "oshmem_compat.h"
#endif

#endif /* FSH_TEST_CHECK_H */
