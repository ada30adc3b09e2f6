//! Writes a sweep's `record.md`, `summary.csv` and `plot.svg` from a
//! [`Summary`] and the raw header. Every number in the record comes from the
//! summary; a value that is missing is written as what is missing and why,
//! never as a placeholder.
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use crate::estimate::RatioEstimate;
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
        let took = s.duration_s.map_or(String::new(), |d| {
            format!(", {} min {:02} s from start to done", (d / 60.0).floor() as u64, (d % 60.0).round() as u64)
        });
        format!("complete: {} of {} arms{took}", s.arms_complete, s.arms_planned)
    } else {
        let why = s
            .halt
            .as_ref()
            .map_or("it was interrupted".to_string(), |h| format!("halted before arm {}: {}", h.arm, h.message));
        format!("**incomplete**: {} of {} arms; {why}", s.arms_complete, s.arms_planned)
    };
    let _ = writeln!(m, "Status: {status}.\n");
    let _ = writeln!(m, "{}\n", headline(s));
    let _ = writeln!(
        m,
        "![ratio to classic by width, with 95% intervals; the chosen width marked](plot.svg)\n\nThe plot shows what the decision uses: each width's ratio to classic with its 95% interval (the process is the unit: one ratio per round, n = {} rounds), a line at 1.0, the chosen width marked, and the ratio per prompt type.\n",
        s.complete_rounds
    );
    let mut ident = String::new();
    std::mem::swap(&mut m, &mut ident);
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
         tuner reads only its typed events. Every round opens and closes with {} classic arm(s); the widths \
         run between them, their order rotated from round to round. Per arm: {} warm-up pass(es) over the \
         prompt set, excluded from every statistic and diagnostic, then {} recorded pass(es) (bursts) for a \
         speculative arm and {} for a bracket arm. Greedy decoding (temperature 0), {} max tokens, {} \
         thread(s). The gate ran before every arm and the NV_ERR_NO_MEMORY count was read before and after it.\n",
        if st.served.is_some() { "serve --json" } else { "generate --json" },
        st.bracket_arms,
        st.warmup,
        st.bursts_of(Some(1)),
        st.bursts_of(None),
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
        "- requests per arm: {} prompts x {} bursts = {} (speculative), x {} = {} (bracket)",
        h.prompts.len(),
        st.bursts_of(Some(1)),
        s.expected_requests_per_arm,
        st.bursts_of(None),
        s.expected_requests_per_bracket_arm
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
        "- statistics: per-request {}; the unit of replication is the arm (one process): one ratio per width per round, t interval across rounds (docs/records.md, \"The statistics\"); descriptive tok/s are medians and ranges over requests; outliers flagged at {} scaled MADs, never dropped",
        statistic(s),
        crate::stats::OUTLIER_MADS
    );
    let _ = writeln!(
        m,
        "- drift rule: a round has drifted when |ln(close/open)| - t x se > ln(1 + {}) (tolerance {}%), t the Student quantile that keeps a false verdict under {}% per sweep (Bonferroni over the rounds); se from the spread of the bracket arms within each side (process and request noise together)",
        s.drift_tolerance,
        100.0 * s.drift_tolerance,
        100.0 * s.drift_false_alarm
    );
    std::mem::swap(&mut m, &mut ident);
    let _ = writeln!(m, "## Decision rule (fixed before the results)\n\n{}\n", s.decision_rule);
    if let Some(a) = &st.auto_rounds {
        let _ = writeln!(
            m,
            "### Rounds: `--rounds auto` (fixed before the first round)\n\n{} Here: at least {}, at most {}, budget {:.0} s. {}\n",
            crate::summary::AUTO_ROUNDS_RULE,
            a.min_rounds,
            a.max_rounds,
            a.budget_s,
            match &s.auto_rounds {
                Some(x) => format!("It stopped after {} round(s): {}.", x.rounds, x.reason),
                None => "It has not stopped yet (the sweep is incomplete).".to_string(),
            }
        );
    }

    let _ = writeln!(m, "## Results\n");
    let _ = writeln!(m, "### Classic brackets and drift\n");
    let _ = writeln!(
        m,
        "Drift is the closing side's rate over the opening side's, paired by prompt (1.000 = none), with its 95% interval. A round has drifted when its drift lies credibly beyond the {}% tolerance (the t column: standard errors beyond the tolerance needed, set so that a sweep without drift is flagged at most {}% of the time). Process spread between arms, estimated from the whole sweep: {}; request noise (sd of one request's log rate within an arm and prompt): {}.\n",
        100.0 * s.drift_tolerance,
        100.0 * s.drift_false_alarm,
        s.process_spread.map_or("not estimable (fewer than two widths or rounds)".to_string(), |p| format!(
            "{:.1}% ({} degrees of freedom)",
            100.0 * p,
            s.process_spread_df
        )),
        s.request_noise.map_or("not estimable (one burst per arm)".to_string(), |q| format!("{:.1}%", 100.0 * q))
    );
    let _ = writeln!(
        m,
        "| round | open n (arms) | open median tok/s | open min..max | close n (arms) | close median tok/s | close min..max | drift [95%] | se: request, process, total (df) | t | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    if s.served {
        let _ = writeln!(m, "(tok/s here and below are end-to-end tok/s of streamed requests.)\n");
    }
    for rb in &s.rounds {
        let [on, om, or] = tps(&rb.open);
        let [cn, cm, cr] = tps(&rb.close);
        let (oa, ca) = rb.test.as_ref().map_or((0, 0), |t| (t.open_arms, t.close_arms));
        let (drift, se) = match &rb.test {
            Some(t) => (
                match t.interval {
                    Some((lo, hi)) => format!("{:.3} [{lo:.3}, {hi:.3}]", t.drift),
                    None => format!("{:.3}", t.drift),
                },
                format!(
                    "{}, {}, {} ({})",
                    t.se_request_log.map_or("-".into(), |x| format!("{x:.3}")),
                    t.se_process_log.map_or("-".into(), |x| format!("{x:.3}")),
                    t.se_log.map_or("-".into(), |x| format!("{x:.3}")),
                    t.df
                ),
            ),
            None => ("-".into(), "-".into()),
        };
        let crit = rb.test.as_ref().and_then(|t| t.critical_t).map_or("-".into(), |c| format!("{c:.2}"));
        let verdict = if rb.incomplete {
            "incomplete round".to_string()
        } else if rb.drifted {
            "**drifted**".to_string()
        } else if !rb.judgeable {
            "**cannot judge** (process spread or request noise not estimable)".to_string()
        } else {
            "no drift".to_string()
        };
        let _ = writeln!(
            m,
            "| {} | {on} ({oa}) | {om} | {or} | {cn} ({ca}) | {cm} | {cr} | {drift} | {se} | {crit} | {verdict} |",
            rb.round + 1
        );
    }
    let [cn, cm, cr] = tps(&s.classic);
    let _ = writeln!(m, "\nClassic, all brackets: n {cn}, median {cm} tok/s, range {cr}.\n");

    let heading =
        if s.drift { "### Widths — NOT CLEAN: the host drifted; ratios against both brackets" } else { "### Widths" };
    let _ = writeln!(m, "{heading}\n");
    let _ = writeln!(
        m,
        "| width | ratio [95%] | per-round ratios | vs best [95%] | tied | vs open | vs close | n | median tok/s | min..max | acceptance | emitted/verify | verify ms/pass | outliers | measurement | output == classic |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for w in &s.widths {
        let [n, med, rg] = tps(&w.tok_per_s);
        let pooled = if s.drift { "not shown (drift)".to_string() } else { ratio(&w.ratio) };
        let per_round = w.ratio.as_ref().map_or("-".to_string(), |r| {
            r.per_round.iter().map(|(_, x)| format!("{x:.3}")).collect::<Vec<_>>().join(" ")
        });
        let (vs_best, tied) = match &w.tie {
            Some(t) if s.decision.best_width == Some(w.width) => ("best".to_string(), "yes".to_string()),
            Some(t) => (
                format!("{:.3} [{:.3}, {:.3}]", t.vs_best, t.low, t.high),
                if t.tied { "yes".into() } else { "no".into() },
            ),
            None => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            m,
            "| {} | {pooled} | {per_round} | {vs_best} | {tied} | {} | {} | {n} | {med} | {rg} | {} | {} | {} | {} | {} | {} |",
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
        let _ = writeln!(m, "| arms | n | median ms | min..max ms |\n|---|---|---|---|");
        let ms = |x: &Option<Stats>| match x {
            Some(t) => format!("{} | {:.1} | {:.1}..{:.1}", t.n, t.median, t.min, t.max),
            None => "0 | - | -".into(),
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
            "- **Drift not ruled out**: a complete round could not be judged (it needs two prompts paired and a process spread estimated from at least two widths and two rounds)."
        );
    }
    if s.complete_rounds < 2 {
        let _ = writeln!(
            m,
            "- **Fewer than two complete rounds**: with the process as the unit, no interval can be stated; re-run with `--rounds 2` or more."
        );
    }
    if s.data_problems.is_empty() {
        let _ = writeln!(
            m,
            "- The raw data matches the plan: every complete arm has its prompts x bursts requests, none duplicated, every token hash matches its token ids."
        );
    } else {
        let _ = writeln!(m, "- **Raw data problems** ({}):", s.data_problems.len());
        for d in s.data_problems.iter().take(50) {
            let _ = writeln!(
                m,
                "  - {}{}: {}; {}",
                d.line.map_or(String::new(), |l| format!("raw.jsonl:{l} ")),
                d.arm.map_or(String::new(), |a| format!("(arm {a})")),
                d.what,
                d.remedy
            );
        }
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
    let _ = writeln!(
        m,
        "- The gate read the host {} time(s) while the complete arms ran{}.",
        s.during_arm_samples,
        if s.arms_without_during_check > 0 {
            format!(
                " ({} complete arm(s) have no reading during the run: written before this check existed, or too short)",
                s.arms_without_during_check
            )
        } else {
            String::new()
        }
    );
    if s.contention_reruns.is_empty() {
        let _ = writeln!(m, "- No arm was re-run for contention.");
    } else {
        let _ = writeln!(
            m,
            "- **{} arm attempt(s) ran through contention and were re-run** (kept in raw.jsonl):",
            s.contention_reruns.len()
        );
        for c in &s.contention_reruns {
            let _ = writeln!(
                m,
                "  - arm {} attempt {}: {} of {} readings contended: {}",
                c.arm,
                c.attempt,
                c.contended_samples,
                c.samples,
                c.reasons.join("; ")
            );
        }
    }
    if s.accepted_unknown.is_empty() {
        let _ = writeln!(m, "- No gate source was accepted as unknown.");
    } else {
        for a in &s.accepted_unknown {
            let _ = writeln!(
                m,
                "- **Gate**: before arm {}, source(s) {} were unknown and accepted (not checked).",
                a.arm,
                a.source_names()
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
            "- {} request(s) have no valid rate (no token after the first, or a non-positive or non-finite time); their widths are not measurements (above).",
            s.requests_without_rate
        );
    }
    if let Some(k) = &s.key_problem {
        let _ = writeln!(m, "- **Key**: {k}.");
    }
    if let (Some(device), Some(quant)) = (&s.device_class, &s.target_quant) {
        let threads = if device.starts_with("cpu:") {
            s.threads.map_or(", threads unknown".into(), |t| format!(", {t} threads"))
        } else {
            String::new()
        };
        let _ = writeln!(
            m,
            "- **Policy key**: ({}, {device}, {quant}{threads}){}; drafter settings {}; weight formats [{}]; \
             verify-path fingerprint {}.",
            s.drafter,
            s.target_quant_format.as_ref().map_or(String::new(), |f| format!(", declared by {f}")),
            s.drafter_settings.as_ref().map_or("unknown".into(), |d| d.describe()),
            s.weight_formats.as_ref().map_or("unknown".into(), |f| f.join(", ")),
            s.verify_fingerprint.as_deref().unwrap_or("unknown")
        );
    }

    let _ = writeln!(m, "\n## Conclusions\n");
    for line in conclusions(s) {
        let _ = writeln!(m, "- {line}");
    }
    let _ = writeln!(m);
    m.push_str(&ident);
    let _ = writeln!(m, "\n## Files\n");
    let _ = writeln!(m, "- `raw.jsonl`: every request, arm, gate report and halt as it happened (docs/records.md)");
    let _ = writeln!(m, "- `logs/`: each arm's runtime stdout (its events, warm-ups included) and stderr");
    let _ = writeln!(m, "- `summary.csv` (one row per width), `plot.svg` (the figure above), `prompts.jsonl`");
    let _ = writeln!(m, "- regenerate this file: `tuner summarize {dir_name}` (from the folder holding it)");
    m
}

/// The record's first line after the status: the decision and its interval.
pub fn headline(s: &Summary) -> String {
    let d = &s.decision;
    let tied = d.tied.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
    let validity = if s.drift {
        " **The host drifted: the record proposes no entry.**"
    } else if !s.data_problems.is_empty() {
        " **The raw data has problems (Validity): the record proposes no entry.**"
    } else {
        ""
    };
    match (d.width, d.ratio, d.ratio_interval) {
        (Some(w), Some(r), Some((lo, hi))) => format!(
            "**Decision: width {w}**, {r:.3}x classic [{lo:.3}, {hi:.3}] (95%, {} rounds; the process is the unit). Tied with the best (width {}): {tied}.{validity}",
            s.complete_rounds,
            d.best_width.map_or("none".into(), |b| b.to_string())
        ),
        (None, Some(r), iv) => format!(
            "**Decision: off** — no width tied with the best has an interval wholly above 1.0 (best: width {}, {r:.3}x classic{}; tied: {tied}).{validity}",
            d.best_width.map_or("none".into(), |b| b.to_string()),
            iv.map_or(", no interval".to_string(), |(lo, hi)| format!(" [{lo:.3}, {hi:.3}]"))
        ),
        _ => format!("**No decision**: {}.{validity}", d.why),
    }
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
                    "Survives the drift: width {} is faster than classic against both brackets ({} vs open, {} vs close).",
                    w.width,
                    iv(o),
                    iv(c)
                ));
            } else if o.below_one() && c.below_one() {
                out.push(format!(
                    "Survives the drift: width {} is slower than classic against both brackets ({} vs open, {} vs close).",
                    w.width,
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
        out.push("The record drifted, so it proposes no policy entry; re-run the sweep on a quiet host.".into());
        return out;
    }
    let d = &s.decision;
    match (d.width, d.ratio, d.ratio_interval) {
        (Some(w), Some(r), Some((lo, hi))) => out.push(format!(
            "By the decision rule the width is {w}: ratio {r:.3}, interval [{lo:.3}, {hi:.3}] wholly above 1.0; the narrowest of the tied widths {:?} that qualifies.",
            d.tied
        )),
        (None, Some(_), _) => out.push(format!("By the decision rule the entry is `off`: {}.", d.why)),
        _ => out.push(format!("No decision: {}.", d.why)),
    }
    let faster: Vec<String> = s
        .widths
        .iter()
        .filter(|w| w.ratio.as_ref().is_some_and(|r| r.above_one()))
        .map(|w| w.width.to_string())
        .collect();
    let slower: Vec<String> = s
        .widths
        .iter()
        .filter(|w| w.ratio.as_ref().is_some_and(|r| r.below_one()))
        .map(|w| w.width.to_string())
        .collect();
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
/// its 95% interval (black), a line at 1.0, the chosen width marked, and
/// the ratio over each prompt type's prompts (coloured, no interval).
pub fn write_plot(path: &Path, s: &Summary, widths: &[usize]) -> Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut ys: Vec<f64> = vec![1.0];
    for w in &s.widths {
        if let Some(r) = &w.ratio {
            ys.push(r.ratio);
            if let Some((lo, hi)) = r.interval {
                ys.extend([lo, hi]);
            }
        }
    }
    ys.extend(s.type_ratios.iter().map(|t| t.ratio));
    ys.retain(|y| y.is_finite());
    let (ylo, yhi) = ys.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| (a.min(*y), b.max(*y)));
    let pad = ((yhi - ylo) * 0.08).max(0.02);
    let (ylo, yhi) = ((ylo - pad).max(0.0), yhi + pad);
    let xmax = widths.iter().copied().max().unwrap_or(1) as f64 + 0.5;
    let chosen = s.decision.width;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("ratio to classic ({}) by width: {}", statistic(s), title(s)), ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.5f64..xmax, ylo..yhi)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(match chosen {
            Some(w) => format!("draft width (tokens per verify); chosen: {w}"),
            None => "draft width (tokens per verify); decision: off".to_string(),
        })
        .y_desc("speculative / classic")
        .draw()
        .map_err(|e| err(&e))?;
    chart
        .draw_series(LineSeries::new(vec![(0.5, 1.0), (xmax, 1.0)], BLACK.mix(0.6).stroke_width(1)))
        .map_err(|e| err(&e))?
        .label("1.0 = classic")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.mix(0.6)));
    let mut types: Vec<&str> = s.type_ratios.iter().map(|t| t.prompt_type.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    for (i, t) in types.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba().mix(0.7);
        let pts: Vec<(f64, f64)> = widths
            .iter()
            .filter_map(|w| {
                s.type_ratios.iter().find(|x| x.prompt_type == *t && x.width == *w).map(|x| (*w as f64, x.ratio))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(1)))
            .map_err(|e| err(&e))?
            .label(format!("{t} prompts"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(1)));
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 2, color.filled()))).map_err(|e| err(&e))?;
    }
    /// (width, ratio, interval) of each width with a ratio.
    type Point = (f64, f64, Option<(f64, f64)>);
    let all: Vec<Point> =
        s.widths.iter().filter_map(|w| w.ratio.as_ref().map(|r| (w.width as f64, r.ratio, r.interval))).collect();
    chart
        .draw_series(all.iter().filter_map(|(x, _, iv)| {
            iv.map(|(lo, hi)| PathElement::new(vec![(*x, lo.max(ylo)), (*x, hi.min(yhi))], BLACK.stroke_width(2)))
        }))
        .map_err(|e| err(&e))?;
    chart
        .draw_series(LineSeries::new(all.iter().map(|(x, y, _)| (*x, *y)), BLACK.stroke_width(2)))
        .map_err(|e| err(&e))?
        .label("all prompts: ratio and 95% interval")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.stroke_width(2)));
    if let Some(w) = chosen
        && let Some((x, y, _)) = all.iter().find(|(x, _, _)| *x == w as f64)
    {
        chart
            .draw_series(std::iter::once(Circle::new((*x, *y), 8, RED.stroke_width(3))))
            .map_err(|e| err(&e))?
            .label(format!("chosen width {w}"))
            .legend(|(x, y)| Circle::new((x + 8, y), 5, RED.stroke_width(2)));
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
