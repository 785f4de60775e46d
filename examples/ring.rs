//! NVSHMEM's `simple_shift`: every PE puts its number into the next PE, then prints what it
//! received from the previous one.
//!
//! ```text
//! cargo run --release --example ring              # 4 PEs in this process
//! ferroshmem run -n 4 -- target/release/examples/ring   # one PE per process
//! ```

#[tokio::main]
async fn main() -> ferroshmem::Result<()> {
    ferroshmem::observability::init_tracing();
    let results = ferroshmem::run(4, |pe| async move {
        let dest = pe.calloc::<u64>(1).await?;
        let me = pe.my_pe();
        let next = (me + 1) % pe.n_pes();
        pe.p(&dest, me as u64, next).await?;
        pe.barrier_all().await?;
        let received = pe.g(&dest, me).await?;
        println!("PE {me} of {} received {received}", pe.n_pes());
        pe.free(dest).await?;
        Ok::<_, ferroshmem::Error>(())
    })
    .await?;
    results.into_iter().collect()
}
