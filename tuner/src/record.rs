//! Writes a sweep's `record.md`, `summary.csv` and `plot.svg` from a
//! [`Summary`] and the raw header. Every number in the record comes from the
//! summary; a value that is missing is written as what is missing and why,
//! never as a placeholder.
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use crate::raw::{Bracket, RawFile, RawLine};
use crate::reading::Reading;
use crate::stats::Stats;
use crate::summary::{Summary, WidthSummary};

fn r<T: std::fmt::Display>(x: &Reading<T>) -> String {
    match &x.value {
        Some(v) => v.to_string(),
        None => format!("unavailable ({})", x.reason()),
    }
}

fn tps(s: &Option<Stats>) -> [String; 4] {
    match s {
        Some(s) => [
            s.n.to_string(),
            format!("{:.1}", s.median),
            format!("{:.1}..{:.1}", s.min, s.max),
            format!("[{:.1}, {:.1}]", s.ci_low, s.ci_high),
        ],
        None => ["0".into(), "no samples".into(), "-".into(), "-".into()],
    }
}

fn ratio(s: &Option<Stats>) -> String {
    match s {
        Some(s) => format!("{:.3} [{:.3}, {:.3}]", s.median, s.ci_low, s.ci_high),
        None => "no paired samples".into(),
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("none".into(), |v| format!("{v:.digits$}"))
}

/// The headline of a record: what was measured where (and, for a served
/// sweep, that it was measured through the server).
pub fn title(s: &Summary) -> String {
    format!(
        "{} drafter on {}, {} target ({}{})",
        s.drafter,
        s.device_class.as_deref().unwrap_or("an unknown device class"),
        s.target_quant.as_deref().unwrap_or("unknown"),
        s.date,
        if s.served { ", served" } else { "" }
    )
}

/// What the record's tok/s are.
pub fn statistic(s: &Summary) -> &'static str {
    if s.served { "end-to-end tok/s" } else { "decode tok/s" }
}

/// The record as Markdown.
pub fn markdown(raw: &RawFile, s: &Summary, dir_name: &str) -> String {
    let h = &raw.header;
    let st = &h.settings;
    let id = &h.identity;
    let mut m = String::new();
    let _ = writeln!(m, "# Sweep record: {}\n", title(s));
    let status = if s.complete {
        format!("complete: {} of {} arms", s.arms_complete, s.arms_planned)
    } else {
        let why = s
            .halt
            .as_ref()
            .map_or("it was interrupted".to_string(), |h| format!("halted before arm {}: {}", h.arm, h.message));
        format!("**incomplete**: {} of {} arms; {why}", s.arms_complete, s.arms_planned)
    };
    let _ = writeln!(m, "Status: {status}.\n");

    let _ = writeln!(m, "## Host identity (`tuner identity`)\n");
    let c = &id.cpu;
    let rows: Vec<(&str, String)> = vec![
        ("hostname", r(&id.hostname)),
        ("os", r(&id.os)),
        ("kernel", r(&id.kernel_release)),
        ("cpu", r(&c.model)),
        ("arch", c.arch.clone()),
        ("isa flags", c.isa_flags.join(" ")),
        ("physical cores", r(&c.physical_cores)),
        ("threads online / available", format!("{} / {}", r(&c.threads_online), r(&c.threads_available))),
        (
            "kernel family",
            format!(
                "{} (best {}, forced: {}), device class {}",
                r(&c.kernel_family.selected),
                c.kernel_family.best,
                c.kernel_family.forced,
                r(&c.kernel_family.device_class)
            ),
        ),
        (
            "memory",
            format!(
                "{} MiB total, {} MiB available at the start",
                r(&id.memory.total_mib),
                r(&id.memory.available_mib)
            ),
        ),
        (
            "NVIDIA",
            match &id.nvidia.value {
                Some(n) => format!(
                    "driver {}, CUDA {}, {}",
                    r(&n.driver_version),
                    r(&n.cuda_driver_version),
                    n.gpus.value.as_ref().map_or_else(
                        || format!("GPUs unavailable ({})", n.gpus.reason()),
                        |gs| gs
                            .iter()
                            .map(|g| format!("{} (sm {})", r(&g.name), r(&g.compute_capability)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                ),
                None => format!("none ({})", id.nvidia.reason()),
            },
        ),
        (
            "nvcc",
            match &id.nvcc.value {
                Some(n) => format!("{} ({})", r(&n.version), n.path),
                None => format!("none ({})", id.nvcc.reason()),
            },
        ),
        (
            "runtime build",
            match &id.runtime.build.value {
                Some(b) => format!(
                    "{} {} (commit {}, dirty {}), {}, profile {}, features [{}], CUDA archs [{}], kernel fingerprint {}",
                    id.runtime.path,
                    b.version,
                    b.git_commit,
                    b.git_dirty,
                    b.rustc,
                    b.profile,
                    b.features.join(", "),
                    b.cuda_archs.join(", "),
                    b.kernel_fingerprint
                ),
                None => format!("{} ({})", id.runtime.path, id.runtime.build.reason()),
            },
        ),
        ("rustc on PATH", r(&id.rustc_on_path.version)),
        ("tuner", h.tuner_version.clone()),
    ];
    let _ = writeln!(m, "| | |\n|---|---|");
    for (k, v) in rows {
        let _ = writeln!(m, "| {k} | {} |", v.replace('|', "\\|"));
    }

    let _ = writeln!(m, "\n## Method\n");
    if let Some(sv) = &st.served {
        let _ = writeln!(
            m,
            "**Served sweep.** Each arm is a fresh `runtime serve --json` process on a free loopback port with \
             every setting on its command line; the tuner learns the port from its typed `startup` event, waits \
             for `GET /health` (up to {} s), sends every prompt as a streamed request (text prompts to \
             `/v1/completions`, message lists to `/v1/chat/completions`; `stream_options.include_usage`), one \
             at a time, and stops it with SIGTERM (SIGKILL after {} s). Per request it measures the time to \
             first token (request written to the first chunk with a choice) and the end-to-end time (to \
             `data: [DONE]`); the sample is end-to-end tok/s, completion tokens over the end-to-end seconds. \
             Each response is joined to the server's `completion` event (and diagnostics) by its id.\n",
            sv.health_timeout_s, sv.stop_timeout_s
        );
    }
    let _ = writeln!(
        m,
        "Each arm is a fresh `runtime {}` process with every setting on its command line; the \
         tuner reads only its typed events. Every round opens and closes with a classic arm; the widths run \
         between them, their order rotated from round to round. Per arm: {} warm-up pass(es) over the prompt \
         set, excluded from every statistic and diagnostic, then {} recorded pass(es) (bursts). Greedy \
         decoding (temperature 0), {} max tokens, {} thread(s). The gate ran before every arm and the \
         NV_ERR_NO_MEMORY count was read before and after it.\n",
        if st.served.is_some() { "serve --json" } else { "generate --json" },
        st.warmup,
        st.bursts,
        st.max_tokens,
        st.threads
    );
    let _ = writeln!(
        m,
        "- drafter: `{}`{}",
        st.drafter,
        st.drafter_model.as_ref().map_or(String::new(), |p| format!(" (model {})", p.display()))
    );
    let _ = writeln!(m, "- widths: {:?}, rounds: {}, arms: {}", st.widths, st.rounds, h.plan.len());
    let order: Vec<String> = h
        .plan
        .iter()
        .map(|a| match a.width {
            Some(w) => w.to_string(),
            None => "C".into(),
        })
        .collect();
    let _ = writeln!(m, "- arm order (C = classic): {}", order.join(" "));
    let _ = writeln!(
        m,
        "- requests per arm: {} prompts x {} bursts = {}",
        h.prompts.len(),
        st.bursts,
        s.expected_requests_per_arm
    );
    let mut types: Vec<(String, usize)> = Vec::new();
    for p in &h.prompts {
        match types.iter_mut().find(|(t, _)| *t == p.kind) {
            Some((_, n)) => *n += 1,
            None => types.push((p.kind.clone(), 1)),
        }
    }
    let types: Vec<String> = types.iter().map(|(t, n)| format!("{t} {n}")).collect();
    let _ = writeln!(
        m,
        "- prompt set: `prompts.jsonl` in this folder (copied from {}), sha256 `{}`; types: {}",
        st.prompts_source,
        st.prompts_sha256,
        types.join(", ")
    );
    for mf in &id.models {
        let _ = writeln!(m, "- model `{}`: {} bytes, sha256 `{}`", mf.path, r(&mf.size_bytes), r(&mf.sha256));
    }
    let g = &st.gate;
    let accepted: Vec<&str> = g.accept_unknown.iter().map(|x| x.name()).collect();
    let _ = writeln!(
        m,
        "- gate: cpu threshold {}% of a core, host {}%, window {} ms, memory floor {} MiB, NVRM budget {}, NVRM window {} s, GPU util {}%, GPU free {} MiB, accept unknown: [{}], wait up to {} s",
        g.cpu_threshold_pct,
        g.host_cpu_threshold_pct,
        g.cpu_window_ms,
        g.min_available_mib,
        g.nvrm_budget,
        g.nvrm_window_s,
        g.gpu_util_threshold_pct,
        g.gpu_min_free_mib,
        accepted.join(", "),
        st.gate_wait_s
    );
    let env_keys: Vec<String> = raw
        .lines
        .iter()
        .find_map(|l| match l {
            RawLine::ArmStart(a) => Some(a.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            _ => None,
        })
        .unwrap_or_default();
    let _ = writeln!(m, "- environment given to each arm (complete): `{}`", env_keys.join(" "));
    let _ = writeln!(
        m,
        "- statistics: per-request {}; median, min..max, percentile-bootstrap 95% interval of the median ({} resamples, fixed seed); outliers flagged at {} scaled MADs, never dropped",
        statistic(s),
        crate::stats::BOOTSTRAP_RESAMPLES,
        crate::stats::OUTLIER_MADS
    );

    let _ = writeln!(m, "\n## Decision rule (fixed before the results)\n\n{}\n", s.decision_rule);

    let _ = writeln!(m, "## Results\n");
    let _ = writeln!(m, "### Classic brackets and drift\n");
    let _ = writeln!(
        m,
        "A round has drifted when its opening and closing brackets' ranges do not overlap. Each bracket's range is over its samples, each divided by the median of the same prompt's samples in both brackets, so the prompt mix does not widen it; the ranges fail to overlap only when every opening sample is faster (or slower) than every closing one.\n"
    );
    let _ = writeln!(
        m,
        "| round | open n | open median tok/s | open min..max | close n | close median tok/s | close min..max | open range | close range | verdict |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    if s.served {
        let _ = writeln!(m, "(tok/s here and below are end-to-end tok/s of streamed requests.)\n");
    }
    for rb in &s.rounds {
        let [on, om, or, _] = tps(&rb.open);
        let [cn, cm, cr, _] = tps(&rb.close);
        let rg = |x: Option<(f64, f64)>| x.map_or("-".into(), |(a, b)| format!("{a:.3}..{b:.3}"));
        let verdict = if rb.incomplete {
            "incomplete round".to_string()
        } else if rb.drifted {
            "**drifted**".to_string()
        } else if !rb.judgeable {
            format!(
                "**cannot judge**: {:.0}% chance of a false drift with this n",
                100.0 * rb.false_drift_chance.unwrap_or(1.0)
            )
        } else {
            "no drift".to_string()
        };
        let _ = writeln!(
            m,
            "| {} | {on} | {om} | {or} | {cn} | {cm} | {cr} | {} | {} | {verdict} |",
            rb.round + 1,
            rg(rb.open_range),
            rg(rb.close_range)
        );
    }
    let [cn, cm, cr, cc] = tps(&s.classic);
    let _ = writeln!(m, "\nClassic, all brackets: n {cn}, median {cm} tok/s, range {cr}, interval {cc}.\n");

    let heading =
        if s.drift { "### Widths — NOT CLEAN: the host drifted; ratios against both brackets" } else { "### Widths" };
    let _ = writeln!(m, "{heading}\n");
    let _ = writeln!(
        m,
        "| width | n | median tok/s | min..max | interval | ratio vs brackets | vs open | vs close | acceptance | emitted/verify | verify ms/pass | outliers | measurement | output == classic |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for w in &s.widths {
        let [n, med, rg, ci] = tps(&w.tok_per_s);
        let pooled = if s.drift { "not shown (drift)".to_string() } else { ratio(&w.ratio) };
        let _ = writeln!(
            m,
            "| {} | {n} | {med} | {rg} | {ci} | {pooled} | {} | {} | {} | {} | {} | {} | {} | {} |",
            w.width,
            ratio(&w.ratio_vs_open),
            ratio(&w.ratio_vs_close),
            opt(w.acceptance, 3),
            opt(w.emitted_per_verify, 2),
            opt(w.verify_ms_per_round, 2),
            w.tok_per_s.as_ref().map_or(0, |t| t.outliers),
            w.not_a_measurement.as_deref().map_or("yes".to_string(), |why| format!("**not a measurement**: {why}")),
            if w.differences.is_empty() {
                "yes".to_string()
            } else {
                format!("**no** ({} requests)", w.differences.len())
            },
        );
    }

    if s.served {
        let _ = writeln!(m, "\n### Time to first token (served, client side)\n");
        let _ = writeln!(m, "| arms | n | median ms | min..max ms | interval ms |\n|---|---|---|---|---|");
        let ms = |x: &Option<Stats>| match x {
            Some(t) => {
                format!("{} | {:.1} | {:.1}..{:.1} | [{:.1}, {:.1}]", t.n, t.median, t.min, t.max, t.ci_low, t.ci_high)
            }
            None => "0 | - | - | -".into(),
        };
        let _ = writeln!(m, "| classic | {} |", ms(&s.classic_ttft_ms));
        for w in &s.widths {
            let _ = writeln!(m, "| width {} | {} |", w.width, ms(&w.ttft_ms));
        }
    }
    let _ = writeln!(m, "\n### Median {} by prompt type\n", statistic(s));
    let mut types: Vec<&str> = s.by_type.iter().map(|t| t.prompt_type.as_str()).collect();
    types.dedup();
    let _ = write!(m, "| type | classic |");
    for w in &st.widths {
        let _ = write!(m, " W={w} |");
    }
    let _ = writeln!(m, "\n|---|---|{}", "---|".repeat(st.widths.len()));
    for t in &types {
        let cell = |k: Option<usize>| {
            s.by_type
                .iter()
                .find(|x| x.prompt_type == *t && x.width == k)
                .map_or("-".into(), |x| format!("{:.1} (n {})", x.median, x.n))
        };
        let _ = write!(m, "| {t} | {} |", cell(None));
        for w in &st.widths {
            let _ = write!(m, " {} |", cell(Some(*w)));
        }
        let _ = writeln!(m);
    }

    let _ = writeln!(m, "\n## Output identity\n");
    let n_diff: usize = s.widths.iter().map(|w| w.differences.len()).sum();
    if s.identical {
        let _ = writeln!(
            m,
            "Every recorded completion of every arm is byte-identical (text sha256 and token ids) to the first classic completion of its prompt; the classic brackets are identical to each other."
        );
    } else {
        let _ = writeln!(
            m,
            "**Outputs differ.** {n_diff} speculative and {} classic requests differ from the first classic completion of their prompt:\n",
            s.bracket_differences.len()
        );
        let _ = writeln!(
            m,
            "| arm | width | prompt | burst | first differing token | text identical |\n|---|---|---|---|---|---|"
        );
        for d in s.bracket_differences.iter().chain(s.widths.iter().flat_map(|w| &w.differences)).take(50) {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | {} | {} |",
                d.arm,
                d.width.map_or("classic".into(), |w| w.to_string()),
                d.prompt_id,
                d.burst,
                d.first_differing_token,
                d.text_identical
            );
        }
    }
    if !s.inexact_arms.is_empty() {
        let _ = writeln!(
            m,
            "\n**Inexact arms**: {:?} ran with exactness forfeited or a failed block-vs-chain probe.",
            s.inexact_arms
        );
    }

    let _ = writeln!(m, "\n## Validity\n");
    if s.drift_unjudged {
        let _ = writeln!(
            m,
            "- **Drift not ruled out**: a round has too few classic samples per bracket (at least 5 are needed) for the drift check to mean anything."
        );
    }
    if s.drift {
        let drifted: Vec<String> = s.rounds.iter().filter(|r| r.drifted).map(|r| (r.round + 1).to_string()).collect();
        let _ = writeln!(
            m,
            "- **Drift**: round(s) {} drifted. Only conclusions that hold against both brackets survive (below).",
            drifted.join(", ")
        );
    } else if !s.drift_unjudged {
        let _ = writeln!(m, "- No round drifted.");
    }
    if s.accepted_unknown.is_empty() {
        let _ = writeln!(m, "- No gate source was accepted as unknown.");
    } else {
        for a in &s.accepted_unknown {
            let _ = writeln!(
                m,
                "- **Gate**: before arm {}, source(s) {} were unknown and accepted (not checked).",
                a.arm,
                a.sources.join(", ")
            );
        }
    }
    for w in s.widths.iter().filter(|w| w.not_a_measurement.is_some()) {
        let _ = writeln!(
            m,
            "- Width {} is not a measurement: {}.",
            w.width,
            w.not_a_measurement.as_deref().unwrap_or_default()
        );
    }
    for f in &s.arms_failed {
        let _ = writeln!(
            m,
            "- Arm {} (attempt {}) did not complete: {} (logs: `{}`, `{}`).",
            f.arm,
            f.attempt,
            f.error.as_deref().unwrap_or("unknown"),
            f.stdout_log,
            f.stderr_log
        );
    }
    if s.requests_without_rate > 0 {
        let _ = writeln!(
            m,
            "- {} request(s) emitted no token after the first and have no decode rate; they are in no statistic.",
            s.requests_without_rate
        );
    }
    if let Some(k) = &s.key_problem {
        let _ = writeln!(m, "- **Key**: {k}.");
    }

    let _ = writeln!(m, "\n## Conclusions\n");
    for line in conclusions(s) {
        let _ = writeln!(m, "- {line}");
    }
    let _ = writeln!(m, "\n## Files\n");
    let _ = writeln!(m, "- `raw.jsonl`: every request, arm, gate report and halt as it happened (docs/records.md)");
    let _ = writeln!(m, "- `logs/`: each arm's runtime stdout (its events, warm-ups included) and stderr");
    let _ = writeln!(m, "- `summary.csv`, `plot.svg`, `prompts.jsonl`");
    let _ = writeln!(m, "- regenerate this file: `tuner summarize {dir_name}` (from the folder holding it)");
    m
}

/// Conclusions, each drawn only from numbers stated above.
pub fn conclusions(s: &Summary) -> Vec<String> {
    let mut out = Vec::new();
    if s.drift {
        for w in &s.widths {
            let (Some(o), Some(c)) = (&w.ratio_vs_open, &w.ratio_vs_close) else { continue };
            if o.ci_low > 1.0 && c.ci_low > 1.0 {
                out.push(format!(
                    "Survives the drift: width {} is faster than classic against both brackets ({:.3} [{:.3}, {:.3}] vs open, {:.3} [{:.3}, {:.3}] vs close).",
                    w.width, o.median, o.ci_low, o.ci_high, c.median, c.ci_low, c.ci_high
                ));
            } else if o.ci_high < 1.0 && c.ci_high < 1.0 {
                out.push(format!(
                    "Survives the drift: width {} is slower than classic against both brackets ({:.3} vs open, {:.3} vs close).",
                    w.width, o.median, c.median
                ));
            }
        }
        if out.is_empty() {
            out.push(
                "No width is faster or slower than classic against both brackets: no conclusion survives the drift."
                    .into(),
            );
        }
        out.push("The record drifted, so it proposes no policy entry; re-run the sweep on a quiet host.".into());
        return out;
    }
    let d = &s.decision;
    match (d.width, d.ratio, d.ratio_interval) {
        (Some(w), Some(r), Some((lo, hi))) => out.push(format!(
            "By the decision rule the width is {w}: median ratio {r:.3}, interval [{lo:.3}, {hi:.3}] wholly above 1.0."
        )),
        (None, Some(r), Some((lo, hi))) => out.push(format!(
            "By the decision rule the entry is `off`: no width's interval lies wholly above 1.0 (best: width {}, {r:.3} [{lo:.3}, {hi:.3}]).",
            d.best_width.map_or("none".into(), |w| w.to_string())
        )),
        _ => out.push(format!("No decision: {}.", d.why)),
    }
    let faster: Vec<String> = s
        .widths
        .iter()
        .filter(|w| w.ratio.as_ref().is_some_and(|r| r.ci_low > 1.0))
        .map(|w| w.width.to_string())
        .collect();
    let slower: Vec<String> = s
        .widths
        .iter()
        .filter(|w| w.ratio.as_ref().is_some_and(|r| r.ci_high < 1.0))
        .map(|w| w.width.to_string())
        .collect();
    if !faster.is_empty() {
        out.push(format!("Faster than classic (interval wholly above 1.0): width(s) {}.", faster.join(", ")));
    }
    if !slower.is_empty() {
        out.push(format!("Slower than classic (interval wholly below 1.0): width(s) {}.", slower.join(", ")));
    }
    if let Some(w) = d.width.and_then(|w| s.widths.iter().find(|x| x.width == w))
        && let Some(why) = &w.not_a_measurement
    {
        out.push(format!(
            "The chosen width {} is not a measurement ({why}): no entry can be proposed from it.",
            w.width
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
        "ci_low_tok_per_s",
        "ci_high_tok_per_s",
        "ratio_median",
        "ratio_ci_low",
        "ratio_ci_high",
        "ratio_vs_open_median",
        "ratio_vs_close_median",
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
    let st = |s: &Option<Stats>| -> [String; 6] {
        match s {
            Some(s) => [
                s.n.to_string(),
                f(Some(s.median)),
                f(Some(s.min)),
                f(Some(s.max)),
                f(Some(s.ci_low)),
                f(Some(s.ci_high)),
            ],
            None => ["0".into(), String::new(), String::new(), String::new(), String::new(), String::new()],
        }
    };
    let c = st(&s.classic);
    let mut row = vec!["classic".to_string(), String::new()];
    row.extend(c);
    row.extend(vec![String::new(); 8]);
    row.push(s.classic.as_ref().map_or(0, |x| x.outliers).to_string());
    row.push(String::new());
    row.push(s.bracket_differences.len().to_string());
    row.push(ttft(&s.classic_ttft_ms));
    row.push(statistic.into());
    w.write_record(&row)?;
    for ws in &s.widths {
        let WidthSummary { width, tok_per_s, ratio, ratio_vs_open, ratio_vs_close, .. } = ws;
        let mut row = vec!["speculative".to_string(), width.to_string()];
        row.extend(st(tok_per_s));
        row.push(f(ratio.as_ref().map(|r| r.median)));
        row.push(f(ratio.as_ref().map(|r| r.ci_low)));
        row.push(f(ratio.as_ref().map(|r| r.ci_high)));
        row.push(f(ratio_vs_open.as_ref().map(|r| r.median)));
        row.push(f(ratio_vs_close.as_ref().map(|r| r.median)));
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

/// `plot.svg`: median decode (or end-to-end) tok/s against width, one line per prompt type,
/// each type's classic range shaded in its colour.
pub fn write_plot(path: &Path, s: &Summary, widths: &[usize]) -> Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let ymax = s.by_type.iter().map(|t| t.max).fold(1.0, f64::max) * 1.1;
    let xmax = widths.iter().copied().max().unwrap_or(1) as f64 + 0.5;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{} by width: {}", statistic(s), title(s)), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.5f64..xmax, 0f64..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("draft width (tokens per verify)")
        .y_desc(format!("median {}", statistic(s)))
        .draw()
        .map_err(|e| err(&e))?;
    let mut types: Vec<&str> = s.by_type.iter().map(|t| t.prompt_type.as_str()).collect();
    types.dedup();
    for (i, t) in types.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        if let Some(c) = s.by_type.iter().find(|x| x.prompt_type == *t && x.width.is_none()) {
            chart
                .draw_series(std::iter::once(Rectangle::new([(0.5, c.min), (xmax, c.max)], color.mix(0.12).filled())))
                .map_err(|e| err(&e))?;
        }
        let pts: Vec<(f64, f64)> = widths
            .iter()
            .filter_map(|w| {
                s.by_type.iter().find(|x| x.prompt_type == *t && x.width == Some(*w)).map(|x| (*w as f64, x.median))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(format!("{t} (band: classic range)"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled()))).map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
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
    write_plot(&dir.join("plot.svg"), s, &raw.header.settings.widths)?;
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
