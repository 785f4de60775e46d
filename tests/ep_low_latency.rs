//! Expert parallelism's low-latency mode on GPU PEs, in one-process jobs of 1, 2, 4 and 8 PEs
//! sharing the GPUs there are: what each local expert receives against the host reference
//! (rows ordered by source and slot, the GPU's order being the order senders took places),
//! experts run on the GPU in place (combines pushed and pulled) or results sent from a
//! device buffer, rows cast to FP8 on the way checked code for code against the host's cast,
//! and every token's weighted combine checked exactly; refused inputs (an
//! expert out of range, an expert named twice, too many tokens) failing every PE and leaving
//! the buffer usable; calls out of order refused, and a send dropped before its receive
//! leaving the buffer unusable; kernel clocks timing a round's kernels.
//!
//! Where no GPU exists each test says so and passes at once.

mod ep_support;
#[path = "ep_support/low_latency.rs"]
mod low_latency;

use ep_support::{exclusive, job, upload, Routing, Shape};
use ferroshmem::ep::{Bf16, Buffer, LowLatencyCombine, LowLatencyInput, LowLatencyRound};
use ferroshmem::gpu::DeviceBuffer;
use ferroshmem::Error;
use low_latency::{config, config_combining, round};

#[test]
fn low_latency_dispatch_and_combine_match_the_reference() {
    let Some(_turn) = exclusive("low_latency_dispatch_and_combine_match_the_reference") else {
        return;
    };
    for n in [1, 2, 4, 8] {
        job(n, |pe, gpu| async move {
            let shape = Shape::small(pe.n_pes());
            for combine in [LowLatencyCombine::Push, LowLatencyCombine::Pull] {
                let mut buffer = Buffer::new(&gpu, config_combining(&shape, combine)).await?;
                for (seed, routing) in Routing::ALL.into_iter().enumerate() {
                    for (seed, fp8) in [(seed, false), (seed + 11, false), (seed + 21, true)] {
                        round(&gpu, &mut buffer, &shape, (routing, seed as u64, fp8)).await?;
                    }
                }
                buffer.destroy().await?;
            }
            Ok(())
        });
    }
}

/// DeepEP's low-latency hidden size and top-k (combines pull by default there), PE 0 and PE 1
/// in turn dispatching 8192 / n tokens and each other PE one, rounds with nothing between a
/// combine and the next dispatch: no dispatch may overwrite rows another PE's reduce still
/// reads where they lie (at 2 PEs the heavy PE's reads 470 MB, long after the other PE's
/// combine has ended and its heavy dispatch begun).
#[test]
fn back_to_back_rounds_at_full_hidden_match_the_reference() {
    let Some(_turn) = exclusive("back_to_back_rounds_at_full_hidden_match_the_reference") else {
        return;
    };
    // Each PE's buffer takes about 9.8 GiB at 2 PEs, 2.6 GiB at 8 (two areas of packed rows).
    for (n, heap) in [(2, "11G"), (8, "3G")] {
        std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", heap);
        job(n, |pe, gpu| async move {
            let shape = Shape {
                n: pe.n_pes(),
                max_tokens: 8192 / pe.n_pes(),
                hidden: 7168,
                top_k: 8,
                experts: 64,
            };
            let mut buffer = Buffer::new(&gpu, config(&shape)).await?;
            assert!(buffer.config().pulls(), "hidden 7168 pulls by default");
            low_latency::back_to_back_rounds(&gpu, &mut buffer, &shape, 6).await?;
            buffer.destroy().await
        });
    }
}

/// A round captured into a CUDA graph, replayed with new inputs each time (the call numbers
/// the kernels wait for are advanced on the GPU: with them as kernel arguments, the second
/// replay would wait for a call that never comes), then an ordinary round after the graph.
#[test]
fn a_captured_round_replays_with_new_inputs_each_time() {
    let Some(_turn) = exclusive("a_captured_round_replays_with_new_inputs_each_time") else {
        return;
    };
    for n in [1, 2, 4] {
        job(n, |pe, gpu| async move {
            let shape = Shape::small(pe.n_pes());
            for combine in [LowLatencyCombine::Push, LowLatencyCombine::Pull] {
                let mut buffer = Buffer::new(&gpu, config_combining(&shape, combine)).await?;
                low_latency::captured_rounds(&gpu, &mut buffer, &shape).await?;
                round(&gpu, &mut buffer, &shape, (Routing::Random, 40, false)).await?;
                buffer.destroy().await?;
            }
            Ok(())
        });
    }
}

/// Kernel clocks: off, a round leaves none; on, the dispatch's and the combine's kernels each
/// show a span on the GPU's timer, shorter than the round took on the host; read once, they
/// start over; a captured round's replay is clocked too.
#[test]
fn kernel_clocks_time_the_rounds_kernels_only_while_on() {
    let Some(_turn) = exclusive("kernel_clocks_time_the_rounds_kernels_only_while_on") else {
        return;
    };
    job(2, |pe, gpu| async move {
        let shape = Shape::small(pe.n_pes());
        let mut buffer = Buffer::new(&gpu, config(&shape)).await?;
        round(&gpu, &mut buffer, &shape, (Routing::ALL[0], 1, false)).await?;
        let off = buffer.take_kernel_clocks()?;
        assert_eq!((off.dispatch_ns(), off.combine_ns()), (None, None));
        buffer.clock_kernels(true)?;
        let started = std::time::Instant::now();
        round(&gpu, &mut buffer, &shape, (Routing::ALL[1], 2, false)).await?;
        let took = started.elapsed().as_nanos() as u64;
        let on = buffer.take_kernel_clocks()?;
        for (what, ns) in [("dispatch", on.dispatch_ns()), ("combine", on.combine_ns())] {
            let ns = ns.unwrap_or_else(|| panic!("PE {}: no {what} clock", pe.my_pe()));
            assert!(
                ns > 0 && ns < took,
                "PE {}: {what} {ns} ns of {took}",
                pe.my_pe()
            );
        }
        let again = buffer.take_kernel_clocks()?;
        assert_eq!((again.dispatch_ns(), again.combine_ns()), (None, None));
        // A captured round's replay, its kernels clocked as well.
        let input = shape.input(pe.my_pe(), Routing::Random, 3);
        let mut x = upload(&gpu, &input.x).await?;
        let mut topk_idx = upload(&gpu, &input.topk_idx).await?;
        let mut topk_weights = upload(&gpu, &input.topk_weights).await?;
        let mut out = DeviceBuffer::<Bf16>::new(gpu.context(), input.tokens * shape.hidden)?;
        let round = LowLatencyRound {
            x: &mut x,
            topk_idx: &mut topk_idx,
            topk_weights: &mut topk_weights,
            tokens: input.tokens,
            fp8: false,
            y: None,
            out: &mut out,
        };
        let mut graph = buffer.capture_low_latency(round, |_| Ok(()))?;
        graph.replay().await?;
        let replayed = graph.take_kernel_clocks()?;
        assert!(replayed.dispatch_ns().is_some() && replayed.combine_ns().is_some());
        drop(graph);
        buffer.clock_kernels(false)?;
        buffer.destroy().await?;
        Ok(())
    });
}

#[test]
fn refused_low_latency_inputs_fail_every_pe_and_the_buffer_goes_on() {
    let Some(_turn) = exclusive("refused_low_latency_inputs_fail_every_pe_and_the_buffer_goes_on")
    else {
        return;
    };
    job(4, |pe, gpu| async move {
        let shape = Shape::small(pe.n_pes());
        let mut buffer = Buffer::new(&gpu, config(&shape)).await?;
        let me = pe.my_pe();
        let k = shape.top_k;
        let cases: [(usize, &str, &str); 3] = [
            (2, "token 4 is routed to expert 99", "PE 2 refused"),
            (1, "token 6 names expert 5 twice", "PE 1 refused"),
            (3, "at most", "PE 3 refused"),
        ];
        for (case, (culprit, mine_says, others_say)) in cases.into_iter().enumerate() {
            let mut input = shape.input(me, Routing::Random, 20 + case as u64);
            if me == culprit {
                match case {
                    0 => input.topk_idx[4 * k + 2] = 99,
                    1 => input.topk_idx[6 * k..6 * k + 2].copy_from_slice(&[5, 5]),
                    _ => input.tokens = shape.max_tokens + 1,
                }
            }
            let x = upload(&gpu, &input.x).await?;
            let topk_idx = upload(&gpu, &input.topk_idx).await?;
            let tokens = input.tokens;
            let err = buffer
                .low_latency_dispatch(LowLatencyInput {
                    x: &x,
                    topk_idx: &topk_idx,
                    tokens,
                    fp8: false,
                    hook: me % 2 == 0,
                })?
                .receive()
                .await
                .unwrap_err();
            let says = if me == culprit { mine_says } else { others_say };
            assert!(
                err.to_string().contains(says),
                "PE {me}, case {case}: {err}"
            );
        }
        round(&gpu, &mut buffer, &shape, (Routing::Random, 30, false)).await?;
        buffer.destroy().await
    });
}

#[test]
fn low_latency_calls_out_of_order_or_mode_or_dropped_are_refused() {
    let Some(_turn) = exclusive("low_latency_calls_out_of_order_or_mode_or_dropped_are_refused")
    else {
        return;
    };
    job(2, |pe, gpu| async move {
        let shape = Shape::small(pe.n_pes());
        let input = shape.input(pe.my_pe(), Routing::Random, 40);
        let x = upload(&gpu, &input.x).await?;
        let topk_idx = upload(&gpu, &input.topk_idx).await?;
        let ll_input = LowLatencyInput {
            x: &x,
            topk_idx: &topk_idx,
            tokens: input.tokens,
            fp8: false,
            hook: true,
        };
        let mut normal = Buffer::new(&gpu, shape.config()).await?;
        let err = normal.low_latency_dispatch(ll_input).unwrap_err();
        assert!(
            err.to_string()
                .contains("does not serve the low-latency mode"),
            "{err}"
        );
        normal.destroy().await?;
        let mut buffer = Buffer::new(&gpu, config(&shape)).await?;
        let received = buffer.low_latency_dispatch(ll_input)?.receive().await?;
        // An expert or PE out of range is an error, not a panic.
        let local = shape.experts / shape.n;
        assert!(received.recv_x(local).await.is_err());
        assert!(received.rows_from(0, shape.n).is_none());
        let handle = received.handle();
        let err = buffer.low_latency_dispatch(ll_input).unwrap_err();
        assert!(
            err.to_string().contains("has not been combined yet"),
            "{err}"
        );
        let weights = upload(&gpu, &input.topk_weights).await?;
        let mut out = DeviceBuffer::<Bf16>::new(gpu.context(), input.tokens * shape.hidden)?;
        buffer
            .low_latency_combine(&handle, None, (&topk_idx, &weights), &mut out)
            .await?;
        let err = buffer
            .low_latency_combine(&handle, None, (&topk_idx, &weights), &mut out)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("awaiting its combine is None"),
            "{err}"
        );
        // A send dropped before its receive leaves the buffer unusable, on every PE.
        drop(buffer.low_latency_dispatch(ll_input)?);
        let err = buffer.low_latency_dispatch(ll_input).unwrap_err();
        assert!(matches!(err, Error::Desynchronized { .. }), "{err}");
        buffer.destroy().await
    });
}
