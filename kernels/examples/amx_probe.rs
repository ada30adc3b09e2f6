//! A probe, not a kernel of the engine: how much faster exact integer
//! arithmetic on Intel AMX (`tdpb*d`, 1,024 byte products a cycle) runs the
//! Q4_K prefill product than the AVX-512 VNNI passes the engine uses
//! (`vpdpwssd`, 32 sixteen-bit products a cycle), with the engine's
//! specification kept bit for bit (issue 33: prefill of 1,024 tokens at 2x
//! llama.cpp).
//!
//! Exact, because the 16-bit activation quants split into a low byte
//! (unsigned) and a high byte (signed): `q = 256 hi + lo`, so a sub-block's
//! integer sum `Σ w q = 256 Σ w hi + Σ w lo` comes from two byte products
//! (`tdpbsud`, `tdpbuud`) with no rounding, and the float work after it is
//! the specification's chain per output, in its order (one conversion, one
//! scale product, one FMA and one FNMADD per sub-block). The output is
//! compared bit for bit with `kernels::matvec::matmul_rows_with` on the
//! same matrix and rows.
//!
//! `cargo run --release -p kernels --example amx_probe -- [ROWS] [COLS] [TOKENS] [REPS]`
//! (default 8960 1536 1024 3: the 1.5B's FFN gate, a 1,024-token prompt),
//! one thread. Prints both times, their ratio and whether every output bit
//! agrees; exits 1 on a difference, 2 where the CPU or OS has no AMX or an
//! argument is not a count within its bounds.
//!
//! What it found (docs/performance.md, "Exact AMX for the K-quant
//! prefill"): bit-identical output, at 1.04–1.17x the VNNI passes' speed,
//! not the 2x the instruction counts promised. The sums have to leave the
//! tiles through memory once per 32-element sub-block (two 1 KiB tile
//! stores per 8,192 products: one for the low bytes' sums, one for the
//! high bytes'), and the specification's float chain runs on them after;
//! separately the tile traffic took about 80 ms and the chain about 50 ms
//! of the 1,024-row gate product, together about their sum: the core
//! overlaps neither with the other, whichever order the blocks are issued
//! in.
//!
//! Not measured here: the weight unpacking to byte tiles is scalar and
//! counted in the AMX time (about 20 ms of it); Q5_K and Q6_K; more than
//! one thread.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx {
    use kernels::act::{ActRow, QRow};
    use kernels::matvec::r16::k::KFormat;
    use kernels::matvec::r16::{GROUP, R16};
    use kernels::quant::QK_K;
    use kernels::quant::dequant::get_scale_min_k4;
    use std::arch::x86_64::*;

    /// AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25), and the
    /// kernel's permission for this process to use the tile data state.
    pub fn available() -> Result<(), String> {
        let l7 = __cpuid_count(7, 0);
        if l7.edx & (1 << 24) == 0 || l7.edx & (1 << 25) == 0 {
            return Err("this CPU has no AMX-TILE / AMX-INT8".into());
        }
        // arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
        let ret: i64;
        // SAFETY: a plain syscall; it reads and writes no memory of ours.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") 158i64 => ret,
                in("rdi") 0x1023i64,
                in("rsi") 18i64,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        if ret != 0 {
            return Err(format!("arch_prctl(ARCH_REQ_XCOMP_PERM) failed: {ret}"));
        }
        Ok(())
    }

    /// The 64-byte tile configuration: tmm0, tmm1 the activation bytes (16
    /// rows of 32), tmm2 the weight bytes (8 rows of 64: four elements of
    /// each of sixteen weight rows), tmm4 … tmm7 two sets of sums (16 × 16
    /// i32 each: `lo`, `hi`).
    #[repr(C, align(64))]
    struct Config([u8; 64]);

    fn config() -> Config {
        let mut c = [0u8; 64];
        c[0] = 1; // palette 1
        let mut set = |t: usize, rows: u8, colsb: u16| {
            c[16 + 2 * t..16 + 2 * t + 2].copy_from_slice(&colsb.to_le_bytes());
            c[48 + t] = rows;
        };
        set(0, 16, 32);
        set(1, 16, 32);
        set(2, 8, 64);
        for t in 4..8 {
            set(t, 16, 64);
        }
        Config(c)
    }

    // Hand-encoded AMX instructions (VEX, map 0F38): no assembler feature
    // flags needed. TILELOADD / TILESTORED address [rsi + rdx*1].
    macro_rules! tileloadd {
        ($modrm:literal, $p:expr, $stride:expr) => {
            std::arch::asm!(
                concat!(".byte 0xc4, 0xe2, 0x7b, 0x4b, ", stringify!($modrm), ", 0x16"),
                in("rsi") $p, in("rdx") $stride, options(nostack, readonly)
            )
        };
    }
    macro_rules! tilestored {
        ($modrm:literal, $p:expr, $stride:expr) => {
            std::arch::asm!(
                concat!(".byte 0xc4, 0xe2, 0x7a, 0x4b, ", stringify!($modrm), ", 0x16"),
                in("rsi") $p, in("rdx") $stride, options(nostack)
            )
        };
    }
    macro_rules! op {
        ($($b:literal),*) => { std::arch::asm!(concat!(".byte ", $(stringify!($b), ", ",)* "0x90"), options(nostack, nomem)) };
    }

    /// Starts one (16 activation rows × 16 weight rows × 32 elements)
    /// product into sum set `S` (tmm4/tmm5 or tmm6/tmm7): `lo` from tmm0 ×
    /// tmm2 unsigned × unsigned, `hi` from tmm1 × tmm2 signed × unsigned,
    /// stored to `c` (`lo` then `hi`, 1,024 bytes each).
    ///
    /// # Safety
    /// The tiles are configured ([`config`]); `a_lo`, `a_hi` address 16 rows
    /// of 32 bytes `stride` apart, `b` 512 bytes, `c` 2,048 writable bytes.
    #[inline(always)]
    unsafe fn issue<const S: usize>(a_lo: *const u8, a_hi: *const u8, stride: usize, b: *const u8, c: *mut u8) {
        // SAFETY: forwarded from the caller.
        unsafe {
            tileloadd!(0x04, a_lo, stride); // tmm0
            tileloadd!(0x0c, a_hi, stride); // tmm1
            tileloadd!(0x14, b, 64usize); // tmm2
            if S == 0 {
                op!(0xc4, 0xe2, 0x7b, 0x49, 0xe0); // tilezero tmm4
                op!(0xc4, 0xe2, 0x7b, 0x49, 0xe8); // tilezero tmm5
                op!(0xc4, 0xe2, 0x68, 0x5e, 0xe0); // tdpbuud tmm4, tmm0, tmm2
                op!(0xc4, 0xe2, 0x6a, 0x5e, 0xe9); // tdpbsud tmm5, tmm1, tmm2
                tilestored!(0x24, c, 64usize); // tmm4
                tilestored!(0x2c, c.add(1024), 64usize); // tmm5
            } else {
                op!(0xc4, 0xe2, 0x7b, 0x49, 0xf0); // tilezero tmm6
                op!(0xc4, 0xe2, 0x7b, 0x49, 0xf8); // tilezero tmm7
                op!(0xc4, 0xe2, 0x68, 0x5e, 0xf0); // tdpbuud tmm6, tmm0, tmm2
                op!(0xc4, 0xe2, 0x6a, 0x5e, 0xf9); // tdpbsud tmm7, tmm1, tmm2
                tilestored!(0x34, c, 64usize); // tmm6
                tilestored!(0x3c, c.add(1024), 64usize); // tmm7
            }
        }
    }

    /// Every activation row's quants as low bytes and high bytes, element
    /// order, `cols` bytes a row.
    pub fn split(rows: &[QRow], cols: usize) -> (Vec<u8>, Vec<u8>) {
        let mut lo = vec![0u8; rows.len() * cols];
        let mut hi = vec![0u8; rows.len() * cols];
        for (m, q) in rows.iter().enumerate() {
            for b in 0..q.nb {
                for (e, v) in q.block_quants(b).into_iter().enumerate() {
                    lo[m * cols + 32 * b + e] = v as u16 as u8;
                    hi[m * cols + 32 * b + e] = (v >> 8) as i8 as u8;
                }
            }
        }
        (lo, hi)
    }

    /// One group's weights as AMX byte tiles (sub-block by sub-block, each 8
    /// rows of 64 bytes: element `4k + j` of weight row `n` at `64 k + 4 n +
    /// j`), and its per-sub-block factors `d · scale` and `dmin · min` (16
    /// lanes each), computed as the VNNI kernel computes them.
    fn unpack_group(r: &R16, g: usize) -> (Vec<u8>, Vec<[f32; 16]>, Vec<[f32; 16]>) {
        let f = KFormat::Q4K;
        let (qo, so) = (f.qs_offset(), f.scales_offset());
        let mut b = vec![0u8; r.nb * 8 * 512];
        let mut p = Vec::with_capacity(r.nb * 8);
        let mut mm = Vec::with_capacity(r.nb * 8);
        for sb in 0..r.nb {
            let t = r.tile(g, sb);
            let h = |o: usize| half::f16::from_bits(u16::from_le_bytes([t[o], t[o + 1]])).to_f32();
            for j in 0..8 {
                let (k, low) = (j / 2, j % 2 == 0);
                let mut pj = [0f32; 16];
                let mut mj = [0f32; 16];
                for n in 0..GROUP {
                    let scales: [u8; 12] = std::array::from_fn(|x| t[so + 16 * x + n]);
                    let (sc, m) = get_scale_min_k4(j, &scales);
                    pj[n] = h(2 * n) * sc as f32;
                    mj[n] = h(KFormat::DMIN + 2 * n) * m as f32;
                    for e in 0..32 {
                        let byte = t[qo + 32 * (16 * k + e / 2) + 2 * n + e % 2];
                        let w = if low { byte & 0x0f } else { byte >> 4 };
                        b[(sb * 8 + j) * 512 + 64 * (e / 4) + 4 * n + e % 4] = w;
                    }
                }
                p.push(pj);
                mm.push(mj);
            }
        }
        (b, p, mm)
    }

    /// Groups of sixteen weight rows whose tiles are unpacked together and
    /// run against one block of sixteen activation rows before the next
    /// block: the activation bytes (48 KiB for 1,536 columns) stay in L1/L2
    /// over the groups, the groups' tiles (24 KiB each) in L2.
    const CHUNK: usize = 8;

    /// `outs[m * rows + o]` for every activation row `m` (a multiple of 16)
    /// and weight row `o` of the Q4_K matrix `r` (`rows` a multiple of 16).
    /// Returns the seconds spent unpacking weights.
    ///
    /// # Safety
    /// AMX is [`available`]; the CPU has AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn matmul(r: &R16, rows: usize, xs: &[QRow], lo: &[u8], hi: &[u8], outs: &mut [f32]) -> f64 {
        let cols = r.nb * QK_K;
        let nu = r.nb * 8;
        let tiles = xs.len() / 16;
        // Each block's scales `d` and `d · sum` for its sixteen rows, side by side.
        let mut dx = vec![0f32; tiles * nu * 16];
        let mut sx = vec![0f32; tiles * nu * 16];
        for (m, q) in xs.iter().enumerate() {
            for u in 0..nu {
                dx[((m / 16) * nu + u) * 16 + m % 16] = q.d[u];
                sx[((m / 16) * nu + u) * 16 + m % 16] = q.s[u];
            }
        }
        let cfg = config();
        #[repr(C, align(64))]
        struct Sums([i32; 1024]);
        let mut c = Sums([0; 1024]);
        let cp = c.0.as_mut_ptr().cast::<u8>();
        // SAFETY: the configuration is 64 readable bytes; AMX is available.
        unsafe { std::arch::asm!(".byte 0xc4, 0xe2, 0x78, 0x49, 0x07", in("rdi") cfg.0.as_ptr(), options(nostack)) };
        let mut unpacking = 0.0;
        let groups = rows / GROUP;
        for g0 in (0..groups).step_by(CHUNK) {
            let t0 = std::time::Instant::now();
            let chunk: Vec<_> = (g0..(g0 + CHUNK).min(groups)).map(|g| unpack_group(r, g)).collect();
            unpacking += t0.elapsed().as_secs_f64();
            for mt in 0..tiles {
                let (a_lo, a_hi) = (lo[16 * mt * cols..].as_ptr(), hi[16 * mt * cols..].as_ptr());
                let (dxt, sxt) = (dx[mt * nu * 16..].as_ptr(), sx[mt * nu * 16..].as_ptr());
                for (k, (b, p, mm)) in chunk.iter().enumerate() {
                    let bp = b.as_ptr();
                    let mut y = [_mm512_setzero_ps(); 16];
                    // SAFETY: rows 16 mt .. 16 mt + 16 of `lo` / `hi` hold
                    // `cols` bytes each, block u at 32 u; `b` holds nu tiles
                    // of 512 bytes; `c` 4,096 bytes; `dxt`, `sxt` nu · 16 floats.
                    unsafe {
                        issue::<0>(a_lo, a_hi, cols, bp, cp);
                        for u in 0..nu {
                            // The next block's product runs while this one's
                            // sums go through the float chain.
                            if u + 1 < nu {
                                let (al, ah, bn) =
                                    (a_lo.add(32 * (u + 1)), a_hi.add(32 * (u + 1)), bp.add(512 * (u + 1)));
                                if u % 2 == 0 {
                                    issue::<1>(al, ah, cols, bn, cp.add(2048));
                                } else {
                                    issue::<0>(al, ah, cols, bn, cp);
                                }
                            }
                            let cs = cp.add(2048 * (u % 2)).cast::<i32>();
                            let pv = _mm512_loadu_ps(p.get_unchecked(u).as_ptr());
                            let mv = _mm512_loadu_ps(mm.get_unchecked(u).as_ptr());
                            let (du, su) = (dxt.add(16 * u), sxt.add(16 * u));
                            for (i, yi) in y.iter_mut().enumerate() {
                                let s_lo = _mm512_load_si512(cs.add(16 * i).cast());
                                let s_hi = _mm512_load_si512(cs.add(256 + 16 * i).cast());
                                let s = _mm512_add_epi32(_mm512_slli_epi32(s_hi, 8), s_lo);
                                let f = _mm512_mul_ps(pv, _mm512_set1_ps(*du.add(i)));
                                *yi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), f, *yi);
                                *yi = _mm512_fnmadd_ps(mv, _mm512_set1_ps(*su.add(i)), *yi);
                            }
                        }
                    }
                    let g = g0 + k;
                    for (i, yi) in y.iter().enumerate() {
                        let o = &mut outs[(16 * mt + i) * rows + GROUP * g..][..GROUP];
                        // SAFETY: sixteen writable floats.
                        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), *yi) };
                    }
                }
            }
        }
        // tilerelease
        // SAFETY: releases the tile state this function configured.
        unsafe { std::arch::asm!(".byte 0xc4, 0xe2, 0x78, 0x49, 0xc0", options(nostack, nomem)) };
        unpacking
    }

    /// Activation rows of `cols` floats, quantized as the engine does.
    pub fn activations(tokens: usize, cols: usize, seed: u64) -> Vec<ActRow> {
        let mut s = seed;
        let mut next = move || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
        };
        (0..tokens)
            .map(|_| {
                let x: Vec<f32> = (0..cols).map(|_| next() * 3.0).collect();
                let mut a = ActRow::default();
                a.quantize(&x);
                a
            })
            .collect()
    }

    /// GGUF Q4_K bytes of a (rows, cols) matrix: random quants, scales and
    /// mins, `d` and `dmin` small positive halves.
    pub fn q4k_bytes(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        let mut next = move || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 32) as u32
        };
        let blocks = rows * cols / QK_K;
        let mut out = Vec::with_capacity(blocks * 144);
        for _ in 0..blocks {
            let d = half::f16::from_f32(0.0005 + (next() % 1000) as f32 * 1e-5).to_bits();
            let dmin = half::f16::from_f32(0.0002 + (next() % 1000) as f32 * 1e-5).to_bits();
            out.extend_from_slice(&d.to_le_bytes());
            out.extend_from_slice(&dmin.to_le_bytes());
            out.extend((0..140).map(|_| next() as u8));
        }
        out
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn main() {
    use kernels::dispatch::{FamilyKind, KernelFamily};
    use kernels::matvec::r16::Repacked;
    use kernels::matvec::{Input, Weights, matmul_rows_with};
    use kernels::quant::GgmlType;
    use std::time::Instant;

    // ROWS COLS TOKENS REPS: each bounded, so that a typo cannot ask for
    // more memory than a probe needs (ROWS x COLS bytes of weights at most
    // 64 Mi elements, TOKENS x COLS activation bytes twice).
    let usage = |why: String| -> ! {
        eprintln!(
            "amx_probe: {why}; usage: amx_probe [ROWS (16..=65536, a multiple of 16)] [COLS (256..=65536, a \
             multiple of 256)] [TOKENS (16..=4096, a multiple of 16)] [REPS (1..=100)], ROWS x COLS at most 2^26"
        );
        std::process::exit(2)
    };
    let mut args = Vec::new();
    for a in std::env::args().skip(1) {
        match a.parse::<usize>() {
            Ok(v) => args.push(v),
            Err(_) => usage(format!("{a:?} is not a count")),
        }
    }
    let arg = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
    let (rows, cols, tokens, reps) = (arg(0, 8960), arg(1, 1536), arg(2, 1024), arg(3, 3));
    let fits = |v: usize, lo: usize, hi: usize, of: usize| (lo..=hi).contains(&v) && v.is_multiple_of(of);
    if args.len() > 4
        || !fits(rows, 16, 65536, 16)
        || !fits(cols, 256, 65536, 256)
        || !fits(tokens, 16, 4096, 16)
        || !fits(reps, 1, 100, 1)
        || rows * cols > 1 << 26
    {
        usage(format!("{args:?} out of bounds"));
    }
    if let Err(e) = amx::available() {
        eprintln!("amx_probe: {e}");
        std::process::exit(2);
    }
    let Some(family) = KernelFamily::of(FamilyKind::Avx512Vnni).filter(|_| FamilyKind::Avx512Vnni.is_supported())
    else {
        eprintln!("amx_probe: no AVX-512 VNNI family to compare with");
        std::process::exit(2);
    };
    let native = amx::q4k_bytes(rows, cols, 7);
    let packed = Repacked::from_native(GgmlType::Q4K, &native, rows, cols).expect("shape").expect("Q4_K repacks");
    let m = packed.matrix();
    let Weights::R16(r) = m.w else { unreachable!("a repacked matrix") };
    let acts = amx::activations(tokens, cols, 11);
    let views: Vec<_> = acts.iter().map(|a| a.view()).collect();
    let x = vec![0f32; cols];
    let inputs: Vec<Input> = views.iter().map(|q| Input::new(&x, *q)).collect();
    let (lo, hi) = amx::split(&views, cols);

    let mut want = vec![0f32; tokens * rows];
    let mut got = vec![0f32; tokens * rows];
    let (mut t_vnni, mut t_amx, mut t_unpack) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        matmul_rows_with(family, true, &m, &inputs, 0, &mut want);
        t_vnni.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        // SAFETY: AMX is available (checked above) and so is AVX-512 F.
        let unpacking = unsafe { amx::matmul(&r, rows, &views, &lo, &hi, &mut got) };
        t_amx.push(t.elapsed().as_secs_f64());
        t_unpack.push(unpacking);
    }
    let differ = want.iter().zip(&got).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let macs = (rows * cols * tokens) as f64;
    println!(
        "Q4_K {rows}x{cols}, {tokens} activation rows, one thread, best of {reps}: VNNI passes {:.3} s ({:.1} G products/s), \
         AMX {:.3} s ({:.1} G/s; {:.3} s of it unpacking weights): {:.2}x; outputs differing in any bit: {differ} of {}",
        best(&t_vnni),
        macs / best(&t_vnni) / 1e9,
        best(&t_amx),
        macs / best(&t_amx) / 1e9,
        best(&t_unpack),
        best(&t_vnni) / best(&t_amx),
        want.len()
    );
    if differ > 0 {
        std::process::exit(1);
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn main() {
    eprintln!("amx_probe: x86_64 Linux only");
    std::process::exit(2);
}
