//! OpenSHMEM's thread levels: [`init_thread`] and [`Pe::query_thread`]. Every operation of a
//! [`Pe`] may be called from any thread and any task at once (`Pe` is `Send + Sync` and its
//! futures are `Send`), so the level provided is always [`ThreadLevel::Multiple`], whatever
//! was requested (OpenSHMEM lets the provided level exceed the requested one).

use ferroshmem_runtime::Result;

use crate::pe::Pe;

/// How threads may call the library (`SHMEM_THREAD_SINGLE` … `SHMEM_THREAD_MULTIPLE`),
/// ordered from the most restrictive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ThreadLevel {
    /// One thread only.
    Single,
    /// Several threads; only the one that initialized calls the library.
    Funneled,
    /// Several threads; one calls the library at a time.
    Serialized,
    /// Several threads, calling the library at once.
    Multiple,
}

/// The level every PE provides.
const PROVIDED: ThreadLevel = ThreadLevel::Multiple;

/// Joins the launched job as [`crate::init`] does, asking for thread level `requested`
/// (`shmem_init_thread`); resolves to the PE and the level provided, which is at least the
/// one requested.
///
/// # Errors
/// As [`crate::init`].
pub async fn init_thread(requested: ThreadLevel) -> Result<(Pe, ThreadLevel)> {
    let pe = crate::init().await?;
    Ok((pe, PROVIDED.max(requested)))
}

impl Pe {
    /// The thread level this PE provides (`shmem_query_thread`).
    pub fn query_thread(&self) -> ThreadLevel {
        PROVIDED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_order_from_the_most_restrictive() {
        assert!(ThreadLevel::Single < ThreadLevel::Funneled);
        assert!(ThreadLevel::Serialized < ThreadLevel::Multiple);
        assert_eq!(PROVIDED.max(ThreadLevel::Single), ThreadLevel::Multiple);
    }
}
