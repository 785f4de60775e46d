//! The device-side encoder (`src/device/ibgda.cuh`) compiled by NVRTC as device code, the way
//! the device library will include it (`FSH_IBGDA_FN` = `__device__ __forceinline__`), with a
//! kernel that calls every function. Where NVRTC cannot be loaded the test says so and skips;
//! `tests/ibgda_c.rs` proves the same file byte-exact on the host.

const HEADER: &str = include_str!("../src/device/ibgda.cuh");

const KERNEL: &str = r#"
extern "C" __global__ void fsh_ibgda_every_function(unsigned char *sq, const unsigned char *cq,
                                                    unsigned int *out) {
    unsigned char data[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    unsigned int idx = threadIdx.x * 8, m = 255, qpn = 0x12;
    unsigned int n = fsh_ibgda_wqe_nop(sq, m, idx, qpn, FSH_IBGDA_CQ_UPDATE);
    n += fsh_ibgda_wqe_rdma(sq, m, idx + 1, qpn, 0, FSH_IBGDA_OP_RDMA_WRITE, 0, 0x1000, 1,
                            0x2000, 2, 64);
    n += fsh_ibgda_wqe_inline(sq, m, idx + 2, qpn, FSH_IBGDA_FENCE, data, 13, 0x2000, 2);
    n += fsh_ibgda_wqe_atomic(sq, m, idx + 3, qpn, 0, FSH_IBGDA_OP_ATOMIC_MASKED_CS, 8, 1, 2,
                              3, 4, 0x2000, 2, 0x1000, 1);
    n += fsh_ibgda_wqe_amo(sq, m, idx + 5, qpn, 0, FSH_IBGDA_AMO_FETCH_XOR, 4, 7, 0, 0x2000, 2,
                           0x1000, 1);
    fsh_ibgda_cqe_t c;
    int valid = fsh_ibgda_cqe_read(cq, 8, threadIdx.x, &c);
    out[threadIdx.x] = n + valid + c.wqe_counter + fsh_ibgda_dbr_value(idx + n);
}
"#;

#[test]
fn the_encoder_compiles_under_nvrtc_as_device_code() {
    let source = format!(
        "#define FSH_IBGDA_FN __device__ __forceinline__\n\
         #define FSH_IBGDA_ACQUIRE() __threadfence_system()\n{HEADER}\n{KERNEL}"
    );
    match std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx(&source)) {
        Err(_) => eprintln!("skipping: NVRTC cannot be loaded here"),
        Ok(Err(e)) => panic!("NVRTC refused ibgda.cuh: {e:?}"),
        Ok(Ok(ptx)) => assert!(ptx.to_src().contains("fsh_ibgda_every_function")),
    }
}
