//! Does every width of a record share one arm noise? The pooled difference
//! (`tuner::analysis::pool`) and the record's tie test (`tuner::analysis::estimate::ties`) take
//! a round's difference's variance from the whole width × round table,
//! which assumes it. This reads every committed record with a full table
//! (8 widths × 4 rounds), pools each width's share of the residual sum of
//! squares over them and prints Bartlett's statistic for equal variances
//! across widths (approximate: a row's residuals are not independent of
//! the others'). docs/records.md reports the result.
//!
//! `cargo test --release -p tuner --test shared_noise -- --ignored --nocapture`
use std::collections::BTreeMap;

#[test]
#[ignore = "reads every committed record (a minute); prints the check docs/records.md reports"]
fn committed_records_show_one_arm_noise_across_widths() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../records");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .expect("records/")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("raw.jsonl").exists())
        .collect();
    dirs.sort();
    // width -> (residual sum of squares, its degrees of freedom) summed over records.
    let mut by_width: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
    let mut used = 0;
    for d in dirs {
        let Ok((_, s)) = tuner::analysis::summarize::summarize_dir(&d) else { continue };
        let l: BTreeMap<usize, Vec<(usize, f64)>> = s
            .widths
            .iter()
            .filter(|w| w.not_a_measurement.is_none())
            .filter_map(|w| {
                w.ratio.as_ref().map(|r| (w.width.code(), r.per_round.iter().map(|(k, x)| (*k, x.ln())).collect()))
            })
            .collect();
        let ws: Vec<usize> = l.keys().copied().collect();
        if ws.len() != 8 {
            continue;
        }
        let ks: Vec<usize> =
            l[&ws[0]].iter().map(|x| x.0).filter(|k| ws.iter().all(|w| l[w].iter().any(|y| y.0 == *k))).collect();
        if ks.len() != 4 {
            continue;
        }
        used += 1;
        let cell = |w: usize, k: usize| l[&w].iter().find(|y| y.0 == k).map_or(0.0, |y| y.1);
        let (nw, nr) = (ws.len() as f64, ks.len() as f64);
        let grand: f64 = ws.iter().flat_map(|w| ks.iter().map(move |k| cell(*w, *k))).sum::<f64>() / (nw * nr);
        let km: Vec<f64> = ks.iter().map(|&k| ws.iter().map(|&w| cell(w, k)).sum::<f64>() / nw).collect();
        let (_, total_df) = tuner::analysis::estimate::interaction_variance(&l, None).expect("a full table");
        for &w in &ws {
            let wm: f64 = ks.iter().map(|&k| cell(w, k)).sum::<f64>() / nr;
            let ss: f64 = ks.iter().zip(&km).map(|(&k, m)| (cell(w, k) - wm - m + grand).powi(2)).sum();
            let e = by_width.entry(w).or_default();
            e.0 += ss;
            e.1 += total_df as f64 / nw;
        }
    }
    assert!(used > 0, "no committed record has a full 8 x 4 table");
    let vars: Vec<(usize, f64, f64)> = by_width.iter().map(|(w, (ss, df))| (*w, ss / df, *df)).collect();
    let (sdf, sss): (f64, f64) = vars.iter().fold((0.0, 0.0), |a, (_, v, df)| (a.0 + df, a.1 + v * df));
    let pooled = sss / sdf;
    let k = vars.len() as f64;
    let m = sdf * pooled.ln() - vars.iter().map(|(_, v, df)| df * v.ln()).sum::<f64>();
    let c = 1.0 + (vars.iter().map(|(_, _, df)| 1.0 / df).sum::<f64>() - 1.0 / sdf) / (3.0 * (k - 1.0));
    println!("{used} records with 8 widths x 4 rounds; each width's residual sd (log), pooled over them:");
    for (w, v, df) in &vars {
        println!("  width {w}: {:.3} on {df:.1} df", v.sqrt());
    }
    println!("  all widths: {:.3}; Bartlett's statistic {:.2} on {} df", pooled.sqrt(), m / c, vars.len() - 1);
}
