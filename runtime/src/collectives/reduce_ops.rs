//! The reduction operators and the element types they apply to: `and`, `or`, `xor` on
//! integers; `min`, `max`, `sum`, `prod` on integers, `f32` and `f64`; `sum` and `prod` on
//! complex numbers ([`Complex32`], [`Complex64`]: C's `float _Complex` and `double _Complex`);
//! `min`, `max`, `sum`, `prod` on C's `long double` on x86-64 ([`LongDouble`](super::LongDouble)).
//!
//! Integer sums and products wrap. Floating-point `min`/`max` keep the first operand unless
//! the second compares smaller/larger (a NaN operand is kept only when it comes first).
//! Floating-point results depend on the order in which contributions are combined, which
//! depends on the algorithm; every member receives the same bits.

use bytemuck::Pod;

/// A reduction operator (`shmem_<op>_reduce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Bitwise and (integers).
    And,
    /// Bitwise or (integers).
    Or,
    /// Bitwise exclusive or (integers).
    Xor,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Sum (wrapping for integers).
    Sum,
    /// Product (wrapping for integers).
    Prod,
}

impl ReduceOp {
    /// Whether the operator is a bitwise one (integers only).
    pub fn is_bitwise(self) -> bool {
        matches!(self, ReduceOp::And | ReduceOp::Or | ReduceOp::Xor)
    }

    /// A small number naming the operator in collective descriptors.
    pub(crate) fn code(self) -> u64 {
        self as u64
    }
}

pub(super) mod private {
    pub trait Sealed {}
}

/// Element types of reductions: the integers of 8 to 64 bits (and `isize`/`usize`), `f32`,
/// `f64`, [`Complex32`], [`Complex64`], and on x86-64 [`LongDouble`](super::LongDouble).
pub trait Reducible: Pod + Send + Sync + std::fmt::Debug + private::Sealed {
    /// Whether bitwise operators apply.
    const INTEGER: bool;
    /// Whether `min` and `max` apply (not to complex numbers).
    const ORDERED: bool = true;
    /// A number naming the type in collective descriptors.
    const TAG: u64;
    /// Combines element-wise: `acc[i] = acc[i] op other[i]`.
    fn combine(op: ReduceOp, acc: &mut [Self], other: &[Self]);
}

/// The element types of bitwise reductions: the integers.
pub trait BitwiseReducible: Reducible {}

macro_rules! integers {
    ($($t:ty = $tag:expr),*) => {$(
        impl private::Sealed for $t {}
        impl BitwiseReducible for $t {}
        impl Reducible for $t {
            const INTEGER: bool = true;
            const TAG: u64 = $tag;
            #[inline]
            fn combine(op: ReduceOp, acc: &mut [Self], other: &[Self]) {
                let pairs = acc.iter_mut().zip(other);
                match op {
                    ReduceOp::And => pairs.for_each(|(a, b)| *a &= *b),
                    ReduceOp::Or => pairs.for_each(|(a, b)| *a |= *b),
                    ReduceOp::Xor => pairs.for_each(|(a, b)| *a ^= *b),
                    ReduceOp::Min => pairs.for_each(|(a, b)| *a = (*a).min(*b)),
                    ReduceOp::Max => pairs.for_each(|(a, b)| *a = (*a).max(*b)),
                    ReduceOp::Sum => pairs.for_each(|(a, b)| *a = a.wrapping_add(*b)),
                    ReduceOp::Prod => pairs.for_each(|(a, b)| *a = a.wrapping_mul(*b)),
                }
            }
        }
    )*};
}

macro_rules! floats {
    ($($t:ty = $tag:expr),*) => {$(
        impl private::Sealed for $t {}
        impl Reducible for $t {
            const INTEGER: bool = false;
            const TAG: u64 = $tag;
            #[inline]
            fn combine(op: ReduceOp, acc: &mut [Self], other: &[Self]) {
                let pairs = acc.iter_mut().zip(other);
                match op {
                    ReduceOp::Min => pairs.for_each(|(a, b)| if *b < *a { *a = *b }),
                    ReduceOp::Max => pairs.for_each(|(a, b)| if *b > *a { *a = *b }),
                    ReduceOp::Sum => pairs.for_each(|(a, b)| *a += *b),
                    ReduceOp::Prod => pairs.for_each(|(a, b)| *a *= *b),
                    // Refused before any reduction starts.
                    ReduceOp::And | ReduceOp::Or | ReduceOp::Xor => {}
                }
            }
        }
    )*};
}

/// The complex types: a complex number as C lays out `float _Complex` (`Complex32`) and
/// `double _Complex` (`Complex64`): the real part, then the imaginary part.
macro_rules! complexes {
    ($($name:ident($f:ty) = $tag:expr, $doc:literal;)*) => {$(
        #[doc = $doc]
        #[derive(Debug, Clone, Copy, Default, PartialEq, bytemuck::Zeroable, bytemuck::Pod)]
        #[repr(C)]
        pub struct $name {
            /// The real part.
            pub re: $f,
            /// The imaginary part.
            pub im: $f,
        }

        impl private::Sealed for $name {}
        impl Reducible for $name {
            const INTEGER: bool = false;
            const ORDERED: bool = false;
            const TAG: u64 = $tag;
            #[inline]
            fn combine(op: ReduceOp, acc: &mut [Self], other: &[Self]) {
                let pairs = acc.iter_mut().zip(other);
                match op {
                    ReduceOp::Sum => pairs.for_each(|(a, b)| {
                        a.re += b.re;
                        a.im += b.im;
                    }),
                    ReduceOp::Prod => pairs.for_each(|(a, b)| {
                        *a = $name {
                            re: a.re * b.re - a.im * b.im,
                            im: a.re * b.im + a.im * b.re,
                        }
                    }),
                    // Refused before any reduction starts.
                    _ => {}
                }
            }
        }
    )*};
}

complexes! {
    Complex32(f32) = 13, "A complex number of `f32` parts (C's `float _Complex`).";
    Complex64(f64) = 14, "A complex number of `f64` parts (C's `double _Complex`).";
}

integers!(
    i8 = 1,
    i16 = 2,
    i32 = 3,
    i64 = 4,
    isize = 5,
    u8 = 6,
    u16 = 7,
    u32 = 8,
    u64 = 9,
    usize = 10
);
floats!(f32 = 11, f64 = 12);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complex_numbers_add_and_multiply_as_complex_numbers() {
        let mut a = [Complex64 { re: 1.0, im: 2.0 }];
        Complex64::combine(ReduceOp::Prod, &mut a, &[Complex64 { re: 3.0, im: -1.0 }]);
        assert_eq!(a, [Complex64 { re: 5.0, im: 5.0 }], "(1+2i)(3-i) = 5+5i");
        Complex64::combine(ReduceOp::Sum, &mut a, &[Complex64 { re: -5.0, im: 1.0 }]);
        assert_eq!(a, [Complex64 { re: 0.0, im: 6.0 }]);
        const { assert!(!Complex32::ORDERED) };
    }

    #[test]
    fn operators_combine_element_wise() {
        let mut a = [0b1100u8, 200, 3];
        u8::combine(ReduceOp::And, &mut a, &[0b1010, 255, 1]);
        assert_eq!(a, [0b1000, 200, 1]);
        u8::combine(ReduceOp::Sum, &mut a, &[0, 100, 1]);
        assert_eq!(a, [8, 44, 2], "sums wrap");
        let mut x = [1.5f64, -2.0];
        f64::combine(ReduceOp::Max, &mut x, &[1.0, 3.0]);
        assert_eq!(x, [1.5, 3.0]);
        f64::combine(ReduceOp::Prod, &mut x, &[2.0, 0.5]);
        assert_eq!(x, [3.0, 1.5]);
        let mut m = [i64::MIN, 7];
        i64::combine(ReduceOp::Min, &mut m, &[0, -7]);
        assert_eq!(m, [i64::MIN, -7]);
        assert!(ReduceOp::Xor.is_bitwise() && !ReduceOp::Sum.is_bitwise());
    }
}
