//! Expert parallelism on GPU PEs (`ferroshmem::ep`), normal mode, in one-process jobs of 1,
//! 2, 4 and 8 PEs sharing the GPUs there are (several PEs per GPU): the GPU's layout against
//! the host's, dispatch and combine against the host reference value for value over random
//! routings (with empty slots, experts that get nothing, every token to one expert), FP8 rows
//! arriving with their scales, refused inputs failing every PE's call and leaving the buffer
//! usable, and a PE that never comes ending the others' calls in a timeout.
//!
//! Where no GPU exists each test says so and passes at once.

mod ep_support;
#[path = "ep_support/normal.rs"]
mod normal;

use std::time::{Duration, Instant};

use ep_support::{exclusive, job, upload, Routing, Shape};
use ferroshmem::ep::{Bf16, Buffer, Config, Layout};
use ferroshmem::Error;
use normal::{check_fp8_round, check_round, dispatch_handle, dispatch_only};

#[test]
fn the_gpu_layout_is_the_hosts() {
    let Some(_turn) = exclusive("the_gpu_layout_is_the_hosts") else {
        return;
    };
    for n in [1, 4] {
        job(n, |pe, gpu| async move {
            let shape = Shape::small(pe.n_pes());
            let mut buffer = Buffer::new(&gpu, shape.config()).await?;
            for routing in Routing::ALL {
                let input = shape.input(pe.my_pe(), routing, 7);
                let topk = upload(&gpu, &input.topk_idx).await?;
                let got = buffer.layout(&topk, input.tokens).await?;
                let want =
                    Layout::compute(&input.topk_idx, shape.top_k, shape.experts, pe.n_pes())?;
                assert_eq!(got, want, "PE {} routing {routing:?}", pe.my_pe());
            }
            let mut bad = shape.input(pe.my_pe(), Routing::Random, 8).topk_idx;
            bad[5 * shape.top_k + 1] = shape.experts as i64;
            let topk = upload(&gpu, &bad).await?;
            let err = buffer
                .layout(&topk, bad.len() / shape.top_k)
                .await
                .unwrap_err();
            assert!(
                err.to_string().contains("token 5 is routed to expert"),
                "{err}"
            );
            buffer.destroy().await
        });
    }
}

#[test]
fn dispatch_and_combine_match_the_reference_on_2_4_and_8_pes() {
    let Some(_turn) = exclusive("dispatch_and_combine_match_the_reference_on_2_4_and_8_pes") else {
        return;
    };
    for n in [1, 2, 4, 8] {
        job(n, |pe, gpu| async move {
            let shape = Shape::small(pe.n_pes());
            let mut buffer = Buffer::new(&gpu, shape.config()).await?;
            for (round, routing) in Routing::ALL.into_iter().enumerate() {
                check_round(&pe, &gpu, &mut buffer, &shape, routing, round as u64).await?;
            }
            buffer.destroy().await
        });
    }
}

#[test]
fn a_refused_input_fails_every_pe_and_the_buffer_goes_on() {
    let Some(_turn) = exclusive("a_refused_input_fails_every_pe_and_the_buffer_goes_on") else {
        return;
    };
    job(4, |pe, gpu| async move {
        let shape = Shape::small(pe.n_pes());
        let mut buffer = Buffer::new(&gpu, shape.config()).await?;
        let me = pe.my_pe();
        // PE 2 routes a token to an expert that does not exist.
        let mut input = shape.input(me, Routing::Random, 1);
        if me == 2 {
            input.topk_idx[3 * shape.top_k] = -7;
        }
        let err = dispatch_only(&gpu, &mut buffer, &input).await.unwrap_err();
        let says = if me == 2 {
            "token 3 is routed to expert -7"
        } else {
            "PE 2's input was refused"
        };
        assert!(
            matches!(err, Error::InvalidArgument(_)) && err.to_string().contains(says),
            "PE {me}: {err}"
        );
        // PE 1 dispatches more tokens than the buffer holds.
        let mut input = shape.input(me, Routing::Random, 2);
        if me == 1 {
            input.tokens = shape.max_tokens + 1;
        }
        let err = dispatch_only(&gpu, &mut buffer, &input).await.unwrap_err();
        let says = if me == 1 {
            "at most"
        } else {
            "PE 1 refused its own input"
        };
        assert!(err.to_string().contains(says), "PE {me}: {err}");
        // The buffer goes on: a whole round checks out.
        check_round(&pe, &gpu, &mut buffer, &shape, Routing::Random, 3).await?;
        buffer.destroy().await
    });
}

#[test]
fn a_pe_that_never_dispatches_ends_the_others_calls_in_a_timeout() {
    let Some(_turn) = exclusive("a_pe_that_never_dispatches_ends_the_others_calls_in_a_timeout")
    else {
        return;
    };
    job(2, |pe, gpu| async move {
        let shape = Shape::small(pe.n_pes());
        let config = Config {
            timeout: Duration::from_secs(2),
            ..shape.config()
        };
        let mut buffer = Buffer::new(&gpu, config).await?;
        if pe.my_pe() == 1 {
            // Stays away until PE 0 has given up, then meets it at the end.
            pe.barrier_all().await?;
            return Ok(());
        }
        let input = shape.input(0, Routing::Random, 4);
        let started = Instant::now();
        let err = dispatch_only(&gpu, &mut buffer, &input).await.unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
        let again = dispatch_only(&gpu, &mut buffer, &input).await.unwrap_err();
        assert!(
            matches!(again, Error::Timeout { .. }),
            "the buffer stays unusable: {again}"
        );
        pe.barrier_all().await
    });
}

#[test]
fn bad_configurations_are_refused_on_every_pe() {
    let Some(_turn) = exclusive("bad_configurations_are_refused_on_every_pe") else {
        return;
    };
    job(2, |_pe, gpu| async move {
        let err = Buffer::new(&gpu, Config::new(16, 100, 2, 8))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("hidden 100"), "{err}");
        let err = Buffer::new(&gpu, Config::new(16, 128, 2, 7))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("do not divide"), "{err}");
        Ok(())
    });
}

/// A combine given the handle of another buffer's dispatch is refused on every PE (a
/// handle names its buffer: another buffer's rows need not fit this one's receive region),
/// and the buffer goes on.
#[test]
fn a_handle_of_another_buffer_is_refused() {
    let Some(_turn) = exclusive("a_handle_of_another_buffer_is_refused") else {
        return;
    };
    job(2, |pe, gpu| async move {
        let shape = Shape::small(pe.n_pes());
        let mut first = Buffer::new(&gpu, shape.config()).await?;
        let mut second = Buffer::new(&gpu, shape.config()).await?;
        let me = pe.my_pe();
        let input = shape.input(me, Routing::Random, 1);
        let of_first = dispatch_handle(&gpu, &mut first, &input).await?;
        let of_second = dispatch_handle(&gpu, &mut second, &input).await?;
        let rows = of_first.received().max(of_second.received()).max(1);
        let y = upload(&gpu, &vec![Bf16::from_f32(0.0); rows * shape.hidden]).await?;
        let zeros = vec![Bf16::from_f32(0.0); shape.max_tokens * shape.hidden];
        let mut out = upload(&gpu, &zeros).await?;
        let handle = if me == 0 { &of_first } else { &of_second };
        let err = second.combine(handle, &y, &mut out).await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "PE {me}: {err}");
        if me == 0 {
            assert!(err.to_string().contains("another ep buffer"), "{err}");
        }
        check_round(&pe, &gpu, &mut second, &shape, Routing::Random, 2).await?;
        first.destroy().await?;
        second.destroy().await
    });
}

#[test]
fn fp8_rows_arrive_with_their_scales() {
    let Some(_turn) = exclusive("fp8_rows_arrive_with_their_scales") else {
        return;
    };
    job(4, |pe, gpu| async move {
        let shape = Shape::small(pe.n_pes());
        let mut buffer = Buffer::new(&gpu, shape.config()).await?;
        check_fp8_round(&gpu, &mut buffer, &shape).await?;
        buffer.destroy().await
    });
}
