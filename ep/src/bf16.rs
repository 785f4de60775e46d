//! [`Bf16`]: the bfloat16 element of token rows (the upper half of an IEEE `f32`), with the
//! conversions the kernels use: widening is exact, narrowing rounds to nearest, ties to even.

use bytemuck::{Pod, Zeroable};

/// A bfloat16 number, stored as its 16 bits.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct Bf16(pub u16);

impl Bf16 {
    /// Zero.
    pub const ZERO: Bf16 = Bf16(0);

    /// The nearest bfloat16 to `value` (ties to even); a NaN stays a (quiet) NaN.
    pub fn from_f32(value: f32) -> Bf16 {
        let bits = value.to_bits();
        if value.is_nan() {
            return Bf16(((bits >> 16) as u16) | 0x40);
        }
        let rounding = 0x7fff + ((bits >> 16) & 1);
        Bf16((bits.wrapping_add(rounding) >> 16) as u16)
    }

    /// The value as an `f32` (exact).
    pub fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }
}

impl From<f32> for Bf16 {
    fn from(value: f32) -> Self {
        Bf16::from_f32(value)
    }
}

impl From<Bf16> for f32 {
    fn from(value: Bf16) -> Self {
        value.to_f32()
    }
}

#[cfg(test)]
mod tests {
    use super::Bf16;

    #[test]
    fn representable_values_round_trip() {
        for v in [0.0f32, 1.0, -2.5, 0.125, 65280.0, -0.0078125] {
            assert_eq!(Bf16::from_f32(v).to_f32(), v);
        }
    }

    #[test]
    fn narrowing_rounds_to_nearest_even() {
        // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
        assert_eq!(Bf16::from_f32(1.0 + 1.0 / 256.0).to_f32(), 1.0);
        // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: to the even one.
        assert_eq!(Bf16::from_f32(1.0 + 3.0 / 256.0).to_f32(), 1.0 + 1.0 / 64.0);
        // Just above halfway rounds up.
        assert_eq!(
            Bf16::from_f32(1.0 + 1.0 / 256.0 + 1.0 / 4096.0).to_f32(),
            1.0 + 1.0 / 128.0
        );
    }

    #[test]
    fn nan_stays_nan_and_infinity_stays_infinite() {
        assert!(Bf16::from_f32(f32::NAN).to_f32().is_nan());
        assert_eq!(Bf16::from_f32(f32::INFINITY).to_f32(), f32::INFINITY);
        assert_eq!(Bf16::from_f32(f32::MAX).to_f32(), f32::INFINITY);
    }
}
