// Every device-library function once, on 2 blocks x 64 threads launched cooperatively.
// Each PE works on its next PE's memory; the host checks what each PE received from its
// previous PE and the values returned on the device (res).
#define T0 (blockIdx.x == 0 && threadIdx.x == 0)

extern "C" __global__ void suite(int* ints, const int* src, unsigned long long* longs,
                                 float* flt, double* dbl, unsigned long long* sig,
                                 long long* res, int* scratch) {
    int me = fsh_my_pe(), n = fsh_n_pes(), next = (me + 1) % n, prev = (me + n - 1) % n;
    bool b0 = blockIdx.x == 0;
    unsigned t = threadIdx.x;
    (void)prev;

    // RMA from the device: p, put in all scopes.
    if (T0) {
        res[0] = me;
        res[1] = n;
        res[2] = fsh_ptr(ints, next) != 0;
        res[3] = fsh_team_my_pe(FSH_TEAM_WORLD);
        res[4] = fsh_team_n_pes(FSH_TEAM_WORLD);
        fsh_p(&ints[0], me + 100, next);
        fsh_put(ints + 1, src + 1, 8, next);
        fsh_put_nbi(ints + 16, src + 16, 8, next);
        fsh_putmem(ints + 24, src + 24, 12, next);
    }
    if (b0 && t < 32) fsh_put_warp(ints + 32, src + 32, 32, next);
    if (b0 && t >= 32) fsh_put_nbi_warp(ints + 100, src + 100, 20, next);
    if (b0) fsh_put_block(ints + 128, src + 128, 256, next);
    else fsh_put_nbi_block(ints + 384, src + 384, 128, next);
    fsh_barrier_all_grid();

    // g and get in all scopes.
    if (T0) {
        res[5] = ints[0];
        res[6] = fsh_g(&ints[0], next);
        fsh_get(scratch, src + 1, 8, next);
        long long s = 0;
        for (int i = 0; i < 8; ++i) s += scratch[i];
        res[7] = s;
        fsh_get_nbi(scratch + 8, src + 500, 4, prev);
        fsh_getmem_nbi(scratch + 12, src + 504, 8, prev);
    }
    if (b0 && t < 32) fsh_get_warp(scratch + 64, src + 64, 32, next);
    if (b0 && t >= 32) fsh_get_nbi_warp(scratch + 96, src + 96, 32, next);
    if (!b0) fsh_get_block(scratch + 128, src + 128, 256, next);
    if (!b0) fsh_get_nbi_block(scratch + 384, src + 384, 64, next);

    // Atomics on the next PE.
    if (T0) {
        fsh_atomic_set(&longs[0], 5ull, next);
        res[10] = fsh_atomic_fetch(&longs[0], next);
        res[11] = fsh_atomic_fetch_add(&longs[0], 3ull, next);
        fsh_atomic_add(&longs[0], 2ull, next);
        res[12] = fsh_atomic_fetch_inc(&longs[0], next);
        fsh_atomic_inc(&longs[0], next);
        res[13] = fsh_atomic_swap(&longs[1], 7ull, next);
        res[14] = fsh_atomic_compare_swap(&longs[1], 7ull, 9ull, next);
        res[15] = fsh_atomic_compare_swap(&longs[1], 1ull, 2ull, next);
        fsh_atomic_set(&longs[2], 0xF0F0ull, next);
        res[16] = fsh_atomic_fetch_and(&longs[2], 0xFF00ull, next);
        fsh_atomic_and(&longs[2], 0xF000ull, next);
        res[17] = fsh_atomic_fetch_or(&longs[2], 0x000Full, next);
        fsh_atomic_or(&longs[2], 0x0F00ull, next);
        res[18] = fsh_atomic_fetch_xor(&longs[2], 0x00FFull, next);
        fsh_atomic_xor(&longs[2], 0x000Full, next);
        res[19] = fsh_atomic_fetch_add((long long*)&longs[3], -4ll, next);
        res[20] = fsh_atomic_fetch_add(&ints[800], 7, next);
        fsh_atomic_inc(&ints[800], next);
        res[21] = fsh_atomic_compare_swap(&ints[800], 8, -1, next);
        res[22] = fsh_atomic_swap((unsigned*)&ints[801], 0xABCDu, next);
        res[23] = fsh_atomic_fetch_or((unsigned*)&ints[801], 0x10000u, next);
        fsh_atomic_xor(&ints[802], 5, next);
        res[24] = fsh_atomic_fetch(&ints[802], next);
        fsh_atomic_add(&flt[0], 1.5f, next);
        res[25] = (long long)(fsh_atomic_fetch_add(&flt[0], 2.0f, next) * 100.0f);
        fsh_atomic_add(&dbl[0], 0.25, next);
        res[26] = (long long)(fsh_atomic_fetch_add(&dbl[0], 1.0, next) * 100.0);
        fsh_atomic_set(&flt[1], 3.5f, next);
        res[27] = (long long)(fsh_atomic_fetch(&flt[1], next) * 10.0f);
        res[28] = (long long)(fsh_atomic_swap(&dbl[1], 2.0, next) * 10.0);
        res[29] = fsh_atomic_fetch_inc((long long*)&longs[4], next);
    }
    fsh_barrier_all_grid();

    // Signals.
    if (T0) {
        fsh_put_signal(ints + 600, src + 600, 4, &sig[0], 1ull, FSH_SIGNAL_SET, next);
        res[30] = fsh_signal_wait_until(&sig[0], FSH_CMP_GE, 1ull);
        res[31] = ints[600] + ints[603];
        fsh_put_signal_nbi(ints + 610, src + 610, 2, &sig[1], 5ull, FSH_SIGNAL_ADD, next);
        fsh_signal_op(&sig[1], 2ull, FSH_SIGNAL_ADD, next);
        res[32] = fsh_signal_wait_until(&sig[1], FSH_CMP_EQ, 7ull);
        res[33] = ints[611];
        fsh_signal_op(&sig[2], 42ull, FSH_SIGNAL_SET, next);
        fsh_signal_wait_until(&sig[2], FSH_CMP_NE, 0ull);
        res[34] = fsh_signal_fetch(&sig[2]);
        fsh_putmem_signal(ints + 640, src + 640, 8, &sig[4], 1ull, FSH_SIGNAL_SET, next);
        fsh_putmem_signal_nbi(ints + 642, src + 642, 8, &sig[5], 1ull, FSH_SIGNAL_SET, next);
    }
    if (b0 && t < 32) fsh_put_signal_warp(ints + 620, src + 620, 32, &sig[3], 1ull, FSH_SIGNAL_ADD, next);
    if (b0 && t >= 32) fsh_put_signal_nbi_warp(ints + 700, src + 700, 16, &sig[6], 1ull, FSH_SIGNAL_ADD, next);
    if (!b0) fsh_put_signal_block(ints + 660, src + 660, 32, &sig[3], 1ull, FSH_SIGNAL_ADD, next);
    if (!b0) fsh_put_signal_nbi_block(ints + 740, src + 740, 32, &sig[7], 1ull, FSH_SIGNAL_ADD, next);
    if (T0) {
        res[35] = fsh_signal_wait_until(&sig[3], FSH_CMP_GE, 2ull);
        res[36] = ints[620] + ints[651] + ints[660] + ints[691];
        fsh_signal_wait_until(&sig[4], FSH_CMP_EQ, 1ull);
        fsh_signal_wait_until(&sig[5], FSH_CMP_EQ, 1ull);
        fsh_signal_wait_until(&sig[6], FSH_CMP_EQ, 1ull);
        fsh_signal_wait_until(&sig[7], FSH_CMP_EQ, 1ull);
        res[43] = ints[641] + ints[643] + ints[715] + ints[771];
    }

    // Point-to-point synchronization, fence and quiet.
    if (T0) {
        fsh_put(ints + 900, src + 900, 4, next);
        fsh_fence();
        fsh_p(&ints[910], 1, next);
        fsh_wait_until(&ints[910], FSH_CMP_EQ, 1);
        res[37] = ints[900] + ints[903];
        res[38] = fsh_test(&ints[910], FSH_CMP_EQ, 1);
        res[39] = fsh_test(&ints[910], FSH_CMP_GT, 5);
        fsh_p(&longs[10], 3ull, next);
        fsh_quiet();
        fsh_wait_until(&longs[10], FSH_CMP_GE, 3ull);
        res[40] = longs[10];
        fsh_p(&longs[11], 1ull, next);
        fsh_p(&longs[12], 1ull, next);
        fsh_quiet();
        fsh_wait_until_all(&longs[11], 2, (const int*)0, FSH_CMP_EQ, 1ull);
        res[41] = (long long)fsh_wait_until_any(&longs[11], 2, (const int*)0, FSH_CMP_EQ, 1ull);
        res[42] = fsh_test_all(&longs[11], 2, (const int*)0, FSH_CMP_EQ, 1ull);
    }

    // Every barrier form once (one caller per PE for each).
    if (b0) fsh_barrier_all_block();
    if (b0) fsh_sync_all_block();
    if (b0 && t < 32) fsh_barrier_all_warp();
    if (b0 && t < 32) fsh_sync_all_warp();
    if (T0) fsh_barrier_all();
    if (T0) fsh_sync_all();
    fsh_sync_all_grid();
    if (T0) res[50] = 1;
}
