//! The C structures of rdma-core this crate reads or fills, declared as `verbs.h` and
//! `mlx5dv.h` (rdma-core 44) declare them; `layout_tests` checks every size and offset
//! against the installed headers. Objects only ever handled through pointers
//! (`ibv_context`, `ibv_pd`, `mlx5dv_devx_obj`, …) are opaque here.

use std::ffi::{c_char, c_int, c_void};

/// `struct ibv_device` (opaque: reached through `ibv_get_device_list`).
#[repr(C)]
pub struct IbvDevice {
    _opaque: [u8; 0],
}

/// `struct ibv_context` (opaque).
#[repr(C)]
pub struct IbvContext {
    _opaque: [u8; 0],
}

/// `struct ibv_pd` (opaque).
#[repr(C)]
pub struct IbvPd {
    _opaque: [u8; 0],
}

/// `struct mlx5dv_devx_obj` (opaque).
#[repr(C)]
pub struct DevxObj {
    _opaque: [u8; 0],
}

/// `struct ibv_device_attr`: what `ibv_query_device` fills.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvDeviceAttr {
    /// Firmware version, a C string.
    pub fw_ver: [c_char; 64],
    /// Node GUID (big-endian).
    pub node_guid: u64,
    /// System image GUID (big-endian).
    pub sys_image_guid: u64,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// Page sizes supported.
    pub page_size_cap: u64,
    /// PCI vendor id (0x02c9 Mellanox/NVIDIA).
    pub vendor_id: u32,
    /// Part id (ConnectX generation).
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// The `int` limits from `max_qp` to `max_srq_sge`, in header order.
    pub limits: [c_int; 29],
    /// Largest number of partition keys.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
}

/// Index of `max_qp_rd_atom` in [`IbvDeviceAttr::limits`].
pub const LIMIT_MAX_QP_RD_ATOM: usize = 9;
/// Index of `atomic_cap` (an enum, `int`-sized) in [`IbvDeviceAttr::limits`].
pub const LIMIT_ATOMIC_CAP: usize = 14;

/// `struct ibv_port_attr`: what `ibv_query_port` fills.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvPortAttr {
    /// `enum ibv_port_state` (4: ACTIVE).
    pub state: c_int,
    /// `enum ibv_mtu`.
    pub max_mtu: c_int,
    /// `enum ibv_mtu` (1: 256 … 5: 4096).
    pub active_mtu: c_int,
    /// GID table length.
    pub gid_tbl_len: c_int,
    /// Port capability flags.
    pub port_cap_flags: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// The port's LID (InfiniBand).
    pub lid: u16,
    /// The subnet manager's LID.
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Virtual lanes.
    pub max_vl_num: u8,
    /// Subnet manager's service level.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// Active width.
    pub active_width: u8,
    /// Active speed.
    pub active_speed: u8,
    /// Physical state.
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_*` (1: InfiniBand, 2: Ethernet).
    pub link_layer: u8,
    /// Flags.
    pub flags: u8,
    /// More capability flags.
    pub port_cap_flags2: u16,
    /// The extended active speed, appended by newer rdma-core (the GPU machines' headers
    /// have it, Debian 12's do not): kept so that a library that writes it writes inside
    /// this structure; zero where the library predates it.
    pub active_speed_ex: u32,
}

/// `union ibv_gid`: 16 raw bytes.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct IbvGid {
    /// The GID's bytes, network order.
    pub raw: [u8; 16],
}

/// `struct ibv_mr`: a registered memory region.
#[repr(C)]
pub struct IbvMr {
    /// The device context.
    pub context: *mut IbvContext,
    /// The protection domain.
    pub pd: *mut IbvPd,
    /// Start address.
    pub addr: *mut c_void,
    /// Length in bytes.
    pub length: usize,
    /// Kernel handle.
    pub handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// `struct mlx5dv_context_attr`: how `mlx5dv_open_device` opens (DevX or not).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Mlx5dvContextAttr {
    /// `MLX5DV_CONTEXT_FLAGS_*`.
    pub flags: u32,
    /// Extension mask (0).
    pub comp_mask: u64,
}

/// `MLX5DV_CONTEXT_FLAGS_DEVX`.
pub const MLX5DV_CONTEXT_FLAGS_DEVX: u32 = 1;

/// `struct mlx5dv_pd`: the PD number DevX commands name.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Mlx5dvPd {
    /// The PD number.
    pub pdn: u32,
    /// Extension mask.
    pub comp_mask: u64,
}

/// One `{in, out}` pair of `struct mlx5dv_obj`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ObjPair {
    /// The verbs object (`struct ibv_*`).
    pub input: *mut c_void,
    /// Where its mlx5 description goes (`struct mlx5dv_*`).
    pub output: *mut c_void,
}

/// `struct mlx5dv_obj`: the pairs for qp, cq, srq, rwq, dm, ah, pd, in that order.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Mlx5dvObj {
    /// qp, cq, srq, rwq, dm, ah, pd.
    pub pairs: [ObjPair; 7],
}

/// Index of the PD pair in [`Mlx5dvObj::pairs`].
pub const OBJ_PAIR_PD: usize = 6;
/// `MLX5DV_OBJ_PD`.
pub const MLX5DV_OBJ_PD: u64 = 1 << 6;

/// `struct mlx5dv_devx_umem`: a registered user memory, named by its id in commands.
#[repr(C)]
pub struct Mlx5dvDevxUmem {
    /// The id commands name (`cq_umem_id`, `wq_umem_id`, `dbr_umem_id`).
    pub umem_id: u32,
}

/// `struct mlx5dv_devx_umem_in`: what `mlx5dv_devx_umem_reg_ex` registers.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Mlx5dvDevxUmemIn {
    /// Start address (the offset into the dmabuf when `comp_mask` names one).
    pub addr: *mut c_void,
    /// Size in bytes.
    pub size: usize,
    /// `IBV_ACCESS_*`.
    pub access: u32,
    /// Page sizes the NIC may use.
    pub pgsz_bitmap: u64,
    /// `MLX5DV_UMEM_MASK_*`.
    pub comp_mask: u64,
    /// The dmabuf's file descriptor, with `MLX5DV_UMEM_MASK_DMABUF`.
    pub dmabuf_fd: c_int,
}

/// `MLX5DV_UMEM_MASK_DMABUF`.
pub const MLX5DV_UMEM_MASK_DMABUF: u64 = 1;

/// `struct mlx5dv_devx_uar`: a UAR page (doorbell registers) mapped into the process.
#[repr(C)]
pub struct Mlx5dvDevxUar {
    /// The doorbell (BlueFlame) register.
    pub reg_addr: *mut c_void,
    /// The page it lies in.
    pub base_addr: *mut c_void,
    /// The page's index, named by `uar_page` in commands.
    pub page_id: u32,
    /// The mmap offset.
    pub mmap_off: i64,
    /// Extension mask.
    pub comp_mask: u64,
}

/// `MLX5DV_UAR_ALLOC_TYPE_BF` (`MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF`).
pub const UAR_ALLOC_TYPE_BF: u32 = 0;
/// `MLX5DV_UAR_ALLOC_TYPE_NC` (`MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC`).
pub const UAR_ALLOC_TYPE_NC: u32 = 1;

/// `IBV_ACCESS_LOCAL_WRITE`.
pub const ACCESS_LOCAL_WRITE: u32 = 1;
/// `IBV_ACCESS_REMOTE_WRITE`.
pub const ACCESS_REMOTE_WRITE: u32 = 1 << 1;
/// `IBV_ACCESS_REMOTE_READ`.
pub const ACCESS_REMOTE_READ: u32 = 1 << 2;
/// `IBV_ACCESS_REMOTE_ATOMIC`.
pub const ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;

/// `IBV_PORT_ACTIVE`.
pub const PORT_ACTIVE: c_int = 4;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const LINK_LAYER_ETHERNET: u8 = 2;
