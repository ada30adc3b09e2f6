//! End-to-end: `tuner sweep`, `summarize` and `propose` driven through a
//! fake runtime (`--runtime PATH`, a shell script) that replays crafted
//! events, so every refusal and failure path runs for real: drift, decline,
//! zero rounds, missing diagnostics, inexact output, NVRM budget halt, a
//! crash mid-arm, interruption and resume, a gate source accepted as
//! unknown, malformed raw data.
//!
//! The events are the typed ones of `common` (the runtime's exact shape).
//! The gate runs for real on this (possibly busy) host with relaxed CPU
//! thresholds; the NV_ERR_NO_MEMORY count comes from an injected kernel log
//! (`DRAFTWISE_TUNER_NVRM_LOG`).
mod common;

use std::process::{Command, Output};

use common::{FORMATS, Fixture, completion, declined, diagnostics, empty_table, startup, text, verify_fp};
use draftwise_tests::{exclude_other_runtimes, fake_gate};
use serde_json::{Value, json};

const PROMPTS: [(&str, &str); 2] = [("p1", "code"), ("p2", "free")];
const BURSTS: usize = 3;

fn tokens(prompt: &str) -> Vec<u32> {
    let base = if prompt == "p1" { 100 } else { 200 };
    (0..8).map(|i| base + i).collect()
}

/// How a crafted speculative arm behaves.
#[derive(Clone, Copy, Default)]
struct Spec {
    declined: bool,
    zero_rounds: bool,
    no_diagnostics: bool,
    /// Change the token at this position of every p2 completion.
    differ_at: Option<usize>,
}

/// One arm's stdout: startup, a warm-up pass (absurd rates and different
/// tokens: any leak into a statistic or the identity check shows), bursts.
fn arm(width: Option<usize>, tok_s: f64, spec: Spec) -> String {
    arm_bursts(width, tok_s, spec, BURSTS)
}

fn arm_bursts(width: Option<usize>, tok_s: f64, spec: Spec, bursts: usize) -> String {
    let mut out = vec![common::ev(startup(width))];
    for (warmup, repeats) in [(true, 1), (false, bursts)] {
        for repeat in 0..repeats {
            for (p, _) in PROMPTS {
                let mut ids = tokens(p);
                if warmup {
                    ids[1] = 9999;
                }
                if let Some(i) = spec.differ_at
                    && p == "p2"
                    && !warmup
                {
                    ids[i] += 1;
                }
                let rate =
                    if warmup { 1e6 } else { tok_s * (1.0 + 0.01 * repeat as f64) * if p == "p1" { 1.0 } else { 0.8 } };
                out.push(completion(p, warmup, repeat, &ids, rate));
                if let Some(w) = width {
                    if spec.declined {
                        out.push(declined(p, warmup, repeat, w));
                    } else if !spec.no_diagnostics {
                        out.push(diagnostics(p, warmup, repeat, w, if spec.zero_rounds { 0 } else { 3 }));
                    }
                }
            }
        }
    }
    out.join("\n") + "\n"
}

const SCRIPT: &str = r#"#!/bin/sh
D="$(dirname "$0")"
if [ "$1" = "build-info" ]; then cat "$D/build-info.json"; exit 0; fi
N=$(cat "$D/count" 2>/dev/null || echo 0)
echo $((N + 1)) > "$D/count"
echo "$@" > "$D/args-$N"
env > "$D/env-$N"
W=c
prev=""
for a in "$@"; do
  if [ "$prev" = "--draft-width" ]; then W="$a"; fi
  prev="$a"
done
if [ -f "$D/arm-$N.sh" ]; then . "$D/arm-$N.sh"; fi
if [ -f "$D/arm-$N.jsonl" ]; then cat "$D/arm-$N.jsonl"; else cat "$D/w-$W.jsonl"; fi
"#;

impl Fixture {
    fn new() -> Fixture {
        let prompts: String = PROMPTS
            .iter()
            .map(|(id, t)| json!({"id": id, "type": t, "prompt": format!("say {id}")}).to_string() + "\n")
            .collect();
        let f = Fixture::scratch(SCRIPT, &prompts, "records/sweep");
        // Defaults: classic 100 tok/s, width 1 130, width 2 120, all clean.
        f.set_width(None, &arm(None, 100.0, Spec::default()));
        f.set_width(Some(1), &arm(Some(1), 130.0, Spec::default()));
        f.set_width(Some(2), &arm(Some(2), 120.0, Spec::default()));
        f
    }

    fn set_width(&self, w: Option<usize>, text: &str) {
        let name = w.map_or("w-c.jsonl".to_string(), |w| format!("w-{w}.jsonl"));
        std::fs::write(self.fake.join(name), text).unwrap();
    }

    /// The `n`-th runtime invocation (0-based) prints this instead.
    fn set_arm(&self, n: usize, text: &str) {
        std::fs::write(self.fake.join(format!("arm-{n}.jsonl")), text).unwrap();
    }

    /// Shell run by the `n`-th invocation before it prints.
    fn set_hook(&self, n: usize, sh: &str) {
        std::fs::write(self.fake.join(format!("arm-{n}.sh")), sh).unwrap();
    }

    /// `tuner sweep` over widths 1,2, two rounds of one bracket arm a side:
    /// arms C 1 2 C | C 2 1 C (invocations 0..=7).
    fn sweep(&self, extra: &[&str]) -> Output {
        self.fake_sweep(BURSTS, 8, extra)
    }

    fn resume(&self) -> Output {
        self.tuner(&["sweep", "--resume", &self.out.display().to_string()], &[])
    }

    fn propose(&self, dry: bool) -> Output {
        // The fixture's gate is the fake one (no real contention test under a
        // test run's load): propose allows it, as a reviewer would have to.
        let mut a = vec!["propose", self.out.to_str().unwrap(), "--allow-loose-gate", "--allow-weak-plan"];
        if dry {
            a.push("--dry-run");
        }
        self.tuner(&a, &[])
    }

    fn raw_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(self.out.join("raw.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn summary(&self) -> Value {
        let o = self.tuner(&["summarize", self.out.to_str().unwrap(), "--json"], &[]);
        assert!(o.status.success(), "{}", text(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    fn record(&self) -> String {
        std::fs::read_to_string(self.out.join("record.md")).unwrap()
    }

    fn table(&self) -> String {
        std::fs::read_to_string(self.root.join("policy/draft-block-width.toml")).unwrap()
    }
}

fn kinds(lines: &[Value]) -> Vec<String> {
    lines.iter().map(|l| l["kind"].as_str().unwrap().to_string()).collect()
}

fn assert_refused(o: &Output, needle: &str) {
    assert_eq!(o.status.code(), Some(5), "{}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refused") && err.contains(needle), "{err}");
}

#[test]
fn a_clean_sweep_writes_a_record_and_proposes_the_best_qualified_width() {
    let f = Fixture::new();
    let o = f.sweep(&[]);
    assert!(o.status.success(), "{}", text(&o));
    let lines = f.raw_lines();
    let k = kinds(&lines);
    assert_eq!(k.first().map(String::as_str), Some("sweep"));
    assert_eq!(k.last().map(String::as_str), Some("done"));
    assert_eq!(k.iter().filter(|x| *x == "arm_start").count(), 8);
    // The record names no absolute path of this machine: the runtime, model
    // and prompts relative to the repository (the fixture's root).
    let raw = std::fs::read_to_string(f.out.join("raw.jsonl")).unwrap();
    let root = f.root.canonicalize().unwrap();
    for p in [f.root.display().to_string(), root.display().to_string()] {
        assert!(
            !raw.contains(&p),
            "raw.jsonl names {p}: {}",
            raw.lines().find(|l| l.contains(&p)).unwrap_or_default().chars().take(3000).collect::<String>()
        );
    }
    let s = &lines[0]["settings"];
    assert_eq!(
        (s["runtime"].as_str(), s["target"].as_str(), s["prompts"].as_str()),
        (Some("fake/runtime"), Some("fake/model.gguf"), Some("records/sweep/prompts.jsonl")),
        "{s}"
    );
    assert_eq!(lines[0]["identity"]["models"][0]["path"], "fake/model.gguf");
    // Warm-ups are excluded: 2 prompts x 3 bursts per arm, none with the warm-up rate.
    let reqs: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "request").collect();
    assert_eq!(reqs.len(), 8 * 6);
    assert!(reqs.iter().all(|r| r["decode_tok_per_s"].as_f64().unwrap() < 1e5));
    assert!(reqs.iter().filter(|r| !r["width"].is_null()).all(|r| r["diagnostics_present"] == true));
    // Each arm got explicit settings and only the recorded environment.
    let args1 = std::fs::read_to_string(f.fake.join("args-1")).unwrap();
    for flag in [
        "--json",
        "--drafter ngram",
        "--draft-width 1",
        "--ngram-min 3",
        "--ngram-max 4",
        "--threads 2",
        "--warmup 1",
        "--repeat 3",
        "--max-tokens 8",
    ] {
        assert!(args1.contains(flag), "{flag} missing: {args1}");
    }
    // A classic arm forces classic decoding: without a drafter flag the
    // runtime's policy could speculate.
    let args0 = std::fs::read_to_string(f.fake.join("args-0")).unwrap();
    assert!(args0.trim_end().ends_with("--drafter none"), "{args0}");
    assert!(!args0.contains("--draft-width") && !args0.contains("--ngram-"), "{args0}");
    assert_eq!(lines[0]["settings"]["drafter_settings"], json!({"ngram_min": 3, "ngram_max": 4}));
    let start = lines.iter().find(|l| l["kind"] == "arm_start").unwrap();
    let env0 = std::fs::read_to_string(f.fake.join("env-0")).unwrap();
    for (key, _) in start["env"].as_object().unwrap() {
        assert!(env0.contains(&format!("{key}=")), "{key} recorded but not given");
    }
    assert!(!env0.lines().any(|l| l.starts_with("DRAFTWISE_ALLOW_INEXACT")));
    assert!(f.out.join("logs/arm-000-attempt-0.stdout.jsonl").exists());

    let s = f.summary();
    assert_eq!(s["decision"]["width"], 1);
    assert_eq!(s["drift"], false);
    assert_eq!(s["identical"], true);
    let r1 = s["widths"][0]["ratio"]["ratio"].as_f64().unwrap();
    assert!((r1 - 1.3).abs() < 0.02, "{r1}");
    assert_eq!(s["widths"][0]["ratio"]["rounds"], 2);
    assert_eq!(s["decision"]["tied"], json!([1]));
    assert!(s["data_problems"].as_array().unwrap().is_empty(), "{}", s["data_problems"]);
    // Every arm was watched while it ran (these fake arms end before the first reading).
    let ends: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "arm_end").collect();
    assert!(ends.iter().all(|e| e["contention"]["contended_samples"] == 0), "{ends:?}");
    let record = f.record();
    let rule = record.find("## Decision rule").unwrap();
    assert!(rule < record.find("## Results").unwrap(), "the rule is printed before the results");
    assert!(record.contains("By the decision rule the width is 1"), "{record}");
    // The decision comes first, and the plot is embedded.
    assert!(record.contains("Status: complete: 8 of 8 arms, 0 min"), "the sweep's time is stated");
    let head = record.find("**Decision: width 1**").expect("the decision line");
    assert!(head < record.find("## Decision rule").unwrap() && record.contains("![ratio to classic"), "{record}");
    for placeholder in ["TODO", "TBD", "XXX", "{}", "NaN"] {
        assert!(!record.contains(placeholder), "placeholder {placeholder:?} in the record");
    }
    assert!(f.out.join("summary.csv").exists());
    let svg = std::fs::read_to_string(f.out.join("plot.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("code") && svg.contains("decision: width 1"), "plot");
    // Summaries are reproducible byte for byte.
    let again = f.summary();
    assert_eq!(s, again);

    let before = f.table();
    let o = f.propose(true);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("+width = 1") && out.contains("+record = \"records/sweep\""), "{out}");
    assert_eq!(f.table(), before, "--dry-run writes nothing");
    let o = f.propose(false);
    assert!(o.status.success(), "{}", text(&o));
    let t = policy::table::compile("t", &f.table(), policy::table::RecordCheck::Under(&f.root)).unwrap();
    assert_eq!(t.entries.len(), 1);
    assert_eq!(t.entries[0].drafting, Some(policy::Drafting::Fixed(policy::Width::new(1).unwrap())));
    assert_eq!(t.entries[0].verify_fingerprint, verify_fp());
    assert_eq!(t.entries[0].key.threads, Some(2));
    assert_eq!(t.entries[0].key.host.to_string(), common::host_class());
    assert_eq!(t.entries[0].key.model.parameters, 134_515_008);
    // A prompt file given by path is named relative to the repository, never
    // by its absolute path.
    assert_eq!(t.entries[0].prompts.name, "fake/prompts.jsonl");
    assert_eq!(t.entries[0].drafter_settings, policy::DrafterSettings::ngram(3, 4));
    assert_eq!(t.entries[0].weight_formats, FORMATS);
    assert_eq!(t.entries[0].target_quant_format.as_deref(), Some("gguf"));
    // The chosen width's tokens per verify pass (the fake's 1 + width / 2),
    // for the server's /metrics to set live traffic against.
    assert_eq!(t.entries[0].emitted_per_verify, Some(1.5));
    // The record and the entry name the processor beyond its model name
    // (which hosts of different generations can share).
    if let Some(sig) =
        std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|c| tuner::host::identity::cpu_signature(&c))
    {
        assert!(record.contains(&format!("| cpu signature | {sig} |")), "{record}");
        assert!(t.entries[0].host.contains(&format!("({sig})")), "{}", t.entries[0].host);
    }
    assert!(record.contains("| caches (cpu 0) | "), "{record}");
    // The sweep is in the ledger with its key and decision.
    let ledger = tuner::output::ledger::read(&f.root.join("records")).unwrap();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(
        (ledger[0].folder.as_str(), ledger[0].decision.as_str(), ledger[0].outcome.as_str()),
        ("sweep", "width 1", "complete")
    );
    assert_eq!(ledger[0].key.as_deref(), Some(t.entries[0].key.to_string().as_str()));
    // An earlier sweep of the key that chose otherwise is shown by propose.
    let mut earlier = ledger[0].clone();
    earlier.folder = "2026-01-01-earlier".into();
    earlier.decision = "width 3".into();
    tuner::output::ledger::append(&f.root.join("records"), &earlier).unwrap();
    let o = f.propose(true);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("earlier sweeps of this key") && err.contains("2026-01-01-earlier") && err.contains("DISAGREES"),
        "{}",
        text(&o)
    );
    // Proposing again replaces the entry rather than duplicating it.
    let o = f.propose(false);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("unchanged"));
    let t = policy::table::compile("t", &f.table(), policy::table::RecordCheck::Under(&f.root)).unwrap();
    assert_eq!(t.entries.len(), 1);
}

#[test]
fn a_drifted_host_prints_no_clean_table_and_propose_refuses() {
    let f = Fixture::new();
    // Two bracket arms a side (C C 1 2 C C | C C 2 1 C C): round 1's closing
    // side (the 5th and 6th invocations) runs 30% slower than its opening one.
    f.set_arm(4, &arm(None, 70.0, Spec::default()));
    f.set_arm(5, &arm(None, 70.0, Spec::default()));
    let o = f.sweep(&["--bracket-arms", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    let s = f.summary();
    assert_eq!(s["drift"], true);
    // The sweep's test over both rounds flags it too.
    assert_eq!(s["sweep_drift"]["drifted"], true, "{}", s["sweep_drift"]);
    assert_eq!(s["rounds"][0]["drifted"], true, "{}", s["rounds"][0]);
    assert_eq!(s["rounds"][1]["drifted"], false);
    let d = s["rounds"][0]["test"]["drift"].as_f64().unwrap();
    assert!((d - 0.7).abs() < 0.01, "{d}");
    let record = f.record();
    assert!(record.contains("NOT CLEAN"), "{record}");
    assert!(record.contains("not shown (drift)"));
    // The verdict shows the interval it judged by: round 1's lies beyond
    // the band, round 2's reaches it.
    let row = |round: &str| {
        record.lines().find(|l| l.starts_with(&format!("| {round} |")) && l.contains("drift")).unwrap().to_string()
    };
    let (r1, r2) = (row("1"), row("2"));
    assert!(r1.contains("**drifted** (verdict interval [") && r1.contains("lies beyond the ±2% band"), "{r1}");
    assert!(r2.contains("no drift (verdict interval [") && r2.contains("reaches the ±2% band"), "{r2}");
    let hi = |l: &str| -> f64 {
        l.split("verdict interval [")
            .nth(1)
            .unwrap()
            .split(']')
            .next()
            .unwrap()
            .split(", ")
            .nth(1)
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(hi(&r1) < 1.0 / 1.02, "{r1}");
    assert!(hi(&r2) >= 1.0 / 1.02, "{r2}");
    assert!(record.contains("against both brackets"));
    // A closing side 30% slower is more than two bracket processes of this
    // plan ever differ by (they agree exactly here): refused whatever the
    // choice. And the choice moves too: against round 1's closing side
    // alone width 1 is not credibly above 1.0 (1.86 and 1.30 over two
    // rounds), against the opening sides it is.
    assert_eq!(s["drift_survival"]["survives"], false, "{}", s["drift_survival"]);
    assert_eq!(s["drift_survival"]["size"]["within"], false, "{}", s["drift_survival"]);
    assert!(record.contains("the decision does not survive it"), "{record}");
    let o = f.propose(true);
    assert_refused(&o, "drifted");
    assert_refused(&o, "the decision does not survive it: the drift is larger than the plan's own spread explains");
    assert_refused(&o, "against the opening brackets alone the rule takes width 1");
}

#[test]
fn a_drift_the_decision_survives_is_proposed_with_an_interval_that_holds_both_brackets() {
    let f = Fixture::new();
    // Two bracket arms a side (C C 1 2 C C | C C 2 1 C C); every closing
    // side runs 3% slower than its opening side: a systematic drift, which
    // moves no choice (width 1 is the best and far above 1.0 against
    // either side alone).
    for (n, rate) in [(0, 100.0), (1, 101.0), (4, 97.0), (5, 98.0), (6, 100.0), (7, 101.5), (10, 97.0), (11, 98.5)] {
        f.set_arm(n, &arm(None, rate, Spec::default()));
    }
    let o = f.sweep(&["--bracket-arms", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    let s = f.summary();
    assert_eq!(s["drift"], true, "{}", s["sweep_drift"]);
    let d = &s["drift_survival"];
    assert_eq!(d["survives"], true, "{d}");
    assert_eq!((d["vs_open"]["width"].as_u64(), d["vs_close"]["width"].as_u64()), (Some(1), Some(1)));
    let w1 = &s["widths"][0];
    assert_eq!(w1["width"], 1);
    let iv = |v: &Value| (v[0].as_f64().unwrap(), v[1].as_f64().unwrap());
    let (lo, hi) = iv(&s["decision"]["ratio_interval"]);
    let (open, close) = (iv(&w1["ratio_vs_open"]["interval"]), iv(&w1["ratio_vs_close"]["interval"]));
    assert!(lo <= open.0 && hi >= close.1, "[{lo}, {hi}] against {open:?} and {close:?}");
    assert!(hi - lo > iv(&w1["ratio"]["interval"]).1 - iv(&w1["ratio"]["interval"]).0);
    let record = f.record();
    assert!(record.contains("**The host drifted, and the decision survives it**"), "{record}");
    assert!(
        record.contains("The decision survives the drift: against the opening brackets alone the rule takes width 1")
    );
    // Proposed: the entry's interval, pooled from this record's rounds with
    // half the one-sided gap as widening, holds both one-sided ratios.
    let o = f.propose(false);
    assert!(o.status.success(), "{}", text(&o));
    let t = policy::table::compile("t", &f.table(), policy::table::RecordCheck::Under(&f.root)).unwrap();
    let e = &t.entries[0];
    assert_eq!(e.drafting.map(|d| d.max().get()), Some(1));
    let [elo, ehi] = e.ratio_interval;
    let (ro, rc) = (w1["ratio_vs_open"]["ratio"].as_f64().unwrap(), w1["ratio_vs_close"]["ratio"].as_f64().unwrap());
    assert!(elo <= ro.min(rc) && ehi >= ro.max(rc), "entry [{elo}, {ehi}] against {ro} and {rc}");
    assert!(f.table().contains("the host drifted and the choice survives it"), "{}", f.table());
}

#[test]
fn one_round_states_no_interval_and_is_refused() {
    let f = Fixture::new();
    assert!(f.sweep(&["--rounds", "1"]).status.success());
    let s = f.summary();
    assert_eq!(s["complete_rounds"], 1);
    assert!(s["widths"][0]["ratio"]["interval"].is_null());
    assert_eq!(s["drift_unjudged"], true, "one bracket arm a side and one round: no variance to judge by");
    assert!(f.record().contains("**cannot judge**"));
    assert_refused(&f.propose(true), "at least two");
}

#[test]
fn drift_that_cannot_be_judged_is_refused() {
    let f = Fixture::new();
    // One width and one bracket arm a side: no within-side spread and no
    // width x round interaction to estimate the variance from.
    assert!(f.sweep(&["--widths", "1"]).status.success());
    let s = f.summary();
    assert_eq!(s["drift"], false);
    assert_eq!(s["drift_unjudged"], true);
    assert_refused(&f.propose(true), "drift cannot be ruled out");
}

#[test]
fn a_small_closing_disagreement_is_not_drift_but_widens_the_interval() {
    let f = Fixture::new();
    let clean = {
        assert!(f.sweep(&[]).status.success());
        f.summary()
    };
    let g = Fixture::new();
    // Round 1 closes 1% slower: under the 2% tolerance.
    g.set_arm(3, &arm(None, 99.0, Spec::default()));
    assert!(g.sweep(&[]).status.success());
    let s = g.summary();
    assert_eq!(s["drift"], false, "{}", s["rounds"]);
    let width = |v: &Value| {
        let iv = &v["widths"][0]["ratio"]["interval"];
        iv[1].as_f64().unwrap() - iv[0].as_f64().unwrap()
    };
    assert!(s["widths"][0]["ratio"]["drift_widening_log"].as_f64().unwrap() > 0.0);
    assert!(width(&s) > width(&clean), "{} vs {}", width(&s), width(&clean));
}

#[test]
fn a_declined_arm_is_not_a_measurement_and_cannot_be_proposed() {
    let f = Fixture::new();
    f.set_width(Some(1), &arm(Some(1), 150.0, Spec { declined: true, ..Spec::default() }));
    assert!(f.sweep(&[]).status.success());
    let s = f.summary();
    // The declined width is left out of the decision, and still refused: it could have been the best.
    assert_eq!(s["decision"]["width"], 2);
    assert!(s["widths"][0]["not_a_measurement"].as_str().unwrap().contains("declined"));
    assert!(f.record().contains("**not a measurement**"));
    assert_refused(&f.propose(true), "not measurements");
}

/// Width 1, its arms crafted as `spec`, is not a measurement: the summary
/// says `why`, and so does the refusal to propose it.
fn assert_width_1_is_not_a_measurement(spec: Spec, why: &str) {
    let f = Fixture::new();
    f.set_width(Some(1), &arm(Some(1), 150.0, spec));
    assert!(f.sweep(&[]).status.success());
    let s = f.summary();
    assert!(s["widths"][0]["not_a_measurement"].as_str().unwrap().contains(why), "{s}");
    assert_refused(&f.propose(true), why);
}

#[test]
fn an_arm_whose_every_request_ran_zero_rounds_is_not_a_measurement() {
    assert_width_1_is_not_a_measurement(Spec { zero_rounds: true, ..Spec::default() }, "zero");
}

#[test]
fn an_arm_without_diagnostics_is_not_a_measurement() {
    assert_width_1_is_not_a_measurement(Spec { no_diagnostics: true, ..Spec::default() }, "no speculative diagnostics");
}

#[test]
fn output_that_differs_from_classic_names_the_first_token_and_is_refused() {
    let f = Fixture::new();
    f.set_width(Some(2), &arm(Some(2), 120.0, Spec { differ_at: Some(3), ..Spec::default() }));
    assert!(f.sweep(&[]).status.success());
    let s = f.summary();
    assert_eq!(s["identical"], false);
    let d = &s["widths"][1]["differences"];
    assert_eq!(d.as_array().unwrap().len(), 6, "every p2 burst of width 2, both rounds");
    assert_eq!(d[0]["first_differing_token"], 3);
    assert_eq!(d[0]["prompt_id"], "p2");
    assert!(f.record().contains("**Outputs differ.**"));
    assert_refused(&f.propose(true), "differs from classic");
}

#[test]
fn the_nvrm_projection_halts_before_an_arm_and_writes_the_halt_into_raw_data() {
    let f = Fixture::new();
    // The first arm makes the driver log one NV_ERR_NO_MEMORY (kernel facility, record #1).
    f.set_hook(0, "echo '3,1,1000000,-;NVRM: GPU0 allocation failed: NV_ERR_NO_MEMORY' >> \"$D/kmsg\"\n");
    let o = f.sweep(&["--nvrm-budget", "3"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let lines = f.raw_lines();
    let end0 = lines.iter().find(|l| l["kind"] == "arm_end").unwrap();
    assert_eq!(end0["nvrm_delta"], 1);
    let halt = lines.iter().find(|l| l["kind"] == "halt").expect("a halt line");
    assert_eq!(halt["halt"], "nvrm_budget");
    assert_eq!(halt["arm"], 1);
    // now 1 + worst delta 1 x 7 arms left = 8 >= 3.
    assert_eq!(halt["nvrm_projected"], 8);
    assert_eq!(kinds(&lines).iter().filter(|k| *k == "arm_start").count(), 1, "arm 1 never started");
    assert!(f.record().contains("**incomplete**"));
    assert_refused(&f.propose(true), "incomplete");
}

#[test]
fn a_crash_mid_arm_halts_with_the_partial_data_and_resume_reruns_the_arm() {
    let f = Fixture::new();
    // The second invocation prints its startup and two requests, then dies.
    let full = arm(Some(1), 130.0, Spec::default());
    let head: String = full.lines().take(7).map(|l| format!("{l}\n")).collect();
    std::fs::write(f.fake.join("partial.jsonl"), head).unwrap();
    f.set_hook(1, "cat \"$D/partial.jsonl\"; echo 'thread main panicked' >&2; exit 101\n");
    let o = f.sweep(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let lines = f.raw_lines();
    let end = lines.iter().find(|l| l["kind"] == "arm_end" && l["arm"] == 1).unwrap();
    assert_eq!(end["ok"], false);
    assert_eq!(end["exit_code"], 101);
    assert!(end["error"].as_str().unwrap().contains("exited"));
    assert!(lines.iter().any(|l| l["kind"] == "halt" && l["halt"] == "arm_failed"));
    let stderr_log = std::fs::read_to_string(f.out.join("logs/arm-001-attempt-0.stderr.log")).unwrap();
    assert!(stderr_log.contains("panicked"));
    // The halted sweep is in the ledger, with the hash of what it left.
    let ledger = tuner::output::ledger::read(&f.root.join("records")).unwrap();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(ledger[0].folder, "sweep");
    assert!(ledger[0].outcome.starts_with("halted (ArmFailed)"), "{:?}", ledger[0]);
    let raw = std::fs::read(f.out.join("raw.jsonl")).unwrap();
    assert_eq!(ledger[0].raw_sha256.as_deref(), Some(runtime::events::sha256_hex(&raw).as_str()));

    let o = f.resume();
    assert!(o.status.success(), "{}", text(&o));
    let ledger = tuner::output::ledger::read(&f.root.join("records")).unwrap();
    assert_eq!(ledger.len(), 2, "the resumed sweep adds its own line: {ledger:?}");
    assert_eq!(ledger[1].outcome, "complete");
    let lines = f.raw_lines();
    assert!(lines.iter().any(|l| l["kind"] == "resume"));
    assert!(lines.iter().any(|l| l["kind"] == "arm_start" && l["arm"] == 1 && l["attempt"] == 1));
    let s = f.summary();
    assert_eq!(s["complete"], true);
    // Only the complete attempt counts: 2 prompts x 3 bursts x 2 rounds.
    assert_eq!(s["widths"][0]["requests"], 12);
    assert!(f.propose(true).status.success());
}

#[test]
fn an_interrupted_sweep_leaves_valid_data_and_resumes() {
    let f = Fixture::new();
    // The third invocation kills the tuner itself (SIGKILL: no cleanup runs).
    f.set_hook(2, "kill -9 $PPID; sleep 1; exit 1\n");
    let o = f.sweep(&[]);
    assert!(!o.status.success(), "{}", text(&o));
    let lines = f.raw_lines();
    assert!(!kinds(&lines).contains(&"done".to_string()));
    // What an interrupted write leaves: a partial last line.
    let mut raw = std::fs::OpenOptions::new().append(true).open(f.out.join("raw.jsonl")).unwrap();
    std::io::Write::write_all(&mut raw, b"{\"kind\":\"request\",\"arm\":2,\"pro").unwrap();
    drop(raw);
    let s = f.tuner(&["summarize", f.out.to_str().unwrap(), "--json"], &[]);
    assert!(s.status.success(), "a partial last line is tolerated: {}", text(&s));
    assert!(String::from_utf8_lossy(&s.stderr).contains("partial last line"));

    let o = f.resume();
    assert!(o.status.success(), "{}", text(&o));
    let lines = f.raw_lines();
    let resume = lines.iter().find(|l| l["kind"] == "resume").unwrap();
    assert_eq!(resume["completed_arms"], json!([0, 1]));
    assert!(resume["dropped_partial_line_bytes"].as_u64().unwrap() > 0);
    assert_eq!(kinds(&lines).last().map(String::as_str), Some("done"));
    let s = f.summary();
    assert_eq!(s["complete"], true);
    assert_eq!(s["decision"]["width"], 1);
    // A finished sweep cannot be resumed again.
    let o = f.resume();
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("complete"));
}

#[test]
fn a_gate_source_accepted_as_unknown_is_recorded_and_refused() {
    let f = Fixture::new();
    let missing = f.fake.join("no-such-kmsg");
    let mut args = vec!["sweep".to_string()];
    args.extend(f.base_args());
    args.extend(["--widths", "1", "--rounds", "2", "--bursts", "3", "--bracket-bursts", "3"].map(String::from));
    args.extend(fake_gate().into_iter().chain(["--accept-unknown", "nvrm"]).map(String::from));
    args.extend(exclude_other_runtimes());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = f.tuner(&args, &[("DRAFTWISE_TUNER_NVRM_LOG", missing.to_str().unwrap())]);
    assert!(o.status.success(), "{}", text(&o));
    let s = f.summary();
    assert_eq!(s["accepted_unknown"][0]["sources"], json!(["nvrm"]));
    assert!(f.record().contains("accepted as unknown"));
    assert_refused(&f.propose(true), "accepted as unknown");
}

#[test]
fn a_gate_that_keeps_waiting_stops_the_sweep_with_a_halt_line() {
    let f = Fixture::new();
    // A CPU-bound process the test starts (not the tuner's descendant).
    let mut hog = Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    // The later flags override the fixture's relaxed CPU threshold.
    let o = f.sweep(&["--cpu-threshold", "20", "--cpu-window-ms", "500", "--gate-wait", "0"]);
    let _ = hog.kill();
    let _ = hog.wait();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let lines = f.raw_lines();
    let halt = lines.iter().find(|l| l["kind"] == "halt").expect("a halt line");
    assert_eq!(halt["halt"], "gate_timeout");
    assert!(halt["message"].as_str().unwrap().contains("--resume"), "{halt}");
    assert!(!kinds(&lines).contains(&"arm_start".to_string()), "no arm ran");
}

#[test]
fn malformed_raw_data_and_a_bad_table_are_clear_errors() {
    let f = Fixture::new();
    assert!(f.sweep(&[]).status.success());
    let raw = f.out.join("raw.jsonl");
    let good = std::fs::read_to_string(&raw).unwrap();
    let mut lines: Vec<&str> = good.lines().collect();
    lines.insert(3, "{\"kind\": \"request\", \"arm\": \"three\"}");
    std::fs::write(&raw, lines.join("\n") + "\n").unwrap();
    let o = f.tuner(&["summarize", f.out.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("raw.jsonl:4") && !err.contains("panicked"), "{err}");

    std::fs::write(&raw, &good).unwrap();
    std::fs::write(f.root.join("policy/draft-block-width.toml"), "schema_version = 3\n[[entry]]\ndrafter = 3\n")
        .unwrap();
    let o = f.propose(true);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("draft-block-width.toml") && !err.contains("panicked"), "{err}");
    // A schema-1 table is refused with how to migrate it.
    std::fs::write(f.root.join("policy/draft-block-width.toml"), "schema_version = 1\n").unwrap();
    let o = f.propose(true);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("schema_version 1 is no longer compiled") && err.contains("Migrate"), "{err}");

    // A record outside records/ cannot be cited.
    std::fs::write(f.root.join("policy/draft-block-width.toml"), empty_table()).unwrap();
    let elsewhere = f.root.join("elsewhere");
    std::fs::rename(&f.out, &elsewhere).unwrap();
    let o =
        f.tuner(&["propose", elsewhere.to_str().unwrap(), "--dry-run", "--allow-loose-gate", "--allow-weak-plan"], &[]);
    assert_refused(&o, "records/");
}

/// Rewrites raw.jsonl line by line (1-based line numbers): `edit` changes a
/// line in place, or returns the lines that replace it (none: it is dropped).
fn doctor(f: &Fixture, mut edit: impl FnMut(usize, &mut Value) -> Option<Vec<Value>>) {
    let raw = f.out.join("raw.jsonl");
    let text = std::fs::read_to_string(&raw).unwrap();
    let mut out = String::new();
    for (i, l) in text.lines().enumerate() {
        let mut v: Value = serde_json::from_str(l).unwrap();
        match edit(i + 1, &mut v) {
            Some(vs) => vs.iter().for_each(|x| out.push_str(&(x.to_string() + "\n"))),
            None => out.push_str(&(v.to_string() + "\n")),
        }
    }
    std::fs::write(&raw, out).unwrap();
}

/// What each of a summary's data problems says.
fn problems(s: &Value) -> Vec<&str> {
    s["data_problems"].as_array().unwrap().iter().map(|p| p["what"].as_str().unwrap()).collect()
}

/// The summary names a data problem saying `what`, and `propose` refuses
/// saying `refusal`.
fn assert_data_problem_refused(f: &Fixture, what: &str, refusal: &str) {
    let s = f.summary();
    let whats = problems(&s);
    assert!(whats.iter().any(|w| w.contains(what)), "{whats:?}");
    assert_refused(&f.propose(true), refusal);
}

/// The first request line's 1-based number.
fn first_request_line(f: &Fixture) -> usize {
    f.raw_lines().iter().position(|l| l["kind"] == "request").unwrap() + 1
}

#[test]
fn a_token_hash_that_does_not_match_its_token_ids_is_named_and_refused() {
    let f = Fixture::new();
    assert!(f.sweep(&[]).status.success());
    let at = first_request_line(&f);
    doctor(&f, |n, v| {
        if n == at {
            v["token_ids"][0] = json!(7);
        }
        None
    });
    let s = f.summary();
    let p = &s["data_problems"][0];
    assert_eq!(p["line"], at);
    assert!(p["what"].as_str().unwrap().contains("token_ids_sha256"), "{p}");
    assert!(f.record().contains(&format!("raw.jsonl:{at}")));
    assert_refused(&f.propose(true), &format!("raw.jsonl:{at}"));
}

#[test]
fn a_duplicated_request_line_is_named_and_refused() {
    let f = Fixture::new();
    assert!(f.sweep(&[]).status.success());
    let at = first_request_line(&f);
    doctor(&f, |n, v| (n == at).then(|| vec![v.clone(), v.clone()]));
    assert_data_problem_refused(&f, "duplicated request", "duplicated request");
}

#[test]
fn an_arm_that_ended_ok_without_request_lines_is_named_and_refused() {
    let f = Fixture::new();
    assert!(f.sweep(&[]).status.success());
    // Arm 1's request lines vanish; its arm_end still says ok.
    doctor(&f, |_, v| (v["kind"] == "request" && v["arm"] == 1).then(Vec::new));
    assert_data_problem_refused(&f, "arm 1 ended ok but has no request lines", "no request lines");
}

#[test]
fn a_request_count_that_does_not_match_the_plan_is_named_and_refused() {
    let f = Fixture::new();
    assert!(f.sweep(&[]).status.success());
    // One request of arm 2 dropped, and arm_end counts fixed to match: the plan still says 6.
    let mut dropped = false;
    doctor(&f, |_, v| {
        if v["kind"] == "request" && v["arm"] == 2 && !dropped {
            dropped = true;
            return Some(Vec::new());
        }
        if v["kind"] == "arm_end" && v["arm"] == 2 {
            v["requests"] = json!(5);
        }
        None
    });
    assert_data_problem_refused(&f, "arm 2 has 5 request lines; the plan gives 6", "the plan gives 6");
}

#[test]
fn a_plan_that_does_not_match_the_settings_is_named_and_refused() {
    let f = Fixture::new();
    assert!(f.sweep(&[]).status.success());
    doctor(&f, |n, v| {
        if n == 1 {
            v["settings"]["rounds"] = json!(3);
        }
        None
    });
    let s = f.summary();
    assert!(s["data_problems"][0]["what"].as_str().unwrap().contains("is not the plan its settings give"), "{s}");
    assert_refused(&f.propose(true), "is not the plan its settings give");
}

#[test]
fn a_width_whose_rates_are_invalid_is_not_a_measurement_and_is_refused() {
    let f = Fixture::new();
    // Three widths, so that drift stays judgeable from the two valid ones.
    f.set_width(Some(3), &arm(Some(3), 110.0, Spec::default()));
    assert!(f.sweep(&["--widths", "1,2,3"]).status.success());
    // Every width-1 request gets a missing rate (a zero decode time, so the
    // row agrees with itself) or a negative one: width 1 would drop out and
    // width 2 be chosen, silently, without the check.
    doctor(&f, |_, v| {
        if v["kind"] == "request" && v["width"] == 1 {
            v["decode_tok_per_s"] = Value::Null;
            v["decode_ms"] = json!(0.0);
        }
        None
    });
    let s = f.summary();
    let why = s["widths"][0]["not_a_measurement"].as_str().unwrap();
    assert!(why.contains("missing, non-finite or implausible"), "{why}");
    assert_eq!(s["widths"][0]["invalid_rate_requests"], 12);
    assert_eq!(s["drift_unjudged"], false);
    assert_eq!(s["decision"]["width"], 2);
    assert_refused(&f.propose(true), "not measurements");
    // A negative rate is also not what the row's counts and times give: a
    // data problem, refused before the widths are looked at.
    doctor(&f, |_, v| {
        if v["kind"] == "request" && v["width"] == 1 && v["burst"] == 0 {
            v["decode_tok_per_s"] = json!(-5.0);
        }
        None
    });
    assert_refused(&f.propose(true), "is not its own decode_tokens / decode_ms");
}

#[test]
fn contention_during_an_arm_reruns_it_and_the_record_says_why() {
    let f = Fixture::new();
    // The second invocation (arm 1) starts a CPU hog outside the tuner's
    // process tree (setsid -f: reparented, not a descendant) and runs long
    // enough for the gate to see it while the arm runs.
    f.set_hook(1, "setsid -f sh -c 'timeout 6 sh -c \"while :; do :; done\"' </dev/null >/dev/null 2>&1; sleep 4\n");
    let o = f.sweep(&["--cpu-threshold", "60", "--cpu-window-ms", "300"]);
    assert!(o.status.success(), "{}", text(&o));
    let lines = f.raw_lines();
    let first = lines.iter().find(|l| l["kind"] == "arm_end" && l["arm"] == 1 && l["attempt"] == 0).unwrap();
    assert_eq!(first["ok"], false, "{first}");
    assert!(first["contention"]["contended_samples"].as_u64().unwrap() >= 1, "{first}");
    assert!(first["error"].as_str().unwrap().contains("contention during the arm"), "{first}");
    assert!(lines.iter().any(|l| l["kind"] == "arm_end" && l["arm"] == 1 && l["attempt"] == 1 && l["ok"] == true));
    let s = f.summary();
    assert_eq!(s["contention_reruns"][0]["arm"], 1);
    assert!(f.record().contains("ran through contention and were re-run"));
    assert_eq!(s["complete"], true);
}

#[test]
fn rounds_auto_stops_when_the_decision_is_settled_and_says_why() {
    let f = Fixture::new();
    // The fixture's rates are the same every round: width 1 (the narrowest)
    // is chosen with an interval above 1.0 after the minimum of 2 rounds.
    let o = f.sweep(&["--rounds", "auto", "--auto-min-rounds", "2", "--auto-max-rounds", "5"]);
    assert!(o.status.success(), "{}", text(&o));
    let lines = f.raw_lines();
    let settled = lines.iter().find(|l| l["kind"] == "settled").expect("a settled line");
    assert_eq!((settled["rounds"].as_u64(), settled["settled"].as_bool()), (Some(2), Some(true)), "{settled}");
    assert_eq!(kinds(&lines).last().map(String::as_str), Some("done"));
    assert_eq!(kinds(&lines).iter().filter(|k| *k == "arm_start").count(), 8, "rounds 3..5 never ran");
    let s = f.summary();
    assert_eq!(
        (s["complete"].as_bool(), s["arms_planned"].as_u64(), s["complete_rounds"].as_u64()),
        (Some(true), Some(8), Some(2))
    );
    assert!(f.record().contains("It stopped after 2 round(s)"), "{}", f.record());
    assert!(f.propose(true).status.success());
}

#[test]
fn rounds_auto_runs_to_its_maximum_when_the_decision_is_not_settled() {
    let f = Fixture::new();
    // A width that is not a measurement never lets the decision settle.
    f.set_width(Some(1), &arm(Some(1), 150.0, Spec { declined: true, ..Spec::default() }));
    let o = f.sweep(&["--rounds", "auto", "--auto-min-rounds", "2", "--auto-max-rounds", "3"]);
    assert!(o.status.success(), "{}", text(&o));
    let lines = f.raw_lines();
    let settled = lines.iter().find(|l| l["kind"] == "settled").expect("a settled line");
    assert_eq!((settled["rounds"].as_u64(), settled["settled"].as_bool()), (Some(3), Some(false)), "{settled}");
    assert!(settled["reason"].as_str().unwrap().contains("maximum"));
    assert_eq!(kinds(&lines).iter().filter(|k| *k == "arm_start").count(), 12);
}

#[test]
fn an_off_decision_with_a_width_that_is_not_a_measurement_is_refused() {
    let f = Fixture::new();
    // Width 2 is slower than classic; width 1 declined: `off` is not shown for width 1.
    f.set_width(Some(2), &arm(Some(2), 80.0, Spec::default()));
    f.set_width(Some(1), &arm(Some(1), 150.0, Spec { declined: true, ..Spec::default() }));
    f.set_width(Some(3), &arm(Some(3), 70.0, Spec::default()));
    assert!(f.sweep(&["--widths", "1,2,3"]).status.success());
    let s = f.summary();
    assert!(s["decision"]["width"].is_null(), "{}", s["decision"]);
    assert_eq!(s["drift_unjudged"], false);
    assert_refused(&f.propose(true), "is `off`, but width(s) 1");
}

#[test]
fn every_number_a_sweep_is_given_is_bounded_with_a_clear_error() {
    let f = Fixture::new();
    for (args, needle) in [
        (&["--rounds", "65"][..], "--rounds 65 is out of range 1..=64"),
        (&["--bursts", "0"][..], "--bursts 0 is out of range 1..=64"),
        (&["--bracket-arms", "17"][..], "--bracket-arms 17 is out of range 1..=16"),
        (&["--bracket-bursts", "65"][..], "--bracket-bursts 65 is out of range 1..=64"),
        (&["--warmup", "17"][..], "--warmup 17 is out of range 0..=16"),
        (&["--max-tokens", "4097"][..], "--max-tokens 4097 is out of range 1..=4096"),
        (&["--rounds", "many"][..], "give a number of rounds or `auto`"),
        (&["--rounds", "auto", "--auto-min-rounds", "1"][..], "the minimum (1) must be at least 2"),
        (&["--rounds", "auto", "--auto-min-rounds", "6", "--auto-max-rounds", "5"][..], "at most the maximum (5)"),
        (&["--rounds", "auto", "--auto-budget", "0"][..], "--auto-budget 0"),
        (&["--adaptive-arm", "on"][..], "--cost-contexts none measures none"),
        (&["--adaptive-arm", "maybe"][..], "give on or off"),
    ] {
        let o = f.sweep(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(needle) && !err.contains("panicked"), "{args:?}: {err}");
        assert!(!f.out.join("raw.jsonl").exists(), "{args:?}: nothing is written");
    }
}

#[test]
fn an_arm_that_runs_through_contention_on_every_attempt_halts_the_sweep() {
    let f = Fixture::new();
    // Invocations 1, 2 and 3 are the three attempts of arm 1; each starts a
    // hog outside the tuner's process tree while it runs.
    for n in 1..=3 {
        f.set_hook(
            n,
            "setsid -f sh -c 'timeout 6 sh -c \"while :; do :; done\"' </dev/null >/dev/null 2>&1; sleep 4\n",
        );
    }
    let o = f.sweep(&["--cpu-threshold", "60", "--cpu-window-ms", "300"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let lines = f.raw_lines();
    let ends: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "arm_end" && l["arm"] == 1).collect();
    assert_eq!(ends.len(), 3, "three attempts, each kept");
    assert!(
        ends.iter().all(|e| e["ok"] == false && e["contention"]["contended_samples"].as_u64() >= Some(1)),
        "{ends:?}"
    );
    let halt = lines.iter().find(|l| l["kind"] == "halt").expect("a halt line");
    assert_eq!(halt["halt"], "contention");
    assert!(halt["message"].as_str().unwrap().contains("--resume"), "{halt}");
    assert_refused(&f.propose(true), "incomplete");
}

#[test]
fn resume_refuses_a_model_file_that_is_not_the_recorded_one() {
    let f = Fixture::new();
    // The second invocation dies, so the sweep halts and can be resumed.
    f.set_hook(1, "echo 'thread main panicked' >&2; exit 101\n");
    let o = f.sweep(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // The record names the model `fake/model.gguf`; another file takes its place.
    std::fs::write(f.fake.join("model.gguf"), b"another model").unwrap();
    std::fs::remove_file(f.fake.join("arm-1.sh")).unwrap();
    let o = f.resume();
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("it is another file") && err.contains("fake/model.gguf"), "{}", text(&o));
}
