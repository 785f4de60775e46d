//! Collectives that enter member by member (`alltoall` and `fcollect` past the eager sizes,
//! in a team of up to four on one node: flat, or for `alltoall` blocks of 4 KiB, pairwise):
//! a member's block moves as soon as that member and its receiver have entered the call, not
//! once the last member has; and never the block of a member that has not entered, nor of
//! one whose call does not match its receiver's.

mod common;

use std::time::{Duration, Instant};

use common::runtime;
use ferroshmem::{run_local, Cmp, Error, Pe, Result, SymBuffer, SymSlice, TeamConfig};

/// How long the member that stays out waits to see the others' blocks move; reaching it
/// means they waited for it.
const PATIENCE: Duration = Duration::from_secs(10);

/// Members of the jobs here.
const N: usize = 3;

/// The collectives that enter member by member.
#[derive(Clone, Copy, Debug)]
enum Collective {
    /// Flat: blocks of 16 KiB.
    Alltoall,
    /// Pairwise: blocks of 4 KiB (above the eager sizes, within the pairwise ones).
    AlltoallPairwise,
    /// Flat: blocks of 16 KiB.
    Fcollect,
}

impl Collective {
    /// Elements (`u64`) per block.
    fn block(self) -> usize {
        match self {
            Collective::Alltoall | Collective::Fcollect => 2048,
            Collective::AlltoallPairwise => 512,
        }
    }

    /// Element `k` of the block that member `from` sends member `to` (one value for every
    /// receiver of an fcollect); never zero, the value of a block not written.
    fn element(self, from: usize, to: usize, k: usize) -> u64 {
        let to = match self {
            Collective::Alltoall | Collective::AlltoallPairwise => to,
            Collective::Fcollect => 0,
        };
        (from * 1_000_000 + to * 10_000 + k + 1) as u64
    }

    /// The `source` of member `me`, blocks of `block` elements.
    fn source(self, me: usize, block: usize) -> Vec<u64> {
        let receivers = match self {
            Collective::Alltoall | Collective::AlltoallPairwise => N,
            Collective::Fcollect => 1,
        };
        (0..receivers)
            .flat_map(|to| (0..block).map(move |k| self.element(me, to, k)))
            .collect()
    }

    /// The call on the world team, blocks of `block` elements.
    async fn call(
        self,
        pe: &Pe,
        dest: &SymBuffer<u64>,
        source: &SymBuffer<u64>,
        block: usize,
    ) -> Result<()> {
        let world = pe.team_world();
        match self {
            Collective::Alltoall | Collective::AlltoallPairwise => {
                world.alltoall(dest, source, block).await
            }
            Collective::Fcollect => {
                world
                    .fcollect(dest.slice(..N * block), source.slice(..block))
                    .await
            }
        }
    }
}

/// Runs `program` on every PE of a job of [`N`] PEs in this process; panics with every
/// PE's error.
fn job<F, Fut>(program: F)
where
    F: Fn(Pe) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "64M");
    let ended = runtime().block_on(run_local(N, program)).expect("job");
    let failed: Vec<String> = ended
        .into_iter()
        .enumerate()
        .filter_map(|(pe, r)| r.err().map(|e| format!("PE {pe}: {e}")))
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
}

/// Fails unless block `from` (of `block` elements) of `dest` on this PE holds `want(k)` at
/// every element `k`.
async fn expect_block(
    pe: &Pe,
    dest: &SymBuffer<u64>,
    (from, block): (usize, usize),
    want: impl Fn(usize) -> u64,
) -> Result<()> {
    let mut got = vec![0u64; block];
    pe.get(
        &mut got,
        dest.slice(from * block..(from + 1) * block),
        pe.my_pe(),
    )
    .await?;
    match (0..block).find(|&k| got[k] != want(k)) {
        None => Ok(()),
        Some(k) => Err(Error::InvalidArgument(format!(
            "block {from}, element {k}: {}, expected {}",
            got[k],
            want(k)
        ))),
    }
}

/// Makes the call with whole blocks; fails unless every block of `dest` came from its
/// member.
async fn call_and_check(
    collective: Collective,
    pe: &Pe,
    dest: &SymBuffer<u64>,
    source: &SymBuffer<u64>,
) -> Result<()> {
    let block = collective.block();
    collective.call(pe, dest, source, block).await?;
    for from in 0..N {
        let want = |k| collective.element(from, pe.my_pe(), k);
        expect_block(pe, dest, (from, block), want).await?;
    }
    Ok(())
}

/// PE 2 stays out of the call until PE 0 holds PE 1's block, and only then writes its own
/// `source`: the call must move the blocks of the members that entered without waiting for
/// the last, and must read PE 2's block only after PE 2 entered.
fn blocks_move_while_one_member_stays_out(collective: Collective) {
    job(move |pe| async move {
        let (me, block) = (pe.my_pe(), collective.block());
        let source = pe.calloc::<u64>(N * block).await?;
        let dest = pe.calloc::<u64>(N * block).await?;
        if me == 2 {
            let want = collective.element(1, 0, 0);
            let started = Instant::now();
            while pe.g(dest.slice(block..block + 1), 0).await? != want {
                if started.elapsed() > PATIENCE {
                    return Err(Error::InvalidArgument(format!(
                        "{collective:?}: PE 0 had not read PE 1's block after {PATIENCE:?} \
                         while PE 2 stayed out of the call"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let mine = collective.source(me, block);
        pe.put(source.slice(..mine.len()), &mine, me).await?;
        call_and_check(collective, &pe, &dest, &source).await
    });
}

#[test]
fn alltoall_moves_blocks_while_one_member_stays_out() {
    blocks_move_while_one_member_stays_out(Collective::Alltoall);
}

#[test]
fn a_pairwise_alltoall_moves_blocks_while_one_member_stays_out() {
    blocks_move_while_one_member_stays_out(Collective::AlltoallPairwise);
}

#[test]
fn fcollect_moves_blocks_while_one_member_stays_out() {
    blocks_move_while_one_member_stays_out(Collective::Fcollect);
}

/// PE 2 calls with half the block size: every member gets `CollectiveMismatch`, no member
/// reads a block of a member whose call differs from its own (where those blocks would land
/// in `dest`, it stays unwritten), and the next matching call on the team succeeds.
fn no_block_moves_across_a_mismatch(collective: Collective) {
    job(move |pe| async move {
        let (me, whole) = (pe.my_pe(), collective.block());
        let source = pe.calloc::<u64>(N * whole).await?;
        let dest = pe.calloc::<u64>(N * whole).await?;
        let mine = collective.source(me, whole);
        pe.put(source.slice(..mine.len()), &mine, me).await?;
        pe.barrier_all().await?;
        let block = if me == 2 { whole / 2 } else { whole };
        match collective.call(&pe, &dest, &source, block).await {
            Err(Error::CollectiveMismatch { .. }) => {}
            other => {
                return Err(Error::InvalidArgument(format!(
                    "{collective:?} with PE 2's size halved: {other:?}, expected a mismatch"
                )))
            }
        }
        // PE 2's halved blocks of PE 0 and PE 1 lie in block 0 (its own copy, in block 1).
        let unread = if me == 2 { 0 } else { 2 };
        expect_block(&pe, &dest, (unread, whole), |_| 0).await?;
        pe.barrier_all().await?;
        call_and_check(collective, &pe, &dest, &source).await
    });
}

#[test]
fn alltoall_moves_no_block_across_a_mismatch() {
    no_block_moves_across_a_mismatch(Collective::Alltoall);
}

#[test]
fn a_pairwise_alltoall_moves_no_block_across_a_mismatch() {
    no_block_moves_across_a_mismatch(Collective::AlltoallPairwise);
}

#[test]
fn fcollect_moves_no_block_across_a_mismatch() {
    no_block_moves_across_a_mismatch(Collective::Fcollect);
}

/// A pairwise `alltoall` that fails on PE 0 while its pair with PE 1 is claimed by PE 0
/// alone (PE 2 refuses the call, PE 1 comes to it only after PE 0 has returned): PE 1 must
/// write nothing into PE 0's `dest` once PE 0's call has returned, and fails its call too.
#[test]
fn a_pairwise_alltoall_writes_nothing_into_a_returned_members_dest() {
    job(|pe| async move {
        let (me, whole) = (pe.my_pe(), Collective::AlltoallPairwise.block());
        let source = pe.calloc::<u64>(N * whole).await?;
        let dest = pe.calloc::<u64>(N * whole).await?;
        // PE 0 tells PE 1 that its call has returned; PE 1 tells PE 0 that its call has.
        let returned = pe.calloc::<u64>(1).await?;
        let mine = Collective::AlltoallPairwise.source(me, whole);
        pe.put(source.slice(..mine.len()), &mine, me).await?;
        pe.barrier_all().await?;
        let world = pe.team_world();
        let outcome = match me {
            // Its `dest` holds one block where the call needs three: refused.
            2 => world.alltoall(dest.slice(..whole), &source, whole).await,
            0 => {
                let call = world.alltoall(&dest, &source, whole);
                let outcome = within("PE 0's call", call).await;
                // Block 1 is PE 1's to write, while the call runs only.
                let after = vec![u64::MAX; whole];
                pe.put(dest.slice(whole..2 * whole), &after, me).await?;
                pe.p(returned.at(0), 1, 1).await?;
                wait_for_flag(&pe, returned.at(0), 1, "PE 1's call to return").await?;
                expect_block(&pe, &dest, (1, whole), |_| u64::MAX).await?;
                outcome
            }
            _ => {
                wait_for_flag(&pe, returned.at(0), 1, "PE 0's call to return").await?;
                let call = world.alltoall(&dest, &source, whole);
                let outcome = within("PE 1's call", call).await;
                pe.p(returned.at(0), 1, 0).await?;
                outcome
            }
        };
        match (me, outcome) {
            (2, Err(Error::OutOfBounds { .. }))
            | (0 | 1, Err(Error::CollectiveMismatch { .. })) => Ok(()),
            (_, other) => Err(Error::InvalidArgument(format!(
                "PE {me}: {other:?}, expected PE 2's call refused and the others' failing"
            ))),
        }
    });
}

/// A pairwise `alltoall` dropped on PE 0 (cancelled by a timeout while PEs 1 and 2 stay
/// out of the call): PEs 1 and 2, coming to the call afterwards, must write nothing into
/// PE 0's `dest`, and fail their calls.
#[test]
fn a_cancelled_pairwise_alltoall_gets_nothing_written_into_its_dest() {
    job(|pe| async move {
        let (me, whole) = (pe.my_pe(), Collective::AlltoallPairwise.block());
        let source = pe.calloc::<u64>(N * whole).await?;
        let dest = pe.calloc::<u64>(N * whole).await?;
        // Word `k`: PE `k` tells the PE that holds it that its call has returned.
        let returned = pe.calloc::<u64>(N).await?;
        let mine = Collective::AlltoallPairwise.source(me, whole);
        pe.put(source.slice(..mine.len()), &mine, me).await?;
        pe.barrier_all().await?;
        let world = pe.team_world();
        if me == 0 {
            let call = world.alltoall(&dest, &source, whole);
            if let Ok(done) = tokio::time::timeout(Duration::from_millis(50), call).await {
                return Err(Error::InvalidArgument(format!(
                    "PE 0's call ended ({done:?}) while the others stayed out of it"
                )));
            }
            // Blocks 1 and 2 were the others' to write, while the call ran only.
            let after = vec![u64::MAX; 2 * whole];
            pe.put(dest.slice(whole..3 * whole), &after, me).await?;
            for other in 1..N {
                pe.p(returned.at(0), 1, other).await?;
            }
            for other in 1..N {
                wait_for_flag(&pe, returned.at(other), 1, "the others' calls to return").await?;
            }
            for other in 1..N {
                expect_block(&pe, &dest, (other, whole), |_| u64::MAX).await?;
            }
            return Ok(());
        }
        wait_for_flag(&pe, returned.at(0), 1, "PE 0's call to be dropped").await?;
        let outcome = within("the call", world.alltoall(&dest, &source, whole)).await;
        pe.p(returned.at(me), 1, 0).await?;
        match outcome {
            Err(Error::CollectiveMismatch { .. }) => Ok(()),
            other => Err(Error::InvalidArgument(format!(
                "PE {me}: {other:?}, expected a mismatch after PE 0 dropped its call"
            ))),
        }
    });
}

/// Rounds of [`a_failing_pairwise_alltoall_waits_for_a_member_already_moving`]: each shows a
/// member that returns without waiting with some chance only (when its failure reaches it
/// before the mover's copy ends), so the test repeats it.
const MOVING_ROUNDS: u64 = 4;

/// A pairwise `alltoall` that fails on PE 0 while PE 1 is moving their pair's blocks: PE 0
/// must wait for PE 1's mark before it returns, so that nothing lands in its `dest`
/// afterwards.
#[test]
fn a_failing_pairwise_alltoall_waits_for_a_member_already_moving() {
    job(|pe| async move {
        // 8 MiB blocks: PE 1's copies last long after PE 2 sees their first word land.
        let (me, whole) = (pe.my_pe(), 1 << 20);
        let source = pe.calloc::<u64>(N * whole).await?;
        let dest = pe.calloc::<u64>(N * whole).await?;
        // Word 0: PE 0's go to PE 1, and PE 2's wake-up of PE 0; word 1: PE 1's return.
        let flags = pe.calloc::<u64>(2).await?;
        let mine = Collective::AlltoallPairwise.source(me, whole);
        pe.put(source.slice(..mine.len()), &mine, me).await?;
        for round in 1..=MOVING_ROUNDS {
            fail_while_moving(&pe, (&dest, &source, whole), &flags, round).await?;
        }
        Ok(())
    });
}

/// One round of [`a_failing_pairwise_alltoall_waits_for_a_member_already_moving`], on a new
/// team whose blocks of `whole` elements go pairwise: PE 0 claims its pairs first, PE 1
/// comes second to its pair with PE 0 and moves, PE 2 refuses the call once PE 1's block
/// starts landing in PE 0's `dest`, and wakes PE 0 at once by a write that PE 0 waits for
/// beside the call. Flags count rounds.
async fn fail_while_moving(
    pe: &Pe,
    (dest, source, whole): (&SymBuffer<u64>, &SymBuffer<u64>, usize),
    flags: &SymBuffer<u64>,
    round: u64,
) -> Result<()> {
    let me = pe.my_pe();
    let config = TeamConfig {
        pairwise_bytes: 8 * whole,
        ..TeamConfig::default()
    };
    let team = pe.team_world().split_strided_with(0, 1, N, config).await?;
    let team = team.ok_or_else(|| Error::InvalidArgument("not a member".into()))?;
    // The word of PE 0's `dest` that PE 1 writes first, and the one it writes last.
    let (first, last) = (dest.at(whole), dest.at(2 * whole - 1));
    if me == 0 {
        pe.p(first, 0, me).await?;
    }
    pe.barrier_all().await?;
    let outcome = match me {
        0 => {
            pe.p(flags.at(0), round, 1).await?;
            let woken = within("PE 2's wake-up", async {
                pe.wait_until(flags.at(0), Cmp::Ge, round).await
            });
            let call = within("PE 0's call", team.alltoall(dest, source, whole));
            let (outcome, woken) = tokio::join!(call, woken);
            woken?;
            // PE 1 writes its block while the call runs only: the last word is this PE's now.
            pe.p(last, u64::MAX, me).await?;
            wait_for_flag(pe, flags.at(1), round, "PE 1's call to return").await?;
            let v = pe.g(last, me).await?;
            if v != u64::MAX {
                return Err(Error::InvalidArgument(format!(
                    "round {round}: PE 1 wrote {v} into PE 0's dest after PE 0's call returned"
                )));
            }
            outcome
        }
        1 => {
            wait_for_flag(pe, flags.at(0), round, "PE 0's go").await?;
            // PE 0 claims their pair first meanwhile.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let outcome = within("PE 1's call", team.alltoall(dest, source, whole)).await;
            pe.p(flags.at(1), round, 0).await?;
            outcome
        }
        _ => {
            let started = Instant::now();
            while pe.g(first, 0).await? == 0 && started.elapsed() < PATIENCE {
                tokio::task::yield_now().await;
            }
            let refused = team.alltoall(dest.slice(..whole), source, whole).await;
            pe.p(flags.at(0), round, 0).await?;
            refused
        }
    };
    match (me, outcome) {
        (2, Err(Error::OutOfBounds { .. })) | (0 | 1, Err(Error::CollectiveMismatch { .. })) => {
            Ok(())
        }
        (_, other) => Err(Error::InvalidArgument(format!(
            "round {round}, PE {me}: {other:?}, expected PE 2's call refused and the \
             others' failing"
        ))),
    }
}

/// Waits, [`PATIENCE`] at most, until this PE's `flag` holds at least `value`.
async fn wait_for_flag(pe: &Pe, flag: SymSlice<'_, u64>, value: u64, what: &str) -> Result<()> {
    let started = Instant::now();
    while pe.g(flag, pe.my_pe()).await? < value {
        if started.elapsed() > PATIENCE {
            return Err(Error::InvalidArgument(format!(
                "waited {PATIENCE:?} for {what}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// Bounds one call of the tests below: a call that a mismatch left waiting for ever fails
/// instead of hanging the test.
async fn within<T>(what: &str, call: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    match tokio::time::timeout(PATIENCE, call).await {
        Ok(done) => done,
        Err(_) => Err(Error::InvalidArgument(format!(
            "{what} still waiting after {PATIENCE:?}"
        ))),
    }
}

/// Mismatched calls against the others' pairwise `alltoall` of 4 KiB blocks (one member, a
/// different one each round, calls a flat `alltoall` of 8 KiB blocks, a pairwise one of
/// 2 KiB, or `sync`), each followed at once, with no barrier between, by a matching pairwise
/// call, a reduction of 8 KiB (a tree, whose signals carry the team's count of signalled
/// collectives) and another pairwise call: every mismatch is reported, and the team stays
/// usable for the calls after it however far ahead one member runs.
#[test]
fn matching_calls_right_after_a_pairwise_mismatch_complete() {
    job(|pe| async move {
        let (me, whole) = (pe.my_pe(), Collective::AlltoallPairwise.block());
        let source = pe.calloc::<u64>(2 * N * whole).await?;
        let dest = pe.calloc::<u64>(2 * N * whole).await?;
        let summed = pe.calloc::<u64>(2 * 1024).await?;
        let mine = Collective::AlltoallPairwise.source(me, whole);
        pe.put(source.slice(..mine.len()), &mine, me).await?;
        pe.put(summed.slice(..1024), &[me as u64 + 1; 1024], me)
            .await?;
        pe.barrier_all().await?;
        let world = pe.team_world();
        for round in 0..1000 {
            let what = format!("round {round}: the mismatched call");
            let odd_one = me == round % N;
            let mismatched = match (odd_one, round / N % 3) {
                (false, _) => within(&what, world.alltoall(&dest, &source, whole)).await,
                (true, 0) => within(&what, world.alltoall(&dest, &source, 2 * whole)).await,
                (true, 1) => within(&what, world.alltoall(&dest, &source, whole / 2)).await,
                (true, _) => within(&what, world.sync()).await,
            };
            match mismatched {
                Err(Error::CollectiveMismatch { .. }) => {}
                other => return Err(Error::InvalidArgument(format!("{what}: {other:?}"))),
            }
            let matching = call_and_check(Collective::AlltoallPairwise, &pe, &dest, &source);
            within("the next alltoall", matching).await?;
            let reduce = world.sum_reduce(summed.slice(1024..), summed.slice(..1024));
            within("the reduction", reduce).await?;
            let total = pe.g(summed.at(2047), me).await?;
            if total != (N * (N + 1) / 2) as u64 {
                return Err(Error::InvalidArgument(format!(
                    "round {round}: sum {total}"
                )));
            }
            let matching = call_and_check(Collective::AlltoallPairwise, &pe, &dest, &source);
            within("the alltoall after the reduction", matching).await?;
        }
        Ok(())
    });
}
