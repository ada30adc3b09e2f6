//! Writes a sweep's `record.md`, `summary.csv` and `plot.svg` from a
//! [`Summary`] and the raw header. Every number in the record comes from the
//! summary; a value that is missing is written as what is missing and why,
//! never as a placeholder.
use crate::data::plan::SpeculativeArm;
use std::path::Path;

use anyhow::{Context, Result};

mod markdown;
pub use markdown::markdown;

use crate::analysis::estimate::RatioEstimate;
use crate::analysis::stats::Stats;
use crate::analysis::summary::{Summary, WidthSummary};
use crate::data::raw::{Bracket, RawFile};
use crate::host::reading::Reading;

fn r<T: std::fmt::Display>(x: &Reading<T>) -> String {
    match &x.value {
        Some(v) => v.to_string(),
        None => format!("unavailable ({})", x.reason()),
    }
}

fn tps(s: &Option<Stats>) -> [String; 3] {
    match s {
        Some(s) => [s.n.to_string(), format!("{:.1}", s.median), format!("{:.1}..{:.1}", s.min, s.max)],
        None => ["0".into(), "no samples".into(), "-".into()],
    }
}

/// `ratio [low, high]`, or what is missing.
pub fn ratio(s: &Option<RatioEstimate>) -> String {
    match s {
        Some(RatioEstimate { ratio, interval: Some((lo, hi)), .. }) => format!("{ratio:.3} [{lo:.3}, {hi:.3}]"),
        Some(r) => format!("{:.3} (one round: no interval)", r.ratio),
        None => "no paired samples".into(),
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("none".into(), |v| format!("{v:.digits$}"))
}

/// `[lo, hi]`, or "no interval".
fn opt_interval(iv: Option<(f64, f64)>) -> String {
    iv.map_or("no interval".into(), |(lo, hi)| format!("[{lo:.3}, {hi:.3}]"))
}

/// The headline of a record: what was measured where (and, for a served
/// sweep, that it was measured through the server, and at what concurrency
/// when above one client).
pub fn title(s: &Summary) -> String {
    format!(
        "{} drafter on {}, {} target ({}{})",
        s.drafter,
        s.device_class.as_deref().unwrap_or("an unknown device class"),
        s.target_quant.as_deref().unwrap_or("unknown"),
        s.date,
        match (s.served, s.concurrency) {
            (false, _) => String::new(),
            (true, 1) => ", served".to_string(),
            (true, n) => format!(", served at concurrency {n}"),
        }
    )
}

/// A served record measured under load: what it measured, the batches its
/// requests ran in, and what its entry is (a bucket of the idle key).
/// `None` at one client.
pub fn under_load(s: &Summary) -> Option<String> {
    if !s.served || s.concurrency <= 1 {
        return None;
    }
    let batch = match &s.batch {
        Some(b) => format!(
            "its measured requests ran in passes of {:.2} sequences on average (the widest {}, over {} requests)",
            b.mean_sequences, b.widest, b.requests
        ),
        None => "no response said the batches it ran in (a server before `--parallel`)".to_string(),
    };
    Some(format!(
        "Measured at concurrency {}: every request was sent beside up to {} others, and {batch}. `tuner propose` \
         writes its entry with `concurrency = {}`: a bucket of the idle key, which a server uses for the steps \
         where at least {} sequences run, never as a run's own width; it pools only with records of the same \
         concurrency.",
        s.concurrency,
        s.concurrency - 1,
        s.concurrency,
        s.concurrency
    ))
}

/// What the record's tok/s are.
pub fn statistic(s: &Summary) -> &'static str {
    if s.served { "end-to-end tok/s" } else { "decode tok/s" }
}

/// How a person reads an arm's name in a sentence: `width 2`, or `the
/// adaptive arm` (raw.jsonl stores it as 0; no human reads that number).
pub fn arm_name(a: SpeculativeArm) -> String {
    match a {
        SpeculativeArm::Adaptive => "the adaptive arm".to_string(),
        w => format!("width {w}"),
    }
}

/// What the decision chose, as every output names it: `width 2`, `the
/// adaptive draft length`, or `off` (also without a decision).
pub fn choice(s: &Summary) -> String {
    match s.decision.width {
        Some(SpeculativeArm::Adaptive) => "the adaptive draft length".to_string(),
        Some(w) => format!("width {w}"),
        None => "off".to_string(),
    }
}

/// The one interval a record gives for its decision, as its headline, its
/// plot and `tuner propose`'s note write it: `1.253x classic [1.178, 1.372]`.
/// It is the decision's ratio and interval (for `off`, the best width's):
/// in a drifted record whose choice survives, the interval widened to hold
/// the chosen arm's intervals against either bracket alone, never the
/// two-sided one the widths table does not show. `None` without both.
pub fn decision_interval(s: &Summary) -> Option<String> {
    let (r, (lo, hi)) = (s.decision.ratio?, s.decision.ratio_interval?);
    Some(format!("{r:.3}x classic [{lo:.3}, {hi:.3}]"))
}

/// The decision in one sentence, as the record's headline and `tuner
/// propose`'s note say it, in two parts: the choice (`Decision: width 2`,
/// which the headline sets in bold) and the rest, which states
/// [`decision_interval`] once.
pub fn decision_sentence(s: &Summary) -> (String, String) {
    let d = &s.decision;
    let tied = d.tied.iter().map(SpeculativeArm::to_string).collect::<Vec<_>>().join(", ");
    let best = d.best_width.map_or("none".into(), |b| b.to_string());
    let unit = format!("(95%, {} rounds; the process is the unit)", s.complete_rounds);
    match (d.width, decision_interval(s)) {
        (Some(SpeculativeArm::Adaptive), Some(iv)) => (
            "Decision: the adaptive draft length".into(),
            format!(
                " (each round's draft chosen up to the widest width), {iv} {unit}, tied with or faster than the best \
                 fixed width ({best}). Fixed widths tied with the best: {tied}."
            ),
        ),
        (Some(w), Some(iv)) => {
            (format!("Decision: width {w}"), format!(", {iv} {unit}. Tied with the best (width {best}): {tied}."))
        }
        (None, iv) if d.ratio.is_some() => (
            "Decision: off".into(),
            format!(
                " — no width tied with the best has an interval wholly above 1.0 (best: width {best}, {}; tied: \
                 {tied}).",
                iv.unwrap_or_else(|| format!("{:.3}x classic, no interval", d.ratio.unwrap_or(f64::NAN)))
            ),
        ),
        _ => ("No decision".into(), format!(": {}.", d.why)),
    }
}

/// The record's first line after the status: the decision and its interval.
pub fn headline(s: &Summary) -> String {
    let survives = s.drift_survival.as_ref().is_some_and(|d| d.survives);
    let validity = if s.drift && survives {
        " **The host drifted, and the decision survives it** (the same choice against either bracket alone; the \
         interval holds both): the record proposes it."
    } else if s.drift {
        " **The host drifted, and the decision does not survive it: the record proposes no entry.**"
    } else if !s.data_problems.is_empty() {
        " **The raw data has problems (Validity): the record proposes no entry.**"
    } else {
        ""
    };
    let (lead, rest) = decision_sentence(s);
    format!("**{lead}**{rest}{validity}")
}

/// Conclusions, each drawn only from numbers stated above.
pub fn conclusions(s: &Summary) -> Vec<String> {
    let mut out = Vec::new();
    let iv = |r: &RatioEstimate| ratio(&Some(r.clone()));
    if s.drift {
        for w in &s.widths {
            let (Some(o), Some(c)) = (&w.ratio_vs_open, &w.ratio_vs_close) else { continue };
            if o.above_one() && c.above_one() {
                out.push(format!(
                    "Survives the drift: {} is faster than classic against both brackets ({} vs open, {} vs close).",
                    arm_name(w.width),
                    iv(o),
                    iv(c)
                ));
            } else if o.below_one() && c.below_one() {
                out.push(format!(
                    "Survives the drift: {} is slower than classic against both brackets ({} vs open, {} vs close).",
                    arm_name(w.width),
                    iv(o),
                    iv(c)
                ));
            }
        }
        if out.is_empty() {
            out.push(
                "No width is faster or slower than classic against both brackets: no conclusion survives the drift."
                    .into(),
            );
        }
        match &s.drift_survival {
            Some(d) if d.survives => out.push(format!(
                "The decision survives the drift: {}. The record proposes it, its interval widened to hold both \
                 ({}); pooled, its rounds carry half the gap between the two one-sided ratios as drift widening.",
                d.say(),
                opt_interval(s.decision.ratio_interval)
            )),
            Some(d) => out.push(format!(
                "The decision does not survive the drift ({}), so the record proposes no policy entry; re-run the \
                 sweep.",
                d.say()
            )),
            None => out.push("The record drifted, so it proposes no policy entry; re-run the sweep.".into()),
        }
        return out;
    }
    let d = &s.decision;
    match (d.width, d.ratio, d.ratio_interval) {
        (Some(crate::data::plan::SpeculativeArm::Adaptive), Some(_), Some(_)) => {
            out.push(format!("By the decision rule the entry is the adaptive draft length: {}.", d.why))
        }
        (Some(w), Some(r), Some((lo, hi))) => out.push(format!(
            "By the decision rule the width is {w}: ratio {r:.3}, interval [{lo:.3}, {hi:.3}] wholly above 1.0; the narrowest of the tied widths [{}] that qualifies.",
            d.tied.iter().map(SpeculativeArm::to_string).collect::<Vec<_>>().join(", ")
        )),
        (None, Some(_), _) => out.push(format!("By the decision rule the entry is `off`: {}.", d.why)),
        _ => out.push(format!("No decision: {}.", d.why)),
    }
    let widths_where = |f: fn(&RatioEstimate) -> bool| -> Vec<String> {
        s.widths.iter().filter(|w| w.ratio.as_ref().is_some_and(f)).map(|w| w.width.to_string()).collect()
    };
    let faster = widths_where(RatioEstimate::above_one);
    let slower = widths_where(RatioEstimate::below_one);
    if !faster.is_empty() {
        out.push(format!("Faster than classic (interval wholly above 1.0): width(s) {}.", faster.join(", ")));
    }
    if !slower.is_empty() {
        out.push(format!("Slower than classic (interval wholly below 1.0): width(s) {}.", slower.join(", ")));
    }
    let bad: Vec<String> =
        s.widths.iter().filter(|w| w.not_a_measurement.is_some()).map(|w| w.width.to_string()).collect();
    if !bad.is_empty() {
        out.push(format!(
            "Width(s) {} are not measurements: under the tie rule any width can change the decision, so no entry can be proposed.",
            bad.join(", ")
        ));
    }
    if !s.identical {
        out.push(
            "Outputs differ from classic decoding: the speculative path is not exact here; no entry can be proposed."
                .into(),
        );
    }
    if !s.complete {
        out.push("The sweep is incomplete; these numbers cover only the arms that finished.".into());
    }
    out.extend(under_load(s));
    out
}

/// `summary.csv`: one row per arm kind (classic, then each width).
pub fn write_csv(path: &Path, s: &Summary) -> Result<()> {
    let mut w = csv::Writer::from_path(path).with_context(|| format!("creating {}", path.display()))?;
    w.write_record([
        "arm_kind",
        "width",
        "n",
        "median_tok_per_s",
        "min_tok_per_s",
        "max_tok_per_s",
        "rounds",
        "ratio",
        "ratio_ci_low",
        "ratio_ci_high",
        "ratio_vs_open",
        "ratio_vs_close",
        "vs_best",
        "tied",
        "acceptance",
        "emitted_per_verify",
        "verify_ms_per_round",
        "outliers",
        "not_a_measurement",
        "differing_requests",
        "median_ttft_ms",
        "statistic",
    ])?;
    // Empty for generate sweeps (no client-side time to first token).
    let ttft = |t: &Option<Stats>| t.as_ref().map_or(String::new(), |t| format!("{:.3}", t.median));
    let statistic = if s.served { "e2e_tok_per_s" } else { "decode_tok_per_s" };
    let f = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.6}"));
    let st = |s: &Option<Stats>| -> [String; 4] {
        match s {
            Some(s) => [s.n.to_string(), f(Some(s.median)), f(Some(s.min)), f(Some(s.max))],
            None => ["0".into(), String::new(), String::new(), String::new()],
        }
    };
    let mut row = vec!["classic".to_string(), String::new()];
    row.extend(st(&s.classic));
    row.extend(vec![String::new(); 11]);
    row.push(s.classic.as_ref().map_or(0, |x| x.outliers).to_string());
    row.push(String::new());
    row.push(s.bracket_differences.len().to_string());
    row.push(ttft(&s.classic_ttft_ms));
    row.push(statistic.into());
    w.write_record(&row)?;
    for ws in &s.widths {
        let WidthSummary { width, tok_per_s, ratio, ratio_vs_open, ratio_vs_close, tie, .. } = ws;
        // The width column as people read it: the number, or `adaptive`.
        let mut row = vec!["speculative".to_string(), width.to_string()];
        row.extend(st(tok_per_s));
        row.push(ratio.as_ref().map_or(String::new(), |r| r.rounds.to_string()));
        row.push(f(ratio.as_ref().map(|r| r.ratio)));
        row.push(f(ratio.as_ref().and_then(|r| r.interval).map(|i| i.0)));
        row.push(f(ratio.as_ref().and_then(|r| r.interval).map(|i| i.1)));
        row.push(f(ratio_vs_open.as_ref().map(|r| r.ratio)));
        row.push(f(ratio_vs_close.as_ref().map(|r| r.ratio)));
        row.push(f(tie.as_ref().map(|t| t.vs_best)));
        row.push(tie.as_ref().map_or(String::new(), |t| t.tied.to_string()));
        row.push(f(ws.acceptance));
        row.push(f(ws.emitted_per_verify));
        row.push(f(ws.verify_ms_per_round));
        row.push(tok_per_s.as_ref().map_or(0, |x| x.outliers).to_string());
        row.push(ws.not_a_measurement.clone().unwrap_or_default());
        row.push(ws.differences.len().to_string());
        row.push(ttft(&ws.ttft_ms));
        row.push(statistic.into());
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}

/// `plot.svg`: what the decision uses. Each width's ratio to classic with
/// its 95% interval (black), a dashed line at 1.0 labelled as classic, the
/// widths tied with the best shaded, the best width marked, and the ratio
/// over each prompt type's prompts (coloured, no interval). The decision is
/// drawn with its one interval ([`decision_interval`], red) and named in the
/// legend with it, as the headline states it. In a drifted record the
/// two-sided ratios are not drawn (the widths table does not show them
/// either): each width is drawn against the opening and against the closing
/// brackets alone, and the caption says the host drifted. The adaptive arm
/// sits at its own tick, `adaptive`. The y range is the intervals drawn and
/// 1.0 (a prompt type's point outside it is clipped, and the legend says
/// so); the legend sits beside the data, not on it.
pub fn write_plot(path: &Path, s: &Summary, widths: &[SpeculativeArm]) -> Result<()> {
    use plotters::prelude::*;
    // The x axis: each arm at its stored number, the adaptive arm at 0 (its tick says `adaptive`).
    let widths: Vec<usize> = widths.iter().map(|w| w.code()).collect();
    let adaptive_x = SpeculativeArm::Adaptive.code() as f64;
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (plot_area, legend_area) = root.split_horizontally(730);
    /// (x, ratio, interval) of each width with an estimate.
    type Point = (f64, f64, Option<(f64, f64)>);
    let points = |pick: fn(&WidthSummary) -> Option<&RatioEstimate>| -> Vec<Point> {
        s.widths.iter().filter_map(|w| pick(w).map(|r| (w.width.code() as f64, r.ratio, r.interval))).collect()
    };
    // What is drawn: the two-sided ratios, or in a drifted record each bracket side's.
    let all: Vec<Point> = if s.drift { vec![] } else { points(|w| w.ratio.as_ref()) };
    let (open, close) = if s.drift {
        (points(|w| w.ratio_vs_open.as_ref()), points(|w| w.ratio_vs_close.as_ref()))
    } else {
        (vec![], vec![])
    };
    // The decision's point and interval, at the chosen arm (for `off`, none).
    let decided: Option<Point> = match (s.decision.width, s.decision.ratio) {
        (Some(w), Some(r)) => Some((w.code() as f64, r, s.decision.ratio_interval)),
        _ => None,
    };
    let mut ys: Vec<f64> = vec![1.0];
    for (_, y, iv) in all.iter().chain(&open).chain(&close).chain(&decided) {
        ys.push(*y);
        if let Some((lo, hi)) = iv {
            ys.extend([*lo, *hi]);
        }
    }
    ys.retain(|y| y.is_finite());
    let (ylo, yhi) = ys.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| (a.min(*y), b.max(*y)));
    let pad = ((yhi - ylo) * 0.08).max(0.02);
    let (ylo, yhi) = ((ylo - pad).max(0.0), yhi + pad);
    let xmax = widths.iter().copied().max().unwrap_or(1) as f64 + 0.5;
    let xmin = widths.iter().copied().min().unwrap_or(1) as f64 - 0.5;
    let measured: Vec<usize> = widths.clone();
    let caption = if s.drift {
        format!("ratio to classic ({}) by width; drifted: vs each bracket alone", statistic(s))
    } else {
        format!("ratio to classic ({}) by width", statistic(s))
    };
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(caption, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(xmin..xmax, ylo..yhi)
        .map_err(|e| err(&e))?;
    // Ticks at the measured widths only, written as integers, the adaptive arm by name.
    let steps = ((xmax - xmin) * 2.0).round() as usize + 1;
    let tick = move |x: &f64| {
        let n = x.round();
        if (x - n).abs() < 1e-9 && measured.contains(&(n as usize)) {
            if n == adaptive_x { "adaptive".to_string() } else { format!("{}", n as usize) }
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_labels(steps)
        .x_label_formatter(&tick)
        .disable_x_mesh()
        .light_line_style(BLACK.mix(0.05))
        .x_desc(format!("draft width (tokens per verify); decision: {}", choice(s)))
        .y_desc("speculative / classic")
        .draw()
        .map_err(|e| err(&e))?;
    // The widths tied with the best, shaded behind everything.
    let shade = RGBColor(70, 130, 180).mix(0.15);
    chart
        .draw_series(s.decision.tied.iter().map(|&w| {
            let x = w.code() as f64;
            Rectangle::new([(x - 0.4, ylo), (x + 0.4, yhi)], shade.filled())
        }))
        .map_err(|e| err(&e))?;
    chart
        .draw_series(DashedLineSeries::new(vec![(xmin, 1.0), (xmax, 1.0)], 6, 4, BLACK.mix(0.7).stroke_width(1)))
        .map_err(|e| err(&e))?;
    chart
        .draw_series(std::iter::once(Text::new(
            "classic = 1.0",
            (xmin + 0.05, 1.0 + (yhi - ylo) * 0.015),
            ("sans-serif", 12).into_font().color(&BLACK.mix(0.8)),
        )))
        .map_err(|e| err(&e))?;
    let mut types: Vec<&str> = s.type_ratios.iter().map(|t| t.prompt_type.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    let mut legend: Vec<(String, LegendMark)> = Vec::new();
    let mut clipped = false;
    for (i, t) in types.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba().mix(0.7);
        let pts: Vec<(f64, f64)> = widths
            .iter()
            .filter(|w| **w != SpeculativeArm::Adaptive.code())
            .filter_map(|w| {
                s.type_ratios.iter().find(|x| x.prompt_type == *t && x.width.code() == *w).map(|x| (*w as f64, x.ratio))
            })
            .collect();
        clipped |= pts.iter().any(|(_, y)| *y < ylo || *y > yhi);
        chart.draw_series(LineSeries::new(pts.clone(), color.stroke_width(1))).map_err(|e| err(&e))?;
        chart
            .draw_series(pts.iter().filter(|(_, y)| *y >= ylo && *y <= yhi).map(|p| Circle::new(*p, 2, color.filled())))
            .map_err(|e| err(&e))?;
        legend.push((format!("{t} prompts"), LegendMark::Line(color.to_rgba(), 1)));
    }
    // Each set of points: its intervals, the fixed widths joined by a line,
    // the adaptive arm a point of its own; `dx` sets a bracket side beside
    // the width it belongs to.
    let mut draw = |pts: &[Point], color: RGBAColor, dx: f64| -> Result<()> {
        chart
            .draw_series(pts.iter().filter_map(|(x, _, iv)| {
                iv.map(|(lo, hi)| {
                    PathElement::new(vec![(*x + dx, lo.max(ylo)), (*x + dx, hi.min(yhi))], color.stroke_width(2))
                })
            }))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(LineSeries::new(
                pts.iter().filter(|(x, _, _)| *x != adaptive_x).map(|(x, y, _)| (*x + dx, *y)),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(
                pts.iter()
                    .filter(|(x, _, _)| *x == adaptive_x)
                    .map(|(x, y, _)| Circle::new((*x + dx, *y), 4, color.filled())),
            )
            .map_err(|e| err(&e))?;
        Ok(())
    };
    let (green, orange) = (RGBColor(30, 130, 60).to_rgba(), RGBColor(210, 110, 0).to_rgba());
    if s.drift {
        draw(&open, green, -0.12)?;
        draw(&close, orange, 0.12)?;
        legend.insert(0, ("vs opening brackets: ratio, 95%".into(), LegendMark::Line(green, 2)));
        legend.insert(1, ("vs closing brackets: ratio, 95%".into(), LegendMark::Line(orange, 2)));
        legend.insert(2, ("classic decoding (1.0)".into(), LegendMark::Dashed));
    } else {
        draw(&all, BLACK.to_rgba(), 0.0)?;
        legend.insert(0, ("all prompts: ratio and 95% interval".into(), LegendMark::Line(BLACK.to_rgba(), 2)));
        legend.insert(1, ("classic decoding (1.0)".into(), LegendMark::Dashed));
    }
    if !s.decision.tied.is_empty() {
        legend.insert(
            if s.drift { 3 } else { 2 },
            ("tied with the best width".into(), LegendMark::Band(shade.to_rgba())),
        );
    }
    if let Some(b) = s.decision.best_width {
        let y = s
            .widths
            .iter()
            .find(|w| w.width == b)
            .and_then(|w| if s.drift { w.ratio_vs_open.as_ref() } else { w.ratio.as_ref() }.map(|r| r.ratio));
        if let Some(y) = y {
            let x = b.code() as f64 + if s.drift { -0.12 } else { 0.0 };
            chart.draw_series(std::iter::once(TriangleMarker::new((x, y), 7, BLUE.filled()))).map_err(|e| err(&e))?;
            legend.push((format!("best width {b}"), LegendMark::Triangle));
        }
    }
    // The decision, with the interval the headline states.
    let voice = decision_interval(s);
    if let Some((x, y, iv)) = decided {
        if let Some((lo, hi)) = iv {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, lo.max(ylo)), (x, hi.min(yhi))],
                    RED.stroke_width(3),
                )))
                .map_err(|e| err(&e))?;
        }
        chart.draw_series(std::iter::once(Circle::new((x, y), 9, RED.stroke_width(3)))).map_err(|e| err(&e))?;
        let label = format!("decision: {}", choice(s));
        legend.push((voice.map_or(label.clone(), |v| format!("{label}\n{v}")), LegendMark::Ring));
    } else if let Some(v) = voice {
        legend.push((format!("decision: off (best width)\n{v}"), LegendMark::Ring));
    }
    draw_legend(&legend_area, &legend, clipped, &title(s)).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// How a legend entry is drawn.
enum LegendMark {
    Line(plotters::style::RGBAColor, u32),
    Dashed,
    Band(plotters::style::RGBAColor),
    Triangle,
    Ring,
}

/// The legend, in its own area beside the chart: the record's title, one
/// row per entry, and a note when prompt-type points were clipped.
fn draw_legend<DB: plotters::prelude::DrawingBackend>(
    area: &plotters::drawing::DrawingArea<DB, plotters::coord::Shift>,
    entries: &[(String, LegendMark)],
    clipped: bool,
    title: &str,
) -> Result<(), plotters::drawing::DrawingAreaErrorKind<DB::ErrorType>> {
    use plotters::prelude::*;
    let font = ("sans-serif", 13).into_font();
    let mut y = 48;
    for line in wrap(title, 34) {
        area.draw(&Text::new(line, (8, y), font.clone()))?;
        y += 17;
    }
    y += 10;
    for (label, mark) in entries {
        let (x0, x1, cy) = (10, 34, y + 7);
        match mark {
            LegendMark::Line(c, w) => area.draw(&PathElement::new(vec![(x0, cy), (x1, cy)], c.stroke_width(*w)))?,
            LegendMark::Dashed => {
                for k in 0..3 {
                    let a = x0 + k * 9;
                    area.draw(&PathElement::new(vec![(a, cy), (a + 5, cy)], BLACK.mix(0.7).stroke_width(1)))?;
                }
            }
            LegendMark::Band(c) => area.draw(&Rectangle::new([(x0, y), (x1, y + 14)], c.filled()))?,
            LegendMark::Triangle => area.draw(&TriangleMarker::new(((x0 + x1) / 2, cy), 6, BLUE.filled()))?,
            LegendMark::Ring => area.draw(&Circle::new(((x0 + x1) / 2, cy), 6, RED.stroke_width(2)))?,
        }
        // A label's further lines (the decision's interval) below its first.
        for (k, line) in label.lines().enumerate() {
            area.draw(&Text::new(line.to_string(), (x1 + 8, y + 16 * k as i32), font.clone()))?;
        }
        y += 20 + 16 * (label.lines().count().max(1) as i32 - 1);
    }
    if clipped {
        y += 6;
        for line in
            wrap("some prompt-type points lie outside the y range (set by the widths' intervals) and are not drawn", 34)
        {
            area.draw(&Text::new(line, (8, y), ("sans-serif", 12).into_font().color(&BLACK.mix(0.7))))?;
            y += 15;
        }
    }
    Ok(())
}

/// Splits `text` into lines of at most about `width` characters, at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let last = lines.last_mut().expect("one line");
        if !last.is_empty() && last.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    lines
}

/// Writes record.md, summary.csv and plot.svg into `dir`.
pub fn write_all(dir: &Path, raw: &RawFile, s: &Summary) -> Result<()> {
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string());
    let md = markdown(raw, s, &name);
    std::fs::write(dir.join("record.md"), md).with_context(|| format!("writing {}/record.md", dir.display()))?;
    write_csv(&dir.join("summary.csv"), s)?;
    write_plot(&dir.join("plot.svg"), s, &raw.header.settings.design.widths)?;
    Ok(())
}

/// Classic arms' bracket label for humans.
pub fn bracket_name(b: Option<Bracket>) -> &'static str {
    match b {
        Some(Bracket::Open) => "open",
        Some(Bracket::Close) => "close",
        None => "-",
    }
}

#[cfg(test)]
mod tests {
    use crate::analysis::simulate::{SimConfig, Template};
    use crate::data::raw::RawLine;

    fn cost_line(round: usize, context: usize, attempt: usize, ok: bool, relative: Vec<f64>) -> RawLine {
        let mut c = crate::data::verify_cost::CostRun::not_run(round, context, attempt, "pass".into(), "x".into());
        c.ok = ok;
        c.error = (!ok).then(|| "ran through contention".to_string());
        c.one_row_s = ok.then_some(0.01 * (round + 1) as f64);
        c.relative = relative;
        RawLine::from(c)
    }

    #[test]
    // summarize/cost.rs's verify-cost curves, on a simulated sweep.
    fn verify_cost_curves_are_geometric_means_over_rounds_and_a_missing_round_is_named() {
        let c = SimConfig::default_plan(0.03, 0.05, 3);
        let mut raw = crate::analysis::simulate::sweep(&Template::new(), &c);
        raw.header.settings.design.cost_contexts = vec![64, 2048];
        let n = raw.header.settings.design.rounds;
        for r in 0..n {
            let k = 1.0 + 0.1 * r as f64;
            raw.lines.push(cost_line(r, 64, 0, true, vec![1.0, 1.1 * k, 1.2 * k]));
            // Context 2048: round 0's first attempt was contended, its second counts; the last round has none.
            if r == 0 {
                raw.lines.push(cost_line(r, 2048, 0, false, vec![]));
            }
            if r + 1 < n {
                raw.lines.push(cost_line(r, 2048, one_if(r == 0), true, vec![1.0, 2.0]));
            }
        }
        let s = crate::analysis::summarize::summarize(&raw).unwrap();
        let v: &Vec<crate::data::verify_cost::CostCurve> = &s.verify_cost;
        assert_eq!(v.iter().map(|c| c.context).collect::<Vec<_>>(), [64, 2048]);
        let short = &v[0];
        assert_eq!((short.rounds, short.points.len()), (n, 3));
        assert_eq!(short.points[0].relative, 1.0);
        let gm = |x: f64| ((0..n).map(|r| (x * (1.0 + 0.1 * r as f64)).ln()).sum::<f64>() / n as f64).exp();
        assert!((short.points[1].relative - gm(1.1)).abs() < 1e-12);
        assert!(short.points[2].interval.is_some_and(|(lo, hi)| lo < short.points[2].relative && hi > gm(1.2)));
        let long = &v[1];
        assert_eq!((long.rounds, long.points.len()), (n - 1, 2));
        assert_eq!(long.missing.len(), 1);
        assert_eq!(long.missing[0].0, n - 1);
        assert!(long.missing[0].1.contains("not run"), "{:?}", long.missing);
        // The record states the table and names the missing round.
        let md = crate::output::record::markdown(&raw, &s, "dir");
        assert!(md.contains("### Verify cost: a pass of R rows against a one-row pass"), "{md}");
        assert!(md.contains(&format!("| 2 | {:.3} [", gm(1.1))), "{md}");
        assert!(md.contains(&format!("Context 2048, round {n}: no measurement: not run")), "{md}");
        // Old records (no cost contexts) have no curves, and the summary
        // serializes without the field.
        raw.header.settings.design.cost_contexts.clear();
        let s = crate::analysis::summarize::summarize(&raw).unwrap();
        assert!(s.verify_cost.is_empty());
        assert!(!serde_json::to_string(&s).unwrap().contains("verify_cost"));
        assert!(!crate::output::record::markdown(&raw, &s, "dir").contains("Verify cost"));
    }

    #[test]
    fn a_record_under_load_says_its_entry_is_a_bucket() {
        let mut raw = crate::analysis::simulate::sweep(&Template::new(), &SimConfig::default_plan(0.03, 0.11, 7));
        raw.header.settings.served = Some(crate::data::raw::ServedSettings {
            health_timeout_s: 120.0,
            stop_timeout_s: 15.0,
            request_timeout_s: 300.0,
            concurrency: 4,
        });
        let s = crate::analysis::summarize::summarize(&raw).unwrap();
        let text = super::under_load(&s).unwrap();
        assert!(text.contains("`concurrency = 4`") && text.contains("bucket"), "{text}");
        raw.header.settings.served.as_mut().unwrap().concurrency = 1;
        assert!(super::under_load(&crate::analysis::summarize::summarize(&raw).unwrap()).is_none());
    }

    fn one_if(b: bool) -> usize {
        usize::from(b)
    }
}
