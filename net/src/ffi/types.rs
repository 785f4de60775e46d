//! libfabric's C types, as its 1.17 headers lay them out (ABI 1.6; later versions only append
//! fields, and this crate reads and writes only the fields declared here), and the constants
//! this crate uses. Every ops table starts with its own size, which callers check before they
//! call an entry a provider might not have.
//!
//! Only what the transport needs is declared in full; entries it never calls are typed as
//! opaque pointers so that the tables keep their layout.

use std::ffi::{c_char, c_int, c_void};

/// `fi_addr_t`: an address-vector entry.
pub type FiAddr = u64;

/// An ops-table entry this crate does not call.
pub type Unused = *const c_void;

/// `struct fid`: the header of every libfabric object.
#[repr(C)]
pub struct Fid {
    pub fclass: usize,
    pub context: *mut c_void,
    pub ops: *const FiOps,
}

/// `struct fi_ops`: the operations every object has.
#[repr(C)]
pub struct FiOps {
    pub size: usize,
    pub close: Option<unsafe extern "C" fn(fid: *mut Fid) -> c_int>,
    pub bind: Option<unsafe extern "C" fn(fid: *mut Fid, bfid: *mut Fid, flags: u64) -> c_int>,
    pub control:
        Option<unsafe extern "C" fn(fid: *mut Fid, command: c_int, arg: *mut c_void) -> c_int>,
    pub ops_open: Unused,
    pub tostr: Unused,
    pub ops_set: Unused,
}

/// `struct fid_fabric`.
#[repr(C)]
pub struct FidFabric {
    pub fid: Fid,
    pub ops: *const FiOpsFabric,
    pub api_version: u32,
}

/// `struct fi_ops_fabric`.
#[repr(C)]
pub struct FiOpsFabric {
    pub size: usize,
    pub domain: Option<
        unsafe extern "C" fn(
            fabric: *mut FidFabric,
            info: *mut FiInfo,
            domain: *mut *mut FidDomain,
            context: *mut c_void,
        ) -> c_int,
    >,
    pub passive_ep: Unused,
    pub eq_open: Unused,
    pub wait_open: Unused,
    pub trywait: Option<
        unsafe extern "C" fn(fabric: *mut FidFabric, fids: *mut *mut Fid, count: c_int) -> c_int,
    >,
    pub domain2: Unused,
}

/// `struct fid_domain`.
#[repr(C)]
pub struct FidDomain {
    pub fid: Fid,
    pub ops: *const FiOpsDomain,
    pub mr: *const FiOpsMr,
}

/// `struct fi_ops_domain`.
#[repr(C)]
pub struct FiOpsDomain {
    pub size: usize,
    pub av_open: Option<
        unsafe extern "C" fn(
            domain: *mut FidDomain,
            attr: *mut FiAvAttr,
            av: *mut *mut FidAv,
            context: *mut c_void,
        ) -> c_int,
    >,
    pub cq_open: Option<
        unsafe extern "C" fn(
            domain: *mut FidDomain,
            attr: *mut FiCqAttr,
            cq: *mut *mut FidCq,
            context: *mut c_void,
        ) -> c_int,
    >,
    pub endpoint: Option<
        unsafe extern "C" fn(
            domain: *mut FidDomain,
            info: *mut FiInfo,
            ep: *mut *mut FidEp,
            context: *mut c_void,
        ) -> c_int,
    >,
    pub scalable_ep: Unused,
    pub cntr_open: Unused,
    pub poll_open: Unused,
    pub stx_ctx: Unused,
    pub srx_ctx: Unused,
    pub query_atomic: Unused,
    pub query_collective: Unused,
    pub endpoint2: Unused,
}

/// `struct fi_ops_mr`.
#[repr(C)]
pub struct FiOpsMr {
    pub size: usize,
    #[allow(clippy::type_complexity)]
    pub reg: Option<
        unsafe extern "C" fn(
            fid: *mut Fid,
            buf: *const c_void,
            len: usize,
            access: u64,
            offset: u64,
            requested_key: u64,
            flags: u64,
            mr: *mut *mut FidMr,
            context: *mut c_void,
        ) -> c_int,
    >,
    pub regv: Unused,
    pub regattr: Unused,
}

/// `struct fid_mr`.
#[repr(C)]
pub struct FidMr {
    pub fid: Fid,
    pub mem_desc: *mut c_void,
    pub key: u64,
}

/// `struct fid_av` and its `struct fi_ops_av`.
#[repr(C)]
pub struct FidAv {
    pub fid: Fid,
    pub ops: *const FiOpsAv,
}

/// `struct fi_ops_av`.
#[repr(C)]
pub struct FiOpsAv {
    pub size: usize,
    pub insert: Option<
        unsafe extern "C" fn(
            av: *mut FidAv,
            addr: *const c_void,
            count: usize,
            fi_addr: *mut FiAddr,
            flags: u64,
            context: *mut c_void,
        ) -> c_int,
    >,
    pub insertsvc: Unused,
    pub insertsym: Unused,
    pub remove: Unused,
    pub lookup: Unused,
    pub straddr: Unused,
    pub av_set: Unused,
}

/// `struct fid_cq`.
#[repr(C)]
pub struct FidCq {
    pub fid: Fid,
    pub ops: *const FiOpsCq,
}

/// `struct fi_ops_cq`.
#[repr(C)]
pub struct FiOpsCq {
    pub size: usize,
    pub read: Option<unsafe extern "C" fn(cq: *mut FidCq, buf: *mut c_void, count: usize) -> isize>,
    pub readfrom: Unused,
    pub readerr:
        Option<unsafe extern "C" fn(cq: *mut FidCq, buf: *mut FiCqErrEntry, flags: u64) -> isize>,
    pub sread: Option<
        unsafe extern "C" fn(
            cq: *mut FidCq,
            buf: *mut c_void,
            count: usize,
            cond: *const c_void,
            timeout: c_int,
        ) -> isize,
    >,
    pub sreadfrom: Unused,
    pub signal: Option<unsafe extern "C" fn(cq: *mut FidCq) -> c_int>,
    pub strerror: Option<
        unsafe extern "C" fn(
            cq: *mut FidCq,
            prov_errno: c_int,
            err_data: *const c_void,
            buf: *mut c_char,
            len: usize,
        ) -> *const c_char,
    >,
}

/// `struct fid_ep`.
#[repr(C)]
pub struct FidEp {
    pub fid: Fid,
    pub ops: *const c_void,
    pub cm: *const FiOpsCm,
    pub msg: *const c_void,
    pub rma: *const FiOpsRma,
    pub tagged: *const c_void,
    pub atomic: *const FiOpsAtomic,
    pub collective: *const c_void,
}

/// `struct fi_ops_cm`.
#[repr(C)]
pub struct FiOpsCm {
    pub size: usize,
    pub setname: Unused,
    pub getname:
        Option<unsafe extern "C" fn(fid: *mut Fid, addr: *mut c_void, len: *mut usize) -> c_int>,
    pub getpeer: Unused,
    pub connect: Unused,
    pub listen: Unused,
    pub accept: Unused,
    pub reject: Unused,
    pub shutdown: Unused,
    pub join: Unused,
}

/// The signature of `fi_read` and `fi_write`: buffer, length, descriptor, peer, remote
/// address, key, context.
pub type RmaFn = unsafe extern "C" fn(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    addr: FiAddr,
    remote: u64,
    key: u64,
    context: *mut c_void,
) -> isize;

/// `struct fi_ops_rma`.
#[repr(C)]
pub struct FiOpsRma {
    pub size: usize,
    pub read: Option<RmaFn>,
    pub readv: Unused,
    pub readmsg: Unused,
    pub write: Option<RmaFn>,
    pub writev: Unused,
    pub writemsg:
        Option<unsafe extern "C" fn(ep: *mut FidEp, msg: *const FiMsgRma, flags: u64) -> isize>,
    pub inject: Unused,
    #[allow(clippy::type_complexity)]
    pub writedata: Option<
        unsafe extern "C" fn(
            ep: *mut FidEp,
            buf: *const c_void,
            len: usize,
            desc: *mut c_void,
            data: u64,
            addr: FiAddr,
            remote: u64,
            key: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    pub injectdata: Unused,
}

/// `struct iovec`.
#[repr(C)]
pub struct IoVec {
    pub base: *mut c_void,
    pub len: usize,
}

/// `struct fi_rma_iov`.
#[repr(C)]
pub struct FiRmaIov {
    pub addr: u64,
    pub len: usize,
    pub key: u64,
}

/// `struct fi_msg_rma`.
#[repr(C)]
pub struct FiMsgRma {
    pub msg_iov: *const IoVec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: FiAddr,
    pub rma_iov: *const FiRmaIov,
    pub rma_iov_count: usize,
    pub context: *mut c_void,
    pub data: u64,
}

/// `struct fi_ops_atomic`.
#[repr(C)]
pub struct FiOpsAtomic {
    pub size: usize,
    #[allow(clippy::type_complexity)]
    pub write: Option<
        unsafe extern "C" fn(
            ep: *mut FidEp,
            buf: *const c_void,
            count: usize,
            desc: *mut c_void,
            addr: FiAddr,
            remote: u64,
            key: u64,
            datatype: c_int,
            op: c_int,
            context: *mut c_void,
        ) -> isize,
    >,
    pub writev: Unused,
    pub writemsg: Unused,
    pub inject: Unused,
    #[allow(clippy::type_complexity)]
    pub readwrite: Option<
        unsafe extern "C" fn(
            ep: *mut FidEp,
            buf: *const c_void,
            count: usize,
            desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            addr: FiAddr,
            remote: u64,
            key: u64,
            datatype: c_int,
            op: c_int,
            context: *mut c_void,
        ) -> isize,
    >,
    pub readwritev: Unused,
    pub readwritemsg: Unused,
    #[allow(clippy::type_complexity)]
    pub compwrite: Option<
        unsafe extern "C" fn(
            ep: *mut FidEp,
            buf: *const c_void,
            count: usize,
            desc: *mut c_void,
            compare: *const c_void,
            compare_desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            addr: FiAddr,
            remote: u64,
            key: u64,
            datatype: c_int,
            op: c_int,
            context: *mut c_void,
        ) -> isize,
    >,
    pub compwritev: Unused,
    pub compwritemsg: Unused,
    pub writevalid: Option<
        unsafe extern "C" fn(
            ep: *mut FidEp,
            datatype: c_int,
            op: c_int,
            count: *mut usize,
        ) -> c_int,
    >,
    pub readwritevalid: Option<
        unsafe extern "C" fn(
            ep: *mut FidEp,
            datatype: c_int,
            op: c_int,
            count: *mut usize,
        ) -> c_int,
    >,
    pub compwritevalid: Option<
        unsafe extern "C" fn(
            ep: *mut FidEp,
            datatype: c_int,
            op: c_int,
            count: *mut usize,
        ) -> c_int,
    >,
}

/// `struct fi_info`.
#[repr(C)]
pub struct FiInfo {
    pub next: *mut FiInfo,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: usize,
    pub dest_addrlen: usize,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: *mut Fid,
    pub tx_attr: *mut FiTxAttr,
    pub rx_attr: *mut c_void,
    pub ep_attr: *mut FiEpAttr,
    pub domain_attr: *mut FiDomainAttr,
    pub fabric_attr: *mut FiFabricAttr,
    pub nic: *mut c_void,
}

/// `struct fi_tx_attr`.
#[repr(C)]
pub struct FiTxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
    pub tclass: u32,
}

/// `struct fi_ep_attr`.
#[repr(C)]
pub struct FiEpAttr {
    pub ep_type: u32,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
    pub msg_prefix_size: usize,
    pub max_order_raw_size: usize,
    pub max_order_war_size: usize,
    pub max_order_waw_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub auth_key_size: usize,
    pub auth_key: *mut u8,
}

/// `struct fi_domain_attr` (its ABI 1.6 prefix).
#[repr(C)]
pub struct FiDomainAttr {
    pub domain: *mut FidDomain,
    pub name: *mut c_char,
    pub threading: u32,
    pub control_progress: u32,
    pub data_progress: u32,
    pub resource_mgmt: u32,
    pub av_type: u32,
    pub mr_mode: c_int,
    pub mr_key_size: usize,
    pub cq_data_size: usize,
    pub cq_cnt: usize,
    pub ep_cnt: usize,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub max_ep_tx_ctx: usize,
    pub max_ep_rx_ctx: usize,
    pub max_ep_stx_ctx: usize,
    pub max_ep_srx_ctx: usize,
    pub cntr_cnt: usize,
    pub mr_iov_limit: usize,
    pub caps: u64,
    pub mode: u64,
    pub auth_key: *mut u8,
    pub auth_key_size: usize,
    pub max_err_data: usize,
    pub mr_cnt: usize,
    pub tclass: u32,
}

/// `struct fi_fabric_attr`.
#[repr(C)]
pub struct FiFabricAttr {
    pub fabric: *mut FidFabric,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

/// `struct fi_cq_attr`.
#[repr(C)]
pub struct FiCqAttr {
    pub size: usize,
    pub flags: u64,
    pub format: u32,
    pub wait_obj: u32,
    pub signaling_vector: c_int,
    pub wait_cond: u32,
    pub wait_set: *mut c_void,
}

/// `struct fi_av_attr`.
#[repr(C)]
pub struct FiAvAttr {
    pub av_type: u32,
    pub rx_ctx_bits: c_int,
    pub count: usize,
    pub ep_per_node: usize,
    pub name: *const c_char,
    pub map_addr: *mut c_void,
    pub flags: u64,
}

/// `struct fi_cq_data_entry`: the entry format this crate opens its CQ with.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiCqDataEntry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
}

/// `struct fi_cq_err_entry` (its ABI 1.6 layout; 1.20 appends `src_addr`, which callers
/// asking for API 1.17 never receive).
#[repr(C)]
pub struct FiCqErrEntry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: usize,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
}

/// `FI_VERSION(1, 17)`: the API this crate is written against.
pub const API_VERSION: u32 = (1 << 16) | 17;

/// Capabilities.
pub const FI_MSG: u64 = 0x2;
pub const FI_RMA: u64 = 0x4;
pub const FI_ATOMIC: u64 = 0x10;
pub const FI_READ: u64 = 0x100;
pub const FI_WRITE: u64 = 0x200;
pub const FI_RECV: u64 = 0x400;
pub const FI_TRANSMIT: u64 = 0x800;
pub const FI_REMOTE_READ: u64 = 0x1000;
pub const FI_REMOTE_WRITE: u64 = 0x2000;
pub const FI_REMOTE_CQ_DATA: u64 = 0x20000;
pub const FI_SOURCE: u64 = 1 << 57;

/// Modes an application may declare it supports.
pub const FI_CONTEXT: u64 = 1 << 59;
pub const FI_CONTEXT2: u64 = 1 << 52;

/// Memory-registration modes.
pub const FI_MR_VIRT_ADDR: c_int = 0x10;
pub const FI_MR_ALLOCATED: c_int = 0x20;
pub const FI_MR_PROV_KEY: c_int = 0x40;
pub const FI_MR_ENDPOINT: c_int = 0x200;

/// Endpoints, address vectors, completion queues, progress and threading.
pub const FI_EP_RDM: u32 = 3;
pub const FI_AV_TABLE: u32 = 2;
pub const FI_CQ_FORMAT_DATA: u32 = 3;
pub const FI_WAIT_UNSPEC: u32 = 1;
pub const FI_THREAD_SAFE: u32 = 1;
/// The application drives progress by reading the completion queue (`FI_PROGRESS_MANUAL`).
pub const FI_PROGRESS_MANUAL: u32 = 2;

/// `fi_control` commands.
pub const FI_ENABLE: c_int = 6;
/// `fi_control` command: the wait object of a completion queue (`FI_GETWAIT`).
pub const FI_GETWAIT: c_int = 5;

/// RMA reads after RMA reads, reads after writes and writes after writes go out in the order
/// posted (`FI_ORDER_RMA_RAR | FI_ORDER_RMA_RAW | FI_ORDER_RMA_WAW`).
pub const FI_ORDER_RMA: u64 = (1 << 32) | (1 << 33) | (1 << 35);
/// The same among atomics (`FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAW`).
pub const FI_ORDER_ATOMIC: u64 = (1 << 36) | (1 << 37) | (1 << 39);
/// The operation generates a completion (`FI_COMPLETION`).
pub const FI_COMPLETION: u64 = 1 << 24;
/// An operation completes once the target has placed it (`FI_DELIVERY_COMPLETE`).
pub const FI_DELIVERY_COMPLETE: u64 = 1 << 28;
/// A write completes once the provider no longer needs its buffer (`FI_INJECT_COMPLETE`),
/// not once the target placed it.
pub const FI_INJECT_COMPLETE: u64 = 1 << 26;

/// Atomic operations and the datatype this crate uses them on.
pub const FI_SUM: c_int = 2;
pub const FI_BOR: c_int = 6;
pub const FI_BAND: c_int = 7;
pub const FI_BXOR: c_int = 9;
pub const FI_ATOMIC_READ: c_int = 10;
pub const FI_ATOMIC_WRITE: c_int = 11;
pub const FI_CSWAP: c_int = 12;
pub const FI_UINT32: c_int = 5;
pub const FI_UINT64: c_int = 7;

/// Error numbers (negated in return values).
pub const FI_EAGAIN: isize = 11;
pub const FI_EAVAIL: isize = 259;
/// What a wait on a completion queue returns when `fi_cq_signal` interrupted it.
pub const FI_ECANCELED: isize = 125;
/// What it returns when its time ran out.
pub const FI_ETIMEDOUT: isize = 110;

/// `sizeof(struct fi_context2)`: the room a provider may use at the start of an operation's
/// context when it asks for `FI_CONTEXT`/`FI_CONTEXT2`.
pub const CONTEXT_BYTES: usize = 64;

const _: () = {
    assert!(std::mem::size_of::<Fid>() == 24);
    assert!(std::mem::size_of::<FiOps>() == 56);
    assert!(std::mem::size_of::<FidFabric>() == 40);
    assert!(std::mem::size_of::<FiOpsFabric>() == 56);
    assert!(std::mem::size_of::<FidDomain>() == 40);
    assert!(std::mem::size_of::<FiOpsDomain>() == 96);
    assert!(std::mem::size_of::<FiOpsMr>() == 32);
    assert!(std::mem::size_of::<FidMr>() == 40);
    assert!(std::mem::size_of::<FidAv>() == 32);
    assert!(std::mem::size_of::<FiOpsAv>() == 64);
    assert!(std::mem::size_of::<FidCq>() == 32);
    assert!(std::mem::size_of::<FiOpsCq>() == 64);
    assert!(std::mem::size_of::<FidEp>() == 80);
    assert!(std::mem::size_of::<FiOpsCm>() == 80);
    assert!(std::mem::size_of::<FiOpsRma>() == 80);
    assert!(std::mem::size_of::<FiMsgRma>() == 64);
    assert!(std::mem::offset_of!(FiMsgRma, data) == 56);
    assert!(std::mem::size_of::<FiRmaIov>() == 24);
    assert!(std::mem::size_of::<IoVec>() == 16);
    assert!(std::mem::size_of::<FiOpsAtomic>() == 112);
    assert!(std::mem::size_of::<FiInfo>() == 120);
    assert!(std::mem::size_of::<FiTxAttr>() == 80);
    assert!(std::mem::size_of::<FiEpAttr>() == 96);
    assert!(std::mem::size_of::<FiDomainAttr>() == 192);
    assert!(std::mem::size_of::<FiFabricAttr>() == 32);
    assert!(std::mem::size_of::<FiCqAttr>() == 40);
    assert!(std::mem::size_of::<FiAvAttr>() == 48);
    assert!(std::mem::size_of::<FiCqDataEntry>() == 40);
    assert!(std::mem::size_of::<FiCqErrEntry>() == 80);
    assert!(std::mem::offset_of!(FiInfo, domain_attr) == 96);
    assert!(std::mem::offset_of!(FiDomainAttr, data_progress) == 24);
    assert!(std::mem::offset_of!(FiDomainAttr, mr_mode) == 36);
    assert!(std::mem::offset_of!(FiDomainAttr, cq_data_size) == 48);
    assert!(std::mem::offset_of!(FiDomainAttr, caps) == 136);
    assert!(std::mem::offset_of!(FiDomainAttr, tclass) == 184);
    assert!(std::mem::offset_of!(FiEpAttr, max_msg_size) == 16);
    assert!(std::mem::offset_of!(FiCqErrEntry, err) == 56);
    assert!(std::mem::offset_of!(FidEp, rma) == 48);
    assert!(std::mem::offset_of!(FidEp, atomic) == 64);
};
