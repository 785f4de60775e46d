//! FP8 (e4m3, the "fn" variant: no infinities, ±448 the largest finite) as the low-latency
//! dispatch casts rows to it: per group of 128 elements, `scale = amax / 448` (amax at least
//! 1e-4) and each element `x · (448 / amax)` rounded to nearest (ties to even) and clamped to
//! ±448, as the GPU's `cvt.rn.satfinite.e4m3x2.f32` does. The host's conversions here are the
//! reference the kernels are checked against.

use crate::bf16::Bf16;

/// Elements sharing one scale.
pub const GROUP: usize = 128;
/// The largest finite e4m3 value.
const MAX: f32 = 448.0;
/// The smallest amax a group is scaled by.
const MIN_AMAX: f32 = 1e-4;

/// The value of e4m3 code `code` (NaN for the two NaN codes).
pub fn e4m3_to_f32(code: u8) -> f32 {
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let (exponent, mantissa) = (i32::from((code >> 3) & 0xf), f32::from(code & 7));
    if exponent == 0xf && code & 7 == 7 {
        return f32::NAN;
    }
    let magnitude = match exponent {
        0 => mantissa / 8.0 * 2f32.powi(-6),
        e => (1.0 + mantissa / 8.0) * 2f32.powi(e - 7),
    };
    sign * magnitude
}

/// The e4m3 code nearest `value` (ties to the even code), clamped to ±448; NaN to 0x7f.
pub fn e4m3_from_f32(value: f32) -> u8 {
    if value.is_nan() {
        return 0x7f;
    }
    let sign = if value.is_sign_negative() { 0x80 } else { 0 };
    let a = value.abs().min(MAX);
    // Codes 0..=0x7e are the non-negative finite values, increasing.
    let above = (0u8..=0x7e).find(|&c| e4m3_to_f32(c) >= a).unwrap_or(0x7e);
    if above == 0 || e4m3_to_f32(above) == a {
        return sign | above;
    }
    let below = above - 1;
    let (lo, hi) = (e4m3_to_f32(below), e4m3_to_f32(above));
    let code = match (a - lo).partial_cmp(&(hi - a)) {
        Some(std::cmp::Ordering::Less) => below,
        Some(std::cmp::Ordering::Greater) => above,
        _ if below % 2 == 0 => below,
        _ => above,
    };
    sign | code
}

/// A row cast to FP8: its codes and one scale per [`GROUP`] elements (`row.len()` a multiple
/// of it).
pub fn quantize(row: &[Bf16]) -> (Vec<u8>, Vec<f32>) {
    let mut codes = Vec::with_capacity(row.len());
    let mut scales = Vec::with_capacity(row.len() / GROUP);
    for group in row.chunks(GROUP) {
        let amax = group
            .iter()
            .map(|v| v.to_f32().abs())
            .fold(0.0f32, f32::max)
            .max(MIN_AMAX);
        scales.push(amax / MAX);
        let inverse = MAX / amax;
        codes.extend(group.iter().map(|v| e4m3_from_f32(v.to_f32() * inverse)));
    }
    (codes, scales)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_decode_to_e4m3_values() {
        assert_eq!(e4m3_to_f32(0x00), 0.0);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6));
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert_eq!(e4m3_to_f32(0x7e), 448.0);
        assert_eq!(e4m3_to_f32(0xb8), -1.0);
        assert!(e4m3_to_f32(0x7f).is_nan());
    }

    #[test]
    fn encoding_rounds_to_nearest_even_and_saturates() {
        for code in 0u8..=0x7e {
            assert_eq!(e4m3_from_f32(e4m3_to_f32(code)), code, "code {code:#x}");
        }
        // 1.0625 lies halfway between 1 (0x38, even) and 1.125 (0x39): to 0x38.
        assert_eq!(e4m3_from_f32(1.0625), 0x38);
        // 1.1875 lies halfway between 1.125 (0x39) and 1.25 (0x3a, even): to 0x3a.
        assert_eq!(e4m3_from_f32(1.1875), 0x3a);
        assert_eq!(e4m3_from_f32(1.05), 0x38);
        assert_eq!(e4m3_from_f32(1.07), 0x39);
        assert_eq!(e4m3_from_f32(1000.0), 0x7e);
        assert_eq!(e4m3_from_f32(-1000.0), 0xfe);
        assert_eq!(e4m3_from_f32(-0.0), 0x80);
    }

    #[test]
    fn a_group_is_scaled_to_its_largest_magnitude() {
        let row: Vec<Bf16> = (0..256).map(|i| Bf16::from_f32(i as f32 - 100.0)).collect();
        let (codes, scales) = quantize(&row);
        assert_eq!(scales, vec![100.0 / 448.0, 155.0 / 448.0]);
        // The largest magnitude of each group becomes ±448.
        assert_eq!(codes[0], 0xfe);
        assert_eq!(codes[255], 0x7e);
        // Each code times its scale is close to the element.
        for (i, v) in row.iter().enumerate() {
            let back = e4m3_to_f32(codes[i]) * scales[i / GROUP];
            assert!(
                (back - v.to_f32()).abs() <= v.to_f32().abs() / 16.0 + 1e-3,
                "{i}"
            );
        }
    }
}
