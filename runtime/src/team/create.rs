//! Creating and destroying teams: `split_strided`, `split_2d`, `destroy`.
//!
//! A split is collective over the parent team. Its members run two allgathers through the
//! control plane ([`Exchange::exchange`]) in a group whose id every member derives alike
//! from the parent's id and the parent's split counter:
//!
//! 1. each sends its arguments, the configuration, and its team pool's free ranges; all check
//!    that the arguments agree ([`Error::CollectiveMismatch`] otherwise) and are valid, then
//!    compute the same region offset for each new team: the first fit in the intersection of
//!    its members' free ranges;
//! 2. each reserves (and zeroes) its regions and sends whether it could; if any member could
//!    not (a concurrent creation on another parent took the range in between), all release
//!    and start over with fresh free lists.

use std::sync::atomic::Ordering;

use super::pool::{
    carve, decode_free_list, encode_free_list, first_fit, intersect, picked_fit, FreeList,
};
use super::region::{Layout, MAX_TEAM_PES};
use super::{Team, TeamConfig};
use crate::collectives::Descriptor;
use crate::error::{Error, Result};
#[cfg(doc)]
use crate::exchange::Exchange;

/// How often a creation retries when concurrent creations keep taking its pool ranges.
const MAX_ATTEMPTS: usize = 16;

/// Bytes of the arguments at the start of a phase-1 payload: the split (4 words) and the
/// configuration (8 words, `TeamConfig::encode`).
const ARGS_BYTES: usize = 12 * 8;

/// A split of a parent team, in parent member numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Split {
    Strided {
        start: usize,
        stride: isize,
        size: usize,
    },
    TwoD {
        xrange: usize,
    },
    /// A member's part in a split that its caller refused (see [`Team::refuse_split`]).
    Refused,
}

impl Split {
    fn encode(&self, out: &mut Vec<u8>) {
        let words = match *self {
            Split::Strided {
                start,
                stride,
                size,
            } => [1, start, stride as usize, size],
            Split::TwoD { xrange } => [2, xrange, 0, 0],
            Split::Refused => [3, 0, 0, 0],
        };
        for w in words {
            out.extend_from_slice(&(w as u64).to_le_bytes());
        }
    }

    /// The new teams, each as its members' parent numbers; or why the split is invalid.
    fn children(&self, n: usize) -> Result<Vec<Vec<usize>>> {
        match *self {
            Split::Strided {
                start,
                stride,
                size,
            } => Ok(vec![strided_members(start, stride, size, n)?]),
            Split::TwoD { xrange } => {
                if xrange == 0 {
                    return Err(Error::InvalidArgument(
                        "split_2d: xrange must be at least 1".into(),
                    ));
                }
                let x = xrange.min(n);
                let rows = (0..n.div_ceil(x)).map(|r| (r * x..((r + 1) * x).min(n)).collect());
                let columns = (0..x).map(|c| (c..n).step_by(x).collect());
                Ok(rows.chain(columns).collect())
            }
            Split::Refused => Err(Error::InvalidArgument(
                "every member refused the team split (its own arguments failed its checks)".into(),
            )),
        }
    }
}

/// The parent members `start + stride·i` for `i < size` (OpenSHMEM 1.5: a negative stride
/// lists them downwards, a zero one names `start` alone), or why the triplet is invalid.
fn strided_members(start: usize, stride: isize, size: usize, n: usize) -> Result<Vec<usize>> {
    if size == 0 {
        return Err(Error::InvalidArgument(
            "split_strided: a team needs at least one PE".into(),
        ));
    }
    if stride == 0 && size > 1 {
        return Err(Error::InvalidArgument(format!(
            "split_strided: a zero stride names one PE, not {size}"
        )));
    }
    // The last member lies furthest from `start`; i128 holds every product of the two.
    let last = start as i128 + stride as i128 * (size as i128 - 1);
    if last < 0 {
        return Err(Error::InvalidArgument(format!(
            "split_strided: member {} would be PE {last} (start {start}, stride {stride})",
            size - 1
        )));
    }
    let last_pe = usize::try_from(last).unwrap_or(usize::MAX);
    if start >= n || last_pe >= n {
        return Err(Error::PeOutOfRange {
            pe: start.max(last_pe),
            n_pes: n,
        });
    }
    Ok((0..size)
        .map(|i| (start as isize + stride * i as isize) as usize)
        .collect())
}

/// splitmix64's finalizer: a well-mixed 64-bit value of `x`.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The region of each new team: the same answer on every member, from the same payloads
/// and the same `pick`. The first fit when `pick` is `None` (a first attempt); on a retry,
/// a fit picked by `pick` among all that fit, which every member of this creation derives
/// alike but a concurrent creation (another group) derives otherwise, so two creations that
/// took each other's first fits do not collide again on every retry.
fn place(
    children: &[Vec<usize>],
    lists: &mut [FreeList],
    config: &TeamConfig,
    heap_size: usize,
    pick: Option<u64>,
) -> Result<Vec<usize>> {
    children
        .iter()
        .map(|members| {
            let bytes = Layout::new(members.len(), config).bytes;
            let common = members
                .iter()
                .skip(1)
                .fold(lists[members[0]].clone(), |acc, &m| {
                    intersect(&acc, &lists[m])
                });
            let fit = match pick {
                None => first_fit(&common, bytes),
                Some(pick) => picked_fit(&common, bytes, pick),
            };
            let at = fit.ok_or_else(|| Error::HeapExhausted {
                requested: bytes,
                available: common.iter().map(|r| r.1).max().unwrap_or(0),
                heap_size,
            })?;
            for &m in members {
                carve(&mut lists[m], at, bytes);
            }
            Ok(at)
        })
        .collect()
}

impl Team {
    /// Splits a team of every `stride`-th member from member `start`, `size` of them
    /// (`shmem_team_split_strided`), with this team's configuration: new member `i` is
    /// member `start + stride·i` of this team, so a negative stride lists members downwards
    /// (in reverse order) and a zero stride names `start` alone. Collective over this
    /// team: every member calls it with the same arguments. Resolves to the new team on its
    /// members and to `None` on the others.
    ///
    /// # Errors
    /// On every member alike: [`Error::InvalidArgument`] for a zero size, a zero stride with
    /// a size above 1, or a member below 0; [`Error::PeOutOfRange`] when a member would lie
    /// past this team's end,
    /// [`Error::CollectiveMismatch`] when members passed different arguments,
    /// [`Error::HeapExhausted`] when the team pool is full, [`Error::TeamDestroyed`].
    ///
    /// Cancel safety: not cancel safe; a split dropped midway leaves this team unusable.
    pub async fn split_strided(
        &self,
        start: usize,
        stride: isize,
        size: usize,
    ) -> Result<Option<Team>> {
        self.split_strided_with(start, stride, size, self.config())
            .await
    }

    /// As [`Team::split_strided`], with `config` for the new team (`shmem_team_split_strided`
    /// with a `shmem_team_config_t`); every member passes the same one.
    ///
    /// Cancel safety: not cancel safe; a split dropped midway leaves this team unusable.
    pub async fn split_strided_with(
        &self,
        start: usize,
        stride: isize,
        size: usize,
        config: TeamConfig,
    ) -> Result<Option<Team>> {
        let split = Split::Strided {
            start,
            stride,
            size,
        };
        Ok(self.split(split, config).await?.pop())
    }

    /// Arranges this team's members in rows of `xrange` (the last row may be shorter) and
    /// splits it into rows and columns (`shmem_team_split_2d`): resolves to this PE's row
    /// (the x-axis team) and its column (the y-axis team). An `xrange` larger than the team
    /// is taken as the team's size. Collective over this team, like
    /// [`Team::split_strided`], with the same errors (a zero `xrange` is invalid).
    ///
    /// Cancel safety: not cancel safe; a split dropped midway leaves this team unusable.
    pub async fn split_2d(&self, xrange: usize) -> Result<(Team, Team)> {
        self.split_2d_with(xrange, self.config()).await
    }

    /// As [`Team::split_2d`], with `config` for both new teams; every member passes the same
    /// one.
    ///
    /// Cancel safety: not cancel safe; a split dropped midway leaves this team unusable.
    pub async fn split_2d_with(&self, xrange: usize, config: TeamConfig) -> Result<(Team, Team)> {
        let mut teams = self
            .split(Split::TwoD { xrange }, config)
            .await?
            .into_iter();
        match (teams.next(), teams.next()) {
            (Some(x), Some(y)) => Ok((x, y)),
            _ => Err(Error::InvalidArgument(
                "split_2d: this PE is missing from its row or column".into(),
            )),
        }
    }

    /// Takes this member's part in a split (`split_strided` or `split_2d`, collective over
    /// this team) that its caller refused, its own arguments having failed the caller's
    /// checks (the C library's team configuration): the other members' splits fail with
    /// [`Error::CollectiveMismatch`] naming this member instead of waiting for it, and this
    /// team stays usable.
    ///
    /// # Errors
    /// Always: [`Error::CollectiveMismatch`] where other members split, or
    /// [`Error::InvalidArgument`] where every member refused.
    pub async fn refuse_split(&self) -> Result<()> {
        self.split(Split::Refused, self.config()).await.map(|_| ())
    }

    /// Runs the creation protocol; resolves to the new teams this PE belongs to, in order.
    async fn split(&self, split: Split, config: TeamConfig) -> Result<Vec<Team>> {
        let op = self.begin(Descriptor::SPLIT)?;
        let n = self.n_pes();
        let me = self.my_pe();
        let home = &self.inner.home;
        let counter = self.inner.splits.fetch_add(1, Ordering::Relaxed) + 1;
        let group = mix(self.inner.id ^ mix(counter)) | 1 << 63;
        let mut args = Vec::with_capacity(ARGS_BYTES);
        split.encode(&mut args);
        config.encode(&mut args);
        for attempt in 0..MAX_ATTEMPTS as u64 {
            let pick = (attempt > 0).then(|| mix(group ^ mix(attempt)));
            let mut payload = args.clone();
            let free = home
                .pool
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .free_list();
            encode_free_list(&free, &mut payload);
            let all = self
                .watching(home.control.exchange(group, me, n, payload))
                .await?;
            let verdict = self.agree(&all, &args, split, &config, pick);
            let (children, offsets) = match verdict {
                Ok(v) => v,
                Err(e) => {
                    op.finish();
                    return Err(e);
                }
            };
            let mine: Vec<(usize, usize, usize)> = children
                .iter()
                .enumerate()
                .filter(|(_, m)| m.contains(&me))
                .map(|(c, m)| (c, offsets[c], Layout::new(m.len(), &config).bytes))
                .collect();
            let reserved = self.reserve(&mine);
            let votes = self
                .watching(
                    home.control
                        .exchange(group, me, n, vec![u8::from(reserved)]),
                )
                .await?;
            if votes.iter().all(|v| v.as_slice() == [1]) {
                let teams = mine
                    .iter()
                    .map(|&(c, at, _)| {
                        let members: Box<[usize]> =
                            children[c].iter().map(|&m| self.pe(m)).collect();
                        let index = children[c].iter().position(|&m| m == me).unwrap_or(0);
                        let id = mix(group ^ mix(c as u64 + 1));
                        Team::new(home.clone(), id, members, index, config, at, None)
                    })
                    .collect::<Result<Vec<_>>>();
                op.finish();
                return teams;
            }
            if reserved {
                let mut pool = home.pool.lock().unwrap_or_else(|p| p.into_inner());
                for &(_, at, bytes) in &mine {
                    pool.release(at, bytes);
                }
            }
        }
        op.finish();
        Err(Error::CollectiveMismatch {
            operation: "team split",
            detail: format!(
                "the members found no common team-pool range in {MAX_ATTEMPTS} attempts: concurrent team creations kept taking them"
            ),
        })
    }

    /// Checks the phase-1 payloads and computes the new teams and their regions.
    fn agree(
        &self,
        all: &[Vec<u8>],
        args: &[u8],
        split: Split,
        config: &TeamConfig,
        pick: Option<u64>,
    ) -> Result<(Vec<Vec<usize>>, Vec<usize>)> {
        if let Some(pe) = all.iter().position(|p| p.get(..ARGS_BYTES) != Some(args)) {
            return Err(Error::CollectiveMismatch {
                operation: "team split",
                detail: format!(
                    "member {pe} of the parent team passed other arguments or configuration than member {}",
                    self.my_pe()
                ),
            });
        }
        config.check()?;
        let children = split.children(self.n_pes())?;
        if let Some(big) = children.iter().find(|c| c.len() > MAX_TEAM_PES) {
            return Err(Error::InvalidArgument(format!(
                "a team of {} PEs is larger than the largest supported ({MAX_TEAM_PES})",
                big.len()
            )));
        }
        let mut lists = all
            .iter()
            .map(|p| decode_free_list(&p[ARGS_BYTES..]))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::CollectiveMismatch {
                operation: "team split",
                detail: "a member's free list could not be read".into(),
            })?;
        let offsets = place(&children, &mut lists, config, self.dp().heap_size(), pick)?;
        Ok((children, offsets))
    }

    /// Reserves and zeroes this PE's new regions; `false` (nothing reserved) if one is taken.
    fn reserve(&self, mine: &[(usize, usize, usize)]) -> bool {
        let home = &self.inner.home;
        let mut pool = home.pool.lock().unwrap_or_else(|p| p.into_inner());
        for (k, &(_, at, bytes)) in mine.iter().enumerate() {
            if !pool.reserve(at, bytes) {
                for &(_, at, bytes) in &mine[..k] {
                    pool.release(at, bytes);
                }
                return false;
            }
        }
        drop(pool);
        for &(_, at, bytes) in mine {
            home.dp.zero_own(at, bytes);
        }
        true
    }

    /// Destroys the team (`shmem_team_destroy`): collective over its members, it synchronizes
    /// them, then gives the team's region back to the pool. Every handle of the team on this
    /// PE then fails with [`Error::TeamDestroyed`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for the world and node teams, which cannot be destroyed;
    /// [`Error::TeamDestroyed`] when it already was.
    ///
    /// Cancel safety: not cancel safe; dropped midway, it leaves the team unusable and its
    /// region reserved.
    pub async fn destroy(&self) -> Result<()> {
        if let Some(name) = self.inner.predefined {
            return Err(Error::InvalidArgument(format!(
                "the {name} team cannot be destroyed"
            )));
        }
        let mut op = self.begin(Descriptor::DESTROY)?;
        self.sync_in(&mut op, Descriptor::DESTROY).await?;
        if op.rejected() {
            return op.settle(Ok(()));
        }
        // Every member has agreed; once one passes the next sync it hands its region back,
        // where its call records lie, so that sync no longer reads them.
        self.inner.leaving.store(true, Ordering::Relaxed);
        self.sync_in(&mut op, Descriptor::END).await?;
        self.mark_destroyed(op);
        self.inner
            .home
            .pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .release(self.inner.base, self.inner.layout.bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_compute_their_members() {
        let s = Split::Strided {
            start: 1,
            stride: 2,
            size: 3,
        };
        assert_eq!(s.children(6).unwrap(), vec![vec![1, 3, 5]]);
        assert!(matches!(
            s.children(5),
            Err(Error::PeOutOfRange { pe: 5, n_pes: 5 })
        ));
        let zero = Split::Strided {
            start: 0,
            stride: 0,
            size: 2,
        };
        assert!(matches!(zero.children(4), Err(Error::InvalidArgument(_))));
        let huge = Split::Strided {
            start: 1,
            stride: isize::MAX,
            size: 3,
        };
        assert!(matches!(huge.children(4), Err(Error::PeOutOfRange { .. })));
        let down = Split::Strided {
            start: 5,
            stride: -2,
            size: 3,
        };
        assert_eq!(down.children(6).unwrap(), vec![vec![5, 3, 1]]);
        let below = Split::Strided {
            start: 3,
            stride: -2,
            size: 3,
        };
        assert!(matches!(below.children(6), Err(Error::InvalidArgument(_))));
        let one = Split::Strided {
            start: 2,
            stride: 0,
            size: 1,
        };
        assert_eq!(one.children(4).unwrap(), vec![vec![2]]);
        let past = Split::Strided {
            start: 4,
            stride: -1,
            size: 1,
        };
        assert!(matches!(
            past.children(4),
            Err(Error::PeOutOfRange { pe: 4, .. })
        ));
        let grid = Split::TwoD { xrange: 3 }.children(7).unwrap();
        assert_eq!(
            grid,
            vec![
                vec![0, 1, 2],
                vec![3, 4, 5],
                vec![6],
                vec![0, 3, 6],
                vec![1, 4],
                vec![2, 5]
            ]
        );
        assert_eq!(Split::TwoD { xrange: 9 }.children(2).unwrap().len(), 3);
    }

    #[test]
    fn placement_avoids_every_members_taken_ranges() {
        let config = TeamConfig::default();
        let bytes = Layout::new(2, &config).bytes;
        let mut lists = vec![
            vec![(0, 4 * bytes)],
            vec![(bytes, 3 * bytes)],
            vec![(0, bytes), (2 * bytes, 2 * bytes)],
        ];
        let at = place(&[vec![0, 1], vec![1, 2]], &mut lists, &config, 0, None).unwrap();
        assert_eq!(at, vec![bytes, 2 * bytes]);
        let pair = vec![vec![0, 2], vec![0, 2]];
        assert_eq!(
            place(&pair, &mut lists, &config, 0, None).unwrap(),
            vec![0, 3 * bytes]
        );
        assert!(matches!(
            place(&pair[..1], &mut lists, &config, 0, None),
            Err(Error::HeapExhausted { .. })
        ));
    }

    #[test]
    fn retries_of_colliding_creations_place_their_teams_apart() {
        let config = TeamConfig::default();
        let bytes = Layout::new(3, &config).bytes;
        let lists = vec![vec![(0, 64 * bytes)]; 3];
        let world = [vec![0, 1, 2]];
        let at = |pick| place(&world, &mut lists.clone(), &config, 0, pick).unwrap()[0];
        assert_eq!(at(None), 0, "a first attempt takes the first fit");
        // Two concurrent creations (two groups) on their second attempt.
        let (x, y) = (mix(11 ^ mix(1)), mix(12 ^ mix(1)));
        let (ax, ay) = (at(Some(x)), at(Some(y)));
        assert!(
            ax.abs_diff(ay) >= bytes,
            "regions at {ax} and {ay} of {bytes} bytes overlap"
        );
        assert_eq!(at(Some(x)), ax, "every member places alike");
    }
}
