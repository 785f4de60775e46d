//! A soak of random one-sided traffic among 4 PEs — put, put_nbi, p, get, g, fetch_add, add,
//! xor, put_signal — with a checksum scheme that catches a lost or corrupted update, and a
//! self-check that the scheme does catch one deliberately dropped.
//!
//! # The scheme
//! Every PE owns, on every target, a row of cells that only it writes, and keeps a ledger of
//! what it wrote there. A cell holds a sequence number and a check of (writer, target, cell,
//! sequence): a torn, misplaced or corrupted write fails its check, and a lost one leaves an
//! older sequence number than the ledger's. Reads of its own cells are checked at once (puts
//! complete before they return). Each target also has one counter every PE adds to and one
//! word every PE xors into, whose ledgers are summed and xored at the end, and a mailbox per
//! writer of a put-with-signal: its signal counts the puts, its data is the last one's.
//! At the end every PE puts its ledger for each target into that target's symmetric memory,
//! and every target checks its memory against all of them.
//!
//! The self-check has PE 1 record one update it never makes — an add, an xor, a put (the
//! last one into its cell) or a put-with-signal — and expects the checks to fail.

mod common;

use std::time::Duration;

use common::runtime;
use ferroshmem::{run_local, Error, Pe, Result, SignalOp, SymBuffer};

const N: usize = 4;
/// Cells each PE owns in every target's row.
const CELLS: usize = 64;
/// Words of a put-with-signal's data.
const MAIL: usize = 8;
/// Operations each PE issues.
const OPS: usize = 100_000;

/// The update PE 1 records without making it, in the self-check.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dropped {
    Nothing,
    Add,
    Xor,
    Put,
    Mail,
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The check of a cell's sequence number `seq` written by `writer` into cell `cell` of
/// `target`: any other writer, target, cell or sequence number gives another check.
fn check(writer: usize, target: usize, cell: usize, seq: u64) -> u64 {
    let mut h = seq ^ ((writer as u64) << 48) ^ ((target as u64) << 40) ^ ((cell as u64) << 32);
    h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    (h ^ (h >> 33)) & 0xffff_ffff
}

/// The word a writer stores: the sequence number above its check (0: never written).
fn cell_word(writer: usize, target: usize, cell: usize, seq: u64) -> u64 {
    (seq << 32) | check(writer, target, cell, seq)
}

/// What one PE did to one target.
#[derive(Clone, Debug, Default)]
struct Ledger {
    /// Last sequence number written into each of its cells there.
    cells: Vec<u64>,
    /// Sum of what it added to the target's counter.
    added: u64,
    /// Xor of what it xored into the target's word.
    xored: u64,
    /// Puts-with-signal it made there, and the first word of the last one's data.
    mails: u64,
    last_mail: u64,
}

impl Ledger {
    fn new() -> Self {
        Ledger {
            cells: vec![0; CELLS],
            ..Ledger::default()
        }
    }

    fn words(&self) -> Vec<u64> {
        let mut w = self.cells.clone();
        w.extend([self.added, self.xored, self.mails, self.last_mail]);
        w
    }

    fn from_words(w: &[u64]) -> Self {
        Ledger {
            cells: w[..CELLS].to_vec(),
            added: w[CELLS],
            xored: w[CELLS + 1],
            mails: w[CELLS + 2],
            last_mail: w[CELLS + 3],
        }
    }
}

const LEDGER_WORDS: usize = CELLS + 4;

/// One PE's symmetric memory for the soak.
struct Memory {
    /// `[writer][cell]`: the cells each writer owns here.
    cells: SymBuffer<u64>,
    counter: SymBuffer<u64>,
    xor: SymBuffer<u64>,
    /// `[writer][word]`: each writer's mailbox, and its signal.
    mail: SymBuffer<u64>,
    signals: SymBuffer<u64>,
    /// `[writer]`: the ledgers the writers put here at the end.
    ledgers: SymBuffer<u64>,
}

impl Memory {
    async fn new(pe: &Pe) -> Result<Memory> {
        Ok(Memory {
            cells: pe.calloc(N * CELLS).await?,
            counter: pe.calloc(1).await?,
            xor: pe.calloc(1).await?,
            mail: pe.calloc(N * MAIL).await?,
            signals: pe.calloc(N).await?,
            ledgers: pe.calloc(N * LEDGER_WORDS).await?,
        })
    }
}

/// A mismatch found.
fn lost(what: String) -> Error {
    Error::InvalidArgument(format!("soak: {what}"))
}

/// Issues this PE's random traffic, keeping its ledgers, then one more update of each kind
/// to PE 2 (the last into its cell there); on PE 1, `dropped` names one of those that is
/// recorded but not made, which the checks must catch.
async fn traffic(pe: &Pe, m: &Memory, dropped: Dropped) -> Result<Vec<Ledger>> {
    let me = pe.my_pe();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (me as u64 + 1));
    let mut ledgers = vec![Ledger::new(); N];
    let last = |kind: usize| [2, 4, 6, 7][kind];
    for op in 0..OPS + 4 {
        let (t, cell, kind) = match op.checked_sub(OPS) {
            None => (rng.below(N), rng.below(CELLS), rng.below(8)),
            Some(k) => (2, 0, last(k)),
        };
        let at = me * CELLS + cell;
        let dropped = me == 1
            && op >= OPS
            && match kind {
                2 => dropped == Dropped::Put,
                4 => dropped == Dropped::Add,
                6 => dropped == Dropped::Xor,
                _ => dropped == Dropped::Mail,
            };
        match kind {
            0..=2 => {
                let seq = ledgers[t].cells[cell] + 1;
                let word = cell_word(me, t, cell, seq);
                if !dropped {
                    match rng.below(3) {
                        0 => pe.put(m.cells.slice(at..at + 1), &[word], t).await?,
                        1 => pe.put_nbi(m.cells.slice(at..at + 1), &[word], t)?,
                        _ => pe.p(m.cells.at(at), word, t).await?,
                    }
                }
                ledgers[t].cells[cell] = seq;
            }
            3 => {
                pe.quiet().await?;
                let got = pe.g(m.cells.at(at), t).await?;
                let seq = ledgers[t].cells[cell];
                let want = if seq == 0 {
                    0
                } else {
                    cell_word(me, t, cell, seq)
                };
                if got != want {
                    return Err(lost(format!(
                        "PE {me} read {got:#x} from its cell {cell} on PE {t}, not {want:#x}"
                    )));
                }
            }
            4 => {
                let v = rng.next() >> 20;
                if !dropped {
                    pe.atomic_fetch_add(m.counter.at(0), v, t).await?;
                }
                ledgers[t].added = ledgers[t].added.wrapping_add(v);
            }
            5 => {
                let v = rng.next() >> 20;
                if !dropped {
                    pe.atomic_add(m.counter.at(0), v, t).await?;
                }
                ledgers[t].added = ledgers[t].added.wrapping_add(v);
            }
            6 => {
                let v = rng.next();
                if !dropped {
                    pe.atomic_xor(m.xor.at(0), v, t).await?;
                }
                ledgers[t].xored ^= v;
            }
            _ => {
                let first = rng.next();
                let data: Vec<u64> = (0..MAIL as u64).map(|i| first.wrapping_add(i)).collect();
                let mailbox = m.mail.slice(me * MAIL..(me + 1) * MAIL);
                if !dropped {
                    pe.put_signal(mailbox, &data, m.signals.at(me), 1, SignalOp::Add, t)
                        .await?;
                }
                ledgers[t].mails += 1;
                ledgers[t].last_mail = first;
            }
        }
    }
    pe.quiet().await?;
    Ok(ledgers)
}

/// Checks this PE's memory against every writer's ledger for it.
async fn verify(pe: &Pe, m: &Memory) -> Result<()> {
    let me = pe.my_pe();
    let mut all = vec![0u64; N * LEDGER_WORDS];
    pe.get(&mut all, &m.ledgers, me).await?;
    let mut cells = vec![0u64; N * CELLS];
    pe.get(&mut cells, &m.cells, me).await?;
    let mut mail = vec![0u64; N * MAIL];
    pe.get(&mut mail, &m.mail, me).await?;
    let (mut added, mut xored) = (0u64, 0u64);
    for w in 0..N {
        let ledger = Ledger::from_words(&all[w * LEDGER_WORDS..(w + 1) * LEDGER_WORDS]);
        for (cell, &seq) in ledger.cells.iter().enumerate() {
            let got = cells[w * CELLS + cell];
            let want = if seq == 0 {
                0
            } else {
                cell_word(w, me, cell, seq)
            };
            if got != want {
                return Err(lost(format!(
                    "PE {me}'s cell {cell} of PE {w} holds {got:#x}, PE {w} wrote {want:#x} last"
                )));
            }
        }
        added = added.wrapping_add(ledger.added);
        xored ^= ledger.xored;
        let signals = pe.g(m.signals.at(w), me).await?;
        if signals != ledger.mails {
            return Err(lost(format!(
                "PE {me} counted {signals} puts-with-signal of PE {w}, which made {}",
                ledger.mails
            )));
        }
        let data = &mail[w * MAIL..(w + 1) * MAIL];
        let intact = (0..MAIL).all(|i| data[i] == ledger.last_mail.wrapping_add(i as u64));
        if ledger.mails > 0 && !intact {
            return Err(lost(format!("PE {me}'s mailbox of PE {w} holds {data:x?}")));
        }
    }
    let counter = pe.g(m.counter.at(0), me).await?;
    let xor = pe.g(m.xor.at(0), me).await?;
    if counter != added || xor != xored {
        return Err(lost(format!(
            "PE {me}'s counter is {counter} (added: {added}), its xor {xor:#x} ({xored:#x})"
        )));
    }
    Ok(())
}

/// Runs the soak; `dropped` is the update PE 1 records without making it.
fn soak(dropped: Dropped) -> Vec<Result<()>> {
    std::env::set_var("FERROSHMEM_SYMMETRIC_SIZE", "8M");
    let job = run_local(N, move |pe| async move {
        let m = Memory::new(&pe).await?;
        let ledgers = traffic(&pe, &m, dropped).await?;
        pe.barrier_all().await?;
        let me = pe.my_pe();
        for (t, ledger) in ledgers.iter().enumerate() {
            let mine = m.ledgers.slice(me * LEDGER_WORDS..(me + 1) * LEDGER_WORDS);
            pe.put(mine, &ledger.words(), t).await?;
        }
        pe.barrier_all().await?;
        let verdict = verify(&pe, &m).await;
        std::mem::forget(m);
        Ok::<_, Error>(verdict)
    });
    runtime()
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), job).await })
        .expect("the soak ended in time")
        .expect("job")
        .into_iter()
        .map(|pe| pe.and_then(|verdict| verdict))
        .collect()
}

#[test]
fn random_traffic_among_four_pes_loses_and_corrupts_nothing() {
    for (pe, verdict) in soak(Dropped::Nothing).into_iter().enumerate() {
        verdict.unwrap_or_else(|e| panic!("PE {pe}: {e}"));
    }
}

#[test]
fn a_deliberately_dropped_update_is_caught() {
    for dropped in [Dropped::Add, Dropped::Xor, Dropped::Put, Dropped::Mail] {
        let verdicts = soak(dropped);
        assert!(
            verdicts.iter().any(Result::is_err),
            "the checks missed {dropped:?}, which PE 1 never made: {verdicts:?}"
        );
    }
}
