//! Every field the commands write, checked at the bit offset rdma-core gives it, read back
//! one bit at a time (not with the writer's dword arithmetic); then every checked field is
//! cleared and the command must be all zero, so no stray bit was written either.
//!
//! The offsets are facts read in linux-rdma/rdma-core:
//! - `providers/mlx5/mlx5_ifc.h` (commit a4ab8e8): `mlx5_ifc_qpc_bits`, `mlx5_ifc_ads_bits`,
//!   `mlx5_ifc_create_qp_in_bits` (qpc at 0xc0, `reserved_at_800` after it: qpc is 0x740
//!   bits; `wq_umem_id` at 0x840, `wq_umem_valid` at 0x860), `mlx5_ifc_rst2init_qp_in_bits`
//!   / `init2rtr` / `rtr2rts` (`qpn` at 0x48, qpc at 0xc0, `reserved_at_800[0x80]`: 0x880
//!   bits); an earlier commit (001d39d) of the same file for `mlx5_ifc_cmd_hca_cap_bits`
//!   (`log_max_qp_sz` at 0x88, `log_max_cq_sz` at 0xc8, `port_type` at 0x1b6, `log_max_msg`
//!   at 0x1c3, `atomic` at 0x21e, `rc` at 0x23f, `bf` at 0x260, `log_bf_reg_size` at 0x26b);
//! - `tests/mlx5_prm_structs.py` (pyverbs' DevX tests): `SwCqc` and `CreateCqIn` (the
//!   provider header has no CQ context; cqc at byte 16, `cq_umem_offset`, `cq_umem_id`,
//!   `cq_umem_valid`, then 176 reserved bytes: 272 bytes), `SwQpc`, `SwAds`, `CreateQpIn`
//!   and `ModifyQpIn`, whose field widths sum to the same offsets as the C header's.
//!
//! Values: `atomic_mode` 3 is NVSHMEM's `IBGDA_MLX5_QPC_ATOMIC_MODE_UP_TO_64BIT`;
//! `pm_state` 3 is `MLX5_QPC_PM_STATE_MIGRATED` (same file).

use super::commands::*;
use super::prm::*;

/// `width` bits from bit `off` of `buf`, most significant first, one bit at a time.
fn bits(buf: &[u8], off: usize, width: usize) -> u64 {
    (off..off + width).fold(0, |v, b| {
        (v << 1) | u64::from((buf[b / 8] >> (7 - b % 8)) & 1)
    })
}

fn clear(buf: &mut [u8], off: usize, width: usize) {
    for b in off..off + width {
        buf[b / 8] &= !(0x80 >> (b % 8));
    }
}

/// Checks each (name, bit offset, width, value), then that nothing else is set.
fn expect(cmd: &Cmd, bytes: usize, fields: &[(&str, usize, usize, u64)]) {
    assert_eq!(cmd.bytes().len(), bytes, "command size");
    let mut rest = cmd.bytes().to_vec();
    for &(name, off, width, value) in fields {
        assert_eq!(
            bits(cmd.bytes(), off, width),
            value,
            "{name} at bit {off:#x}"
        );
        clear(&mut rest, off, width);
    }
    let stray: Vec<usize> = (0..rest.len() * 8)
        .filter(|&b| bits(&rest, b, 1) == 1)
        .collect();
    assert!(
        stray.is_empty(),
        "bits set outside the expected fields: {stray:x?}"
    );
}

const PLACE: UmemPlace = UmemPlace {
    umem_id: 0x1234_5678,
    umem_offset: 0x0102_0304_0506_0708,
    dbr_umem_id: 0x9abc_def0,
    dbr_offset: 0x0000_0011_2233_4450,
};

#[test]
fn create_cq_puts_each_field_where_the_prm_has_it() {
    let cmd = create_cq(&CqParams {
        log_size: 11,
        uar_page: 0xab_cdef,
        eqn: 0x5a,
        place: PLACE,
    })
    .expect("valid");
    // create_cq_in: cq_context at bit 0x80 (byte 16); offsets below are 0x80 + cqc's.
    expect(
        &cmd,
        272,
        &[
            ("opcode", 0x00, 16, 0x400),
            ("cqc.dbr_umem_valid", 0x80 + 0x06, 1, 1),
            ("cqc.dbr_umem_id", 0x80 + 0x20, 32, 0x9abc_def0),
            ("cqc.log_cq_size", 0x80 + 0x63, 5, 11),
            ("cqc.uar_page", 0x80 + 0x68, 24, 0xab_cdef),
            ("cqc.c_eqn", 0x80 + 0xb8, 8, 0x5a),
            ("cqc.dbr_addr", 0x80 + 0x1c0, 64, 0x0000_0011_2233_4450),
            ("cq_umem_offset", 0x280, 64, 0x0102_0304_0506_0708),
            ("cq_umem_id", 0x2c0, 32, 0x1234_5678),
            ("cq_umem_valid", 0x2e0, 1, 1),
        ],
    );
}

#[test]
fn create_qp_puts_each_field_where_the_prm_has_it() {
    let p = QpParams {
        pdn: 0x12_3456,
        log_sq_size: 10,
        uar_page: 0x65_4321,
        cqn: 0xfe_dcba,
        place: PLACE,
    };
    let cmd = create_qp(&p).expect("valid");
    // create_qp_in: qpc at bit 0xc0 (byte 24); offsets below are 0xc0 + qpc's.
    let q = 0xc0;
    expect(
        &cmd,
        272,
        &[
            ("opcode", 0x00, 16, 0x500),
            ("qpc.pm_state", q + 0x13, 2, 3),
            ("qpc.pd", q + 0x28, 24, 0x12_3456),
            ("qpc.log_sq_size", q + 0x51, 4, 10),
            ("qpc.uar_page", q + 0x68, 24, 0x65_4321),
            ("qpc.cqn_snd", q + 0x3e8, 24, 0xfe_dcba),
            ("qpc.cqn_rcv", q + 0x4e8, 24, 0xfe_dcba),
            ("qpc.dbr_addr", q + 0x500, 64, 0x0000_0011_2233_4450),
            ("qpc.rq_type", q + 0x565, 3, 3),
            ("qpc.dbr_umem_valid", q + 0x683, 1, 1),
            ("qpc.dbr_umem_id", q + 0x720, 32, 0x9abc_def0),
            ("wq_umem_offset", 0x800, 64, 0x0102_0304_0506_0708),
            ("wq_umem_id", 0x840, 32, 0x1234_5678),
            ("wq_umem_valid", 0x860, 1, 1),
        ],
    );
}

#[test]
fn rst2init_allows_remote_access_and_64_bit_atomics() {
    let cmd = rst2init(0xab_cdef, 2).expect("valid");
    let (q, path) = (0xc0, 0xc0 + 0xc0);
    expect(
        &cmd,
        272,
        &[
            ("opcode", 0x00, 16, 0x502),
            ("qpn", 0x48, 24, 0xab_cdef),
            ("qpc.pm_state", q + 0x13, 2, 3),
            ("primary_address_path.vhca_port_num", path + 0x128, 8, 2),
            ("qpc.atomic_mode", q + 0x48c, 4, 3),
            ("qpc.rre", q + 0x490, 1, 1),
            ("qpc.rwe", q + 0x491, 1, 1),
            ("qpc.rae", q + 0x492, 1, 1),
        ],
    );
}

fn rtr(route: Route) -> RtrParams {
    RtrParams {
        mtu: 5,
        log_msg_max: 30,
        remote_qpn: 0x0a_0b0c,
        log_rra_max: 4,
        port: 1,
        route,
    }
}

/// The fields INIT2RTR sets whatever the route.
fn rtr_common(q: usize, path: usize) -> Vec<(&'static str, usize, usize, u64)> {
    vec![
        ("opcode", 0x00, 16, 0x503),
        ("qpn", 0x48, 24, 0x11_2233),
        ("qpc.mtu", q + 0x40, 3, 5),
        ("qpc.log_msg_max", q + 0x43, 5, 30),
        ("qpc.remote_qpn", q + 0xa8, 24, 0x0a_0b0c),
        ("qpc.log_rra_max", q + 0x488, 3, 4),
        ("qpc.min_rnr_nak", q + 0x4a3, 5, 12),
        ("primary_address_path.vhca_port_num", path + 0x128, 8, 1),
    ]
}

#[test]
fn init2rtr_over_infiniband_names_the_remote_lid() {
    let cmd = init2rtr(0x11_2233, &rtr(Route::Ib { lid: 0xbeef })).expect("valid");
    let (q, path) = (0xc0, 0xc0 + 0xc0);
    let mut fields = rtr_common(q, path);
    fields.push(("primary_address_path.rlid", path + 0x30, 16, 0xbeef));
    expect(&cmd, 272, &fields);
}

#[test]
fn init2rtr_over_roce_names_the_remote_gid_and_mac() {
    let gid: [u8; 16] = std::array::from_fn(|i| 0xf0 | i as u8);
    let route = Route::Roce {
        gid,
        gid_index: 3,
        mac: [0x02, 0x11, 0x22, 0x33, 0x44, 0x55],
        udp_sport: 0xc123,
    };
    let cmd = init2rtr(0x11_2233, &rtr(route)).expect("valid");
    let (q, path) = (0xc0, 0xc0 + 0xc0);
    let mut fields = rtr_common(q, path);
    fields.extend([
        ("primary_address_path.grh", path + 0x28, 1, 1),
        ("primary_address_path.src_addr_index", path + 0x48, 8, 3),
        ("primary_address_path.hop_limit", path + 0x58, 8, 255),
        (
            "primary_address_path.rgid_rip[0..8]",
            path + 0x80,
            64,
            u64::from_be_bytes(gid[..8].try_into().unwrap()),
        ),
        (
            "primary_address_path.rgid_rip[8..16]",
            path + 0xc0,
            64,
            u64::from_be_bytes(gid[8..].try_into().unwrap()),
        ),
        ("primary_address_path.udp_sport", path + 0x110, 16, 0xc123),
        ("primary_address_path.rmac_47_32", path + 0x130, 16, 0x0211),
        (
            "primary_address_path.rmac_31_0",
            path + 0x140,
            32,
            0x2233_4455,
        ),
    ]);
    expect(&cmd, 272, &fields);
}

#[test]
fn rtr2rts_sets_nvshmems_retries_and_timeout() {
    let cmd = rtr2rts(0x11_2233, 4).expect("valid");
    let (q, path) = (0xc0, 0xc0 + 0xc0);
    expect(
        &cmd,
        272,
        &[
            ("opcode", 0x00, 16, 0x504),
            ("qpn", 0x48, 24, 0x11_2233),
            ("qpc.log_sra_max", q + 0x388, 3, 4),
            ("qpc.retry_count", q + 0x38d, 3, 7),
            ("qpc.rnr_retry", q + 0x390, 3, 7),
            ("primary_address_path.ack_timeout", path + 0x40, 5, 20),
        ],
    );
}

#[test]
fn query_hca_cap_asks_for_the_current_general_capabilities() {
    // query_hca_cap_in: opcode, op_mod at 0x30 (type 0 << 1 | HCA_CAP_OPMOD_GET_CUR), 16 bytes.
    expect(
        &query_hca_cap(),
        16,
        &[("opcode", 0x00, 16, 0x100), ("op_mod", 0x30, 16, 1)],
    );
}

/// Sets `width` bits at `off` of `buf` to `value`, one bit at a time.
fn put(buf: &mut [u8], off: usize, width: usize, value: u64) {
    for i in 0..width {
        if (value >> (width - 1 - i)) & 1 == 1 {
            buf[(off + i) / 8] |= 0x80 >> ((off + i) % 8);
        }
    }
}

#[test]
fn the_capabilities_are_read_where_the_prm_has_them() {
    let mut out = vec![0u8; QUERY_HCA_CAP_OUT_BYTES];
    // query_hca_cap_out: capability at bit 0x80; cmd_hca_cap offsets from rdma-core.
    let cap = 0x80;
    put(&mut out, cap + 0x88, 8, 15);
    put(&mut out, cap + 0xc8, 8, 22);
    put(&mut out, cap + 0x1b6, 2, 1);
    put(&mut out, cap + 0x1c3, 5, 30);
    put(&mut out, cap + 0x21e, 1, 1);
    put(&mut out, cap + 0x23f, 1, 1);
    put(&mut out, cap + 0x26b, 5, 9);
    let caps = parse_hca_caps(&out).expect("status 0");
    assert_eq!(
        caps,
        HcaCaps {
            log_max_qp_sz: 15,
            log_max_cq_sz: 22,
            ethernet: true,
            log_max_msg: 30,
            atomic: true,
            rc: true,
            log_bf_reg_size: 9
        }
    );
}

#[test]
fn failed_commands_and_bad_parameters_are_typed_errors() {
    let mut out = vec![0u8; OUT_BYTES];
    out[0] = 0x03;
    out[4..8].copy_from_slice(&0x1234_5678u32.to_be_bytes());
    let e = created_id(&out, "CREATE_QP").expect_err("status 3");
    assert!(e.to_string().contains("0x12345678"), "{e}");
    assert!(created_id(&[0; 4], "CREATE_CQ").is_err(), "short output");
    assert!(parse_hca_caps(&[0; 16]).is_err(), "no capability bytes");
    let mut out = vec![0u8; OUT_BYTES];
    put(&mut out, 0x48, 24, 0x12_3456);
    assert_eq!(created_id(&out, "CREATE_QP").expect("status 0"), 0x12_3456);
    let cq = CqParams {
        log_size: 32,
        uar_page: 1,
        eqn: 1,
        place: PLACE,
    };
    assert!(create_cq(&cq).is_err(), "log_cq_size past 5 bits");
    let misaligned = UmemPlace {
        dbr_offset: 4,
        ..PLACE
    };
    assert!(create_cq(&CqParams {
        log_size: 4,
        place: misaligned,
        ..cq
    })
    .is_err());
    assert!(init2rtr(
        1,
        &RtrParams {
            mtu: 6,
            ..rtr(Route::Ib { lid: 1 })
        }
    )
    .is_err());
    assert!(rst2init(1 << 24, 1).is_err(), "qpn past 24 bits");
}
