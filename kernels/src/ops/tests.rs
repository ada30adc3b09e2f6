use super::*;
use crate::quant::F16;

#[test]
fn rmsnorm_of_constant_row_is_the_weight() {
    let x = [2.0f32; 8];
    let w: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let mut out = [0.0; 8];
    rmsnorm(KernelFamily::SCALAR, &x, &w, 0.0, &mut out);
    for i in 0..8 {
        assert!((out[i] - w[i]).abs() < 1e-6);
    }
}

#[test]
fn rope_at_position_zero_is_identity_and_preserves_norm_later() {
    let mut cos = [0.0; 4];
    let mut sin = [0.0; 4];
    let x: Vec<f32> = (0..16).map(|i| i as f32 - 7.5).collect();
    for pairing in [RopePairing::Adjacent, RopePairing::Halves] {
        rope_angles(0, 8, 10000.0, &mut cos, &mut sin);
        let mut y = x.clone();
        rope(&mut y, 8, pairing, &cos, &sin);
        assert_eq!(x, y);
        rope_angles(5, 8, 10000.0, &mut cos, &mut sin);
        rope(&mut y, 8, pairing, &cos, &sin);
        let n0: f32 = x.iter().map(|v| v * v).sum();
        let n1: f32 = y.iter().map(|v| v * v).sum();
        assert!((n0 - n1).abs() < 1e-3);
    }
}

#[test]
fn rope_adjacent_rotates_pairs_two_i_and_two_i_plus_one() {
    let mut cos = [0.0; 1];
    let mut sin = [0.0; 1];
    rope_angles(1, 2, 10000.0, &mut cos, &mut sin);
    let mut y = [1.0f32, 0.0];
    rope(&mut y, 2, RopePairing::Adjacent, &cos, &sin);
    assert!((y[0] - 1f32.cos()).abs() < 1e-6 && (y[1] - 1f32.sin()).abs() < 1e-6);
}

#[test]
fn glu_gates_equal_across_families_and_stay_near_libm() {
    let xs: Vec<f32> = (0..4099)
        .map(|i| {
            let t = i as f32 / 4099.0;
            match i % 5 {
                0 => (t - 0.5) * 200.0,
                1 => (t - 0.5) * 1e-3,
                _ => (t - 0.5) * 24.0,
            }
        })
        .chain([0.0, -0.0, 88.0, -88.0, 1e30, -1e30, f32::INFINITY])
        .collect();
    let up: Vec<f32> = (0..xs.len()).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for fam in KernelFamily::all_supported() {
        for (glu, name) in [(swiglu as fn(KernelFamily, &mut [f32], &[f32]), "swiglu"), (geglu_tanh, "geglu")] {
            let (mut a, mut b) = (xs.clone(), xs.clone());
            glu(KernelFamily::SCALAR, &mut a, &up);
            glu(fam, &mut b, &up);
            assert_eq!(bits(&a), bits(&b), "{name} {fam:?}");
        }
    }
    let mut s = xs.clone();
    swiglu(KernelFamily::SCALAR, &mut s, &up);
    let mut g = xs.clone();
    geglu_tanh(KernelFamily::SCALAR, &mut g, &up);
    for (i, &x) in xs.iter().enumerate() {
        let xd = x as f64;
        let silu = xd / (1.0 + (-xd).exp());
        let y = 0.797_884_560_802_865_4 * (xd + 0.044_715 * xd * xd * xd);
        let gelu = 0.5 * xd * (1.0 + y.tanh());
        let eps = f32::EPSILON as f64;
        // A few ulp of the result; for GELU also of its term x/2, where
        // 1 + tanh cancels (as it does with libm's tanh); and the
        // underflow of e^x below -87.
        for (got, want, name, cancel) in [
            (s[i], silu * up[i] as f64, "swiglu", 0.0),
            (g[i], gelu * up[i] as f64, "geglu", xd.abs() * up[i] as f64),
        ] {
            let err = (got as f64 - want).abs();
            let tol = 8.0 * eps * want.abs() + 2.0 * eps * cancel + 1e-30;
            assert!(err <= tol || (want.is_infinite() && got as f64 == want), "{name}({x}) = {got}, want {want}");
        }
    }
}

#[test]
fn exp_is_within_two_ulp_of_libm_and_every_family_softmaxes_alike() {
    let mut worst = 0u32;
    let mut x = 0.0f32;
    while x > -87.0 {
        let (a, b) = (exp_nonpositive(x), x.exp());
        worst = worst.max(a.to_bits().abs_diff(b.to_bits()));
        x -= 0.000_731;
    }
    assert!(worst <= 2, "{worst} ulp");
    assert_eq!(exp_nonpositive(0.0), 1.0);
    assert_eq!(exp_nonpositive(-90.0), 0.0);
    assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
    assert!(exp_nonpositive(f32::NAN).is_nan());
    let signed_zeros: Vec<f32> = (0..19).map(|i| if i % 3 == 0 { -0.0 } else { -(i as f32) }).collect();
    let masked: Vec<f32> = (0..21).map(|i| if i % 2 == 0 { f32::NEG_INFINITY } else { i as f32 * 0.5 }).collect();
    let tail_max: Vec<f32> = (0..17).map(|i| i as f32 * 0.25).collect();
    let sized = [0usize, 1, 7, 8, 9, 15, 16, 24, 31, 40, 64, 333, 2048]
        .map(|n| (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.7).collect::<Vec<f32>>());
    for base in [signed_zeros, masked, tail_max].into_iter().chain(sized) {
        let n = base.len();
        let mut want = base.clone();
        softmax_in(KernelFamily::SCALAR, &mut want);
        for fam in KernelFamily::all_supported() {
            let mut got = base.clone();
            softmax_in(fam, &mut got);
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{fam:?} n {n}"
            );
        }
        if n > 0 {
            assert!((want.iter().sum::<f32>() - 1.0).abs() < 1e-5, "n {n}");
        }
    }
}

#[test]
fn softmax_sums_to_one_and_survives_large_values() {
    let mut x = [1000.0f32, 1001.0, 999.0];
    softmax(&mut x);
    assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    assert!(x[1] > x[0] && x[0] > x[2]);
}

#[test]
fn attention_over_one_position_returns_its_value() {
    let q = [1.0f32, 2.0];
    let k = [0.5f32, 0.5, 9.0, 9.0];
    let v = [3.0f32, 4.0, 7.0, 7.0];
    let mut scores = [0.0; 1];
    let mut out = [0.0; 2];
    attend_head::<f32>(KernelFamily::SCALAR, &q, &k, &v, 4, 0, 1, &mut scores, &mut out);
    assert_eq!(out, [3.0, 4.0]);
}

#[test]
fn f16_widening_is_exact_and_the_same_in_every_family() {
    // Every half: normal, subnormal, zero, infinity (NaNs excluded: their
    // payloads are not part of the contract).
    let all: Vec<F16> = (0..=u16::MAX).map(F16).filter(|h| !h.to_f32().is_nan()).collect();
    let mut want = vec![0.0f32; all.len()];
    F16::widen(KernelFamily::SCALAR, &all, &mut want);
    for (h, w) in all.iter().zip(&want) {
        assert_eq!(F16::from_f32(*w), *h, "round trip of {:#06x}", h.0);
    }
    for fam in KernelFamily::all_supported() {
        let mut got = vec![0.0f32; all.len()];
        F16::widen(fam, &all, &mut got);
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{fam:?}");
    }
    // Round to nearest, ties to even.
    assert_eq!(F16::from_f32(1.0 + 1.0 / 2048.0), F16::from_f32(1.0));
    assert_eq!(F16::from_f32(1.0 + 3.0 / 2048.0).to_f32(), 1.0 + 2.0 / 1024.0);
}

#[test]
fn every_family_attends_bit_identically_over_an_f16_cache() {
    for (hd, n) in [(64, 37), (20, 5), (7, 1), (8, 16), (136, 9), (72, 3), (256, 6), (64, 4), (64, 7)] {
        let q: Vec<f32> = (0..hd).map(|i| (i as f32 * 0.3).sin()).collect();
        let k: Vec<F16> = (0..n * hd * 3).map(|i| F16::from_f32((i as f32 * 0.11).cos())).collect();
        let v: Vec<F16> = (0..n * hd * 3).map(|i| F16::from_f32((i as f32 * 0.07).sin())).collect();
        let mut want = vec![0.0; hd];
        let mut scores = vec![0.0; n];
        attend_head(KernelFamily::SCALAR, &q, &k, &v, hd * 3, hd, n, &mut scores, &mut want);
        // The f16 cache is read as exactly the f32 values it holds.
        let kf: Vec<f32> = k.iter().map(|h| h.to_f32()).collect();
        let vf: Vec<f32> = v.iter().map(|h| h.to_f32()).collect();
        let mut as_f32 = vec![0.0; hd];
        attend_head(KernelFamily::SCALAR, &q, &kf, &vf, hd * 3, hd, n, &mut scores, &mut as_f32);
        assert_eq!(want, as_f32, "hd {hd} n {n}");
        assert_every_family_attends_as(&want, &q, &k, &v, hd, n);
    }
}

/// Every family's attention of `q` over `n` cache rows of `k`, `v` (the
/// middle of three heads of `hd` per row) is `want`, bit for bit.
fn assert_every_family_attends_as<T: KvElem>(want: &[f32], q: &[f32], k: &[T], v: &[T], hd: usize, n: usize) {
    let mut scores = vec![0.0; n];
    for fam in KernelFamily::all_supported() {
        let mut got = vec![0.0; hd];
        attend_head(fam, q, k, v, hd * 3, hd, n, &mut scores, &mut got);
        assert_eq!(
            got.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
            "{fam:?} hd {hd} n {n}"
        );
    }
}

#[test]
fn every_family_attends_bit_identically() {
    // Head sizes around the 8-wide SIMD step; the head is the middle one
    // of three per cache row.
    for (hd, n) in [(64, 37), (20, 5), (7, 1), (8, 16), (136, 9), (72, 3), (100, 6), (64, 4), (64, 7)] {
        let q: Vec<f32> = (0..hd).map(|i| (i as f32 * 0.3).sin()).collect();
        let k: Vec<f32> = (0..n * hd * 3).map(|i| (i as f32 * 0.11).cos()).collect();
        let v: Vec<f32> = (0..n * hd * 3).map(|i| (i as f32 * 0.07).sin()).collect();
        let mut want = vec![0.0; hd];
        let mut scores = vec![0.0; n];
        attend_head(KernelFamily::SCALAR, &q, &k, &v, hd * 3, hd, n, &mut scores, &mut want);
        assert_every_family_attends_as(&want, &q, &k, &v, hd, n);
    }
}
