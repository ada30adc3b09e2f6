//! The IEEE half float the CPU KV cache stores.

/// An IEEE binary16 value stored as its bits: the KV cache's element on
/// the CPU. Written with round-to-nearest-even ([`F16::from_f32`]); read by
/// an exact widening (F16C `vcvtph2ps` on every non-scalar x86 family, the
/// bit-level conversion of the `half` crate on the scalar one: the same
/// value for every non-NaN input).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct F16(pub u16);

impl F16 {
    /// `x` rounded to the nearest half (ties to even), as every writer of
    /// the cache rounds.
    #[inline]
    pub fn from_f32(x: f32) -> Self {
        F16(half::f16::from_f32(x).to_bits())
    }

    #[inline]
    pub fn to_f32(self) -> f32 {
        half::f16::from_bits(self.0).to_f32()
    }
}
