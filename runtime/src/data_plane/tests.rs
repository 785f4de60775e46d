//! Unit tests of the data plane: its checks of the job's shape and settings, and what it
//! reads of its peers' CPUs.

use super::*;

#[test]
fn node_numbers_must_name_every_pe_and_agree_with_the_routes() {
    let own = Arc::new(Segment::create(0, 1 << 16).expect("segment"));
    let routes = vec![
        Route::Mapped(own.clone()),
        Route::Mapped(own),
        Route::Remote,
    ];
    assert!(check_nodes(0, &routes, &[0, 0, 1]).is_ok());
    assert!(check_nodes(0, &routes, &[3, 3, 2]).is_ok(), "any numbering");
    for bad in [&[0, 0][..], &[0, 0, 0], &[0, 1, 1]] {
        assert!(
            matches!(check_nodes(0, &routes, bad), Err(Error::Config(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn a_peer_runs_on_another_cpu_only_where_both_recorded_different_ones() {
    let segments: Vec<Arc<Segment>> = (0..3)
        .map(|pe| Arc::new(Segment::create(pe, 1 << 16).expect("segment")))
        .collect();
    let parts = DataPlaneParts {
        my_pe: 0,
        heap: crate::heap::HeapId(1),
        routes: segments.iter().cloned().map(Route::Mapped).collect(),
        remote: None,
        nodes: vec![0; 3],
        machine_pes: 3,
        health: Arc::new(crate::health::Health::new()),
        spin: std::time::Duration::from_micros(50),
    };
    let dp = DataPlane::new(parts).expect("data plane");
    let elsewhere = || {
        (0..4)
            .map(|pe| dp.runs_on_another_cpu(pe))
            .collect::<Vec<_>>()
    };
    assert_eq!(elsewhere(), [false; 4], "nothing recorded");
    segments[1].record_bound_cpu(Some(1));
    segments[2].record_bound_cpu(Some(0));
    assert_eq!(elsewhere(), [false; 4], "this PE recorded none");
    segments[0].record_bound_cpu(Some(0));
    assert_eq!(
        elsewhere(),
        [false, true, false, false],
        "PE 2 shares CPU 0"
    );
    segments[1].record_bound_cpu(None);
    assert_eq!(elsewhere(), [false; 4], "PE 1 unbound");
}

/// The parts of a job of one PE over `segment`, whose waits spin for `spin`.
fn one_pe(segment: &Arc<Segment>, spin: std::time::Duration) -> DataPlaneParts {
    DataPlaneParts {
        my_pe: 0,
        heap: crate::heap::HeapId(1),
        routes: vec![Route::Mapped(segment.clone())],
        remote: None,
        nodes: vec![0],
        machine_pes: 1,
        health: Arc::new(crate::health::Health::new()),
        spin,
    }
}

#[test]
fn a_spin_beyond_the_most_is_a_config_error() {
    let segment = Arc::new(Segment::create(0, 1 << 16).expect("segment"));
    assert!(DataPlane::new(one_pe(&segment, MAX_SPIN)).is_ok());
    let longer = MAX_SPIN + std::time::Duration::from_micros(1);
    match DataPlane::new(one_pe(&segment, longer)) {
        Err(Error::Config(why)) => assert!(why.contains("at most"), "{why}"),
        other => panic!("a spin of {longer:?}: {other:?}"),
    }
}

#[test]
fn zeroing_stays_in_the_user_heap() {
    let segment = Arc::new(Segment::create(0, 1 << 20).expect("segment"));
    let dp =
        DataPlane::new(one_pe(&segment, std::time::Duration::from_micros(50))).expect("data plane");
    let user = dp.user_heap_bytes();
    assert!(
        user > 64 && user < dp.heap_size(),
        "a team pool above {user}"
    );
    segment.mapping().write(HEADER_SIZE + user - 8, &[7; 8]);
    assert!(dp.zero_local(user - 8, 8).is_ok());
    let mut word = [1u8; 8];
    segment.mapping().read(HEADER_SIZE + user - 8, &mut word);
    assert_eq!(word, [0; 8]);
    for (offset, bytes) in [(user, 8), (user - 8, 16), (1 << 30, 8), (8, usize::MAX)] {
        assert!(
            matches!(dp.zero_local(offset, bytes), Err(Error::OutOfBounds { .. })),
            "{offset} + {bytes}"
        );
    }
}

/// A transport that is never used: the data planes below only count their peers.
#[derive(Debug)]
struct Unused;

impl crate::route::Remote for Unused {
    fn start(&self, _pe: usize, _at: usize, _op: RemoteOp) -> Completion {
        Box::pin(std::future::ready(Err(Error::Shutdown)))
    }
}

#[test]
fn nodes_of_one_machine_that_outnumber_its_cpus_make_waits_yield() {
    let cpus = crate::cpus::machine_cpus();
    let own = Arc::new(Segment::create(0, 1 << 16).expect("segment"));
    // This PE alone on its node, and `cpus` more PEs on other nodes: of this machine, or not.
    let on_machine = |machine_pes| {
        let mut routes = vec![Route::Remote; cpus + 1];
        routes[0] = Route::Mapped(own.clone());
        let parts = DataPlaneParts {
            my_pe: 0,
            heap: crate::heap::HeapId(1),
            routes,
            remote: Some(Arc::new(Unused)),
            nodes: (0..=cpus).collect(),
            machine_pes,
            health: Arc::new(crate::health::Health::new()),
            spin: std::time::Duration::from_micros(50),
        };
        let dp = DataPlane::new(parts).expect("data plane");
        (dp.crowded(), dp.world_nodes.is_some())
    };
    assert_eq!(on_machine(cpus + 1), (true, false), "one machine");
    assert_eq!(on_machine(1), (false, false), "a machine each");
}
