//! What the fabric tests share: two PEs, each a `DataPlane` whose only route to the other is
//! the fabric (`tcp;ofi_rxm` on loopback), and small helpers.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use ferroshmem_net::{
    wake_on_notice, Fabric, FabricOptions, FabricRemote, Library, Registered, Target,
};
use ferroshmem_runtime::heap::{Allocation, HeapId, SymBuffer};
use ferroshmem_runtime::route::Route;
use ferroshmem_runtime::{DataPlane, DataPlaneParts, Health, Segment};

pub const HEAP: usize = 1 << 20;
pub const HEAP_ID: HeapId = HeapId(7);
/// How long any single wait of these tests may take before it counts as a hang.
pub const HANG: Duration = Duration::from_secs(20);

/// One PE: its data plane and its own segment.
pub struct Node {
    /// Its data plane.
    pub dp: Arc<DataPlane>,
    /// Its own segment.
    pub segment: Arc<Segment>,
    /// Its fabric endpoint's name.
    pub name: Vec<u8>,
    /// Its fabric endpoint.
    pub fabric: Arc<Fabric>,
    /// Where it reaches each PE through the fabric (`None` for itself).
    pub targets: Vec<Option<Target>>,
    /// Its registered segment, as its peers reach it.
    pub registered: Registered,
}

impl Node {
    /// Another data plane of this PE, over the same fabric endpoint and targets, in the job
    /// whose heap is `heap`: made after the metrics exporter is installed, it records while
    /// one made before does not. Its own segment is a new one (a segment serves one data
    /// plane: its doorbell); its operations on the other PE are the same.
    pub fn another_data_plane(&self, me: usize, heap: HeapId) -> DataPlane {
        let own = Arc::new(Segment::create(me, HEAP).expect("segment"));
        data_plane(me, heap, &own, &self.fabric, self.targets.clone())
    }
}

/// PE `me`'s data plane (of 2 PEs) in the job of heap `heap`: `own` mapped, the other PE
/// through `fabric` at `targets`.
pub fn data_plane(
    me: usize,
    heap: HeapId,
    own: &Arc<Segment>,
    fabric: &Arc<Fabric>,
    targets: Vec<Option<Target>>,
) -> DataPlane {
    let routes = (0..2)
        .map(|pe| {
            if pe == me {
                Route::Mapped(own.clone())
            } else {
                Route::Remote
            }
        })
        .collect();
    DataPlane::new(DataPlaneParts {
        my_pe: me,
        heap,
        routes,
        remote: Some(Arc::new(FabricRemote::new(fabric.clone(), targets))),
        nodes: (0..2).collect(),
        machine_pes: 2,
        health: Arc::new(Health::new()),
        spin: Duration::from_micros(20),
    })
    .expect("data plane")
}

/// PE 0's data plane in a job of `width` PEs, each of PEs `1..width` being `node`'s peer PE
/// 1 under its own number (a lane each, one connection), and its transport. `node` is PE 0
/// of [`two_nodes`].
pub fn wide_data_plane(node: &Node, width: usize) -> (DataPlane, Arc<FabricRemote>) {
    let own = Arc::new(Segment::create(0, HEAP).expect("segment"));
    let peer = node.targets[1];
    let routes = (0..width)
        .map(|pe| match pe {
            0 => Route::Mapped(own.clone()),
            _ => Route::Remote,
        })
        .collect();
    let targets = (0..width).map(|pe| peer.filter(|_| pe != 0)).collect();
    let remote = Arc::new(FabricRemote::new(node.fabric.clone(), targets));
    let dp = DataPlane::new(DataPlaneParts {
        my_pe: 0,
        heap: HEAP_ID,
        routes,
        remote: Some(remote.clone()),
        nodes: (0..width).map(|pe| pe.min(1)).collect(),
        machine_pes: 2,
        health: Arc::new(Health::new()),
        spin: Duration::from_micros(20),
    })
    .expect("data plane");
    (dp, remote)
}

pub fn available() -> bool {
    match Library::load() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

pub fn fabric_for(segment: &Arc<Segment>) -> Fabric {
    let own = segment.clone();
    Fabric::open(
        &FabricOptions {
            provider: Some("tcp;ofi_rxm".into()),
            node: Some("127.0.0.1".into()),
        },
        move |notice| wake_on_notice(&own, notice),
    )
    .expect("a tcp;ofi_rxm endpoint on loopback")
}

/// Two PEs of the job whose heap is [`HEAP_ID`], each reaching the other through the fabric;
/// `key_of` may falsify the key PE 0 uses for PE 1.
pub fn two_nodes(key_of: impl Fn(Registered) -> Registered) -> [Node; 2] {
    two_nodes_in(HEAP_ID, key_of)
}

/// [`two_nodes`] of the job whose heap (and metrics' `job_id`) is `heap`: tests of one binary
/// that read the process-wide metrics keep their series apart this way.
pub fn two_nodes_in(heap: HeapId, key_of: impl Fn(Registered) -> Registered) -> [Node; 2] {
    let segments: Vec<Arc<Segment>> = (0..2)
        .map(|pe| Arc::new(Segment::create(pe, HEAP).expect("segment")))
        .collect();
    let fabrics: Vec<Arc<Fabric>> = segments.iter().map(|s| Arc::new(fabric_for(s))).collect();
    let registered: Vec<Registered> = fabrics
        .iter()
        .zip(&segments)
        .enumerate()
        .map(|(pe, (f, s))| f.register(s.clone(), 500 + pe as u64).expect("register"))
        .collect();
    let names: Vec<Vec<u8>> = fabrics.iter().map(|f| f.name().expect("name")).collect();
    let nodes: Vec<Node> = (0..2)
        .map(|me| {
            let peers = fabrics[me].connect(&names).expect("connect");
            let targets: Vec<Option<Target>> = (0..2)
                .map(|pe| {
                    (pe != me).then(|| Target {
                        peer: peers[pe],
                        registered: if me == 0 {
                            key_of(registered[pe])
                        } else {
                            registered[pe]
                        },
                    })
                })
                .collect();
            Node {
                dp: Arc::new(data_plane(
                    me,
                    heap,
                    &segments[me],
                    &fabrics[me],
                    targets.clone(),
                )),
                segment: segments[me].clone(),
                name: names[me].clone(),
                fabric: fabrics[me].clone(),
                targets,
                registered: registered[me],
            }
        })
        .collect();
    nodes.try_into().map_err(|_| ()).expect("two nodes")
}

/// A view of `len` elements of `T` at heap byte `offset` (the same on every PE).
pub fn view<T: bytemuck::Pod>(offset: usize, len: usize) -> SymBuffer<T> {
    view_in(HEAP_ID, offset, len)
}

/// [`view`] in the heap `heap` (see [`two_nodes_in`]).
pub fn view_in<T: bytemuck::Pod>(heap: HeapId, offset: usize, len: usize) -> SymBuffer<T> {
    let bytes = len * std::mem::size_of::<T>();
    SymBuffer::from_allocation(Allocation::new(heap, offset, bytes), len).expect("view")
}

pub async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(HANG, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not end within {HANG:?}"))
}
