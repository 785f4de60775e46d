// atomics.cuh: the device library's atomics (nvshmem_*_atomic_*), appended to
// ferroshmem_device.cuh, whose state, checks and PTX atomics they use: to a peer of this node
// by those atomics on its mapped heap, to a peer of another node by the network path's atomic
// WQEs (network.cuh, appended after this file).

// Whether T is an integer type (the bitwise and increment atomics take only those).
template <typename T> struct fsh__is_integer { enum { value = 1 }; };
template <> struct fsh__is_integer<float> { enum { value = 0 }; };
template <> struct fsh__is_integer<double> { enum { value = 0 }; };
#define FSH__INTEGER_ONLY(NAME) \
    static_assert(fsh__is_integer<T>::value, NAME " takes integer types only (as in NVSHMEM)");

// An atomic on a PE on another node: the WQE of `family`, the old value back as T.
template <typename T> __device__ __forceinline__ T fsh__net_atomic(const T* dest, int pe, fsh_u32 family, T value, T compare, bool fetch) {
    typedef typename fsh__bits_of<T>::U U;
    if (!fsh__check(FSH_OP_ATOMIC, pe, dest, sizeof(T))) return T();
    fsh_u64 old = fsh__net_amo(pe, dest, family, sizeof(T), fsh__net_word(value), fsh__net_word(compare), fetch);
    return fsh__bitcast<T>((U)old);
}

#define FSH__AMO_PEER(dest, pe, FAMILY, VALUE, COMPARE) \
    typedef typename fsh__bits_of<T>::U U; \
    if (fsh__qp(pe)) return fsh__net_atomic(dest, pe, FAMILY, VALUE, COMPARE, true); \
    U* r = (U*)fsh__peer(dest, pe, FSH_OP_ATOMIC, sizeof(T)); \
    if (fsh__refused(r)) return T();

template <typename T> __device__ __forceinline__ T fsh_atomic_fetch(const T* dest, int pe) {
    FSH__AMO_PEER(dest, pe, FSH_IBGDA_AMO_FETCH, T(), T())
    return fsh__bitcast<T>(fsh__ld_relaxed(r));
}
template <typename T> __device__ __forceinline__ T fsh_atomic_swap(T* dest, T value, int pe) {
    FSH__AMO_PEER(dest, pe, FSH_IBGDA_AMO_SWAP, value, T())
    return fsh__bitcast<T>(fsh__atom_exch(r, fsh__bitcast<U>(value)));
}
template <typename T> __device__ __forceinline__ void fsh_atomic_set(T* dest, T value, int pe) {
    if (fsh__qp(pe)) { fsh__net_atomic(dest, pe, FSH_IBGDA_AMO_SET, value, T(), false); return; }
    fsh_atomic_swap(dest, value, pe);
}
template <typename T> __device__ __forceinline__ T fsh_atomic_compare_swap(T* dest, T cond, T value, int pe) {
    FSH__AMO_PEER(dest, pe, FSH_IBGDA_AMO_COMPARE_SWAP, value, cond)
    return fsh__bitcast<T>(fsh__atom_cas(r, fsh__bitcast<U>(cond), fsh__bitcast<U>(value)));
}
template <typename T> __device__ __forceinline__ T fsh_atomic_fetch_add(T* dest, T value, int pe) {
    FSH__AMO_PEER(dest, pe, FSH_IBGDA_AMO_FETCH_ADD, value, T())
    return fsh__bitcast<T>(fsh__atom_add(r, fsh__bitcast<U>(value)));
}
template <typename T> __device__ __forceinline__ void fsh_atomic_add(T* dest, T value, int pe) {
    if (fsh__qp(pe)) { fsh__net_atomic(dest, pe, FSH_IBGDA_AMO_ADD, value, T(), false); return; }
    fsh_atomic_fetch_add(dest, value, pe);
}
template <typename T> __device__ __forceinline__ T fsh_atomic_fetch_inc(T* dest, int pe) {
    FSH__INTEGER_ONLY("fsh_atomic_fetch_inc")
    return fsh_atomic_fetch_add(dest, (T)1, pe);
}
template <typename T> __device__ __forceinline__ void fsh_atomic_inc(T* dest, int pe) { fsh_atomic_fetch_inc(dest, pe); }
template <typename T> __device__ __forceinline__ T fsh_atomic_fetch_and(T* dest, T value, int pe) {
    FSH__INTEGER_ONLY("fsh_atomic_fetch_and")
    FSH__AMO_PEER(dest, pe, FSH_IBGDA_AMO_FETCH_AND, value, T())
    return fsh__bitcast<T>(fsh__atom_and(r, fsh__bitcast<U>(value)));
}
template <typename T> __device__ __forceinline__ void fsh_atomic_and(T* dest, T value, int pe) {
    if (fsh__qp(pe)) { fsh__net_atomic(dest, pe, FSH_IBGDA_AMO_AND, value, T(), false); return; }
    fsh_atomic_fetch_and(dest, value, pe);
}
template <typename T> __device__ __forceinline__ T fsh_atomic_fetch_or(T* dest, T value, int pe) {
    FSH__INTEGER_ONLY("fsh_atomic_fetch_or")
    FSH__AMO_PEER(dest, pe, FSH_IBGDA_AMO_FETCH_OR, value, T())
    return fsh__bitcast<T>(fsh__atom_or(r, fsh__bitcast<U>(value)));
}
template <typename T> __device__ __forceinline__ void fsh_atomic_or(T* dest, T value, int pe) {
    if (fsh__qp(pe)) { fsh__net_atomic(dest, pe, FSH_IBGDA_AMO_OR, value, T(), false); return; }
    fsh_atomic_fetch_or(dest, value, pe);
}
template <typename T> __device__ __forceinline__ T fsh_atomic_fetch_xor(T* dest, T value, int pe) {
    FSH__INTEGER_ONLY("fsh_atomic_fetch_xor")
    FSH__AMO_PEER(dest, pe, FSH_IBGDA_AMO_FETCH_XOR, value, T())
    return fsh__bitcast<T>(fsh__atom_xor(r, fsh__bitcast<U>(value)));
}
template <typename T> __device__ __forceinline__ void fsh_atomic_xor(T* dest, T value, int pe) {
    if (fsh__qp(pe)) { fsh__net_atomic(dest, pe, FSH_IBGDA_AMO_XOR, value, T(), false); return; }
    fsh_atomic_fetch_xor(dest, value, pe);
}
#undef FSH__AMO_PEER
#undef FSH__INTEGER_ONLY

// Floating-point add (nvshmemx_float_atomic_fetch_add and friends). A PE on another node
// has no floating-point atomic on the wire: a compare-and-swap loop over it.
template <typename T> __device__ __forceinline__ T fsh__net_fadd(T* dest, T value, int pe) {
    T seen = fsh__net_atomic(dest, pe, FSH_IBGDA_AMO_FETCH, T(), T(), true);
    for (;;) {
        T was = fsh__net_atomic(dest, pe, FSH_IBGDA_AMO_COMPARE_SWAP, (T)(seen + value), seen, true);
        if (fsh__net_word(was) == fsh__net_word(seen)) return seen;
        seen = was;
    }
}
__device__ __forceinline__ float fsh_atomic_fetch_add(float* dest, float value, int pe) {
    if (fsh__qp(pe)) return fsh__net_fadd(dest, value, pe);
    float* r = (float*)fsh__peer(dest, pe, FSH_OP_ATOMIC, 4);
    return fsh__refused(r) ? 0.0f : fsh__atom_fadd(r, value);
}
__device__ __forceinline__ double fsh_atomic_fetch_add(double* dest, double value, int pe) {
    if (fsh__qp(pe)) return fsh__net_fadd(dest, value, pe);
    double* r = (double*)fsh__peer(dest, pe, FSH_OP_ATOMIC, 8);
    return fsh__refused(r) ? 0.0 : fsh__atom_fadd(r, value);
}
__device__ __forceinline__ void fsh_atomic_add(float* dest, float value, int pe) { fsh_atomic_fetch_add(dest, value, pe); }
__device__ __forceinline__ void fsh_atomic_add(double* dest, double value, int pe) { fsh_atomic_fetch_add(dest, value, pe); }
