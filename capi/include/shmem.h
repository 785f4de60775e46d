/*
 * shmem.h: OpenSHMEM 1.5 C API of ferroshmem (libferroshmem_c).
 *
 * Usable from C99 and later and from C++; the type-generic names of the specification
 * (shmem_put, shmem_atomic_fetch_add, shmem_sum_reduce, ...) are C11 _Generic macros, defined
 * only for C11 and later (not for C++).
 *
 * The typed families are declared by X-macros over the specification's type tables, so each
 * table below is the one place that says which TYPENAMEs a family has:
 *
 *   FSHMEM_RMA_TYPES      RMA, signalling put, team collectives    (spec table "standard RMA types")
 *   FSHMEM_AMO_TYPES      standard AMOs
 *   FSHMEM_EXTAMO_TYPES   extended AMOs (fetch, set, swap): standard ones plus float and double
 *   FSHMEM_BITAMO_TYPES   bitwise AMOs
 *   FSHMEM_SYNC_TYPES     point-to-point synchronization (wait_until, test and their _all/_any/_some
 *                         and _vector forms)
 *   FSHMEM_BITRED_TYPES, FSHMEM_MINMAXRED_TYPES, FSHMEM_ARITHRED_TYPES   team reductions
 *   FSHMEM_TOALL_*_TYPES  deprecated active-set reductions (*_to_all)
 *
 * Each table is TABLE(X, S) and expands to X(TYPE, TYPENAME, S) for each entry; S is passed
 * through for the declaring macro's use (a name suffix) or left empty.
 *
 * To list every routine this header declares (what the library must export):
 *   gcc -E -P -std=c11 capi/include/shmemx.h | grep -oE '\b_?(shmemx?_[a-z0-9_]+|start_pes|_my_pe|_num_pes|shmalloc|shfree|shrealloc|shmemalign)[ ]*\(' | tr -d ' (' | sort -u
 * (the static inline no-op cache routines near the end need no export).
 */
#ifndef FERROSHMEM_SHMEM_H
#define FERROSHMEM_SHMEM_H

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------------------- */
/* Library constants                                                                          */
/* ---------------------------------------------------------------------------------------- */

#define SHMEM_MAJOR_VERSION 1
#define SHMEM_MINOR_VERSION 5
#define SHMEM_MAX_NAME_LEN 256
#define SHMEM_VENDOR_STRING "ferroshmem 0.1.0"

#define SHMEM_THREAD_SINGLE 0
#define SHMEM_THREAD_FUNNELED 1
#define SHMEM_THREAD_SERIALIZED 2
#define SHMEM_THREAD_MULTIPLE 3

#define SHMEM_CTX_PRIVATE 1L
#define SHMEM_CTX_SERIALIZED 2L
#define SHMEM_CTX_NOSTORE 4L

#define SHMEM_TEAM_NUM_CONTEXTS 1L

#define SHMEM_MALLOC_ATOMICS_REMOTE 1L
#define SHMEM_MALLOC_SIGNAL_REMOTE 2L

#define SHMEM_CMP_EQ 0
#define SHMEM_CMP_NE 1
#define SHMEM_CMP_GT 2
#define SHMEM_CMP_GE 3
#define SHMEM_CMP_LT 4
#define SHMEM_CMP_LE 5

#define SHMEM_SIGNAL_SET 0
#define SHMEM_SIGNAL_ADD 1

/* ferroshmem ignores the contents of pSync and pWrk; the sizes are what the spec requires
 * callers to allocate, kept small. */
#define SHMEM_SYNC_VALUE 0L
#define SHMEM_SYNC_SIZE 8
#define SHMEM_BCAST_SYNC_SIZE 8
#define SHMEM_BARRIER_SYNC_SIZE 8
#define SHMEM_REDUCE_SYNC_SIZE 8
#define SHMEM_COLLECT_SYNC_SIZE 8
#define SHMEM_ALLTOALL_SYNC_SIZE 8
#define SHMEM_ALLTOALLS_SYNC_SIZE 8
#define SHMEM_REDUCE_MIN_WRKDATA_SIZE 8

/* Deprecated spellings (OpenSHMEM 1.0 to 1.2). */
#define _SHMEM_MAJOR_VERSION SHMEM_MAJOR_VERSION
#define _SHMEM_MINOR_VERSION SHMEM_MINOR_VERSION
#define _SHMEM_MAX_NAME_LEN SHMEM_MAX_NAME_LEN
#define _SHMEM_VENDOR_STRING SHMEM_VENDOR_STRING
#define _SHMEM_CMP_EQ SHMEM_CMP_EQ
#define _SHMEM_CMP_NE SHMEM_CMP_NE
#define _SHMEM_CMP_GT SHMEM_CMP_GT
#define _SHMEM_CMP_GE SHMEM_CMP_GE
#define _SHMEM_CMP_LT SHMEM_CMP_LT
#define _SHMEM_CMP_LE SHMEM_CMP_LE
#define _SHMEM_SYNC_VALUE SHMEM_SYNC_VALUE
#define _SHMEM_SYNC_SIZE SHMEM_SYNC_SIZE
#define _SHMEM_BCAST_SYNC_SIZE SHMEM_BCAST_SYNC_SIZE
#define _SHMEM_BARRIER_SYNC_SIZE SHMEM_BARRIER_SYNC_SIZE
#define _SHMEM_REDUCE_SYNC_SIZE SHMEM_REDUCE_SYNC_SIZE
#define _SHMEM_COLLECT_SYNC_SIZE SHMEM_COLLECT_SYNC_SIZE
#define _SHMEM_ALLTOALL_SYNC_SIZE SHMEM_ALLTOALL_SYNC_SIZE
#define _SHMEM_ALLTOALLS_SYNC_SIZE SHMEM_ALLTOALLS_SYNC_SIZE
#define _SHMEM_REDUCE_MIN_WRKDATA_SIZE SHMEM_REDUCE_MIN_WRKDATA_SIZE

/* ---------------------------------------------------------------------------------------- */
/* Handles                                                                                    */
/* ---------------------------------------------------------------------------------------- */

typedef struct ferroshmem_team_handle *shmem_team_t;
typedef struct ferroshmem_ctx_handle *shmem_ctx_t;

typedef struct {
    int num_contexts;
} shmem_team_config_t;

#define SHMEM_TEAM_INVALID ((shmem_team_t)0)
#define SHMEM_TEAM_WORLD ((shmem_team_t)1)
#define SHMEM_TEAM_SHARED ((shmem_team_t)2)

#define SHMEM_CTX_INVALID ((shmem_ctx_t)0)
#define SHMEM_CTX_DEFAULT ((shmem_ctx_t)1)

/* ---------------------------------------------------------------------------------------- */
/* Attributes                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* Deprecated routines are declared plainly; define FERROSHMEM_WARN_DEPRECATED before including
 * this header to have GCC and Clang warn on their use. */
#if defined(FERROSHMEM_WARN_DEPRECATED) && (defined(__GNUC__) || defined(__clang__))
#define FSHMEM_DEPRECATED __attribute__((deprecated))
#else
#define FSHMEM_DEPRECATED
#endif

#if defined(__cplusplus) && __cplusplus >= 201103L
#define FSHMEM_NORETURN [[noreturn]]
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define FSHMEM_NORETURN _Noreturn
#elif defined(__GNUC__)
#define FSHMEM_NORETURN __attribute__((noreturn))
#else
#define FSHMEM_NORETURN
#endif

/* Complex reductions (complexf, complexd) need C99 _Complex: declared in C99 and later where
 * the compiler has complex types, and in C++ by GCC and Clang, which take _Complex as an
 * extension (the types are named through __extension__ typedefs, so that -Wpedantic stays
 * quiet); not declared for other C++ compilers. */
#if !defined(__cplusplus) && !defined(__STDC_NO_COMPLEX__) && defined(__STDC_VERSION__) \
    && __STDC_VERSION__ >= 199901L
#define FSHMEM_HAVE_COMPLEX 1
#define FSHMEM_COMPLEX_TYPES(X, S) X(float _Complex, complexf, S) X(double _Complex, complexd, S)
#elif defined(__cplusplus) && defined(__GNUC__)
__extension__ typedef float _Complex fshmem_complexf_t;
__extension__ typedef double _Complex fshmem_complexd_t;
#define FSHMEM_HAVE_COMPLEX 1
#define FSHMEM_COMPLEX_TYPES(X, S) X(fshmem_complexf_t, complexf, S) X(fshmem_complexd_t, complexd, S)
#else
#define FSHMEM_HAVE_COMPLEX 0
#define FSHMEM_COMPLEX_TYPES(X, S)
#endif

/* ---------------------------------------------------------------------------------------- */
/* Type tables (OpenSHMEM 1.5, Tables 5, 6, 7, 8, 10, 11 and the deprecated to_all list)      */
/* ---------------------------------------------------------------------------------------- */

/* The RMA types but long double, which the library takes only through pointers (its p and g
 * are inline functions over put and get, below). */
#define FSHMEM_RMA_TYPES_BY_VALUE(X, S)                                                        \
    X(float, float, S) X(double, double, S) X(char, char, S)                                  \
    X(signed char, schar, S) X(short, short, S) X(int, int, S) X(long, long, S)               \
    X(long long, longlong, S) X(unsigned char, uchar, S) X(unsigned short, ushort, S)         \
    X(unsigned int, uint, S) X(unsigned long, ulong, S) X(unsigned long long, ulonglong, S)   \
    X(int8_t, int8, S) X(int16_t, int16, S) X(int32_t, int32, S) X(int64_t, int64, S)         \
    X(uint8_t, uint8, S) X(uint16_t, uint16, S) X(uint32_t, uint32, S)                        \
    X(uint64_t, uint64, S) X(size_t, size, S) X(ptrdiff_t, ptrdiff, S)

#define FSHMEM_RMA_TYPES(X, S) FSHMEM_RMA_TYPES_BY_VALUE(X, S) X(long double, longdouble, S)

#define FSHMEM_AMO_TYPES(X, S)                                                                 \
    X(int, int, S) X(long, long, S) X(long long, longlong, S) X(unsigned int, uint, S)        \
    X(unsigned long, ulong, S) X(unsigned long long, ulonglong, S) X(int32_t, int32, S)       \
    X(int64_t, int64, S) X(uint32_t, uint32, S) X(uint64_t, uint64, S) X(size_t, size, S)     \
    X(ptrdiff_t, ptrdiff, S)

#define FSHMEM_EXTAMO_TYPES(X, S) FSHMEM_AMO_TYPES(X, S) X(float, float, S) X(double, double, S)

#define FSHMEM_BITAMO_TYPES(X, S)                                                              \
    X(unsigned int, uint, S) X(unsigned long, ulong, S) X(unsigned long long, ulonglong, S)   \
    X(int32_t, int32, S) X(int64_t, int64, S) X(uint32_t, uint32, S) X(uint64_t, uint64, S)

#define FSHMEM_SYNC_TYPES(X, S)                                                                \
    X(short, short, S) X(int, int, S) X(long, long, S) X(long long, longlong, S)              \
    X(unsigned short, ushort, S) X(unsigned int, uint, S) X(unsigned long, ulong, S)          \
    X(unsigned long long, ulonglong, S) X(int32_t, int32, S) X(int64_t, int64, S)             \
    X(uint32_t, uint32, S) X(uint64_t, uint64, S) X(size_t, size, S) X(ptrdiff_t, ptrdiff, S)

/* Reductions: and, or, xor */
#define FSHMEM_BITRED_TYPES(X, S)                                                              \
    X(unsigned char, uchar, S) X(unsigned short, ushort, S) X(unsigned int, uint, S)          \
    X(unsigned long, ulong, S) X(unsigned long long, ulonglong, S) X(int8_t, int8, S)         \
    X(int16_t, int16, S) X(int32_t, int32, S) X(int64_t, int64, S) X(uint8_t, uint8, S)       \
    X(uint16_t, uint16, S) X(uint32_t, uint32, S) X(uint64_t, uint64, S) X(size_t, size, S)

/* long double reductions: on x86-64 only (computed with its x87 unit; another target's long
 * double has another layout, and ferroshmem moves it but does not reduce it). */
#if defined(__x86_64__)
#define FSHMEM_LONGDOUBLE_RED(X, S) X(long double, longdouble, S)
#else
#define FSHMEM_LONGDOUBLE_RED(X, S)
#endif

/* Reductions: max, min */
#define FSHMEM_MINMAXRED_TYPES(X, S)                                                           \
    X(char, char, S) X(signed char, schar, S) X(short, short, S) X(int, int, S)               \
    X(long, long, S) X(long long, longlong, S) X(ptrdiff_t, ptrdiff, S)                       \
    X(unsigned char, uchar, S) X(unsigned short, ushort, S) X(unsigned int, uint, S)          \
    X(unsigned long, ulong, S) X(unsigned long long, ulonglong, S) X(int8_t, int8, S)         \
    X(int16_t, int16, S) X(int32_t, int32, S) X(int64_t, int64, S) X(uint8_t, uint8, S)       \
    X(uint16_t, uint16, S) X(uint32_t, uint32, S) X(uint64_t, uint64, S) X(size_t, size, S)   \
    X(float, float, S) X(double, double, S) FSHMEM_LONGDOUBLE_RED(X, S)

/* Reductions: sum, prod */
#define FSHMEM_ARITHRED_TYPES(X, S) FSHMEM_MINMAXRED_TYPES(X, S) FSHMEM_COMPLEX_TYPES(X, S)

/* Deprecated active-set reductions (*_to_all) */
#define FSHMEM_TOALL_BIT_TYPES(X, S)                                                           \
    X(short, short, S) X(int, int, S) X(long, long, S) X(long long, longlong, S)
#define FSHMEM_TOALL_MINMAX_TYPES(X, S)                                                        \
    FSHMEM_TOALL_BIT_TYPES(X, S) X(float, float, S) X(double, double, S)                      \
    FSHMEM_LONGDOUBLE_RED(X, S)
#define FSHMEM_TOALL_ARITH_TYPES(X, S) FSHMEM_TOALL_MINMAX_TYPES(X, S) FSHMEM_COMPLEX_TYPES(X, S)

/* Deprecated (pre-1.4) AMO names */
#define FSHMEM_OLDAMO_TYPES(X, S) X(int, int, S) X(long, long, S) X(long long, longlong, S)
#define FSHMEM_OLDEXTAMO_TYPES(X, S) FSHMEM_OLDAMO_TYPES(X, S) X(float, float, S) X(double, double, S)
/* Deprecated shmem_TYPENAME_wait */
#define FSHMEM_OLDWAIT_TYPES(X, S)                                                             \
    X(short, short, S) X(int, int, S) X(long, long, S) X(long long, longlong, S)

/* Sizes of the sized RMA routines (shmem_put8 ... shmem_put128) */
#define FSHMEM_SIZES(X) X(8) X(16) X(32) X(64) X(128)

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------- */
/* Library setup, exit and query                                                              */
/* ---------------------------------------------------------------------------------------- */

void shmem_init(void);
int shmem_init_thread(int requested, int *provided);
void shmem_query_thread(int *provided);
void shmem_finalize(void);
FSHMEM_NORETURN void shmem_global_exit(int status);
int shmem_my_pe(void);
int shmem_n_pes(void);
int shmem_pe_accessible(int pe);
int shmem_addr_accessible(const void *addr, int pe);
void *shmem_ptr(const void *dest, int pe);
void *shmem_team_ptr(shmem_team_t team, const void *dest, int pe);
void shmem_info_get_version(int *major, int *minor);
void shmem_info_get_name(char *name);

FSHMEM_DEPRECATED void start_pes(int npes);
FSHMEM_DEPRECATED int _my_pe(void);
FSHMEM_DEPRECATED int _num_pes(void);

/* ---------------------------------------------------------------------------------------- */
/* Memory management                                                                          */
/* ---------------------------------------------------------------------------------------- */

void *shmem_malloc(size_t size);
void *shmem_calloc(size_t count, size_t size);
void *shmem_align(size_t alignment, size_t size);
void *shmem_realloc(void *ptr, size_t size);
/* The allocation routines' names before OpenSHMEM 1.2 (deprecated) */
FSHMEM_DEPRECATED void *shmalloc(size_t size);
FSHMEM_DEPRECATED void shfree(void *ptr);
FSHMEM_DEPRECATED void *shrealloc(void *ptr, size_t size);
FSHMEM_DEPRECATED void *shmemalign(size_t alignment, size_t size);
void shmem_free(void *ptr);
void *shmem_malloc_with_hints(size_t size, long hints);

/* ---------------------------------------------------------------------------------------- */
/* Teams and contexts                                                                         */
/* ---------------------------------------------------------------------------------------- */

int shmem_team_my_pe(shmem_team_t team);
int shmem_team_n_pes(shmem_team_t team);
int shmem_team_get_config(shmem_team_t team, long config_mask, shmem_team_config_t *config);
int shmem_team_translate_pe(shmem_team_t src_team, int src_pe, shmem_team_t dest_team);
int shmem_team_split_strided(shmem_team_t parent_team, int start, int stride, int size,
                             const shmem_team_config_t *config, long config_mask,
                             shmem_team_t *new_team);
int shmem_team_split_2d(shmem_team_t parent_team, int xrange,
                        const shmem_team_config_t *xaxis_config, long xaxis_mask,
                        shmem_team_t *xaxis_team, const shmem_team_config_t *yaxis_config,
                        long yaxis_mask, shmem_team_t *yaxis_team);
void shmem_team_destroy(shmem_team_t team);
int shmem_team_sync(shmem_team_t team);

int shmem_ctx_create(long options, shmem_ctx_t *ctx);
int shmem_team_create_ctx(shmem_team_t team, long options, shmem_ctx_t *ctx);
void shmem_ctx_destroy(shmem_ctx_t ctx);
int shmem_ctx_get_team(shmem_ctx_t ctx, shmem_team_t *team);

/* ---------------------------------------------------------------------------------------- */
/* RMA: typed (plain and ctx forms)                                                           */
/* ---------------------------------------------------------------------------------------- */

#define FSHMEM_DECL_RMA(T, N, S)                                                               \
    void shmem_##N##_put(T *dest, const T *source, size_t nelems, int pe);                    \
    void shmem_ctx_##N##_put(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe); \
    void shmem_##N##_get(T *dest, const T *source, size_t nelems, int pe);                    \
    void shmem_ctx_##N##_get(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe); \
    void shmem_##N##_iput(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst,             \
                          size_t nelems, int pe);                                             \
    void shmem_ctx_##N##_iput(shmem_ctx_t ctx, T *dest, const T *source, ptrdiff_t dst,       \
                              ptrdiff_t sst, size_t nelems, int pe);                          \
    void shmem_##N##_iget(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst,             \
                          size_t nelems, int pe);                                             \
    void shmem_ctx_##N##_iget(shmem_ctx_t ctx, T *dest, const T *source, ptrdiff_t dst,       \
                              ptrdiff_t sst, size_t nelems, int pe);                          \
    void shmem_##N##_put_nbi(T *dest, const T *source, size_t nelems, int pe);                \
    void shmem_ctx_##N##_put_nbi(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems,    \
                                 int pe);                                                     \
    void shmem_##N##_get_nbi(T *dest, const T *source, size_t nelems, int pe);                \
    void shmem_ctx_##N##_get_nbi(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems,    \
                                 int pe);                                                     \
    void shmem_##N##_put_signal(T *dest, const T *source, size_t nelems, uint64_t *sig_addr,  \
                                uint64_t signal, int sig_op, int pe);                         \
    void shmem_ctx_##N##_put_signal(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, \
                                    uint64_t *sig_addr, uint64_t signal, int sig_op, int pe); \
    void shmem_##N##_put_signal_nbi(T *dest, const T *source, size_t nelems,                  \
                                    uint64_t *sig_addr, uint64_t signal, int sig_op, int pe); \
    void shmem_ctx_##N##_put_signal_nbi(shmem_ctx_t ctx, T *dest, const T *source,            \
                                        size_t nelems, uint64_t *sig_addr, uint64_t signal,   \
                                        int sig_op, int pe);
FSHMEM_RMA_TYPES(FSHMEM_DECL_RMA, )

#define FSHMEM_DECL_PG(T, N, S)                                                                \
    void shmem_##N##_p(T *dest, T value, int pe);                                             \
    void shmem_ctx_##N##_p(shmem_ctx_t ctx, T *dest, T value, int pe);                        \
    T shmem_##N##_g(const T *source, int pe);                                                 \
    T shmem_ctx_##N##_g(shmem_ctx_t ctx, const T *source, int pe);
FSHMEM_RMA_TYPES_BY_VALUE(FSHMEM_DECL_PG, )
#undef FSHMEM_DECL_PG

/* long double's p and g: one-element put and get (the library takes long double through
 * pointers only). */
static inline void shmem_longdouble_p(long double *dest, long double value, int pe) {
    shmem_longdouble_put(dest, &value, 1, pe);
}
static inline void shmem_ctx_longdouble_p(shmem_ctx_t ctx, long double *dest, long double value,
                                          int pe) {
    shmem_ctx_longdouble_put(ctx, dest, &value, 1, pe);
}
static inline long double shmem_longdouble_g(const long double *source, int pe) {
    long double value;
    shmem_longdouble_get(&value, source, 1, pe);
    return value;
}
static inline long double shmem_ctx_longdouble_g(shmem_ctx_t ctx, const long double *source,
                                                 int pe) {
    long double value;
    shmem_ctx_longdouble_get(ctx, &value, source, 1, pe);
    return value;
}

/* ---------------------------------------------------------------------------------------- */
/* RMA: sized (8, 16, 32, 64, 128 bits) and byte (mem) forms                                  */
/* ---------------------------------------------------------------------------------------- */

/* Contiguous forms; S is a size or "mem" */
#define FSHMEM_DECL_CONTIG(S)                                                                  \
    void shmem_put##S(void *dest, const void *source, size_t nelems, int pe);                 \
    void shmem_ctx_put##S(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems,     \
                          int pe);                                                            \
    void shmem_get##S(void *dest, const void *source, size_t nelems, int pe);                 \
    void shmem_ctx_get##S(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems,     \
                          int pe);                                                            \
    void shmem_put##S##_nbi(void *dest, const void *source, size_t nelems, int pe);           \
    void shmem_ctx_put##S##_nbi(shmem_ctx_t ctx, void *dest, const void *source,              \
                                size_t nelems, int pe);                                       \
    void shmem_get##S##_nbi(void *dest, const void *source, size_t nelems, int pe);           \
    void shmem_ctx_get##S##_nbi(shmem_ctx_t ctx, void *dest, const void *source,              \
                                size_t nelems, int pe);                                       \
    void shmem_put##S##_signal(void *dest, const void *source, size_t nelems,                 \
                               uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);      \
    void shmem_ctx_put##S##_signal(shmem_ctx_t ctx, void *dest, const void *source,           \
                                   size_t nelems, uint64_t *sig_addr, uint64_t signal,        \
                                   int sig_op, int pe);                                       \
    void shmem_put##S##_signal_nbi(void *dest, const void *source, size_t nelems,             \
                                   uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);  \
    void shmem_ctx_put##S##_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source,       \
                                       size_t nelems, uint64_t *sig_addr, uint64_t signal,    \
                                       int sig_op, int pe);

/* Strided forms; sizes only (there is no shmem_iputmem) */
#define FSHMEM_DECL_STRIDED(S)                                                                 \
    void shmem_iput##S(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst,          \
                       size_t nelems, int pe);                                                \
    void shmem_ctx_iput##S(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst,    \
                           ptrdiff_t sst, size_t nelems, int pe);                             \
    void shmem_iget##S(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst,          \
                       size_t nelems, int pe);                                                \
    void shmem_ctx_iget##S(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst,    \
                           ptrdiff_t sst, size_t nelems, int pe);

FSHMEM_SIZES(FSHMEM_DECL_CONTIG)
FSHMEM_DECL_CONTIG(mem)
FSHMEM_SIZES(FSHMEM_DECL_STRIDED)

/* ---------------------------------------------------------------------------------------- */
/* Signals                                                                                    */
/* ---------------------------------------------------------------------------------------- */

uint64_t shmem_signal_fetch(const uint64_t *sig_addr);
uint64_t shmem_signal_wait_until(uint64_t *sig_addr, int cmp, uint64_t cmp_value);

/* ---------------------------------------------------------------------------------------- */
/* AMOs                                                                                       */
/* ---------------------------------------------------------------------------------------- */

/* Extended AMOs: fetch, set, swap (and their nonblocking fetching forms) */
#define FSHMEM_DECL_EXTAMO(T, N, S)                                                            \
    T shmem_##N##_atomic_fetch(const T *source, int pe);                                      \
    T shmem_ctx_##N##_atomic_fetch(shmem_ctx_t ctx, const T *source, int pe);                 \
    void shmem_##N##_atomic_set(T *dest, T value, int pe);                                    \
    void shmem_ctx_##N##_atomic_set(shmem_ctx_t ctx, T *dest, T value, int pe);               \
    T shmem_##N##_atomic_swap(T *dest, T value, int pe);                                      \
    T shmem_ctx_##N##_atomic_swap(shmem_ctx_t ctx, T *dest, T value, int pe);                 \
    void shmem_##N##_atomic_fetch_nbi(T *fetch, const T *source, int pe);                     \
    void shmem_ctx_##N##_atomic_fetch_nbi(shmem_ctx_t ctx, T *fetch, const T *source, int pe); \
    void shmem_##N##_atomic_swap_nbi(T *fetch, T *dest, T value, int pe);                     \
    void shmem_ctx_##N##_atomic_swap_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value, int pe);
FSHMEM_EXTAMO_TYPES(FSHMEM_DECL_EXTAMO, )

/* Standard AMOs: compare_swap, fetch_inc, inc, fetch_add, add */
#define FSHMEM_DECL_AMO(T, N, S)                                                               \
    T shmem_##N##_atomic_compare_swap(T *dest, T cond, T value, int pe);                      \
    T shmem_ctx_##N##_atomic_compare_swap(shmem_ctx_t ctx, T *dest, T cond, T value, int pe); \
    T shmem_##N##_atomic_fetch_inc(T *dest, int pe);                                          \
    T shmem_ctx_##N##_atomic_fetch_inc(shmem_ctx_t ctx, T *dest, int pe);                     \
    void shmem_##N##_atomic_inc(T *dest, int pe);                                             \
    void shmem_ctx_##N##_atomic_inc(shmem_ctx_t ctx, T *dest, int pe);                        \
    T shmem_##N##_atomic_fetch_add(T *dest, T value, int pe);                                 \
    T shmem_ctx_##N##_atomic_fetch_add(shmem_ctx_t ctx, T *dest, T value, int pe);            \
    void shmem_##N##_atomic_add(T *dest, T value, int pe);                                    \
    void shmem_ctx_##N##_atomic_add(shmem_ctx_t ctx, T *dest, T value, int pe);               \
    void shmem_##N##_atomic_compare_swap_nbi(T *fetch, T *dest, T cond, T value, int pe);     \
    void shmem_ctx_##N##_atomic_compare_swap_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T cond,  \
                                                 T value, int pe);                            \
    void shmem_##N##_atomic_fetch_inc_nbi(T *fetch, T *dest, int pe);                         \
    void shmem_ctx_##N##_atomic_fetch_inc_nbi(shmem_ctx_t ctx, T *fetch, T *dest, int pe);    \
    void shmem_##N##_atomic_fetch_add_nbi(T *fetch, T *dest, T value, int pe);                \
    void shmem_ctx_##N##_atomic_fetch_add_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value,    \
                                              int pe);
FSHMEM_AMO_TYPES(FSHMEM_DECL_AMO, )

/* Bitwise AMOs; OP is and, or or xor (given with its leading underscore) */
#define FSHMEM_DECL_BITAMO_OP(T, N, OP)                                                        \
    T shmem_##N##_atomic_fetch##OP(T *dest, T value, int pe);                                 \
    T shmem_ctx_##N##_atomic_fetch##OP(shmem_ctx_t ctx, T *dest, T value, int pe);            \
    void shmem_##N##_atomic##OP(T *dest, T value, int pe);                                    \
    void shmem_ctx_##N##_atomic##OP(shmem_ctx_t ctx, T *dest, T value, int pe);               \
    void shmem_##N##_atomic_fetch##OP##_nbi(T *fetch, T *dest, T value, int pe);              \
    void shmem_ctx_##N##_atomic_fetch##OP##_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value,  \
                                                int pe);
FSHMEM_BITAMO_TYPES(FSHMEM_DECL_BITAMO_OP, _and)
FSHMEM_BITAMO_TYPES(FSHMEM_DECL_BITAMO_OP, _or)
FSHMEM_BITAMO_TYPES(FSHMEM_DECL_BITAMO_OP, _xor)

/* Deprecated AMO names (OpenSHMEM 1.0 to 1.3) */
#define FSHMEM_DECL_OLDAMO(T, N, S)                                                            \
    FSHMEM_DEPRECATED T shmem_##N##_cswap(T *dest, T cond, T value, int pe);                  \
    FSHMEM_DEPRECATED T shmem_##N##_finc(T *dest, int pe);                                    \
    FSHMEM_DEPRECATED void shmem_##N##_inc(T *dest, int pe);                                  \
    FSHMEM_DEPRECATED T shmem_##N##_fadd(T *dest, T value, int pe);                           \
    FSHMEM_DEPRECATED void shmem_##N##_add(T *dest, T value, int pe);
FSHMEM_OLDAMO_TYPES(FSHMEM_DECL_OLDAMO, )

#define FSHMEM_DECL_OLDEXTAMO(T, N, S)                                                         \
    FSHMEM_DEPRECATED T shmem_##N##_fetch(const T *source, int pe);                           \
    FSHMEM_DEPRECATED void shmem_##N##_set(T *dest, T value, int pe);                         \
    FSHMEM_DEPRECATED T shmem_##N##_swap(T *dest, T value, int pe);
FSHMEM_OLDEXTAMO_TYPES(FSHMEM_DECL_OLDEXTAMO, )

/* OpenSHMEM 1.0's untyped swap on long (in C11 the name is the type-generic macro below). */
FSHMEM_DEPRECATED long shmem_swap(long *dest, long value, int pe);

/* ---------------------------------------------------------------------------------------- */
/* Collectives on teams                                                                       */
/* ---------------------------------------------------------------------------------------- */

#define FSHMEM_DECL_COLL(T, N, S)                                                              \
    int shmem_##N##_broadcast(shmem_team_t team, T *dest, const T *source, size_t nelems,     \
                              int PE_root);                                                   \
    int shmem_##N##_collect(shmem_team_t team, T *dest, const T *source, size_t nelems);      \
    int shmem_##N##_fcollect(shmem_team_t team, T *dest, const T *source, size_t nelems);     \
    int shmem_##N##_alltoall(shmem_team_t team, T *dest, const T *source, size_t nelems);     \
    int shmem_##N##_alltoalls(shmem_team_t team, T *dest, const T *source, ptrdiff_t dst,     \
                              ptrdiff_t sst, size_t nelems);
FSHMEM_RMA_TYPES(FSHMEM_DECL_COLL, )

int shmem_broadcastmem(shmem_team_t team, void *dest, const void *source, size_t nelems,
                       int PE_root);
int shmem_collectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_fcollectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallsmem(shmem_team_t team, void *dest, const void *source, ptrdiff_t dst,
                       ptrdiff_t sst, size_t nelems);

/* Reductions: shmem_TYPENAME_OP_reduce; S is the "_OP_reduce" suffix */
#define FSHMEM_DECL_REDUCE(T, N, S)                                                            \
    int shmem_##N##S(shmem_team_t team, T *dest, const T *source, size_t nreduce);
FSHMEM_BITRED_TYPES(FSHMEM_DECL_REDUCE, _and_reduce)
FSHMEM_BITRED_TYPES(FSHMEM_DECL_REDUCE, _or_reduce)
FSHMEM_BITRED_TYPES(FSHMEM_DECL_REDUCE, _xor_reduce)
FSHMEM_MINMAXRED_TYPES(FSHMEM_DECL_REDUCE, _max_reduce)
FSHMEM_MINMAXRED_TYPES(FSHMEM_DECL_REDUCE, _min_reduce)
FSHMEM_ARITHRED_TYPES(FSHMEM_DECL_REDUCE, _sum_reduce)
FSHMEM_ARITHRED_TYPES(FSHMEM_DECL_REDUCE, _prod_reduce)

/* ---------------------------------------------------------------------------------------- */
/* Deprecated active-set collectives (PE_start, logPE_stride, PE_size, pSync)                 */
/* ---------------------------------------------------------------------------------------- */

FSHMEM_DEPRECATED void shmem_barrier(int PE_start, int logPE_stride, int PE_size, long *pSync);
FSHMEM_DEPRECATED void shmem_sync(int PE_start, int logPE_stride, int PE_size, long *pSync);

#define FSHMEM_DECL_ACTIVESET(B)                                                               \
    FSHMEM_DEPRECATED void shmem_broadcast##B(void *dest, const void *source, size_t nelems,  \
                                              int PE_root, int PE_start, int logPE_stride,    \
                                              int PE_size, long *pSync);                      \
    FSHMEM_DEPRECATED void shmem_collect##B(void *dest, const void *source, size_t nelems,    \
                                            int PE_start, int logPE_stride, int PE_size,      \
                                            long *pSync);                                     \
    FSHMEM_DEPRECATED void shmem_fcollect##B(void *dest, const void *source, size_t nelems,   \
                                             int PE_start, int logPE_stride, int PE_size,     \
                                             long *pSync);                                    \
    FSHMEM_DEPRECATED void shmem_alltoall##B(void *dest, const void *source, size_t nelems,   \
                                             int PE_start, int logPE_stride, int PE_size,     \
                                             long *pSync);                                    \
    FSHMEM_DEPRECATED void shmem_alltoalls##B(void *dest, const void *source, ptrdiff_t dst,  \
                                              ptrdiff_t sst, size_t nelems, int PE_start,     \
                                              int logPE_stride, int PE_size, long *pSync);
FSHMEM_DECL_ACTIVESET(32)
FSHMEM_DECL_ACTIVESET(64)

/* shmem_TYPENAME_OP_to_all; S is the "_OP_to_all" suffix */
#define FSHMEM_DECL_TO_ALL(T, N, S)                                                            \
    FSHMEM_DEPRECATED void shmem_##N##S(T *dest, const T *source, int nreduce, int PE_start,  \
                                        int logPE_stride, int PE_size, T *pWrk, long *pSync);
FSHMEM_TOALL_BIT_TYPES(FSHMEM_DECL_TO_ALL, _and_to_all)
FSHMEM_TOALL_BIT_TYPES(FSHMEM_DECL_TO_ALL, _or_to_all)
FSHMEM_TOALL_BIT_TYPES(FSHMEM_DECL_TO_ALL, _xor_to_all)
FSHMEM_TOALL_MINMAX_TYPES(FSHMEM_DECL_TO_ALL, _max_to_all)
FSHMEM_TOALL_MINMAX_TYPES(FSHMEM_DECL_TO_ALL, _min_to_all)
FSHMEM_TOALL_ARITH_TYPES(FSHMEM_DECL_TO_ALL, _sum_to_all)
FSHMEM_TOALL_ARITH_TYPES(FSHMEM_DECL_TO_ALL, _prod_to_all)

/* ---------------------------------------------------------------------------------------- */
/* Synchronization and memory ordering                                                        */
/* ---------------------------------------------------------------------------------------- */

void shmem_barrier_all(void);
void shmem_sync_all(void);
void shmem_quiet(void);
void shmem_ctx_quiet(shmem_ctx_t ctx);
void shmem_fence(void);
void shmem_ctx_fence(shmem_ctx_t ctx);

#define FSHMEM_DECL_P2P(T, N, S)                                                               \
    void shmem_##N##_wait_until(T *ivar, int cmp, T cmp_value);                               \
    void shmem_##N##_wait_until_all(T *ivars, size_t nelems, const int *status, int cmp,      \
                                    T cmp_value);                                             \
    size_t shmem_##N##_wait_until_any(T *ivars, size_t nelems, const int *status, int cmp,    \
                                      T cmp_value);                                           \
    size_t shmem_##N##_wait_until_some(T *ivars, size_t nelems, size_t *indices,              \
                                       const int *status, int cmp, T cmp_value);              \
    void shmem_##N##_wait_until_all_vector(T *ivars, size_t nelems, const int *status,        \
                                           int cmp, T *cmp_values);                           \
    size_t shmem_##N##_wait_until_any_vector(T *ivars, size_t nelems, const int *status,      \
                                             int cmp, T *cmp_values);                         \
    size_t shmem_##N##_wait_until_some_vector(T *ivars, size_t nelems, size_t *indices,       \
                                              const int *status, int cmp, T *cmp_values);     \
    int shmem_##N##_test(T *ivar, int cmp, T cmp_value);                                      \
    int shmem_##N##_test_all(T *ivars, size_t nelems, const int *status, int cmp,             \
                             T cmp_value);                                                    \
    size_t shmem_##N##_test_any(T *ivars, size_t nelems, const int *status, int cmp,          \
                                T cmp_value);                                                 \
    size_t shmem_##N##_test_some(T *ivars, size_t nelems, size_t *indices, const int *status, \
                                 int cmp, T cmp_value);                                       \
    int shmem_##N##_test_all_vector(T *ivars, size_t nelems, const int *status, int cmp,      \
                                    T *cmp_values);                                           \
    size_t shmem_##N##_test_any_vector(T *ivars, size_t nelems, const int *status, int cmp,   \
                                       T *cmp_values);                                        \
    size_t shmem_##N##_test_some_vector(T *ivars, size_t nelems, size_t *indices,             \
                                        const int *status, int cmp, T *cmp_values);
FSHMEM_SYNC_TYPES(FSHMEM_DECL_P2P, )

/* Deprecated: wait until *ivar != cmp_value (OpenSHMEM 1.0 to 1.3). */
#define FSHMEM_DECL_OLDWAIT(T, N, S)                                                           \
    FSHMEM_DEPRECATED void shmem_##N##_wait(volatile T *ivar, T cmp_value);
FSHMEM_OLDWAIT_TYPES(FSHMEM_DECL_OLDWAIT, )
/* OpenSHMEM 1.0's untyped forms on long (in C11 these names are type-generic macros). */
FSHMEM_DEPRECATED void shmem_wait(volatile long *ivar, long cmp_value);
void shmem_wait_until(long *ivar, int cmp, long cmp_value);

/* ---------------------------------------------------------------------------------------- */
/* Locks, profiling control, deprecated cache routines                                        */
/* ---------------------------------------------------------------------------------------- */

void shmem_set_lock(long *lock);
void shmem_clear_lock(long *lock);
int shmem_test_lock(long *lock);

void shmem_pcontrol(const int level, ...);

/* Cache management (deprecated since OpenSHMEM 1.3): no-ops on every system ferroshmem runs on,
 * defined here so the library need not export them. */
static inline void shmem_set_cache_inv(void) {}
static inline void shmem_clear_cache_inv(void) {}
static inline void shmem_set_cache_line_inv(void *dest) { (void)dest; }
static inline void shmem_clear_cache_line_inv(void *dest) { (void)dest; }
static inline void shmem_udcflush(void) {}
static inline void shmem_udcflush_line(void *dest) { (void)dest; }

#ifdef __cplusplus
} /* extern "C" */
#endif

/* The declaring macros are not needed past this point; the type tables stay (shmemx.h and the
 * type-generic macros use them). */
#undef FSHMEM_DECL_RMA
#undef FSHMEM_DECL_CONTIG
#undef FSHMEM_DECL_STRIDED
#undef FSHMEM_DECL_EXTAMO
#undef FSHMEM_DECL_AMO
#undef FSHMEM_DECL_BITAMO_OP
#undef FSHMEM_DECL_OLDAMO
#undef FSHMEM_DECL_OLDEXTAMO
#undef FSHMEM_DECL_COLL
#undef FSHMEM_DECL_REDUCE
#undef FSHMEM_DECL_ACTIVESET
#undef FSHMEM_DECL_TO_ALL
#undef FSHMEM_DECL_P2P
#undef FSHMEM_DECL_OLDWAIT

/* ---------------------------------------------------------------------------------------- */
/* C11 type-generic interfaces                                                                */
/* ---------------------------------------------------------------------------------------- */

/* Each generic name selects the typed routine by the type of its first pointer argument, as the
 * specification's C11 synopses give them; the RMA, AMO and signalling names also take an
 * optional leading shmem_ctx_t (shmem_put(ctx, dest, source, nelems, pe)). A type outside the
 * routine's table selects fshmem_generic_no_match, so the call fails to compile. Only types that
 * are distinct in C appear (int32_t is int, size_t is unsigned long, ... on LP64 systems). In C++
 * the same names are overloads over the same tables (shmem_cxx.h). */

#define FSHMEM_ARG0(...) FSHMEM_ARG0_(__VA_ARGS__, ~)
#define FSHMEM_ARG0_(a, ...) a
#define FSHMEM_ARG1(...) FSHMEM_ARG1_(__VA_ARGS__, ~, ~)
#define FSHMEM_ARG1_(a, b, ...) b

/* Associations: plain, ctx form, and also accepting const or volatile pointees */
#define FSHMEM_GA(T, N, S) T *: shmem_##N##S,
#define FSHMEM_GA_CTX(T, N, S) T *: shmem_ctx_##N##S,
#define FSHMEM_GA_C(T, N, S) T *: shmem_##N##S, const T *: shmem_##N##S,
#define FSHMEM_GA_CTX_C(T, N, S) T *: shmem_ctx_##N##S, const T *: shmem_ctx_##N##S,
#define FSHMEM_GA_V(T, N, S) T *: shmem_##N##S, volatile T *: shmem_##N##S,

/* Generic type tables: the distinct C types of each specification table */
#define FSHMEM_G_RMA(X, S)                                                                     \
    X(float, float, S) X(double, double, S) X(long double, longdouble, S) X(char, char, S)    \
    X(signed char, schar, S) X(short, short, S) X(int, int, S) X(long, long, S)               \
    X(long long, longlong, S) X(unsigned char, uchar, S) X(unsigned short, ushort, S)         \
    X(unsigned int, uint, S) X(unsigned long, ulong, S) X(unsigned long long, ulonglong, S)
#define FSHMEM_G_AMO(X, S)                                                                     \
    X(int, int, S) X(long, long, S) X(long long, longlong, S) X(unsigned int, uint, S)        \
    X(unsigned long, ulong, S) X(unsigned long long, ulonglong, S)
#define FSHMEM_G_EXTAMO(X, S) FSHMEM_G_AMO(X, S) X(float, float, S) X(double, double, S)
#define FSHMEM_G_BITAMO(X, S)                                                                  \
    X(unsigned int, uint, S) X(unsigned long, ulong, S) X(unsigned long long, ulonglong, S)   \
    X(int32_t, int32, S) X(int64_t, int64, S)
#define FSHMEM_G_SYNC(X, S)                                                                    \
    X(short, short, S) X(int, int, S) X(long, long, S) X(long long, longlong, S)              \
    X(unsigned short, ushort, S) X(unsigned int, uint, S) X(unsigned long, ulong, S)          \
    X(unsigned long long, ulonglong, S)
#define FSHMEM_G_BITRED(X, S)                                                                  \
    X(unsigned char, uchar, S) X(unsigned short, ushort, S) X(unsigned int, uint, S)          \
    X(unsigned long, ulong, S) X(unsigned long long, ulonglong, S) X(int8_t, int8, S)         \
    X(int16_t, int16, S) X(int32_t, int32, S) X(int64_t, int64, S)
#define FSHMEM_G_MINMAXRED(X, S)                                                               \
    X(char, char, S) X(signed char, schar, S) X(short, short, S) X(int, int, S)               \
    X(long, long, S) X(long long, longlong, S) X(unsigned char, uchar, S)                     \
    X(unsigned short, ushort, S) X(unsigned int, uint, S) X(unsigned long, ulong, S)          \
    X(unsigned long long, ulonglong, S) X(float, float, S) X(double, double, S)             \
    FSHMEM_LONGDOUBLE_RED(X, S)
#define FSHMEM_G_ARITHRED(X, S) FSHMEM_G_MINMAXRED(X, S) FSHMEM_COMPLEX_TYPES(X, S)

#if defined(__cplusplus) && __cplusplus >= 201103L
#include "shmem_cxx.h"
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L

static inline void fshmem_generic_no_match(void) {}

/* Selection on the first argument (ARG = FSHMEM_ARG0) or the second (FSHMEM_ARG1, after a team) */
#define FSHMEM_GEN(TABLE, A, S, ARG, ...)                                                      \
    _Generic(ARG(__VA_ARGS__), TABLE(A, S) default: fshmem_generic_no_match)(__VA_ARGS__)
/* Selection with an optional leading context */
#define FSHMEM_GEN_CTX(TABLE, A, ACTX, S, ...)                                                 \
    _Generic(FSHMEM_ARG0(__VA_ARGS__),                                                         \
        shmem_ctx_t: _Generic(FSHMEM_ARG1(__VA_ARGS__),                                        \
                              TABLE(ACTX, S) default: fshmem_generic_no_match),               \
        TABLE(A, S) default: fshmem_generic_no_match)(__VA_ARGS__)
#define FSHMEM_GRMA(S, ...) FSHMEM_GEN_CTX(FSHMEM_G_RMA, FSHMEM_GA, FSHMEM_GA_CTX, S, __VA_ARGS__)

/* RMA and signalling put */
#define shmem_put(...) FSHMEM_GRMA(_put, __VA_ARGS__)
#define shmem_get(...) FSHMEM_GRMA(_get, __VA_ARGS__)
#define shmem_p(...) FSHMEM_GRMA(_p, __VA_ARGS__)
#define shmem_g(...) FSHMEM_GEN_CTX(FSHMEM_G_RMA, FSHMEM_GA_C, FSHMEM_GA_CTX_C, _g, __VA_ARGS__)
#define shmem_iput(...) FSHMEM_GRMA(_iput, __VA_ARGS__)
#define shmem_iget(...) FSHMEM_GRMA(_iget, __VA_ARGS__)
#define shmem_put_nbi(...) FSHMEM_GRMA(_put_nbi, __VA_ARGS__)
#define shmem_get_nbi(...) FSHMEM_GRMA(_get_nbi, __VA_ARGS__)
#define shmem_put_signal(...) FSHMEM_GRMA(_put_signal, __VA_ARGS__)
#define shmem_put_signal_nbi(...) FSHMEM_GRMA(_put_signal_nbi, __VA_ARGS__)

/* AMOs */
#define FSHMEM_GAMO(TABLE, S, ...) FSHMEM_GEN_CTX(TABLE, FSHMEM_GA, FSHMEM_GA_CTX, S, __VA_ARGS__)
#define shmem_atomic_fetch(...)                                                                \
    FSHMEM_GEN_CTX(FSHMEM_G_EXTAMO, FSHMEM_GA_C, FSHMEM_GA_CTX_C, _atomic_fetch, __VA_ARGS__)
#define shmem_atomic_set(...) FSHMEM_GAMO(FSHMEM_G_EXTAMO, _atomic_set, __VA_ARGS__)
#define shmem_atomic_swap(...) FSHMEM_GAMO(FSHMEM_G_EXTAMO, _atomic_swap, __VA_ARGS__)
#define shmem_atomic_fetch_nbi(...) FSHMEM_GAMO(FSHMEM_G_EXTAMO, _atomic_fetch_nbi, __VA_ARGS__)
#define shmem_atomic_swap_nbi(...) FSHMEM_GAMO(FSHMEM_G_EXTAMO, _atomic_swap_nbi, __VA_ARGS__)
#define shmem_atomic_compare_swap(...)                                                         \
    FSHMEM_GAMO(FSHMEM_G_AMO, _atomic_compare_swap, __VA_ARGS__)
#define shmem_atomic_fetch_inc(...) FSHMEM_GAMO(FSHMEM_G_AMO, _atomic_fetch_inc, __VA_ARGS__)
#define shmem_atomic_inc(...) FSHMEM_GAMO(FSHMEM_G_AMO, _atomic_inc, __VA_ARGS__)
#define shmem_atomic_fetch_add(...) FSHMEM_GAMO(FSHMEM_G_AMO, _atomic_fetch_add, __VA_ARGS__)
#define shmem_atomic_add(...) FSHMEM_GAMO(FSHMEM_G_AMO, _atomic_add, __VA_ARGS__)
#define shmem_atomic_compare_swap_nbi(...)                                                     \
    FSHMEM_GAMO(FSHMEM_G_AMO, _atomic_compare_swap_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_inc_nbi(...)                                                        \
    FSHMEM_GAMO(FSHMEM_G_AMO, _atomic_fetch_inc_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_add_nbi(...)                                                        \
    FSHMEM_GAMO(FSHMEM_G_AMO, _atomic_fetch_add_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_and(...) FSHMEM_GAMO(FSHMEM_G_BITAMO, _atomic_fetch_and, __VA_ARGS__)
#define shmem_atomic_and(...) FSHMEM_GAMO(FSHMEM_G_BITAMO, _atomic_and, __VA_ARGS__)
#define shmem_atomic_fetch_or(...) FSHMEM_GAMO(FSHMEM_G_BITAMO, _atomic_fetch_or, __VA_ARGS__)
#define shmem_atomic_or(...) FSHMEM_GAMO(FSHMEM_G_BITAMO, _atomic_or, __VA_ARGS__)
#define shmem_atomic_fetch_xor(...) FSHMEM_GAMO(FSHMEM_G_BITAMO, _atomic_fetch_xor, __VA_ARGS__)
#define shmem_atomic_xor(...) FSHMEM_GAMO(FSHMEM_G_BITAMO, _atomic_xor, __VA_ARGS__)
#define shmem_atomic_fetch_and_nbi(...)                                                        \
    FSHMEM_GAMO(FSHMEM_G_BITAMO, _atomic_fetch_and_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_or_nbi(...)                                                         \
    FSHMEM_GAMO(FSHMEM_G_BITAMO, _atomic_fetch_or_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_xor_nbi(...)                                                        \
    FSHMEM_GAMO(FSHMEM_G_BITAMO, _atomic_fetch_xor_nbi, __VA_ARGS__)

/* Collectives on teams: selected by dest, the argument after the team */
#define FSHMEM_GCOLL(TABLE, S, ...) FSHMEM_GEN(TABLE, FSHMEM_GA, S, FSHMEM_ARG1, __VA_ARGS__)
#define shmem_broadcast(...) FSHMEM_GCOLL(FSHMEM_G_RMA, _broadcast, __VA_ARGS__)
#define shmem_collect(...) FSHMEM_GCOLL(FSHMEM_G_RMA, _collect, __VA_ARGS__)
#define shmem_fcollect(...) FSHMEM_GCOLL(FSHMEM_G_RMA, _fcollect, __VA_ARGS__)
#define shmem_alltoall(...) FSHMEM_GCOLL(FSHMEM_G_RMA, _alltoall, __VA_ARGS__)
#define shmem_alltoalls(...) FSHMEM_GCOLL(FSHMEM_G_RMA, _alltoalls, __VA_ARGS__)
#define shmem_and_reduce(...) FSHMEM_GCOLL(FSHMEM_G_BITRED, _and_reduce, __VA_ARGS__)
#define shmem_or_reduce(...) FSHMEM_GCOLL(FSHMEM_G_BITRED, _or_reduce, __VA_ARGS__)
#define shmem_xor_reduce(...) FSHMEM_GCOLL(FSHMEM_G_BITRED, _xor_reduce, __VA_ARGS__)
#define shmem_max_reduce(...) FSHMEM_GCOLL(FSHMEM_G_MINMAXRED, _max_reduce, __VA_ARGS__)
#define shmem_min_reduce(...) FSHMEM_GCOLL(FSHMEM_G_MINMAXRED, _min_reduce, __VA_ARGS__)
#define shmem_sum_reduce(...) FSHMEM_GCOLL(FSHMEM_G_ARITHRED, _sum_reduce, __VA_ARGS__)
#define shmem_prod_reduce(...) FSHMEM_GCOLL(FSHMEM_G_ARITHRED, _prod_reduce, __VA_ARGS__)

/* shmem_sync: on a team (the C11 form of OpenSHMEM 1.5), or the deprecated active-set form,
 * told apart by the number of arguments (1 or 4) */
#define FSHMEM_SYNC_FORM(A1, A2, A3, A4, NAME, ...) NAME
#define shmem_sync(...)                                                                        \
    FSHMEM_SYNC_FORM(__VA_ARGS__, shmem_sync, shmem_sync, shmem_sync, shmem_team_sync,         \
                     fshmem_generic_no_match)(__VA_ARGS__)

/* Point-to-point synchronization */
#define FSHMEM_GSYNC(S, ...) FSHMEM_GEN(FSHMEM_G_SYNC, FSHMEM_GA, S, FSHMEM_ARG0, __VA_ARGS__)
#define shmem_wait_until(...) FSHMEM_GSYNC(_wait_until, __VA_ARGS__)
#define shmem_wait_until_all(...) FSHMEM_GSYNC(_wait_until_all, __VA_ARGS__)
#define shmem_wait_until_any(...) FSHMEM_GSYNC(_wait_until_any, __VA_ARGS__)
#define shmem_wait_until_some(...) FSHMEM_GSYNC(_wait_until_some, __VA_ARGS__)
#define shmem_wait_until_all_vector(...) FSHMEM_GSYNC(_wait_until_all_vector, __VA_ARGS__)
#define shmem_wait_until_any_vector(...) FSHMEM_GSYNC(_wait_until_any_vector, __VA_ARGS__)
#define shmem_wait_until_some_vector(...) FSHMEM_GSYNC(_wait_until_some_vector, __VA_ARGS__)
#define shmem_test(...) FSHMEM_GSYNC(_test, __VA_ARGS__)
#define shmem_test_all(...) FSHMEM_GSYNC(_test_all, __VA_ARGS__)
#define shmem_test_any(...) FSHMEM_GSYNC(_test_any, __VA_ARGS__)
#define shmem_test_some(...) FSHMEM_GSYNC(_test_some, __VA_ARGS__)
#define shmem_test_all_vector(...) FSHMEM_GSYNC(_test_all_vector, __VA_ARGS__)
#define shmem_test_any_vector(...) FSHMEM_GSYNC(_test_any_vector, __VA_ARGS__)
#define shmem_test_some_vector(...) FSHMEM_GSYNC(_test_some_vector, __VA_ARGS__)

/* Deprecated generic names (OpenSHMEM 1.3) */
#define FSHMEM_GOLD(TABLE, A, S, ...) FSHMEM_GEN(TABLE, A, S, FSHMEM_ARG0, __VA_ARGS__)
#define shmem_fetch(...) FSHMEM_GOLD(FSHMEM_OLDEXTAMO_TYPES, FSHMEM_GA_C, _fetch, __VA_ARGS__)
#define shmem_set(...) FSHMEM_GOLD(FSHMEM_OLDEXTAMO_TYPES, FSHMEM_GA, _set, __VA_ARGS__)
#define shmem_swap(...) FSHMEM_GOLD(FSHMEM_OLDEXTAMO_TYPES, FSHMEM_GA, _swap, __VA_ARGS__)
#define shmem_cswap(...) FSHMEM_GOLD(FSHMEM_OLDAMO_TYPES, FSHMEM_GA, _cswap, __VA_ARGS__)
#define shmem_finc(...) FSHMEM_GOLD(FSHMEM_OLDAMO_TYPES, FSHMEM_GA, _finc, __VA_ARGS__)
#define shmem_inc(...) FSHMEM_GOLD(FSHMEM_OLDAMO_TYPES, FSHMEM_GA, _inc, __VA_ARGS__)
#define shmem_fadd(...) FSHMEM_GOLD(FSHMEM_OLDAMO_TYPES, FSHMEM_GA, _fadd, __VA_ARGS__)
#define shmem_add(...) FSHMEM_GOLD(FSHMEM_OLDAMO_TYPES, FSHMEM_GA, _add, __VA_ARGS__)
#define shmem_wait(...) FSHMEM_GOLD(FSHMEM_OLDWAIT_TYPES, FSHMEM_GA_V, _wait, __VA_ARGS__)

#endif /* C11 */

#endif /* FERROSHMEM_SHMEM_H */
