//! A task that waits for what the fabric brings drives the completion queue itself: peers'
//! data is handed on by the waiting task's own thread, not by the progress thread, a driver
//! with nothing arriving sleeps instead of spinning, and one given a spin reads on for that
//! long after an arrival, then sleeps. Over `tcp;ofi_rxm` on loopback;
//! skipped, saying so, where libfabric is not installed.

use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use ferroshmem_net::{Fabric, FabricOptions, Library, Operation, Peer, Registered};
use ferroshmem_runtime::route::Drive;
use ferroshmem_runtime::segment::HEADER_SIZE;
use ferroshmem_runtime::Segment;

const HEAP: usize = 1 << 20;

/// Held by each test: the CPU-time test measures the whole process.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The names of the threads that handed on each notice, in order.
type Handed = Arc<Mutex<Vec<String>>>;

/// One side: its fabric, its registered segment, and who handed on its notices.
struct Side {
    fabric: Fabric,
    registered: Registered,
    handed: Handed,
    _segment: Arc<Segment>,
}

fn side(rank: usize) -> Side {
    let handed = Handed::default();
    let record = handed.clone();
    let fabric = Fabric::open(
        &FabricOptions {
            provider: Some("tcp;ofi_rxm".into()),
            node: Some("127.0.0.1".into()),
        },
        move |_| {
            let name = std::thread::current().name().unwrap_or("").to_string();
            record.lock().unwrap().push(name);
        },
    )
    .expect("a tcp;ofi_rxm endpoint on loopback");
    let segment = Arc::new(Segment::create(rank, HEAP).expect("segment"));
    let registered = fabric
        .register(segment.clone(), 300 + rank as u64)
        .expect("register the segment");
    Side {
        fabric,
        registered,
        handed,
        _segment: segment,
    }
}

/// Two sides, side 0 connected to side 1.
fn connected() -> (Side, Side, Vec<Peer>) {
    let (a, b) = (side(0), side(1));
    let peers = a
        .fabric
        .connect(&[b.fabric.name().expect("name")])
        .expect("connect");
    (a, b, peers)
}

fn available() -> bool {
    match Library::load() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

/// This process's CPU time so far.
fn cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Drives `driver` until `done` holds, polled only when the driver's own registration wakes
/// the task; fails after 10 s (a hang, or a driver that stopped being woken).
async fn drive_until(driver: &mut dyn Drive, done: impl Fn() -> bool) {
    let driving = std::future::poll_fn(|cx| {
        driver.poll_drive(cx);
        if done() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    tokio::time::timeout(Duration::from_secs(10), driving)
        .await
        .expect("the driver was woken for each arrival within 10 s");
}

#[tokio::test(flavor = "current_thread")]
async fn a_driving_task_hands_on_peers_data_itself() {
    let _alone = ALONE.lock().await;
    if !available() {
        return;
    }
    let (a, b, peers) = connected();
    let mut driver = b
        .fabric
        .drive()
        .expect("a task on a runtime takes the drive");
    assert!(b.fabric.drive().is_none(), "one driver at a time");
    let me = std::thread::current().name().unwrap_or("").to_string();
    let writes = 20;
    for i in 0..writes {
        let write = a.fabric.start(
            Operation::WriteData(vec![1; 8], i),
            peers[0],
            b.registered,
            HEADER_SIZE as u64,
        );
        let handed = b.handed.clone();
        drive_until(&mut driver, || handed.lock().unwrap().len() > i as usize).await;
        write.await.expect("the write completes");
    }
    let handed = b.handed.lock().unwrap().clone();
    let by_driver = handed.iter().filter(|name| **name == me).count();
    // The progress thread, standing aside, still reads the queue every millisecond, and may
    // now and then find a notice first.
    assert!(
        by_driver * 2 > writes as usize,
        "only {by_driver} of {writes} notices were handed on by the driving task's thread \
         ({me:?}); the others by {handed:?}"
    );
    drop(driver);
    assert!(b.fabric.drive().is_some(), "the drive is free once dropped");
}

#[tokio::test(flavor = "current_thread")]
async fn a_driver_with_nothing_arriving_sleeps() {
    let _alone = ALONE.lock().await;
    if !available() {
        return;
    }
    let (a, b, peers) = connected();
    let mut driver = b.fabric.drive().expect("the drive");
    // One arrival first, so that the wait object has fired and been read.
    let write = a.fabric.start(
        Operation::WriteData(vec![1; 8], 7),
        peers[0],
        b.registered,
        HEADER_SIZE as u64,
    );
    let handed = b.handed.clone();
    drive_until(&mut driver, || !handed.lock().unwrap().is_empty()).await;
    write.await.expect("the write completes");
    let before = cpu();
    let started = Instant::now();
    let mut polls = 0u32;
    std::future::poll_fn(|cx| {
        driver.poll_drive(cx);
        polls += 1;
        if started.elapsed() >= Duration::from_millis(300) {
            return Poll::Ready(());
        }
        let waker = cx.waker().clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            waker.wake();
        });
        Poll::Pending
    })
    .await;
    let used = cpu() - before;
    assert!(
        polls < 100,
        "the driver woke its task {polls} times in 300 ms with nothing arriving"
    );
    assert!(
        used < Duration::from_millis(150),
        "driving 300 ms with nothing arriving used {used:?} of CPU"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_task_of_another_runtime_drives_too() {
    let _alone = ALONE.lock().await;
    if !available() {
        return;
    }
    let (a, b, peers) = connected();
    drop(
        b.fabric
            .drive()
            .expect("a task of this runtime drives first"),
    );
    // A service thread with a runtime of its own (as the NIC agent's), while this runtime's
    // registration stays.
    let (a, b) = (&a, &b);
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("second-runtime".into())
            .spawn_scoped(scope, move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a second runtime");
                runtime.block_on(async {
                    let mut driver = b
                        .fabric
                        .drive()
                        .expect("a task of a second runtime takes the free drive");
                    for i in 0..10u64 {
                        let write = a.fabric.start(
                            Operation::WriteData(vec![1; 8], i),
                            peers[0],
                            b.registered,
                            HEADER_SIZE as u64,
                        );
                        let handed = b.handed.clone();
                        drive_until(&mut driver, || handed.lock().unwrap().len() > i as usize)
                            .await;
                        write.await.expect("the write completes");
                    }
                });
            })
            .expect("a thread");
    });
    let handed = b.handed.lock().unwrap().clone();
    let by_driver = handed.iter().filter(|n| *n == "second-runtime").count();
    assert!(
        by_driver * 2 > handed.len(),
        "only {by_driver} of the notices were handed on by the second runtime's driver: {handed:?}"
    );
}

/// Counts the wakes of the task it wakes.
#[derive(Default)]
struct WakeCount(std::sync::atomic::AtomicUsize);

impl std::task::Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl WakeCount {
    fn count(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_driver_reads_on_for_its_spin_after_an_arrival_then_sleeps() {
    let _alone = ALONE.lock().await;
    if !available() {
        return;
    }
    let (a, b, peers) = connected();
    let spin = Duration::from_millis(300);
    b.fabric.set_spin(spin);
    let mut driver = b.fabric.drive().expect("the drive");
    let write = |data| {
        a.fabric.start(
            Operation::WriteData(vec![1; 8], data),
            peers[0],
            b.registered,
            HEADER_SIZE as u64,
        )
    };
    let me = std::thread::current().name().unwrap_or("").to_string();
    let handed = b.handed.clone();
    // An arrival the driving task reads itself (the progress thread, standing aside, may
    // read one first now and then).
    for data in 1.. {
        let first = write(data);
        let seen = handed.lock().unwrap().len();
        drive_until(&mut driver, || handed.lock().unwrap().len() > seen).await;
        first.await.expect("the write completes");
        if handed.lock().unwrap().last() == Some(&me) {
            break;
        }
        assert!(data < 50, "the progress thread read every arrival");
    }
    let spin_started = Instant::now();
    // Within the spin, a poll reads on and wakes its own task instead of sleeping.
    let wakes = Arc::new(WakeCount::default());
    let waker = std::task::Waker::from(wakes.clone());
    let mut cx = std::task::Context::from_waker(&waker);
    driver.poll_drive(&mut cx);
    assert_eq!(wakes.count(), 1, "a poll within the spin reads on");
    // A write that lands during the spin is read by the spinning task's own polls.
    let before = handed.lock().unwrap().len();
    let second = write(0);
    while b.handed.lock().unwrap().len() == before {
        assert!(
            spin_started.elapsed() < spin,
            "the second arrival was not read within the spin"
        );
        driver.poll_drive(&mut cx);
    }
    assert_eq!(
        b.handed.lock().unwrap().last(),
        Some(&me),
        "the spinning task read it"
    );
    second.await.expect("the write completes");
    // Past the spin (which the second arrival started again), a poll sleeps.
    tokio::time::sleep(spin + Duration::from_millis(50)).await;
    let before = wakes.count();
    driver.poll_drive(&mut cx);
    assert_eq!(
        wakes.count(),
        before,
        "past the spin, a poll leaves the task asleep"
    );
}
