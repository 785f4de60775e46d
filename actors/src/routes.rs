//! Choosing each peer's route at bootstrap: PEs of this node are mapped (their segments
//! exchanged over Unix sockets, see `segment_exchange`), PEs of other nodes are
//! reached through the fabric, whose endpoint names and heap keys every PE contributes to one
//! allgather here.
//!
//! # The fabric's settings
//! `FERROSHMEM_FABRIC_PROVIDER` names the libfabric provider (default `tcp;ofi_rxm`);
//! `FERROSHMEM_FABRIC_ADDRESS` the local address the endpoint binds to (default: the
//! address this host reaches the bootstrap root from). Each PE registers its segment under
//! a random key, so that a stray connection to its endpoint cannot name its memory.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;

use ferroshmem_net::{wake_on_notice, Fabric, FabricOptions, FabricRemote, Registered, Target};
use ferroshmem_runtime::route::{Remote, Route};
use ferroshmem_runtime::{Error, Result, Segment};

use crate::launch_env::random_bytes;

/// The provider variable.
pub const PROVIDER_VAR: &str = "FERROSHMEM_FABRIC_PROVIDER";
/// The local address variable.
pub const ADDRESS_VAR: &str = "FERROSHMEM_FABRIC_ADDRESS";
/// The provider used when none is named.
pub const DEFAULT_PROVIDER: &str = "tcp;ofi_rxm";

/// What one PE tells the others of its fabric endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contact {
    /// The endpoint's address, as libfabric names it.
    pub name: Vec<u8>,
    /// The registered segment.
    pub registered: Registered,
    /// Its usable heap bytes (every PE's must match).
    pub heap_size: u64,
}

impl Contact {
    /// The bytes of an allgather contribution.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(28 + self.name.len());
        out.extend_from_slice(&(self.name.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.name);
        out.extend_from_slice(&self.registered.key.to_le_bytes());
        out.extend_from_slice(&self.registered.base.to_le_bytes());
        out.extend_from_slice(&self.heap_size.to_le_bytes());
        out
    }

    /// Reads PE `pe`'s contribution.
    ///
    /// # Errors
    /// [`Error::Bootstrap`] when the bytes are not a contact.
    pub fn decode(pe: usize, bytes: &[u8]) -> Result<Contact> {
        let bad = || Error::Bootstrap(format!("PE {pe} sent a malformed fabric contact"));
        let (len, rest) = bytes.split_first_chunk::<4>().ok_or_else(bad)?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() != len + 24 {
            return Err(bad());
        }
        let (name, words) = rest.split_at(len);
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&words[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        Ok(Contact {
            name: name.to_vec(),
            registered: Registered {
                key: word(0),
                base: word(1),
            },
            heap_size: word(2),
        })
    }
}

/// This PE's fabric endpoint, opened and its segment registered, before the exchange.
#[derive(Debug)]
pub struct Joining {
    fabric: Arc<Fabric>,
    contact: Contact,
}

impl Joining {
    /// Opens this PE's endpoint (settings from the environment; `root` is where the
    /// bootstrap root was reached) and registers `own` under a random key.
    ///
    /// # Errors
    /// [`Error::Config`] when libfabric is missing or no provider serves the settings.
    pub fn open(own: &Arc<Segment>, root: Option<SocketAddr>) -> Result<Joining> {
        let provider = env(PROVIDER_VAR).unwrap_or_else(|| DEFAULT_PROVIDER.into());
        let node =
            env(ADDRESS_VAR).or_else(|| root.and_then(source_towards).map(|ip| ip.to_string()));
        let wake = own.clone();
        let fabric = Fabric::open(
            &FabricOptions {
                provider: Some(provider),
                node,
            },
            move |notice| wake_on_notice(&wake, notice),
        )?;
        let key = u64::from_le_bytes(random_bytes()?);
        let registered = fabric.register(own.clone(), key)?;
        Ok(Joining {
            contact: Contact {
                name: fabric.name()?,
                registered,
                heap_size: own.heap_size() as u64,
            },
            fabric: Arc::new(fabric),
        })
    }

    /// What the others need to reach this PE.
    pub fn contact(&self) -> &Contact {
        &self.contact
    }

    /// Reaches the PEs whose `local` entry is false through the fabric, from everyone's
    /// contacts (indexed by PE).
    ///
    /// # Errors
    /// [`Error::Bootstrap`] for a malformed contact or a heap size that differs.
    pub fn connect(self, contacts: &[Vec<u8>], local: &[bool]) -> Result<Arc<FabricRemote>> {
        let contacts = contacts
            .iter()
            .enumerate()
            .map(|(pe, bytes)| Contact::decode(pe, bytes))
            .collect::<Result<Vec<_>>>()?;
        if let Some(pe) = contacts
            .iter()
            .position(|c| c.heap_size != self.contact.heap_size)
        {
            return Err(Error::Bootstrap(format!(
                "PE {pe} has a symmetric heap of {} bytes, this PE {}: set the same FERROSHMEM_SYMMETRIC_SIZE everywhere",
                contacts[pe].heap_size, self.contact.heap_size
            )));
        }
        let names: Vec<Vec<u8>> = contacts.iter().map(|c| c.name.clone()).collect();
        let peers = self.fabric.connect(&names)?;
        let targets = contacts
            .iter()
            .zip(peers)
            .zip(local)
            .map(|((c, peer), &local)| {
                (!local).then_some(Target {
                    peer,
                    registered: c.registered,
                })
            })
            .collect();
        Ok(Arc::new(FabricRemote::new(self.fabric, targets)))
    }
}

/// How a PE reaches every PE of its job: a route per PE, and the transport of the remote
/// ones.
#[derive(Debug)]
pub struct PeerRoutes {
    /// Indexed by PE.
    pub routes: Vec<Route>,
    /// The transport of the `Remote` routes.
    pub remote: Option<Arc<dyn Remote>>,
    /// The node of every PE (see [`node_numbers`]).
    pub nodes: Vec<usize>,
    /// How many of the job's PEs run on this PE's machine (see
    /// `DataPlaneParts::machine_pes`).
    pub machine_pes: usize,
}

impl PeerRoutes {
    /// Every PE mapped: `segments`, indexed by PE.
    pub fn mapped(segments: Vec<Arc<Segment>>) -> PeerRoutes {
        PeerRoutes {
            nodes: vec![0; segments.len()],
            machine_pes: segments.len(),
            routes: segments.into_iter().map(Route::Mapped).collect(),
            remote: None,
        }
    }

    /// The segments mapped here (indexed by PE, `None` elsewhere), the fabric that
    /// reaches the others, every PE's node, and the number of PEs on this PE's machine.
    pub fn new(
        segments: Vec<Option<Arc<Segment>>>,
        remote: Option<Arc<FabricRemote>>,
        nodes: Vec<usize>,
        machine_pes: usize,
    ) -> Self {
        PeerRoutes {
            nodes,
            machine_pes,
            routes: segments
                .into_iter()
                .map(|s| s.map_or(Route::Remote, Route::Mapped))
                .collect(),
            remote: remote.map(|r| r as Arc<dyn Remote>),
        }
    }
}

/// Numbers the nodes of a job from every PE's node key (indexed by PE): the node of PE 0 is
/// 0, the next key not seen before 1, and so on, alike on every PE.
pub fn node_numbers(keys: &[String]) -> Vec<usize> {
    let mut seen: Vec<&str> = Vec::new();
    keys.iter()
        .map(|key| match seen.iter().position(|k| *k == key.as_str()) {
            Some(node) => node,
            None => {
                seen.push(key);
                seen.len() - 1
            }
        })
        .collect()
}

/// The local address this host sends from towards `to` (no packet is sent).
pub fn source_towards(to: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = if to.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0))
    };
    let socket = UdpSocket::bind(any).ok()?;
    socket.connect(to).ok()?;
    socket.local_addr().ok().map(|a| a.ip())
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contact_survives_its_encoding_and_a_short_one_is_refused() {
        let c = Contact {
            name: vec![1, 2, 3, 4, 5],
            registered: Registered { key: 77, base: 0 },
            heap_size: 1 << 20,
        };
        let bytes = c.encode();
        assert_eq!(Contact::decode(3, &bytes), Ok(c));
        for cut in 0..bytes.len() {
            assert!(Contact::decode(3, &bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(Contact::decode(3, &[bytes.as_slice(), &[0]].concat()).is_err());
    }

    #[test]
    fn nodes_are_numbered_by_first_appearance() {
        let keys: Vec<String> = ["b", "a", "b", "c", "a"].map(String::from).to_vec();
        assert_eq!(node_numbers(&keys), vec![0, 1, 0, 2, 1]);
        assert_eq!(node_numbers(&[]), Vec::<usize>::new());
    }
}
