//! The control plane's messages and their byte encoding: little-endian fields behind a tag
//! byte, carried in length-prefixed frames over TCP (or moved as values in one process).

use ferroshmem_runtime::{Error, Result};

/// Largest frame accepted (guards against a peer that is not ferroshmem).
pub const MAX_FRAME: usize = 64 << 20;

/// A message from a PE to the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromPe {
    /// First message on a connection: who the PE is, and the job's secret.
    Hello(Hello),
    /// One PE's part of a control-plane allgather.
    Contribute(Contribution),
    /// The PE is failing and the job should stop.
    Fail {
        /// Why.
        reason: String,
    },
    /// The PE finished cleanly; its disconnection is not a failure.
    Goodbye,
    /// The PE has begun to finalize: it makes no more collective calls. For each group it
    /// has used, the sequence number of the call it will never make.
    Finalizing {
        /// `(group, next sequence number)` of every group the PE has made calls in.
        next: Vec<(u64, u64)>,
    },
    /// The PE ends the whole job with `status` (`shmem_global_exit`).
    GlobalExit {
        /// The status every PE is to exit with.
        status: i32,
    },
}

/// The PE's introduction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The job's secret.
    pub secret: Vec<u8>,
    /// The PE's number.
    pub rank: u32,
    /// The number of PEs the PE was told the job has.
    pub size: u32,
    /// The PE's node key (PEs with equal keys share memory).
    pub node: String,
    /// The PE's process id.
    pub pid: u32,
}

/// One contribution to an allgather among `size` PEs, identified by `(group, seq)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contribution {
    /// The group (0 is the world).
    pub group: u64,
    /// The group's collective sequence number.
    pub seq: u64,
    /// The contributor's index in the group.
    pub index: u32,
    /// The number of contributors.
    pub size: u32,
    /// The bytes contributed.
    pub payload: Vec<u8>,
}

/// A message from the root to a PE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToPe {
    /// Every PE has joined.
    Welcome(Welcome),
    /// An allgather completed: payloads in contributor-index order.
    Gathered {
        /// The group.
        group: u64,
        /// The sequence number.
        seq: u64,
        /// Payloads by index.
        payloads: Vec<Vec<u8>>,
    },
    /// An allgather failed (its members disagreed, or one refused its own call): every
    /// member is told why.
    GatherFailed {
        /// The group.
        group: u64,
        /// The sequence number.
        seq: u64,
        /// Why, naming the PEs involved.
        reason: String,
    },
    /// A PE was lost: the job cannot continue.
    PeerLost {
        /// The PE.
        pe: u32,
        /// Why.
        reason: String,
    },
    /// The root refused or aborted the job.
    Refused {
        /// Why.
        reason: String,
    },
    /// PE `pe` finalized and left the job: it makes no call and sends no signal any more.
    Finished {
        /// The PE.
        pe: u32,
    },
    /// PE `pe` ended the whole job with `status`: every PE is to exit with it. The PE that
    /// called it hears it last, once the others have left (or a while has passed).
    GlobalExit {
        /// The PE that called `global_exit`.
        pe: u32,
        /// The status to exit with.
        status: i32,
    },
}

/// What every PE learns when the job has formed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// Random identity of the job (names its heap and sockets).
    pub job: u64,
    /// Node key of each PE.
    pub nodes: Vec<String>,
    /// Process id of each PE.
    pub pids: Vec<u32>,
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
}

struct Reader<'a>(&'a [u8]);

fn malformed() -> Error {
    Error::Bootstrap(
        "malformed control message (is the peer a ferroshmem PE of this version?)".into(),
    )
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.0.len() < n {
            return Err(malformed());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| malformed())?,
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| malformed())?,
        ))
    }
    fn bytes(&mut self) -> Result<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn string(&mut self) -> Result<String> {
        String::from_utf8(self.bytes()?).map_err(|_| malformed())
    }
    fn end(&self) -> Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(malformed())
        }
    }
}

impl FromPe {
    /// Encodes the message.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        match self {
            FromPe::Hello(h) => {
                w.u8(1)
                    .bytes(&h.secret)
                    .u32(h.rank)
                    .u32(h.size)
                    .bytes(h.node.as_bytes())
                    .u32(h.pid);
            }
            FromPe::Contribute(c) => {
                w.u8(2)
                    .u64(c.group)
                    .u64(c.seq)
                    .u32(c.index)
                    .u32(c.size)
                    .bytes(&c.payload);
            }
            FromPe::Fail { reason } => {
                w.u8(3).bytes(reason.as_bytes());
            }
            FromPe::Goodbye => {
                w.u8(4);
            }
            FromPe::Finalizing { next } => {
                w.u8(5).u32(next.len() as u32);
                for &(group, seq) in next {
                    w.u64(group).u64(seq);
                }
            }
            FromPe::GlobalExit { status } => {
                w.u8(6).u32(*status as u32);
            }
        }
        w.0
    }

    /// Decodes a message.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader(bytes);
        let m = match r.u8()? {
            1 => FromPe::Hello(Hello {
                secret: r.bytes()?,
                rank: r.u32()?,
                size: r.u32()?,
                node: r.string()?,
                pid: r.u32()?,
            }),
            2 => FromPe::Contribute(Contribution {
                group: r.u64()?,
                seq: r.u64()?,
                index: r.u32()?,
                size: r.u32()?,
                payload: r.bytes()?,
            }),
            3 => FromPe::Fail {
                reason: r.string()?,
            },
            4 => FromPe::Goodbye,
            5 => {
                let n = r.u32()? as usize;
                // Never more room than the frame's remaining bytes could fill.
                let mut next = Vec::with_capacity(n.min(r.0.len() / 16));
                for _ in 0..n {
                    next.push((r.u64()?, r.u64()?));
                }
                FromPe::Finalizing { next }
            }
            6 => FromPe::GlobalExit {
                status: r.u32()? as i32,
            },
            _ => return Err(malformed()),
        };
        r.end()?;
        Ok(m)
    }
}

impl ToPe {
    /// Encodes the message.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        match self {
            ToPe::Welcome(wl) => {
                w.u8(1).u64(wl.job).u32(wl.nodes.len() as u32);
                for (node, pid) in wl.nodes.iter().zip(&wl.pids) {
                    w.bytes(node.as_bytes()).u32(*pid);
                }
            }
            ToPe::Gathered {
                group,
                seq,
                payloads,
            } => {
                w.u8(2).u64(*group).u64(*seq).u32(payloads.len() as u32);
                for p in payloads {
                    w.bytes(p);
                }
            }
            ToPe::PeerLost { pe, reason } => {
                w.u8(3).u32(*pe).bytes(reason.as_bytes());
            }
            ToPe::Refused { reason } => {
                w.u8(4).bytes(reason.as_bytes());
            }
            ToPe::GatherFailed { group, seq, reason } => {
                w.u8(5).u64(*group).u64(*seq).bytes(reason.as_bytes());
            }
            ToPe::GlobalExit { pe, status } => {
                w.u8(6).u32(*pe).u32(*status as u32);
            }
            ToPe::Finished { pe } => {
                w.u8(7).u32(*pe);
            }
        }
        w.0
    }

    /// Decodes a message.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader(bytes);
        let m = match r.u8()? {
            1 => {
                let job = r.u64()?;
                let n = r.u32()? as usize;
                // A node takes at least 8 bytes: never more room than the frame could fill.
                let mut nodes = Vec::with_capacity(n.min(r.0.len() / 8));
                let mut pids = Vec::with_capacity(n.min(r.0.len() / 8));
                for _ in 0..n {
                    nodes.push(r.string()?);
                    pids.push(r.u32()?);
                }
                ToPe::Welcome(Welcome { job, nodes, pids })
            }
            2 => {
                let group = r.u64()?;
                let seq = r.u64()?;
                let n = r.u32()? as usize;
                // A payload takes at least its 4-byte length.
                let mut payloads = Vec::with_capacity(n.min(r.0.len() / 4));
                for _ in 0..n {
                    payloads.push(r.bytes()?);
                }
                ToPe::Gathered {
                    group,
                    seq,
                    payloads,
                }
            }
            3 => ToPe::PeerLost {
                pe: r.u32()?,
                reason: r.string()?,
            },
            4 => ToPe::Refused {
                reason: r.string()?,
            },
            5 => ToPe::GatherFailed {
                group: r.u64()?,
                seq: r.u64()?,
                reason: r.string()?,
            },
            6 => ToPe::GlobalExit {
                pe: r.u32()?,
                status: r.u32()? as i32,
            },
            7 => ToPe::Finished { pe: r.u32()? },
            _ => return Err(malformed()),
        };
        r.end()?;
        Ok(m)
    }
}

/// Reads one length-prefixed frame of at most `max` bytes (refused before anything is
/// allocated for it); `Ok(None)` at a clean end of stream.
pub async fn read_frame<R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    use tokio::io::AsyncReadExt;
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > max.min(MAX_FRAME) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "control frame of {len} bytes is over the {}-byte limit",
                max.min(MAX_FRAME)
            ),
        ));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await?;
    Ok(Some(buf))
}

/// Writes one length-prefixed frame.
pub async fn write_frame<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    body: &[u8],
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(body);
    w.write_all(&buf).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let from = [
            FromPe::Hello(Hello {
                secret: vec![1, 2, 3],
                rank: 4,
                size: 8,
                node: "n".into(),
                pid: 99,
            }),
            FromPe::Contribute(Contribution {
                group: 0,
                seq: 7,
                index: 1,
                size: 2,
                payload: vec![9; 10],
            }),
            FromPe::Fail { reason: "x".into() },
            FromPe::Goodbye,
            FromPe::Finalizing {
                next: vec![(0, 4), (9, 1)],
            },
            FromPe::GlobalExit { status: -3 },
        ];
        for m in from {
            assert_eq!(FromPe::decode(&m.encode()).unwrap(), m);
        }
        let to = [
            ToPe::Welcome(Welcome {
                job: 5,
                nodes: vec!["a".into(), "b".into()],
                pids: vec![1, 2],
            }),
            ToPe::Gathered {
                group: 1,
                seq: 2,
                payloads: vec![vec![], vec![1]],
            },
            ToPe::PeerLost {
                pe: 3,
                reason: "gone".into(),
            },
            ToPe::Refused {
                reason: "no".into(),
            },
            ToPe::GatherFailed {
                group: 1,
                seq: 3,
                reason: "PE 0 and PE 1 differ".into(),
            },
            ToPe::GlobalExit { pe: 2, status: 7 },
            ToPe::Finished { pe: 3 },
        ];
        for m in to {
            assert_eq!(ToPe::decode(&m.encode()).unwrap(), m);
        }
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(FromPe::decode(&[]).is_err());
        assert!(FromPe::decode(&[9]).is_err());
        assert!(FromPe::decode(&[2, 1]).is_err());
        let mut ok = FromPe::Goodbye.encode();
        ok.push(0);
        assert!(FromPe::decode(&ok).is_err());
    }
}
