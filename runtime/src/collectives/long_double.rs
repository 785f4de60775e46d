//! [`LongDouble`]: C's `long double` of x86-64 (the x87 unit's 80-bit extended precision,
//! stored in 16 bytes), and its reductions.
//!
//! Rust has no 80-bit type, so the arithmetic of `min`, `max`, `sum` and `prod` is done by
//! the x87 unit itself, as C compilers do for `long double`: the same results, bit for bit,
//! as a C program's `a + b` (round to nearest even, 64-bit significands: the x87 precision
//! Linux starts every process with). Elsewhere than on x86-64 the type is still moved as 16
//! bytes, but it is not [`Reducible`](super::Reducible): another target's `long double` has
//! another layout (IEEE binary128 on 64-bit Arm), which this module does not compute with.
//!
//! `min` and `max` follow the floating-point rule of the other types: the first operand is
//! kept unless the second compares smaller (larger); a NaN is kept only when it comes first.
#![allow(unsafe_code)] // x87 instructions through `asm!`; each block says what it touches.

use bytemuck::{Pod, Zeroable};

/// C's `long double` on x86-64: an 80-bit extended-precision number in the low 10 bytes of
/// 16 (the rest padding), as the x87 unit stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct LongDouble(pub [u64; 2]);

#[cfg(target_arch = "x86_64")]
mod x87 {
    use std::arch::asm;

    use super::LongDouble;
    use crate::collectives::reduce_ops::{private, ReduceOp, Reducible};

    impl LongDouble {
        /// `value` widened (exactly) to extended precision.
        pub fn from_f64(value: f64) -> LongDouble {
            let mut out = LongDouble([0; 2]);
            // SAFETY: loads the 8 bytes of `value` and stores 10 bytes into `out` (16
            // bytes); the x87 registers are clobbered (the C ABI's), so the register stack
            // is empty on entry, and the block leaves it empty (one load, one store-and-pop).
            unsafe {
                asm!(
                    "fld qword ptr [{v}]",
                    "fstp tbyte ptr [{o}]",
                    v = in(reg) &value,
                    o = in(reg) &mut out,
                    clobber_abi("C"),
                    options(nostack),
                );
            }
            out
        }

        /// The nearest `f64` (round to nearest even).
        pub fn to_f64(self) -> f64 {
            let mut out = 0f64;
            // SAFETY: loads the 10 bytes of `self` and stores 8 into `out`; the register
            // stack is empty on entry (clobbered) and on exit (one load, one pop).
            unsafe {
                asm!(
                    "fld tbyte ptr [{v}]",
                    "fstp qword ptr [{o}]",
                    v = in(reg) &self,
                    o = in(reg) &mut out,
                    clobber_abi("C"),
                    options(nostack),
                );
            }
            out
        }

        /// `self + other` and `self * other`, each rounded once to extended precision.
        fn sum_and_product(self, other: LongDouble) -> (LongDouble, LongDouble) {
            let (mut sum, mut product) = (LongDouble([0; 2]), LongDouble([0; 2]));
            // SAFETY: loads 10 bytes from each operand and stores 10 into `sum` and
            // `product`; the stack is empty on entry (clobbered) and on exit: three loads,
            // a multiply stored and popped, an add that pops, a store that pops.
            unsafe {
                asm!(
                    "fld tbyte ptr [{a}]",
                    "fld tbyte ptr [{b}]",
                    "fld st(1)",
                    "fmul st, st(1)",
                    "fstp tbyte ptr [{p}]",
                    "faddp st(1), st",
                    "fstp tbyte ptr [{s}]",
                    a = in(reg) &self,
                    b = in(reg) &other,
                    p = in(reg) &mut product,
                    s = in(reg) &mut sum,
                    clobber_abi("C"),
                    options(nostack),
                );
            }
            (sum, product)
        }

        /// Whether `self < other` (false when either is a NaN).
        fn less_than(self, other: LongDouble) -> bool {
            let below: u8;
            let unordered: u8;
            // SAFETY: loads 10 bytes from each operand; `fucomip` compares st(0) (self) with
            // st(1) (other) into the flags and pops, `fstp st(0)` pops the other: the stack
            // is empty on entry (clobbered) and on exit.
            unsafe {
                asm!(
                    "fld tbyte ptr [{b}]",
                    "fld tbyte ptr [{a}]",
                    "fucomip st, st(1)",
                    "fstp st(0)",
                    "setb al",
                    "setp cl",
                    a = in(reg) &self,
                    b = in(reg) &other,
                    out("al") below,
                    out("cl") unordered,
                    clobber_abi("C"),
                    options(nostack),
                );
            }
            below == 1 && unordered == 0
        }
    }

    impl private::Sealed for LongDouble {}

    impl Reducible for LongDouble {
        const INTEGER: bool = false;
        const TAG: u64 = 15;

        fn combine(op: ReduceOp, acc: &mut [Self], other: &[Self]) {
            let pairs = acc.iter_mut().zip(other);
            match op {
                ReduceOp::Min => pairs.for_each(|(a, b)| {
                    if b.less_than(*a) {
                        *a = *b
                    }
                }),
                ReduceOp::Max => pairs.for_each(|(a, b)| {
                    if a.less_than(*b) {
                        *a = *b
                    }
                }),
                ReduceOp::Sum => pairs.for_each(|(a, b)| *a = a.sum_and_product(*b).0),
                ReduceOp::Prod => pairs.for_each(|(a, b)| *a = a.sum_and_product(*b).1),
                // Refused before any reduction starts.
                ReduceOp::And | ReduceOp::Or | ReduceOp::Xor => {}
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::collectives::reduce_ops::{ReduceOp, Reducible};

    /// The extended number of sign 0, biased exponent `exp` and significand `mantissa`.
    fn extended(exp: u16, mantissa: u64) -> LongDouble {
        LongDouble([mantissa, u64::from(exp)])
    }

    #[test]
    fn sums_keep_the_bits_an_f64_would_lose() {
        // 1 + 2^-63: the last bit of a 64-bit significand, far below an f64's 53.
        let one = LongDouble::from_f64(1.0);
        assert_eq!(one, extended(0x3fff, 1 << 63));
        let tiny = LongDouble::from_f64(2f64.powi(-63));
        let mut acc = [one];
        LongDouble::combine(ReduceOp::Sum, &mut acc, &[tiny]);
        assert_eq!(acc[0], extended(0x3fff, (1 << 63) | 1));
        assert_eq!(acc[0].to_f64(), 1.0, "rounded to f64, the bit is gone");
        // (1 + 2^-63) * 2 = 2 + 2^-62, exactly.
        LongDouble::combine(ReduceOp::Prod, &mut acc, &[LongDouble::from_f64(2.0)]);
        assert_eq!(acc[0], extended(0x4000, (1 << 63) | 1));
    }

    #[test]
    fn min_and_max_compare_extended_values_and_keep_a_leading_nan() {
        let a = extended(0x3fff, (1 << 63) | 1); // just above 1
        let b = LongDouble::from_f64(1.0);
        let mut lo = [a, b];
        LongDouble::combine(ReduceOp::Min, &mut lo, &[b, a]);
        assert_eq!(lo, [b, b]);
        let mut hi = [a, b];
        LongDouble::combine(ReduceOp::Max, &mut hi, &[b, a]);
        assert_eq!(hi, [a, a]);
        let nan = LongDouble::from_f64(f64::NAN);
        let mut first = [nan, b];
        LongDouble::combine(ReduceOp::Min, &mut first, &[b, nan]);
        assert!(first[0].to_f64().is_nan(), "a NaN that comes first stays");
        assert_eq!(first[1], b, "a NaN that comes second is not taken");
        let neg = LongDouble::from_f64(-3.5);
        let mut m = [b];
        LongDouble::combine(ReduceOp::Min, &mut m, &[neg]);
        assert_eq!(m[0].to_f64(), -3.5);
    }
}
