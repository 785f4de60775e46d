//! The FFI structures of [`super::types`] checked against the installed rdma-core headers
//! (`infiniband/verbs.h`, `infiniband/mlx5dv.h`; Debian's libibverbs-dev): a small C program
//! prints each `sizeof` and `offsetof`, and each must equal the Rust side's (or, for a
//! structure newer rdma-core versions extend, be no larger). Without a C compiler or the
//! headers the test says so and skips.

use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use super::types::*;

/// Sizes the Rust side may exceed: structures the library fills, which newer rdma-core
/// versions extend at the end (the Rust side has room for the newest known).
const AT_LEAST: &[&str] = &["sizeof(struct ibv_port_attr)"];

/// (C expression, the Rust side's value) for every size and offset the handler relies on.
const LAYOUTS: &[(&str, usize)] = &[
    ("sizeof(struct ibv_device_attr)", size_of::<IbvDeviceAttr>()),
    (
        "offsetof(struct ibv_device_attr, vendor_id)",
        offset_of!(IbvDeviceAttr, vendor_id),
    ),
    (
        "offsetof(struct ibv_device_attr, vendor_part_id)",
        offset_of!(IbvDeviceAttr, vendor_part_id),
    ),
    (
        "offsetof(struct ibv_device_attr, max_qp)",
        offset_of!(IbvDeviceAttr, limits),
    ),
    (
        "offsetof(struct ibv_device_attr, max_qp_rd_atom)",
        offset_of!(IbvDeviceAttr, limits) + 4 * LIMIT_MAX_QP_RD_ATOM,
    ),
    (
        "offsetof(struct ibv_device_attr, atomic_cap)",
        offset_of!(IbvDeviceAttr, limits) + 4 * LIMIT_ATOMIC_CAP,
    ),
    (
        "offsetof(struct ibv_device_attr, max_pkeys)",
        offset_of!(IbvDeviceAttr, max_pkeys),
    ),
    (
        "offsetof(struct ibv_device_attr, phys_port_cnt)",
        offset_of!(IbvDeviceAttr, phys_port_cnt),
    ),
    ("sizeof(struct ibv_port_attr)", size_of::<IbvPortAttr>()),
    (
        "offsetof(struct ibv_port_attr, state)",
        offset_of!(IbvPortAttr, state),
    ),
    (
        "offsetof(struct ibv_port_attr, active_mtu)",
        offset_of!(IbvPortAttr, active_mtu),
    ),
    (
        "offsetof(struct ibv_port_attr, gid_tbl_len)",
        offset_of!(IbvPortAttr, gid_tbl_len),
    ),
    (
        "offsetof(struct ibv_port_attr, lid)",
        offset_of!(IbvPortAttr, lid),
    ),
    (
        "offsetof(struct ibv_port_attr, link_layer)",
        offset_of!(IbvPortAttr, link_layer),
    ),
    (
        "offsetof(struct ibv_port_attr, port_cap_flags2)",
        offset_of!(IbvPortAttr, port_cap_flags2),
    ),
    ("sizeof(union ibv_gid)", size_of::<IbvGid>()),
    ("sizeof(struct ibv_mr)", size_of::<IbvMr>()),
    ("offsetof(struct ibv_mr, length)", offset_of!(IbvMr, length)),
    ("offsetof(struct ibv_mr, lkey)", offset_of!(IbvMr, lkey)),
    ("offsetof(struct ibv_mr, rkey)", offset_of!(IbvMr, rkey)),
    (
        "sizeof(struct mlx5dv_context_attr)",
        size_of::<Mlx5dvContextAttr>(),
    ),
    (
        "offsetof(struct mlx5dv_context_attr, comp_mask)",
        offset_of!(Mlx5dvContextAttr, comp_mask),
    ),
    (
        "MLX5DV_CONTEXT_FLAGS_DEVX",
        MLX5DV_CONTEXT_FLAGS_DEVX as usize,
    ),
    ("sizeof(struct mlx5dv_pd)", size_of::<Mlx5dvPd>()),
    ("sizeof(struct mlx5dv_obj)", size_of::<Mlx5dvObj>()),
    (
        "offsetof(struct mlx5dv_obj, pd.in)",
        offset_of!(Mlx5dvObj, pairs) + 16 * OBJ_PAIR_PD,
    ),
    (
        "offsetof(struct mlx5dv_obj, pd.out)",
        offset_of!(Mlx5dvObj, pairs) + 16 * OBJ_PAIR_PD + 8,
    ),
    ("MLX5DV_OBJ_PD", MLX5DV_OBJ_PD as usize),
    (
        "sizeof(struct mlx5dv_devx_umem)",
        size_of::<Mlx5dvDevxUmem>(),
    ),
    (
        "sizeof(struct mlx5dv_devx_umem_in)",
        size_of::<Mlx5dvDevxUmemIn>(),
    ),
    (
        "offsetof(struct mlx5dv_devx_umem_in, size)",
        offset_of!(Mlx5dvDevxUmemIn, size),
    ),
    (
        "offsetof(struct mlx5dv_devx_umem_in, access)",
        offset_of!(Mlx5dvDevxUmemIn, access),
    ),
    (
        "offsetof(struct mlx5dv_devx_umem_in, pgsz_bitmap)",
        offset_of!(Mlx5dvDevxUmemIn, pgsz_bitmap),
    ),
    (
        "offsetof(struct mlx5dv_devx_umem_in, comp_mask)",
        offset_of!(Mlx5dvDevxUmemIn, comp_mask),
    ),
    (
        "offsetof(struct mlx5dv_devx_umem_in, dmabuf_fd)",
        offset_of!(Mlx5dvDevxUmemIn, dmabuf_fd),
    ),
    ("MLX5DV_UMEM_MASK_DMABUF", MLX5DV_UMEM_MASK_DMABUF as usize),
    ("sizeof(struct mlx5dv_devx_uar)", size_of::<Mlx5dvDevxUar>()),
    (
        "offsetof(struct mlx5dv_devx_uar, base_addr)",
        offset_of!(Mlx5dvDevxUar, base_addr),
    ),
    (
        "offsetof(struct mlx5dv_devx_uar, page_id)",
        offset_of!(Mlx5dvDevxUar, page_id),
    ),
    (
        "offsetof(struct mlx5dv_devx_uar, mmap_off)",
        offset_of!(Mlx5dvDevxUar, mmap_off),
    ),
    (
        "offsetof(struct mlx5dv_devx_uar, comp_mask)",
        offset_of!(Mlx5dvDevxUar, comp_mask),
    ),
    ("MLX5DV_UAR_ALLOC_TYPE_BF", UAR_ALLOC_TYPE_BF as usize),
    ("MLX5DV_UAR_ALLOC_TYPE_NC", UAR_ALLOC_TYPE_NC as usize),
    ("IBV_ACCESS_LOCAL_WRITE", ACCESS_LOCAL_WRITE as usize),
    ("IBV_ACCESS_REMOTE_WRITE", ACCESS_REMOTE_WRITE as usize),
    ("IBV_ACCESS_REMOTE_READ", ACCESS_REMOTE_READ as usize),
    ("IBV_ACCESS_REMOTE_ATOMIC", ACCESS_REMOTE_ATOMIC as usize),
    ("IBV_PORT_ACTIVE", PORT_ACTIVE as usize),
    ("IBV_LINK_LAYER_ETHERNET", LINK_LAYER_ETHERNET as usize),
];

/// The C program printing each expression of `layouts`, one per line.
fn c_source(items: &[(&str, usize)]) -> String {
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n\
         #include <infiniband/mlx5dv.h>\nint main(void) {\n",
    );
    for (expr, _) in items {
        src.push_str(&format!("    printf(\"%zu\\n\", (size_t)({expr}));\n"));
    }
    src.push_str("    return 0;\n}\n");
    src
}

/// Builds the program, or says why it cannot (no compiler, no headers).
fn build(src: &str) -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("ferroshmem-verbs-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let c = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&c, src).ok()?;
    let out = match Command::new("cc").arg(&c).arg("-o").arg(&exe).output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipping: no C compiler (cc: {e})");
            return None;
        }
    };
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("infiniband/")
                && (err.contains("No such file") || err.contains("not found")),
            "the layout program failed to build: {err}"
        );
        eprintln!("skipping: rdma-core headers not installed (libibverbs-dev)");
        return None;
    }
    Some(exe)
}

#[test]
fn the_ffi_structures_match_the_installed_rdma_core_headers() {
    let items = LAYOUTS;
    let Some(exe) = build(&c_source(items)) else {
        return;
    };
    let out = Command::new(&exe).output().expect("run the layout program");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let c_values: Vec<usize> = text.lines().map(|l| l.parse().expect("a number")).collect();
    assert_eq!(c_values.len(), items.len());
    let wrong: Vec<String> = items
        .iter()
        .zip(&c_values)
        .filter(|((expr, rust), c)| match AT_LEAST.contains(expr) {
            true => *rust < **c,
            false => *rust != **c,
        })
        .map(|((expr, rust), c)| format!("{expr}: C {c}, Rust {rust}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "layouts differ from the headers: {wrong:#?}"
    );
    let _ = std::fs::remove_dir_all(exe.parent().expect("a directory"));
}
