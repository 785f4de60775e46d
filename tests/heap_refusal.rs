//! Collective heap calls whose arguments one PE refuses (a size that overflows, an alignment
//! that is not a power of two): the refusal is part of the collective step, so the refusing
//! PE gets its own error, the others a mismatch, nobody waits, and the heaps stay in step
//! for the next call.

mod common;

use std::time::Duration;

use common::runtime;
use ferroshmem::{run_local, Error, Pe, Result};

/// How one PE's part of a refused call ended, and whether the heaps were in step after it.
#[derive(Debug)]
struct Ended {
    call: Result<()>,
    in_step: bool,
}

/// Runs a 3-PE job in which each PE makes `call` (PE 0 with its own arguments), then checks
/// that a correct allocation afterwards lands at the same offset on every PE.
fn job(call: fn(Pe) -> futures::future::BoxFuture<'static, Result<()>>) -> Vec<Ended> {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "8M");
    let job = run_local(3, move |pe| async move {
        let call = call(pe.clone()).await;
        let next = pe.malloc::<u64>(4).await?;
        let offsets = pe
            .exchange(
                0,
                pe.my_pe(),
                pe.n_pes(),
                next.offset().to_le_bytes().to_vec(),
            )
            .await?;
        pe.free(next).await?;
        let in_step = offsets.windows(2).all(|w| w[0] == w[1]);
        Ok::<_, Error>(Ended { call, in_step })
    });
    runtime()
        .block_on(async { tokio::time::timeout(Duration::from_secs(20), job).await })
        .expect("a PE was left waiting for a refused call")
        .expect("job")
        .into_iter()
        .map(|pe| pe.expect("PE"))
        .collect()
}

fn expect(ended: &[Ended], refuser: fn(&Error) -> bool, others: fn(&Error) -> bool) {
    for (pe, e) in ended.iter().enumerate() {
        assert!(e.in_step, "PE {pe}: heaps out of step after {ended:?}");
        let ok = match (&e.call, pe) {
            (Err(err), 0) => refuser(err),
            (Err(err), _) => others(err),
            (Ok(()), _) => false,
        };
        assert!(ok, "PE {pe}: {ended:?}");
    }
}

fn mismatch(e: &Error) -> bool {
    matches!(e, Error::CollectiveMismatch { .. })
}

#[test]
fn an_overflowing_malloc_on_one_pe_fails_on_every_pe() {
    let ended = job(|pe| {
        Box::pin(async move {
            let len = if pe.my_pe() == 0 { usize::MAX / 2 } else { 4 };
            pe.malloc::<u64>(len).await.map(std::mem::forget)
        })
    });
    expect(&ended, |e| matches!(e, Error::InvalidArgument(_)), mismatch);
}

#[test]
fn a_bad_alignment_on_one_pe_fails_on_every_pe() {
    let ended = job(|pe| {
        Box::pin(async move {
            let align = if pe.my_pe() == 0 { 3 } else { 64 };
            pe.align::<u64>(align, 4).await.map(std::mem::forget)
        })
    });
    expect(&ended, |e| *e == Error::InvalidAlignment(3), mismatch);
}

#[test]
fn a_refusal_made_alike_everywhere_keeps_the_heaps_in_step() {
    let ended =
        job(|pe| Box::pin(async move { pe.align::<u64>(0, 4).await.map(std::mem::forget) }));
    let refused = |e: &Error| *e == Error::InvalidAlignment(0);
    expect(&ended, refused, refused);
}

#[test]
fn an_alignment_above_the_heap_s_own_is_too_large_everywhere() {
    const ALIGN: usize = 1 << 40;
    let ended =
        job(|pe| Box::pin(async move { pe.align::<u64>(ALIGN, 4).await.map(std::mem::forget) }));
    let too_large =
        |e: &Error| matches!(e, Error::AlignmentTooLarge { align: ALIGN, max } if *max < ALIGN);
    expect(&ended, too_large, too_large);
}
