//! What each PE of the `gpu` handler announces over the control plane: how its NIC is
//! reached ([`Endpoint`]), its GPU heap's base and remote key, and, per PE of the job, the
//! QP it made toward that PE (0 where none). NVSHMEM's `ibgda_rc_handle` carries the same
//! (`qpn`, `lid`, the GID's halves), and the heap's keys travel beside it.

use ferroshmem_runtime::{Error, Result};

use super::setup::Endpoint;

/// The announcement's first bytes (`FSHG`, version 1).
const MAGIC: [u8; 5] = *b"FSHG\x01";
/// Bytes before the per-PE QP numbers.
const FIXED: usize = MAGIC.len() + 2 + 1 + 16 + 6 + 4 + 8 + 4;

/// One PE's announcement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announce {
    /// How its NIC is reached.
    pub endpoint: Endpoint,
    /// Its GPU heap's remote key.
    pub rkey: u32,
    /// Its GPU heap's base address (the address its MR names).
    pub base: u64,
    /// Per PE of the job: the QP it made toward that PE, 0 where none.
    pub qpns: Vec<u32>,
}

/// The announcement's bytes.
pub fn encode(a: &Announce) -> Vec<u8> {
    let mut out = Vec::with_capacity(FIXED + 4 * a.qpns.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&a.endpoint.lid.to_le_bytes());
    out.push(u8::from(a.endpoint.ethernet));
    out.extend_from_slice(&a.endpoint.gid);
    out.extend_from_slice(&a.endpoint.mac);
    out.extend_from_slice(&a.rkey.to_le_bytes());
    out.extend_from_slice(&a.base.to_le_bytes());
    out.extend_from_slice(&(a.qpns.len() as u32).to_le_bytes());
    for q in &a.qpns {
        out.extend_from_slice(&q.to_le_bytes());
    }
    out
}

/// An announcement from `bytes` (PE `pe`'s): a typed error, never a panic, when they are
/// not one.
pub fn decode(pe: usize, bytes: &[u8]) -> Result<Announce> {
    let bad = |why: &str| Error::Config(format!("PE {pe}'s gpu NIC handler announcement: {why}"));
    if bytes.len() < FIXED || bytes[..MAGIC.len()] != MAGIC {
        return Err(bad("not one (another handler, or another version)"));
    }
    let mut at = MAGIC.len();
    let mut take = |n: usize| {
        let s = &bytes[at..at + n];
        at += n;
        s
    };
    let lid = u16::from_le_bytes(take(2).try_into().map_err(|_| bad("lid"))?);
    let ethernet = take(1)[0] != 0;
    let gid: [u8; 16] = take(16).try_into().map_err(|_| bad("gid"))?;
    let mac: [u8; 6] = take(6).try_into().map_err(|_| bad("mac"))?;
    let rkey = u32::from_le_bytes(take(4).try_into().map_err(|_| bad("rkey"))?);
    let base = u64::from_le_bytes(take(8).try_into().map_err(|_| bad("base"))?);
    let n = u32::from_le_bytes(take(4).try_into().map_err(|_| bad("count"))?) as usize;
    let rest = &bytes[FIXED..];
    if rest.len() != 4 * n {
        return Err(bad(&format!(
            "{} bytes of QP numbers for {n} PEs",
            rest.len()
        )));
    }
    let qpns = rest
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(Announce {
        endpoint: Endpoint {
            lid,
            ethernet,
            gid,
            mac,
        },
        rkey,
        base,
        qpns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Announce {
        Announce {
            endpoint: Endpoint {
                lid: 0x1234,
                ethernet: true,
                gid: [7; 16],
                mac: [1, 2, 3, 4, 5, 6],
            },
            rkey: 0xdead_beef,
            base: 0x7f00_0000_1000,
            qpns: vec![0, 0x11, 0x22_3344],
        }
    }

    #[test]
    fn an_announcement_reads_back_as_written() {
        let a = sample();
        assert_eq!(decode(1, &encode(&a)).expect("valid"), a);
    }

    #[test]
    fn a_short_or_foreign_announcement_is_a_typed_error() {
        let bytes = encode(&sample());
        for len in [0, 3, FIXED - 1, bytes.len() - 1] {
            assert!(decode(2, &bytes[..len]).is_err(), "{len} bytes");
        }
        let mut other = bytes.clone();
        other[4] = 2;
        assert!(decode(2, &other).is_err(), "another version");
        let mut longer = bytes;
        longer.push(0);
        assert!(decode(2, &longer).is_err(), "a trailing byte");
    }
}
