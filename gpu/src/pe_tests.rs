//! Set-up's second round read without a GPU: who is mapped, who shares this PE's GPU, and
//! the messages that fail the job.

use super::{put_bytes, read_peers};
use crate::fd_share::TOKEN_LEN;

/// PE `pe`'s second-round message: a GPU `uuid`, a heap of `stride` bytes, process `pid`.
fn message(uuid: u8, stride: u64, pid: u32) -> Vec<u8> {
    let mut msg = vec![1];
    put_bytes(&mut msg, &[uuid; 16]);
    put_bytes(&mut msg, &stride.to_le_bytes());
    put_bytes(&mut msg, &[uuid; TOKEN_LEN]);
    put_bytes(&mut msg, &pid.to_le_bytes());
    msg
}

#[test]
fn peers_of_other_nodes_are_not_mapped_and_sharers_are_found() {
    let me = std::process::id();
    // PEs 0 and 1 on node 0 (GPU 7; PE 1 in this process), PE 2 on node 0's GPU 8 in another
    // process, PE 3 on node 1 with a GPU whose uuid equals ours (another machine's).
    let all = vec![
        message(7, 64, me),
        message(7, 64, me),
        message(8, 64, me + 1),
        message(7, 64, me + 2),
    ];
    let (peers, same_gpu) = read_peers(&all, &[0, 0, 0, 1], 0, [7; 16], 64).unwrap();
    let mapped: Vec<bool> = peers.iter().map(Option::is_some).collect();
    assert_eq!(mapped, [true, true, true, false]);
    assert_eq!(peers[2].unwrap().0, [8; 16]);
    assert_eq!(same_gpu, [(1, true)]);
}

#[test]
fn a_pe_without_a_gpu_another_heap_size_or_a_short_message_fails_the_set_up() {
    let me = std::process::id();
    let mut no_gpu = vec![0];
    put_bytes(&mut no_gpu, b"no driver");
    let refused = read_peers(&[message(7, 64, me), no_gpu], &[0, 0], 0, [7; 16], 64);
    assert!(refused.unwrap_err().to_string().contains("no driver"));
    let sizes = read_peers(
        &[message(7, 64, me), message(7, 128, me)],
        &[0, 1],
        0,
        [7; 16],
        64,
    );
    assert!(sizes
        .unwrap_err()
        .to_string()
        .contains("FERROSHMEM_SYMMETRIC_SIZE"));
    let short = read_peers(&[vec![1, 3, 0]], &[0], 0, [7; 16], 64);
    assert!(short.is_err());
    // A job whose node list is shorter than its messages: no panic, the PE just is not
    // mapped.
    let (peers, _) = read_peers(
        &[message(7, 64, me), message(7, 64, me)],
        &[0],
        0,
        [7; 16],
        64,
    )
    .unwrap();
    assert!(peers[1].is_none());
}
