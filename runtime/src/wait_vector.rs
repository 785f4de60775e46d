//! The `_vector` forms of the multi-variable waits and tests (`shmem_wait_until_all_vector`,
//! `_any_vector`, `_some_vector` and the `shmem_test_*_vector` ones): variable `i` is
//! compared with its own value, `values[i]`. They wait as [`crate::wait`]'s forms do, and
//! the `_any` ones start each call's search one index further as theirs do.

use std::sync::atomic::Ordering;

use crate::data_plane::DataPlane;
use crate::error::{Error, Result};
use crate::heap::SymSlice;
use crate::wait::{Cmp, Ivars, Wait, WaitWord};

impl DataPlane {
    /// The variables of a vector form, once `values` has one value per variable.
    fn vector<'a, T: WaitWord>(
        &'a self,
        ivars: SymSlice<'a, T>,
        exclude: Option<&'a [bool]>,
        values: &[T],
    ) -> Result<Ivars<'a, T>> {
        if values.len() != ivars.len() {
            return Err(Error::InvalidArgument(format!(
                "{} comparison values for {} variables",
                values.len(),
                ivars.len()
            )));
        }
        self.ivars(ivars, exclude)
    }

    /// Waits until every variable `i` not excluded satisfies `cmp values[i]`
    /// (`shmem_wait_until_all_vector`).
    pub fn wait_until_all_vector<'a, T: WaitWord>(
        &'a self,
        ivars: impl Into<SymSlice<'a, T>>,
        exclude: Option<&'a [bool]>,
        cmp: Cmp,
        values: &'a [T],
    ) -> Wait<'a, impl FnMut() -> Option<()> + Unpin + Send + 'a> {
        let set = self.vector(ivars.into(), exclude, values);
        self.wait_all_of(set, cmp, move |i| values[i], "wait_until_all_vector")
    }

    /// Waits until some variable `i` not excluded satisfies `cmp values[i]` and resolves to
    /// its index (`shmem_wait_until_any_vector`); `None` at once if every one is excluded.
    pub fn wait_until_any_vector<'a, T: WaitWord>(
        &'a self,
        ivars: impl Into<SymSlice<'a, T>>,
        exclude: Option<&'a [bool]>,
        cmp: Cmp,
        values: &'a [T],
    ) -> Wait<'a, impl FnMut() -> Option<Option<usize>> + Unpin + Send + 'a> {
        let set = self.vector(ivars.into(), exclude, values);
        self.wait_any_of(set, cmp, move |i| values[i], "wait_until_any_vector")
    }

    /// Waits until at least one variable `i` not excluded satisfies `cmp values[i]` and
    /// resolves to the indices of all that do (`shmem_wait_until_some_vector`); empty at once
    /// if every one is excluded.
    pub fn wait_until_some_vector<'a, T: WaitWord>(
        &'a self,
        ivars: impl Into<SymSlice<'a, T>>,
        exclude: Option<&'a [bool]>,
        cmp: Cmp,
        values: &'a [T],
    ) -> Wait<'a, impl FnMut() -> Option<Vec<usize>> + Unpin + Send + 'a> {
        let set = self.vector(ivars.into(), exclude, values);
        self.wait_some_of(set, cmp, move |i| values[i], "wait_until_some_vector")
    }

    /// Whether every variable `i` not excluded satisfies `cmp values[i]` now
    /// (`shmem_test_all_vector`).
    pub fn test_all_vector<'s, T: WaitWord>(
        &self,
        ivars: impl Into<SymSlice<'s, T>>,
        exclude: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<bool> {
        let set = self.vector(ivars.into(), exclude, values)?;
        Ok(set.all(cmp, |i| values[i]))
    }

    /// The index of a variable `i` not excluded that satisfies `cmp values[i]` now, if any
    /// (`shmem_test_any_vector`); each call starts one index further.
    pub fn test_any_vector<'s, T: WaitWord>(
        &self,
        ivars: impl Into<SymSlice<'s, T>>,
        exclude: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<Option<usize>> {
        let set = self.vector(ivars.into(), exclude, values)?;
        let start = self.any_calls.fetch_add(1, Ordering::Relaxed);
        Ok(set.first_from(start, cmp, |i| values[i]))
    }

    /// The indices of all variables `i` not excluded that satisfy `cmp values[i]` now
    /// (`shmem_test_some_vector`).
    pub fn test_some_vector<'s, T: WaitWord>(
        &self,
        ivars: impl Into<SymSlice<'s, T>>,
        exclude: Option<&[bool]>,
        cmp: Cmp,
        values: &[T],
    ) -> Result<Vec<usize>> {
        let set = self.vector(ivars.into(), exclude, values)?;
        Ok(set.satisfied(cmp, |i| values[i]))
    }
}
