//! Published writes over the fabric (`tcp;ofi_rxm` on loopback): a `PutPublished` write's
//! last word becomes the first word of the line it starts in once the whole write has
//! landed, so a reader that sees the flag move sees the data, on fresh connections too; and
//! notices that would publish from outside the segment, or with no flag before the write,
//! change nothing at the target. Skipped, saying so, where libfabric is not installed;
//! `.ci/run` installs it.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::{available, two_nodes, view, within, Node, HEAP};

use ferroshmem_net::{wake_on_notice, FabricRemote};
use ferroshmem_runtime::route::{Remote, RemoteOp};
use ferroshmem_runtime::segment::HEADER_SIZE;
use ferroshmem_runtime::{Cmp, Error, Segment};

/// Words of data in each published write.
const WORDS: usize = 512;
/// Heap offset of the flag word; the data follows it.
const FLAG: usize = 4096;

/// The bytes of a published write of round `k`: `k` in every data word, then `k` to publish.
fn message(k: u64) -> Vec<u8> {
    let mut bytes: Vec<u8> = bytemuck::cast_slice(&vec![k; WORDS]).to_vec();
    bytes.extend_from_slice(&k.to_ne_bytes());
    bytes
}

/// PE 0 sends `rounds` published writes to PE 1 (round k: data k, flag k) while PE 1 checks,
/// each time it sees the flag move, that the data is at least as new.
async fn published_writes(a: &Node, b: &Node, rounds: u64) {
    let remote = FabricRemote::new(a.fabric.clone(), a.targets.clone());
    let reader = {
        let dp = b.dp.clone();
        tokio::spawn(async move {
            let flag = view::<u64>(FLAG, 1);
            let data = view::<u64>(FLAG + 8, WORDS);
            let mut last = 0;
            while last < rounds {
                dp.wait_until(&flag, Cmp::Gt, last).await?;
                let seen = dp.g(flag.at(0), 1).await?;
                let mut got = vec![0u64; WORDS];
                dp.get(&mut got, &data, 1).await?;
                if let Some(i) = got.iter().position(|&v| v < seen) {
                    return Err(Error::InvalidArgument(format!(
                        "flag {seen} seen before its data: element {i} is {}",
                        got[i]
                    )));
                }
                last = seen;
            }
            std::mem::forget((flag, data));
            Ok::<_, Error>(())
        })
    };
    within("published writes", async {
        let at = HEADER_SIZE + FLAG + 8;
        let mut sent = Vec::new();
        for k in 1..=rounds {
            sent.push(remote.start(1, at, RemoteOp::PutPublished(message(k))));
        }
        for write in sent {
            write.await.expect("the write completes");
        }
    })
    .await;
    within("the reader", reader)
        .await
        .expect("task")
        .expect("data before every flag");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_flag_is_never_seen_before_its_data() {
    if !available() {
        return;
    }
    // Fresh connections included: a new pair each time.
    for _ in 0..4 {
        let [a, b] = two_nodes(|r| r);
        published_writes(&a, &b, 200).await;
        let flag = view::<u64>(FLAG, 1);
        assert_eq!(b.dp.g(flag.at(0), 1).await, Ok(200), "the last flag stays");
        std::mem::forget(flag);
    }
}

/// The word at mapping offset `at` of `segment`.
fn word(segment: &Segment, at: usize) -> u64 {
    segment
        .mapping()
        .atomic::<AtomicU64>(at)
        .load(Ordering::SeqCst)
}

#[test]
fn a_notice_that_would_publish_out_of_place_changes_nothing() {
    let segment = Segment::create(0, HEAP).expect("segment");
    let len = segment.mapping().len();
    let pattern: Vec<u8> = (0..64u8).collect();
    segment.mapping().write(HEADER_SIZE, &pattern);
    segment.mapping().write(len - 64, &pattern);
    let publish = |at: u64, bytes: u64| at | (1 << 39) | (bytes << 40);
    let hostile = [
        // Starting at a line's first word: no flag before the write (offset 0 among them).
        publish(0, 16),
        publish(HEADER_SIZE as u64, 16),
        // Shorter than the word it would publish.
        publish(HEADER_SIZE as u64 + 16, 4),
        // Past the end of the mapping.
        publish(len as u64 - 32, 64),
        // "To the end": no exact end to take the word from.
        publish(HEADER_SIZE as u64 + 16, (1 << 24) - 1),
    ];
    for notice in hostile {
        wake_on_notice(&segment, notice);
    }
    let mut head = vec![0u8; 64];
    segment.mapping().read(HEADER_SIZE, &mut head);
    let mut tail = vec![0u8; 64];
    segment.mapping().read(len - 64, &mut tail);
    assert_eq!(
        (head, tail),
        (pattern.clone(), pattern),
        "nothing was published"
    );
    // A well-placed one publishes: the line's first word takes the write's last word, also
    // from a write that starts past the line's second word.
    segment.mapping().write(HEADER_SIZE, &0u64.to_ne_bytes());
    segment
        .mapping()
        .write(HEADER_SIZE + 40, &7u64.to_ne_bytes());
    wake_on_notice(&segment, publish(HEADER_SIZE as u64 + 16, 32));
    assert_eq!(word(&segment, HEADER_SIZE), 7);
    // Notices handed on out of order never take a flag back.
    segment
        .mapping()
        .write(HEADER_SIZE + 40, &9u64.to_ne_bytes());
    wake_on_notice(&segment, publish(HEADER_SIZE as u64 + 16, 32));
    segment
        .mapping()
        .write(HEADER_SIZE + 40, &8u64.to_ne_bytes());
    wake_on_notice(&segment, publish(HEADER_SIZE as u64 + 16, 32));
    assert_eq!(
        word(&segment, HEADER_SIZE),
        9,
        "the flag stays at the larger value"
    );
}
