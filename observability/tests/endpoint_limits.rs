//! The `/metrics` endpoint under slow clients: however many connect and stay silent, the
//! process holds at most [`MAX_CONNECTIONS`] of their connections, and a scrape made while
//! they are still connected gets its answer before they time out.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ferroshmem_observability::endpoint::{MAX_CONNECTIONS, REQUEST_TIMEOUT};
use ferroshmem_observability::install_exporter;

/// Descriptors this process has open.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

#[test]
fn slow_clients_cannot_take_the_processs_descriptors() {
    let address = install_exporter()
        .expect("exporter")
        .serve("127.0.0.1:0".parse().unwrap())
        .expect("endpoint");
    let before = open_descriptors();
    let clients = 300;
    let silent: Vec<TcpStream> = (0..clients)
        .map(|_| TcpStream::connect(address).expect("connect"))
        .collect();
    // Let the endpoint take all it will.
    std::thread::sleep(Duration::from_millis(300));
    let held = open_descriptors() - before - clients;
    assert!(
        held <= MAX_CONNECTIONS + 4,
        "{clients} silent clients made the endpoint hold {held} descriptors"
    );
    // A scrape gets through while they are still there.
    let started = Instant::now();
    let mut scrape = TcpStream::connect(address).expect("connect");
    scrape
        .set_read_timeout(Some(REQUEST_TIMEOUT * 10))
        .expect("timeout");
    scrape
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut reply = String::new();
    scrape.read_to_string(&mut reply).expect("reply");
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    assert!(
        started.elapsed() < REQUEST_TIMEOUT,
        "the scrape waited {:?} behind silent clients",
        started.elapsed()
    );
    drop(silent);
}
