//! Point-to-point synchronization: `shmem_TYPENAME_wait_until` and `_test`, their `_all`,
//! `_any` and `_some` forms over arrays (with a status array excluding entries) and the
//! `_vector` forms (a comparison value per entry), for OpenSHMEM's point-to-point type
//! table, and the deprecated `shmem_TYPENAME_wait`, `shmem_wait`, `shmem_wait_until`.
//!
//! A wait ends when its condition holds, or in the job's failure (a lost PE ends the job).
#![allow(unsafe_code)] // `#[no_mangle]`/`#[export_name]` exports only; raw memory lives in `crate::raw`.

use std::ffi::{c_int, c_long};

use ferroshmem_runtime::{Cmp, Error, Result, WaitWord};

use crate::raw;
use crate::state::{ok, shmem, Shmem};

/// A C `SHMEM_CMP_*` code.
pub(crate) fn cmp(code: c_int) -> Result<Cmp> {
    Ok(match code {
        0 => Cmp::Eq,
        1 => Cmp::Ne,
        2 => Cmp::Gt,
        3 => Cmp::Ge,
        4 => Cmp::Lt,
        5 => Cmp::Le,
        _ => {
            return Err(Error::InvalidArgument(format!(
                "{code} is not a SHMEM_CMP_* code"
            )))
        }
    })
}

/// What the entries of an array are compared with: one value, or one each.
#[derive(Clone, Copy)]
pub(crate) enum Against<T> {
    /// The same value for every entry.
    One(T),
    /// The caller's array of a value per entry.
    Each(*const T),
}

/// The arguments of an array wait or test, checked: the ivars, the exclusions, the values.
struct Set<T: 'static> {
    ivars: ferroshmem_runtime::SymSlice<'static, T>,
    exclude: Option<Vec<bool>>,
    cmp: Cmp,
    values: Values<T>,
}

/// The comparison values, checked.
enum Values<T: 'static> {
    One(T),
    Each(&'static [T]),
}

/// Checks an array call's arguments.
fn set<T: WaitWord>(
    s: &Shmem,
    (ivars, nelems): (*const T, usize),
    status: *const c_int,
    code: c_int,
    against: Against<T>,
) -> Result<Set<T>> {
    let exclude = match status.is_null() {
        true => None,
        false => Some(
            raw::local(status, nelems, "status")?
                .iter()
                .map(|&s| s != 0)
                .collect(),
        ),
    };
    let values = match against {
        Against::One(v) => Values::One(v),
        Against::Each(values) => Values::Each(raw::local(values, nelems, "cmp_values")?),
    };
    Ok(Set {
        ivars: s.view(ivars, nelems)?,
        exclude,
        cmp: cmp(code)?,
        values,
    })
}

/// `wait_until`: blocks until `*ivar cmp value`.
#[inline]
pub(crate) fn wait_until<T: WaitWord>(
    routine: &'static str,
    ivar: *const T,
    code: c_int,
    value: T,
) {
    let s = shmem(routine);
    let done = s
        .view(ivar, 1)
        .and_then(|v| s.block(s.dp().wait_until(v, cmp(code)?, value)));
    ok(routine, done);
}

/// `test`: whether `*ivar cmp value` holds now.
#[inline]
pub(crate) fn test<T: WaitWord>(
    routine: &'static str,
    ivar: *const T,
    code: c_int,
    value: T,
) -> c_int {
    let s = shmem(routine);
    let held = s
        .view(ivar, 1)
        .and_then(|v| s.dp().test(v, cmp(code)?, value));
    ok(routine, held).into()
}

/// `wait_until_all` (`wait`) or `test_all`: whether every entry not excluded holds.
pub(crate) fn all<T: WaitWord>(
    routine: &'static str,
    array: (*const T, usize),
    status: *const c_int,
    code: c_int,
    against: Against<T>,
    wait: bool,
) -> c_int {
    let s = shmem(routine);
    let done = set(s, array, status, code, against).and_then(|set| {
        let (dp, exclude) = (s.dp(), set.exclude.as_deref());
        match (set.values, wait) {
            (Values::One(v), true) => s
                .block(dp.wait_until_all(set.ivars, exclude, set.cmp, v))
                .map(|()| true),
            (Values::Each(v), true) => s
                .block(dp.wait_until_all_vector(set.ivars, exclude, set.cmp, v))
                .map(|()| true),
            (Values::One(v), false) => dp.test_all(set.ivars, exclude, set.cmp, v),
            (Values::Each(v), false) => dp.test_all_vector(set.ivars, exclude, set.cmp, v),
        }
    });
    ok(routine, done).into()
}

/// `wait_until_any` (`wait`) or `test_any`: the index of an entry that holds (`SIZE_MAX` for
/// none); successive calls return each satisfied entry in turn.
pub(crate) fn any<T: WaitWord>(
    routine: &'static str,
    array: (*const T, usize),
    status: *const c_int,
    code: c_int,
    against: Against<T>,
    wait: bool,
) -> usize {
    let s = shmem(routine);
    let found = set(s, array, status, code, against).and_then(|set| {
        let (dp, exclude) = (s.dp(), set.exclude.as_deref());
        match (set.values, wait) {
            (Values::One(v), true) => s.block(dp.wait_until_any(set.ivars, exclude, set.cmp, v)),
            (Values::Each(v), true) => {
                s.block(dp.wait_until_any_vector(set.ivars, exclude, set.cmp, v))
            }
            (Values::One(v), false) => dp.test_any(set.ivars, exclude, set.cmp, v),
            (Values::Each(v), false) => dp.test_any_vector(set.ivars, exclude, set.cmp, v),
        }
    });
    ok(routine, found).unwrap_or(usize::MAX)
}

/// `wait_until_some` (`wait`) or `test_some`: the indices of the entries that hold, written
/// to `indices`; returns how many.
pub(crate) fn some<T: WaitWord>(
    routine: &'static str,
    array: (*const T, usize),
    indices: *mut usize,
    status: *const c_int,
    code: c_int,
    against: Against<T>,
    wait: bool,
) -> usize {
    let s = shmem(routine);
    let found = set(s, array, status, code, against).and_then(|set| {
        let (dp, exclude) = (s.dp(), set.exclude.as_deref());
        let satisfied = match (set.values, wait) {
            (Values::One(v), true) => s.block(dp.wait_until_some(set.ivars, exclude, set.cmp, v)),
            (Values::Each(v), true) => {
                s.block(dp.wait_until_some_vector(set.ivars, exclude, set.cmp, v))
            }
            (Values::One(v), false) => dp.test_some(set.ivars, exclude, set.cmp, v),
            (Values::Each(v), false) => dp.test_some_vector(set.ivars, exclude, set.cmp, v),
        }?;
        raw::local_mut(indices, satisfied.len(), "indices")?.copy_from_slice(&satisfied);
        Ok(satisfied.len())
    });
    ok(routine, found)
}

/// The waits and tests of each `name: type`.
macro_rules! point_to_point {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", stringify!($name), "_wait_until*` and `_test*`.")]
        pub mod $name {
            use super::*;

            #[doc = concat!("`shmem_", stringify!($name), "_wait_until`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_wait_until")]
            pub extern "C" fn wait_until(ivar: *mut $t, cmp: c_int, value: $t) {
                super::wait_until(concat!("shmem_", stringify!($name), "_wait_until"), ivar, cmp, value)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_test`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_test")]
            pub extern "C" fn test(ivar: *mut $t, cmp: c_int, value: $t) -> c_int {
                super::test(concat!("shmem_", stringify!($name), "_test"), ivar, cmp, value)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_wait_until_all`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_wait_until_all")]
            pub extern "C" fn wait_until_all(ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, value: $t) {
                all(concat!("shmem_", stringify!($name), "_wait_until_all"), (ivars, nelems), status, cmp, Against::One(value), true);
            }

            #[doc = concat!("`shmem_", stringify!($name), "_wait_until_all_vector`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_wait_until_all_vector")]
            pub extern "C" fn wait_until_all_vector(ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, values: *const $t) {
                all(concat!("shmem_", stringify!($name), "_wait_until_all_vector"), (ivars, nelems), status, cmp, Against::Each(values), true);
            }

            #[doc = concat!("`shmem_", stringify!($name), "_test_all`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_test_all")]
            pub extern "C" fn test_all(ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, value: $t) -> c_int {
                all(concat!("shmem_", stringify!($name), "_test_all"), (ivars, nelems), status, cmp, Against::One(value), false)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_test_all_vector`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_test_all_vector")]
            pub extern "C" fn test_all_vector(ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, values: *const $t) -> c_int {
                all(concat!("shmem_", stringify!($name), "_test_all_vector"), (ivars, nelems), status, cmp, Against::Each(values), false)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_wait_until_any`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_wait_until_any")]
            pub extern "C" fn wait_until_any(ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, value: $t) -> usize {
                any(concat!("shmem_", stringify!($name), "_wait_until_any"), (ivars, nelems), status, cmp, Against::One(value), true)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_wait_until_any_vector`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_wait_until_any_vector")]
            pub extern "C" fn wait_until_any_vector(ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, values: *const $t) -> usize {
                any(concat!("shmem_", stringify!($name), "_wait_until_any_vector"), (ivars, nelems), status, cmp, Against::Each(values), true)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_test_any`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_test_any")]
            pub extern "C" fn test_any(ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, value: $t) -> usize {
                any(concat!("shmem_", stringify!($name), "_test_any"), (ivars, nelems), status, cmp, Against::One(value), false)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_test_any_vector`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_test_any_vector")]
            pub extern "C" fn test_any_vector(ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, values: *const $t) -> usize {
                any(concat!("shmem_", stringify!($name), "_test_any_vector"), (ivars, nelems), status, cmp, Against::Each(values), false)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_wait_until_some`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_wait_until_some")]
            pub extern "C" fn wait_until_some(ivars: *mut $t, nelems: usize, indices: *mut usize, status: *const c_int, cmp: c_int, value: $t) -> usize {
                some(concat!("shmem_", stringify!($name), "_wait_until_some"), (ivars, nelems), indices, status, cmp, Against::One(value), true)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_wait_until_some_vector`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_wait_until_some_vector")]
            pub extern "C" fn wait_until_some_vector(ivars: *mut $t, nelems: usize, indices: *mut usize, status: *const c_int, cmp: c_int, values: *const $t) -> usize {
                some(concat!("shmem_", stringify!($name), "_wait_until_some_vector"), (ivars, nelems), indices, status, cmp, Against::Each(values), true)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_test_some`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_test_some")]
            pub extern "C" fn test_some(ivars: *mut $t, nelems: usize, indices: *mut usize, status: *const c_int, cmp: c_int, value: $t) -> usize {
                some(concat!("shmem_", stringify!($name), "_test_some"), (ivars, nelems), indices, status, cmp, Against::One(value), false)
            }

            #[doc = concat!("`shmem_", stringify!($name), "_test_some_vector`.")]
            #[export_name = concat!("shmem_", stringify!($name), "_test_some_vector")]
            pub extern "C" fn test_some_vector(ivars: *mut $t, nelems: usize, indices: *mut usize, status: *const c_int, cmp: c_int, values: *const $t) -> usize {
                some(concat!("shmem_", stringify!($name), "_test_some_vector"), (ivars, nelems), indices, status, cmp, Against::Each(values), false)
            }
        }
    )*};
}

point_to_point!(
    short: i16, int: i32, long: i64, longlong: i64, ushort: u16, uint: u32, ulong: u64,
    ulonglong: u64, int32: i32, int64: i64, uint32: u32, uint64: u64, size: u64, ptrdiff: i64,
);

/// The deprecated `shmem_TYPENAME_wait`: blocks until `*ivar` differs from `value`.
macro_rules! deprecated_waits {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`shmem_", stringify!($name), "_wait` (deprecated).")]
        #[export_name = concat!("shmem_", stringify!($name), "_wait")]
        pub extern "C" fn $name(ivar: *mut $t, value: $t) {
            wait_until(concat!("shmem_", stringify!($name), "_wait"), ivar, 1, value)
        }
    )*};
}

/// The deprecated waits.
pub mod deprecated {
    use super::*;

    deprecated_waits!(short: i16, int: i32, long: i64, longlong: i64);

    /// `shmem_wait` (deprecated): `shmem_long_wait`.
    #[no_mangle]
    pub extern "C" fn shmem_wait(ivar: *mut c_long, value: c_long) {
        wait_until("shmem_wait", ivar, 1, value)
    }

    /// `shmem_wait_until` (deprecated): `shmem_long_wait_until`.
    #[no_mangle]
    pub extern "C" fn shmem_wait_until(ivar: *mut c_long, cmp: c_int, value: c_long) {
        wait_until("shmem_wait_until", ivar, cmp, value)
    }
}
