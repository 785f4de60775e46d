//! Metrics of an in-process job (`run_local`): one `/metrics` endpoint serves every PE of the
//! process, told apart by the `pe` label; a bad `FERROSHMEM_METRICS_ADDR` is a typed error.
//!
//! One test function, because it sets process-wide environment variables.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use ferroshmem::observability::installed;
use ferroshmem::{Error, Pe};

const PES: usize = 4;

/// `GET path` from `server`: the status line and the body.
fn get(server: SocketAddr, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(server).expect("connect to the endpoint");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {server}\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    (head.lines().next().unwrap_or("").to_string(), body.into())
}

/// The value of the sample of `metric` whose label set contains every one of `labels`.
fn value(text: &str, metric: &str, labels: &[String]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .find(|l| labels.iter().all(|want| l.contains(want.as_str())))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

/// Each PE puts `me + 1` times 32 bytes into the next PE; PE 0 scrapes the endpoint.
async fn pattern(pe: Pe) -> ferroshmem::Result<Option<String>> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let buf = pe.calloc::<u64>(4).await?;
    for _ in 0..=me {
        pe.put(&buf, &[1u64; 4], (me + 1) % n).await?;
    }
    pe.barrier_all().await?;
    let scraped = if me == 0 {
        let endpoint = installed()
            .and_then(|e| e.endpoint())
            .expect("the endpoint runs");
        let (status, body) = tokio::task::spawn_blocking(move || get(endpoint, "/metrics"))
            .await
            .expect("scrape");
        assert_eq!(status, "HTTP/1.1 200 OK");
        let (missing, _) = tokio::task::spawn_blocking(move || get(endpoint, "/nothing"))
            .await
            .expect("scrape");
        assert_eq!(missing, "HTTP/1.1 404 Not Found");
        Some(body)
    } else {
        None
    };
    pe.barrier_all().await?;
    pe.free(buf).await?;
    Ok(scraped)
}

#[test]
fn one_endpoint_serves_every_pe_of_the_process() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "16M");
    for bad in ["not-an-address", "localhost:9464", "99999"] {
        std::env::set_var("FERROSHMEM_METRICS_ADDR", bad);
        let refused = rt.block_on(ferroshmem::run_local(2, |_pe| async {}));
        assert!(
            matches!(&refused, Err(Error::Config(m)) if m.contains("FERROSHMEM_METRICS_ADDR")),
            "{bad}: {refused:?}"
        );
    }
    assert!(
        installed().is_none(),
        "nothing was started for a bad address"
    );

    std::env::set_var("FERROSHMEM_METRICS_ADDR", "127.0.0.1:0");
    let results = rt
        .block_on(ferroshmem::run_local(PES, pattern))
        .expect("the job ran");
    let text = results
        .into_iter()
        .collect::<ferroshmem::Result<Vec<_>>>()
        .expect("every PE succeeded")
        .into_iter()
        .flatten()
        .next()
        .expect("PE 0 scraped");
    for me in 0..PES {
        let labels = [
            format!("pe=\"{me}\""),
            format!("target_pe=\"{}\"", (me + 1) % PES),
            "op=\"put\"".to_string(),
            "transport=\"shm\"".to_string(),
        ];
        let ops = value(&text, "ferroshmem_ops_total", &labels);
        let bytes = value(&text, "ferroshmem_bytes_total", &labels);
        assert_eq!(ops, Some((me + 1) as f64), "PE {me}:\n{text}");
        assert_eq!(bytes, Some(32.0 * (me + 1) as f64), "PE {me}:\n{text}");
        let pe = [format!("pe=\"{me}\"")];
        let host_heap = [pe[0].clone(), "memory=\"host\"".to_string()];
        assert!(value(&text, "ferroshmem_heap_used_bytes", &host_heap).is_some_and(|v| v >= 64.0));
        assert!(value(&text, "ferroshmem_bootstrap_duration_seconds", &pe).is_some_and(|v| v > 0.0));
    }
    assert!(text.contains("# HELP ferroshmem_ops_total "), "{text}");
    assert!(
        text.contains("# TYPE ferroshmem_op_duration_seconds histogram"),
        "{text}"
    );
}
