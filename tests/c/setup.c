/*
 * setup.c: library setup, exit and query routines, and the library constants.
 *
 *   ok setup init_thread    shmem_init_thread (asking for MULTIPLE) and shmem_query_thread agree
 *   ok setup query          my_pe/n_pes (and the deprecated _my_pe/_num_pes) are consistent
 *   ok setup info           info_get_version/info_get_name against the version macros and
 *                           SHMEM_VENDOR_STRING
 *   ok setup constants      the constants exist, differ where they must; ferroshmem's values
 *   ok setup accessible     pe_accessible and addr_accessible (static, heap, stack, private heap)
 *   ok setup ptr            shmem_ptr: NULL or a pointer that reads and writes the other PE
 *   ok setup pcontrol       shmem_pcontrol accepts every level
 *
 * Starts with shmem_init_thread (the other programs use shmem_init).
 */
#include "check.h"

static long static_word = 7; /* symmetric: data segment */
static int ptr_target[4];    /* symmetric: bss */

static void test_init_thread(void)
{
    int provided = -1, queried = -2;
    int rc = shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided);
    me = shmem_my_pe();
    npes = shmem_n_pes();
    CHECK(rc == 0, "shmem_init_thread returned %d", rc);
    CHECK(provided == SHMEM_THREAD_SINGLE || provided == SHMEM_THREAD_FUNNELED
              || provided == SHMEM_THREAD_SERIALIZED || provided == SHMEM_THREAD_MULTIPLE,
          "shmem_init_thread: provided = %d is no thread level", provided);
    shmem_query_thread(&queried);
    CHECK_EQ(queried, provided, "shmem_query_thread after shmem_init_thread");
    ok("setup init_thread: init_thread(MULTIPLE) and query_thread agree");
}

static void test_query(void)
{
    CHECK(npes >= 1, "shmem_n_pes() = %d", npes);
    CHECK(me >= 0 && me < npes, "shmem_my_pe() = %d with %d PEs", me, npes);
    CHECK_EQ(shmem_my_pe(), me, "shmem_my_pe() twice");
    CHECK_EQ(_my_pe(), me, "_my_pe()");
    CHECK_EQ(_num_pes(), npes, "_num_pes()");
    ok("setup query: my_pe n_pes _my_pe _num_pes");
}

static void test_info(void)
{
    int major = -1, minor = -1;
    char name[SHMEM_MAX_NAME_LEN];
    memset(name, 'x', sizeof name);
    shmem_info_get_version(&major, &minor);
    CHECK_EQ(major, SHMEM_MAJOR_VERSION, "shmem_info_get_version major");
    CHECK_EQ(minor, SHMEM_MINOR_VERSION, "shmem_info_get_version minor");
    CHECK_EQ(_SHMEM_MAJOR_VERSION, SHMEM_MAJOR_VERSION, "_SHMEM_MAJOR_VERSION");
    CHECK_EQ(_SHMEM_MINOR_VERSION, SHMEM_MINOR_VERSION, "_SHMEM_MINOR_VERSION");
    CHECK(SHMEM_MAJOR_VERSION == 1 && SHMEM_MINOR_VERSION >= 4, "version %d.%d",
          SHMEM_MAJOR_VERSION, SHMEM_MINOR_VERSION);
    shmem_info_get_name(name);
    CHECK(memchr(name, '\0', sizeof name) != NULL, "shmem_info_get_name: no NUL in %d bytes",
          SHMEM_MAX_NAME_LEN);
    CHECK(strcmp(name, SHMEM_VENDOR_STRING) == 0,
          "shmem_info_get_name gave \"%s\", SHMEM_VENDOR_STRING is \"%s\"", name,
          SHMEM_VENDOR_STRING);
    CHECK(strlen(SHMEM_VENDOR_STRING) < SHMEM_MAX_NAME_LEN, "SHMEM_VENDOR_STRING too long");
    ok("setup info: info_get_version info_get_name");
}

static void test_constants(void)
{
    const int cmps[] = {SHMEM_CMP_EQ, SHMEM_CMP_NE, SHMEM_CMP_GT,
                        SHMEM_CMP_GE, SHMEM_CMP_LT, SHMEM_CMP_LE};
    const int old_cmps[] = {_SHMEM_CMP_EQ, _SHMEM_CMP_NE, _SHMEM_CMP_GT,
                            _SHMEM_CMP_GE, _SHMEM_CMP_LT, _SHMEM_CMP_LE};
    for (int i = 0; i < 6; i++) {
        CHECK_EQ(old_cmps[i], cmps[i], "_SHMEM_CMP_ spelling %d", i);
        for (int j = 0; j < i; j++)
            CHECK(cmps[i] != cmps[j], "SHMEM_CMP constants %d and %d are equal", i, j);
    }
    /* the thread levels are ordered */
    CHECK(SHMEM_THREAD_SINGLE < SHMEM_THREAD_FUNNELED
              && SHMEM_THREAD_FUNNELED < SHMEM_THREAD_SERIALIZED
              && SHMEM_THREAD_SERIALIZED < SHMEM_THREAD_MULTIPLE,
          "SHMEM_THREAD_ levels not increasing");
    CHECK((SHMEM_CTX_PRIVATE & SHMEM_CTX_SERIALIZED) == 0
              && (SHMEM_CTX_PRIVATE & SHMEM_CTX_NOSTORE) == 0
              && (SHMEM_CTX_SERIALIZED & SHMEM_CTX_NOSTORE) == 0,
          "SHMEM_CTX_ options overlap");
    CHECK(SHMEM_SYNC_VALUE == _SHMEM_SYNC_VALUE, "_SHMEM_SYNC_VALUE");
    CHECK(SHMEM_BARRIER_SYNC_SIZE >= 1 && SHMEM_BCAST_SYNC_SIZE >= 1
              && SHMEM_REDUCE_SYNC_SIZE >= 1 && SHMEM_COLLECT_SYNC_SIZE >= 1
              && SHMEM_ALLTOALL_SYNC_SIZE >= 1 && SHMEM_ALLTOALLS_SYNC_SIZE >= 1
              && SHMEM_SYNC_SIZE >= 1 && SHMEM_REDUCE_MIN_WRKDATA_SIZE >= 1,
          "a *_SYNC_SIZE or SHMEM_REDUCE_MIN_WRKDATA_SIZE is below 1");
    CHECK(_SHMEM_BCAST_SYNC_SIZE == SHMEM_BCAST_SYNC_SIZE
              && _SHMEM_BARRIER_SYNC_SIZE == SHMEM_BARRIER_SYNC_SIZE
              && _SHMEM_REDUCE_SYNC_SIZE == SHMEM_REDUCE_SYNC_SIZE
              && _SHMEM_COLLECT_SYNC_SIZE == SHMEM_COLLECT_SYNC_SIZE
              && _SHMEM_REDUCE_MIN_WRKDATA_SIZE == SHMEM_REDUCE_MIN_WRKDATA_SIZE,
          "_SHMEM_ sync size spellings");
    CHECK(SHMEM_SIGNAL_SET != SHMEM_SIGNAL_ADD, "SHMEM_SIGNAL_SET == SHMEM_SIGNAL_ADD");
#ifndef FSH_TEST_OSHMEM
    /* ferroshmem's values, fixed by its Rust side */
    CHECK(SHMEM_MAJOR_VERSION == 1 && SHMEM_MINOR_VERSION == 5, "version");
    CHECK(SHMEM_MAX_NAME_LEN == 256, "SHMEM_MAX_NAME_LEN");
    CHECK(strncmp(SHMEM_VENDOR_STRING, "ferroshmem", 10) == 0, "SHMEM_VENDOR_STRING");
    CHECK(SHMEM_CMP_EQ == 0 && SHMEM_CMP_NE == 1 && SHMEM_CMP_GT == 2 && SHMEM_CMP_GE == 3
              && SHMEM_CMP_LT == 4 && SHMEM_CMP_LE == 5,
          "SHMEM_CMP_ values");
    CHECK(SHMEM_SIGNAL_SET == 0 && SHMEM_SIGNAL_ADD == 1, "SHMEM_SIGNAL_ values");
    CHECK(SHMEM_THREAD_SINGLE == 0 && SHMEM_THREAD_MULTIPLE == 3, "SHMEM_THREAD_ values");
    CHECK(SHMEM_CTX_PRIVATE == 1 && SHMEM_CTX_SERIALIZED == 2 && SHMEM_CTX_NOSTORE == 4,
          "SHMEM_CTX_ values");
    CHECK(SHMEM_MALLOC_ATOMICS_REMOTE == 1 && SHMEM_MALLOC_SIGNAL_REMOTE == 2,
          "SHMEM_MALLOC_ hint values");
    CHECK(SHMEM_TEAM_NUM_CONTEXTS == 1, "SHMEM_TEAM_NUM_CONTEXTS");
    CHECK(SHMEM_SYNC_VALUE == 0 && SHMEM_SYNC_SIZE == 8 && SHMEM_REDUCE_MIN_WRKDATA_SIZE == 8,
          "sync values");
    CHECK(SHMEM_TEAM_WORLD != SHMEM_TEAM_INVALID && SHMEM_TEAM_SHARED != SHMEM_TEAM_INVALID
              && SHMEM_CTX_DEFAULT != SHMEM_CTX_INVALID,
          "predefined handles");
    CHECK(sizeof(long double) == 16, "sizeof(long double) = %zu", sizeof(long double));
    ok("setup constants: spellings, distinctness, ferroshmem's values");
#else
    ok("setup constants: spellings, distinctness (ferroshmem's values skipped on OSHMEM)");
#endif
}

static void test_accessible(void)
{
    long stack_word = 1;
    long *heap = shmem_malloc(sizeof(long));
    long *private_heap = malloc(sizeof(long));
    for (int pe = 0; pe < npes; pe++) {
        CHECK_EQ(shmem_pe_accessible(pe), 1, "shmem_pe_accessible(%d)", pe);
        CHECK_EQ(shmem_addr_accessible(&static_word, pe), 1, "addr_accessible(static, %d)", pe);
        CHECK_EQ(shmem_addr_accessible(ptr_target, pe), 1, "addr_accessible(bss, %d)", pe);
        CHECK_EQ(shmem_addr_accessible(heap, pe), 1, "addr_accessible(shmem_malloc, %d)", pe);
        CHECK_EQ(shmem_addr_accessible(&stack_word, pe), 0, "addr_accessible(stack, %d)", pe);
        CHECK_EQ(shmem_addr_accessible(private_heap, pe), 0, "addr_accessible(malloc, %d)", pe);
    }
    CHECK_EQ(shmem_pe_accessible(npes), 0, "shmem_pe_accessible(n_pes)");
    CHECK_EQ(shmem_pe_accessible(-1), 0, "shmem_pe_accessible(-1)");
    free(private_heap);
    shmem_free(heap);
    ok("setup accessible: pe_accessible addr_accessible");
}

/* shmem_ptr may give NULL (no load/store path); when it does not, stores through it reach the
 * other PE's object and loads read it. To itself it gives the object's own address or NULL.
 * Each PE stores into the next PE's static and heap objects where it got a pointer, and says
 * in ptr_target[2..3] whether it did, so the next PE knows what to expect. */
static void test_ptr(void)
{
    int next = next_pe(), prev = prev_pe(), *heap = shmem_malloc(4 * sizeof(int));
    int *mine = shmem_ptr(ptr_target, me), *p = shmem_ptr(ptr_target, next);
    int *hp = shmem_ptr(heap, next);
    CHECK(mine == NULL || mine == ptr_target, "shmem_ptr to own PE gave %p, object at %p",
          (void *)mine, (void *)ptr_target);
    CHECK(shmem_ptr(heap, me) == NULL || shmem_ptr(heap, me) == heap, "shmem_ptr(heap, me)");
    ptr_target[0] = -1;
    heap[0] = -1;
    ptr_target[2] = p != NULL;
    ptr_target[3] = hp != NULL;
    shmem_barrier_all();
    if (p)
        p[0] = 100 + me;
    if (hp)
        hp[0] = 200 + me;
    shmem_barrier_all();
    int prev_p = shmem_int_g(&ptr_target[2], prev), prev_hp = shmem_int_g(&ptr_target[3], prev);
    CHECK_EQ(ptr_target[0], prev_p ? 100 + prev : -1,
             "static object (stored through shmem_ptr by PE %d: %s)", prev, prev_p ? "yes" : "no");
    CHECK_EQ(heap[0], prev_hp ? 200 + prev : -1,
             "heap object (stored through shmem_ptr by PE %d: %s)", prev, prev_hp ? "yes" : "no");
    if (p)
        CHECK_EQ(p[0], 100 + me, "load through shmem_ptr from PE %d", next);
    shmem_barrier_all();
    if (me == 0 && npes > 1) {
        printf("# shmem_ptr to PE 1: %s\n", p ? "a pointer" : "NULL");
        fflush(stdout);
    }
    shmem_free(heap);
    ok("setup ptr: shmem_ptr stores and loads");
}

static void test_pcontrol(void)
{
    shmem_pcontrol(0);
    shmem_pcontrol(1);
    shmem_pcontrol(2);
    shmem_pcontrol(3, "user data");
    ok("setup pcontrol: levels 0 to 3");
}

int main(void)
{
    test_init_thread();
    test_query();
    test_info();
    test_constants();
    test_accessible();
    test_ptr();
    test_pcontrol();
    shmem_finalize();
    return 0;
}
