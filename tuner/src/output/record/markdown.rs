//! `record.md`: [`markdown`] joins the record's sections, each written by
//! its own function from the [`Summary`] and the raw header.
use crate::data::plan::SpeculativeArm;
use std::fmt::Write as _;

use super::{conclusions, headline, opt, r, ratio, statistic, title, tps};
use crate::analysis::stats::Stats;
use crate::analysis::summary::Summary;
use crate::data::raw::{RawFile, RawLine};

/// The record as Markdown: the decision and the results first, then the
/// validity and conclusions, then how it was measured, each section written
/// by its own function.
pub fn markdown(raw: &RawFile, s: &Summary, dir_name: &str) -> String {
    [
        header(s),
        decision_rule(raw, s),
        brackets(s),
        widths(s),
        time_to_first_token(s),
        by_prompt_type(raw, s),
        verify_cost(s),
        output_identity(s),
        validity(s),
        conclusions_section(s),
        host_identity(raw),
        method(raw, s),
        files(dir_name),
    ]
    .concat()
}

/// The title, status, headline and the plot with what it shows.
fn header(s: &Summary) -> String {
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
    let _ = writeln!(m, "{}\n", stability_line(s));
    let _ = writeln!(
        m,
        "![ratio to classic by width, with 95% intervals; the chosen width marked](plot.svg)\n\nThe plot shows what the decision uses: each width's ratio to classic with its 95% interval (the process is the unit: one ratio per round, n = {} rounds), a line at 1.0, the chosen width marked, and the ratio per prompt type.\n",
        s.complete_rounds
    );
    m
}

/// How stable the decision is (the bootstrap over rounds), in one paragraph.
pub fn stability_line(s: &Summary) -> String {
    let Some(st) = &s.stability else {
        return "**Stability**: not stated (fewer than two rounds with ratios).".to_string();
    };
    let name = |w: Option<SpeculativeArm>| {
        w.map_or("off".to_string(), |w| {
            if w == crate::data::plan::SpeculativeArm::Adaptive {
                "the adaptive draft length".to_string()
            } else {
                format!("width {w}")
            }
        })
    };
    let choices: Vec<String> =
        st.choices.iter().take(6).map(|(w, x)| format!("{} {:.0}%", name(*w), 100.0 * x)).collect();
    format!(
        "**Stability** (a bootstrap over the {} rounds, {} draws, each decided by the rule): a replicate sweep would \
         choose {} in **{:.0}%** of draws (the draws chose: {}); the expected regret of {} against each draw's best \
         width is **{:.1}%**. A decision a replicate would often reverse is not yet one: `tuner propose` pools the \
         key's records and keeps the entry's width unless the pooled data say otherwise.",
        st.rounds,
        st.draws,
        name(s.decision.width),
        100.0 * st.same,
        choices.join(", "),
        name(s.decision.width),
        100.0 * st.expected_regret
    )
}

/// `## Host identity`: the host, toolchain and build the sweep ran on.
fn host_identity(raw: &RawFile) -> String {
    let h = &raw.header;
    let id = &h.identity;
    let mut m = String::new();
    let _ = writeln!(m, "## Host identity (`tuner identity`)\n");
    let c = &id.cpu;
    let rows: Vec<(&str, String)> = vec![
        ("hostname", r(&id.hostname)),
        ("os", r(&id.os)),
        ("kernel", r(&id.kernel_release)),
        ("cpu", r(&c.model)),
        ("cpu signature", r(&c.signature)),
        ("caches (cpu 0)", r(&c.caches)),
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
    m
}

/// `## Method`: how the arms ran, the plan, prompts, models, gate, environment and statistics.
fn method(raw: &RawFile, s: &Summary) -> String {
    let h = &raw.header;
    let st = &h.settings;
    let id = &h.identity;
    let mut m = String::new();
    let _ = writeln!(m, "\n## Method\n");
    if let Some(sv) = &st.served {
        let _ = writeln!(
            m,
            "**Served sweep.** Each arm is a fresh `runtime serve --json` process on a free loopback port with \
             every setting on its command line; the tuner learns the port from its typed `startup` event, waits \
             for `GET /health` (up to {} s), sends every prompt as a streamed request (text prompts to \
             `/v1/completions`, message lists to `/v1/chat/completions`; `stream_options.include_usage`), {}, \
             and stops it with SIGTERM (SIGKILL after {} s). Per request it measures the time to \
             first token (request written to the first chunk with a choice) and the end-to-end time (to \
             `data: [DONE]`); the sample is end-to-end tok/s, completion tokens over the end-to-end seconds. \
             Each response is joined to the server's `completion` event (and diagnostics) by its id.\n",
            sv.health_timeout_s,
            match sv.concurrency {
                1 => "one at a time (**concurrency 1**; the server runs with `--parallel 1`)".to_string(),
                n => format!(
                    "through {n} client threads, each taking the next prompt of the pass, so at most {n} requests \
                     are in flight and each ran beside up to {} others (**concurrency {n}**; the server runs with \
                     `--parallel {n}`, so every request has a batch slot); the raw rows are written in prompt \
                     order after each pass",
                    n - 1
                ),
            },
            sv.stop_timeout_s
        );
        let _ = writeln!(
            m,
            "{}\n",
            match &s.batch {
                Some(b) => format!(
                    "The batches the measured requests ran in (each response's `draftwise.batch`): {:.2} \
                     sequences per forward pass on average (the request itself included), the widest pass {}, \
                     over {} requests; per arm kind in the time-to-first-token table. The unit of replication \
                     is still the process: requests of one arm, concurrent or not, share its speed.",
                    b.mean_sequences, b.widest, b.requests
                ),
                None => "No response said the batches it ran in (`draftwise.batch`: a server before \
                         `--parallel`)."
                    .to_string(),
            }
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
        st.design.bracket_arms,
        st.design.warmup,
        st.design.bursts,
        st.design.bursts_of(None),
        st.design.max_tokens,
        st.design.threads
    );
    let _ = writeln!(
        m,
        "- drafter: `{}`{}",
        st.drafter,
        st.drafter_model.as_ref().map_or(String::new(), |p| format!(" (model {})", p.display()))
    );
    // The numbers raw.jsonl stores (the adaptive arm as 0).
    let codes: Vec<usize> = st.design.widths.iter().map(|w| w.code()).collect();
    let _ = writeln!(m, "- widths: {codes:?}, rounds: {}, arms: {}", st.design.rounds, h.plan.len());
    let order: Vec<String> = h
        .plan
        .iter()
        .map(|a| match a.width {
            Some(crate::data::plan::SpeculativeArm::Adaptive) => "A".into(),
            Some(w) => w.to_string(),
            None => "C".into(),
        })
        .collect();
    let legend = if st.design.has_adaptive_arm() { "C = classic, A = adaptive" } else { "C = classic" };
    let _ = writeln!(m, "- arm order ({legend}): {}", order.join(" "));
    let _ = writeln!(
        m,
        "- requests per arm: {} prompts x {} bursts = {} (speculative), x {} = {} (bracket)",
        h.prompts.len(),
        st.design.bursts,
        s.expected_requests_per_arm,
        st.design.bursts_of(None),
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
        crate::analysis::stats::OUTLIER_MADS
    );
    let _ = writeln!(
        m,
        "- drift rule: the sweep has drifted when the weighted mean over rounds of ln(close/open) lies beyond t x se of 0 (t at {:.1}%, two-sided), or a round has when |ln(close/open)| - t x se > ln(1 + {}) (tolerance {}%, t at {}% over all rounds: Bonferroni); together a false verdict stays under {}% per sweep; se from the spread of the bracket arms within each side (process and request noise together). The plan must detect a {}% systematic drift with {}% power (`tuner propose` refuses a record that states more). {}",
        100.0 * crate::analysis::estimate::SWEEP_DRIFT_FALSE_ALARM,
        s.drift_tolerance,
        100.0 * s.drift_tolerance,
        100.0 * crate::analysis::estimate::ROUND_DRIFT_FALSE_ALARM,
        100.0 * s.drift_false_alarm,
        100.0 * crate::analysis::estimate::DRIFT_TO_DETECT,
        100.0 * crate::analysis::estimate::DRIFT_POWER,
        crate::analysis::decision::DRIFT_SURVIVAL_RULE
    );
    m
}

/// `## Decision rule`, fixed before the results, and the `--rounds auto` stopping rule.
fn decision_rule(raw: &RawFile, s: &Summary) -> String {
    let h = &raw.header;
    let st = &h.settings.design;
    let mut m = String::new();
    let _ = writeln!(m, "## Decision rule (fixed before the results)\n\n{}\n", s.decision_rule);
    if let Some(a) = &st.auto_rounds {
        let _ = writeln!(
            m,
            "### Rounds: `--rounds auto` (fixed before the first round)\n\n{} Here: at least {}, at most {}, budget {:.0} s. {}\n",
            crate::analysis::decision::AUTO_ROUNDS_RULE,
            a.min_rounds,
            a.max_rounds,
            a.budget_s,
            match &s.auto_rounds {
                Some(x) => format!("It stopped after {} round(s): {}.", x.rounds, x.reason),
                None => "It has not stopped yet (the sweep is incomplete).".to_string(),
            }
        );
    }
    m
}

/// `## Results` opening: the classic brackets of each round and the drift verdicts.
fn brackets(s: &Summary) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "## Results\n");
    let _ = writeln!(m, "### Classic brackets and drift\n");
    let _ = writeln!(
        m,
        "Drift is the closing side's rate over the opening side's, paired by prompt (1.000 = none), with its 95% interval. A round has drifted when its drift lies credibly beyond the {}% tolerance (the t column: standard errors beyond the tolerance needed, set so that the round tests together flag a sweep without drift at most {}% of the time; the sweep test below takes the rest of the {}% bound). The verdict shows that test as an interval: the drift plus and minus t standard errors. The round has drifted when that verdict interval lies wholly outside the band [1/(1 + tolerance), 1 + tolerance], so a round whose 95% interval misses the band can still be judged clean: with several rounds, one such interval in twenty is expected by chance. Process spread between arms, estimated from the whole sweep: {}; request noise (sd of one request's log rate within an arm and prompt): {}.\n",
        100.0 * s.drift_tolerance,
        100.0 * crate::analysis::estimate::ROUND_DRIFT_FALSE_ALARM,
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
        let band = format!("±{}% band", 100.0 * s.drift_tolerance);
        let judged = rb.test.as_ref().and_then(verdict_interval).map(|(lo, hi)| format!("[{lo:.3}, {hi:.3}]"));
        let verdict = if rb.incomplete {
            "incomplete round".to_string()
        } else if rb.drifted {
            match judged {
                Some(iv) => format!("**drifted** (verdict interval {iv} lies beyond the {band})"),
                None => "**drifted**".to_string(),
            }
        } else if !rb.judgeable {
            "**cannot judge** (process spread or request noise not estimable)".to_string()
        } else {
            match judged {
                Some(iv) => format!("no drift (verdict interval {iv} reaches the {band})"),
                None => "no drift".to_string(),
            }
        };
        let _ = writeln!(
            m,
            "| {} | {on} ({oa}) | {om} | {or} | {cn} ({ca}) | {cm} | {cr} | {drift} | {se} | {crit} | {verdict} |",
            rb.round + 1
        );
    }
    let _ = writeln!(m, "\n{}", sweep_drift_line(s));
    let [cn, cm, cr] = tps(&s.classic);
    let _ = writeln!(m, "\nClassic, all brackets: n {cn}, median {cm} tok/s, range {cr}.\n");
    m
}

/// The sweep drift test in one sentence, with the drift the plan could detect.
fn sweep_drift_line(s: &Summary) -> String {
    let Some(d) = &s.sweep_drift else {
        return "**Sweep drift test**: not run (no complete round could be judged); the smallest drift this plan \
                detects is unknown."
            .to_string();
    };
    let verdict = if d.drifted { "**drifted**" } else { "no drift" };
    let remedy = match s.bracket_arms_to_detect {
        Some(n) if d.detectable > crate::analysis::estimate::DRIFT_TO_DETECT => {
            format!(
                " — more than {:.0}%: this spread needs `--bracket-arms {n}`",
                100.0 * crate::analysis::estimate::DRIFT_TO_DETECT
            )
        }
        _ => String::new(),
    };
    format!(
        "**Sweep drift test** (every round's closing sides against the opening sides, {} rounds): drift {:.3} [{:.3}, \
         {:.3}], se {:.3} ({} df), t {:.2}: {verdict}. **Smallest drift this plan detects** (a systematic slowdown \
         of the closing sides flagged with {:.0}% power): **{:.1}%**{remedy}. Per round (the table's tests): {}.",
        d.rounds,
        d.drift,
        d.interval.0,
        d.interval.1,
        d.se_log,
        d.df,
        d.critical_t,
        100.0 * crate::analysis::estimate::DRIFT_POWER,
        100.0 * d.detectable,
        {
            let per: Vec<String> = s
                .rounds
                .iter()
                .filter_map(|r| r.test.as_ref()?.detectable.map(|x| format!("{:.0}%", 100.0 * x)))
                .collect();
            if per.is_empty() { "none judged".to_string() } else { per.join(", ") }
        }
    )
}

/// The interval the drift verdict judges by: `drift · e^(±t·se)` with the
/// verdict's quantile `t` (`DriftTest::critical_t`); the round drifted when
/// it lies wholly outside `[1/(1 + tolerance), 1 + tolerance]`
/// (`DriftTest::drifted`). None when the round could not be judged.
fn verdict_interval(t: &crate::analysis::estimate::DriftTest) -> Option<(f64, f64)> {
    let (crit, se) = (t.critical_t?, t.se_log?);
    let d = t.drift.ln();
    Some(((d - crit * se).exp(), (d + crit * se).exp()))
}

/// The widths table: ratios, ties, rates, diagnostics and whether each is a measurement.
fn widths(s: &Summary) -> String {
    let mut m = String::new();
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
    m
}

/// Served sweeps: the client's time to first token per arm kind.
fn time_to_first_token(s: &Summary) -> String {
    let mut m = String::new();
    if s.served {
        let _ = writeln!(m, "\n### Time to first token (served, client side)\n");
        let _ = writeln!(
            m,
            "| arms | n | median ms | min..max ms | mean sequences per pass (widest) |\n|---|---|---|---|---|"
        );
        let ms = |x: &Option<Stats>| match x {
            Some(t) => format!("{} | {:.1} | {:.1}..{:.1}", t.n, t.median, t.min, t.max),
            None => "0 | - | -".into(),
        };
        let batch = |b: &Option<crate::analysis::summary::BatchSummary>| match b {
            Some(b) => format!("{:.2} ({})", b.mean_sequences, b.widest),
            None => "-".into(),
        };
        let _ = writeln!(m, "| classic | {} | {} |", ms(&s.classic_ttft_ms), batch(&s.classic_batch));
        for w in &s.widths {
            let _ = writeln!(m, "| width {} | {} | {} |", w.width, ms(&w.ttft_ms), batch(&w.batch));
        }
    }
    m
}

/// The verify pass's cost against a one-row pass, per context length
/// (absent when the sweep did not measure it).
fn verify_cost(s: &Summary) -> String {
    let mut m = String::new();
    let Some(widest) = s.verify_cost.iter().map(|c| c.points.len()).max() else { return m };
    let _ = writeln!(m, "\n### Verify cost: a pass of R rows against a one-row pass\n");
    let _ = writeln!(
        m,
        "One `runtime bench --verify-cost` process per context length after each round's arms (the target's pass \
         alone, logits for every row); each process's medians are one replicate, so the unit of every interval is \
         the process, one a round. Geometric means over the rounds, {}% t intervals.\n",
        (crate::analysis::estimate::INTERVAL_LEVEL * 100.0).round()
    );
    let _ = write!(m, "| rows |");
    for c in &s.verify_cost {
        let one = c.one_row_ms.map_or(String::new(), |x| format!(", one row {x:.1} ms"));
        let _ = write!(m, " context {} ({} rounds{one}) |", c.context, c.rounds);
    }
    let _ = writeln!(m, "\n|---|{}", "---|".repeat(s.verify_cost.len()));
    for r in 1..widest {
        let _ = write!(m, "| {} |", r + 1);
        for c in &s.verify_cost {
            let cell = c.points.get(r).map_or("-".into(), |p| match p.interval {
                Some((lo, hi)) => format!("{:.3} [{lo:.3}, {hi:.3}]", p.relative),
                None => format!("{:.3}", p.relative),
            });
            let _ = write!(m, " {cell} |");
        }
        let _ = writeln!(m);
    }
    for c in &s.verify_cost {
        for (round, why) in &c.missing {
            let _ = writeln!(m, "\nContext {}, round {}: no measurement: {why}", c.context, round + 1);
        }
    }
    m
}

/// The median rate per prompt type and arm kind.
fn by_prompt_type(raw: &RawFile, s: &Summary) -> String {
    let h = &raw.header;
    let st = &h.settings.design;
    let mut m = String::new();
    let _ = writeln!(m, "\n### Median {} by prompt type\n", statistic(s));
    let mut types: Vec<&str> = s.by_type.iter().map(|t| t.prompt_type.as_str()).collect();
    types.dedup();
    let _ = write!(m, "| type | classic |");
    for w in &st.widths {
        let _ = write!(m, " W={} |", w);
    }
    let _ = writeln!(m, "\n|---|---|{}", "---|".repeat(st.widths.len()));
    for t in &types {
        let cell = |k: Option<SpeculativeArm>| {
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
    m
}

/// `## Output identity`: every output against classic.
fn output_identity(s: &Summary) -> String {
    let mut m = String::new();
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
    m
}

/// `## Validity`: everything that limits what the record shows, and its policy key.
fn validity(s: &Summary) -> String {
    let mut m = String::new();
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
        let mut drifted: Vec<String> =
            s.rounds.iter().filter(|r| r.drifted).map(|r| format!("round {}", r.round + 1)).collect();
        if s.sweep_drift.as_ref().is_some_and(|d| d.drifted) {
            drifted.push("the sweep as a whole".into());
        }
        let _ = writeln!(
            m,
            "- **Drift**: {} drifted. Only conclusions that hold against both brackets survive (below).",
            drifted.join(", ")
        );
    } else if !s.drift_unjudged {
        let _ = writeln!(m, "- No round drifted, nor the sweep as a whole.");
    }
    if let Some(d) = &s.sweep_drift {
        let _ = writeln!(
            m,
            "- The smallest systematic drift this plan detects with {:.0}% power: {:.1}%{}.",
            100.0 * crate::analysis::estimate::DRIFT_POWER,
            100.0 * d.detectable,
            if d.detectable > crate::analysis::estimate::DRIFT_TO_DETECT {
                format!(
                    " (**more than {:.0}%**: `tuner propose` refuses the record; this spread needs `--bracket-arms {}`)",
                    100.0 * crate::analysis::estimate::DRIFT_TO_DETECT,
                    s.bracket_arms_to_detect.map_or("N".into(), |n| n.to_string())
                )
            } else {
                String::new()
            }
        );
    }
    let _ = writeln!(
        m,
        "- The gate read the host {} time(s) while the complete arms ran{}.",
        s.during_arm_samples,
        if s.arms_without_during_check > 0 {
            format!(
                " (**{} complete arm(s) were read fewer than {} times** while they ran: written before this check existed, or too short; `tuner propose` refuses the record)",
                s.arms_without_during_check,
                crate::host::gate::during::MIN_IN_ARM_READINGS
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
            "- {} request(s) have no valid rate (no token after the first, a non-finite or implausible rate, or one its own counts and times do not give); their widths are not measurements (above).",
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
        let host = s.host_class.as_deref().unwrap_or("host class unknown");
        let model = s.model.as_ref().map_or("model unknown".to_string(), |m| m.to_string());
        let _ = writeln!(
            m,
            "- **Policy key**: ({}, {device}, {host}, {quant}, {model}{threads}){}; drafter settings {}; weight \
             formats [{}]; verify-path fingerprint {}.",
            s.drafter,
            s.target_quant_format.as_ref().map_or(String::new(), |f| format!(", declared by {f}")),
            s.drafter_settings.as_ref().map_or("unknown".into(), |d| d.describe()),
            s.weight_formats.as_ref().map_or("unknown".into(), |f| f.join(", ")),
            s.verify_fingerprint.as_deref().unwrap_or("unknown")
        );
    }
    m
}

/// `## Conclusions`.
fn conclusions_section(s: &Summary) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "\n## Conclusions\n");
    for line in conclusions(s) {
        let _ = writeln!(m, "- {line}");
    }
    let _ = writeln!(m);
    m
}

/// `## Files`: what the folder holds and how to regenerate this file.
fn files(dir_name: &str) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "\n## Files\n");
    let _ = writeln!(m, "- `raw.jsonl`: every request, arm, gate report and halt as it happened (docs/records.md)");
    let _ = writeln!(m, "- `logs/`: each arm's runtime stdout (its events, warm-ups included) and stderr");
    let _ = writeln!(m, "- `summary.csv` (one row per width), `plot.svg` (the figure above), `prompts.jsonl`");
    let _ = writeln!(m, "- regenerate this file: `tuner summarize {dir_name}` (from the folder holding it)");
    m
}
