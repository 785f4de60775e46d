//! Data pushed into a member's buffer with a post behind it: the collectives' way to move
//! data to a member on another node in one one-way trip (tree broadcasts and reductions
//! on their way down, the parts of a reduction scattered among node leaders, block moves).
//!
//! # Order
//! The receiver waits for the post, so the post must not be seen before the data. Over
//! mapped memory the put is done when it returns. Across the fabric the post is one write
//! that the target publishes once placed (`crate::post`), started right behind the data's
//! where the transport places writes that long in order
//! ([`Remote::ordered_write_bytes`](crate::route::Remote::ordered_write_bytes): the
//! provider's `max_order_waw_size`, unlimited on `tcp;ofi_rxm`), else once the data has
//! landed. A put-with-signal would cost more on the fabric: its atomic waits for the data's
//! completion, and its wake-up notice for the atomic's.
//!
//! # Failures
//! A put refused before it starts sends no post: its receiver's wait ends when the sender's
//! call records show the call given up. A put that fails on its way fails its sender's
//! call; where the provider drops a connection on an error and carries the post on a new
//! one (see the fabric transport's lanes), the post may still land without the data. Pushes
//! address buffers every member checked alike, so only a broken link or a lost peer makes
//! one fail, and the job's failure detection reports those.

use bytemuck::Pod;

use crate::error::Result;
use crate::heap::SymSlice;
use crate::landing::Landing;
use crate::shared_memory::Caching;
use crate::team::Team;

/// The longest post: a word and the posted value.
const POST_BYTES: usize = 16;

/// A post to a member ([`Team::post`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Post {
    /// The member posted to.
    pub to: usize,
    /// The region offset of its word that takes `value`.
    pub offset: usize,
    /// The value posted.
    pub value: u64,
    /// A word written into the word after it, with it, where there is one.
    pub word: Option<u64>,
}

/// Data put into a member's buffer with a post behind it ([`Team::put_posted`]); awaited
/// with [`Posted::landed`].
#[must_use = "the data lands, and its post may go out, only once `landed` is awaited"]
pub(crate) struct Posted {
    landing: Landing<()>,
    /// The post, where it waits for the data to land.
    after: Option<Post>,
}

impl Posted {
    /// Whether its post waits for the data to land ([`Posted::landed`] makes it).
    pub fn holds_post(&self) -> bool {
        self.after.is_some()
    }

    /// Whether the put was refused before it started (its landing reports why).
    pub fn refused(&self) -> bool {
        self.landing.failed_at_once()
    }

    /// Waits until the data has landed, then makes the post if it was held for that.
    ///
    /// # Errors
    /// The put's or the post's.
    pub async fn landed(self, team: &Team) -> Result<()> {
        self.landing.await?;
        match self.after {
            Some(post) => team.post_one(post),
            None => Ok(()),
        }
    }
}

impl Team {
    /// Puts this member's own `src` into `dest` on member `post.to` and makes `post` behind
    /// it, so that whoever sees the posted value sees the data (see the module
    /// documentation): at once where the route keeps the two in order, else once the data
    /// has landed ([`Posted::landed`]).
    ///
    /// # Errors
    /// The post's, where it is made at once (the put's come from [`Posted::landed`]).
    pub(crate) fn put_posted<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        src: SymSlice<'_, T>,
        post: Post,
    ) -> Result<Posted> {
        self.put_posted_judged(dest, src, post, 0)
    }

    /// [`Team::put_posted`], its post held for the data, or not, as for a put of `judged`
    /// bytes where that is longer: puts in a row whose posts must not overtake each
    /// other's data judge alike by the longest.
    pub(crate) fn put_posted_judged<T: Pod>(
        &self,
        dest: SymSlice<'_, T>,
        src: SymSlice<'_, T>,
        post: Post,
        judged: usize,
    ) -> Result<Posted> {
        let dp = self.dp();
        let to = self.pe(post.to);
        let landing = dp.put_within(dest, src, to, Caching::Keep);
        let bytes = super::bytes_of::<T>(src.len());
        let judged = bytes.max(judged).max(POST_BYTES);
        let in_order = dp.is_mapped(to) || judged <= dp.ordered_write_bytes();
        let after = match (landing.failed_at_once(), in_order) {
            (true, _) => None,
            (false, true) => {
                self.post_one(post)?;
                None
            }
            (false, false) => Some(post),
        };
        Ok(Posted { landing, after })
    }

    /// Makes `post`.
    pub(crate) fn post_one(&self, post: Post) -> Result<()> {
        let Post {
            to,
            offset,
            value,
            word,
        } = post;
        match word {
            Some(word) => self.post(to, offset, value, offset + 8, &[word]),
            None => self.signal(to, offset, value),
        }
    }

    /// Whether member `peer` shares this member's node: a tree edge between them is
    /// pulled (read in place) rather than pushed.
    pub(crate) fn shares_node(&self, peer: usize) -> bool {
        self.inner.plan.nodes.nodes() == 1 || self.dp().is_mapped(self.pe(peer))
    }
}
