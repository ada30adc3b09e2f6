//! The measured default as an operator gets it: no `--drafter`, the policy
//! decides whether to speculate, with which drafter, width and settings.
//!
//! The decisions run through the runtime's own setup
//! (`Speculation::resolve`) on the real default model with tables written
//! here, keyed to this host (its device class, the model's quantization and
//! weight formats, this build's fingerprint), so each case holds on any host
//! CI runs on. The binary is then checked to do what the compiled table
//! says, and byte-identical output is checked either way.

use draftwise_tests::{bin, json_lines, model_path, output_text, run};
use policy::table::{RecordCheck, Table, compile};
use policy::{DeviceClass, DrafterKind, DrafterSettings, Resolver, Run, Width};
use runtime::engine::{Engine, NoSink};
use runtime::sampling::SamplingParams;
use runtime::speculative::setup::{Decoding, Speculation, SpeculationSettings};
use std::process::Command;

/// The default model, loaded once for this binary, on 2 threads.
fn engine() -> &'static Engine {
    draftwise_tests::default_engine()
}

fn device_class() -> DeviceClass {
    DeviceClass::parse(&engine().loaded.model.device_class(engine().family)).expect("a device class")
}

fn fingerprint(device: &DeviceClass, formats: Option<&[String]>) -> String {
    runtime::policy::verify_fingerprint(device, formats)
}

fn width(n: usize) -> Option<Width> {
    Some(Width::new(n).unwrap())
}

/// A CPU class that is not this host's.
fn another_host() -> &'static str {
    if runtime::policy::host_class_here().as_str() == "intel-sapphire-rapids" {
        "amd-zen5"
    } else {
        "intel-sapphire-rapids"
    }
}

/// One entry keyed to this host and model at `threads`, measured by this
/// build, with ngram settings 2..=5 (not the runtime's defaults, so a test
/// sees whose settings run).
fn entry(width: &str, ratio: f64, interval: [f64; 2], threads: usize) -> String {
    entry_on(runtime::policy::host_class_here().as_str(), width, ratio, interval, threads)
}

/// [`entry`] measured on the CPU class `host`.
fn entry_on(host: &str, width: &str, ratio: f64, interval: [f64; 2], threads: usize) -> String {
    let e = engine();
    let formats: Vec<String> = e.loaded.info.weight_formats.iter().map(|f| format!("\"{f}\"")).collect();
    let device = device_class();
    let m = e.loaded.info.model_class();
    format!(
        "[[entry]]\ndrafter = \"ngram\"\ndevice_class = \"{device}\"\nhost_class = \"{host}\"\n\
         target_quant = \"{}\"\nthreads = {threads}\n\
         model = {{ architecture = \"{}\", parameters = {}, file = \"{}\", sha256 = \"{}\" }}\n\
         prompts = {{ name = \"prompts/sweep.jsonl\", sha256 = \"{}\" }}\n\
         drafter_settings = {{ ngram_min = 2, ngram_max = 5 }}\nweight_formats = [{}]\nwidth = {width}\n\
         record = \"records/test-record\"\ndate = 2026-12-01\nratio = {ratio}\nratio_interval = [{}, {}]\n\
         host = \"test\"\nverify_fingerprint = \"{}\"\n",
        e.loaded.info.quant.class,
        m.architecture,
        m.parameters,
        model_path().file_name().unwrap().to_str().unwrap(),
        "0".repeat(64),
        "0".repeat(64),
        formats.join(", "),
        interval[0],
        interval[1],
        fingerprint(&device, Some(&e.loaded.info.weight_formats)),
    )
}

fn table(entries: &[String]) -> Table {
    compile("test.toml", &format!("schema_version = 3\n\n{}", entries.join("\n")), RecordCheck::Skip)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn decide(t: &Table, args: &SpeculationSettings) -> Decoding {
    Speculation::resolve(args, engine(), &Resolver { table: t, fingerprint: &fingerprint }).expect("resolves")
}

fn no_flags() -> SpeculationSettings {
    SpeculationSettings::default()
}

/// Token ids of a greedy run of a repetitive prompt, through the request
/// path `generate` and `serve` use.
fn tokens(d: &mut Decoding) -> Vec<u32> {
    let e = engine();
    let prompt = e.loaded.tokenizer.encode("one two three four five, one two three four five, one two").unwrap();
    let sampling = SamplingParams { temperature: 0.0, ..SamplingParams::default() };
    let tag = runtime::request::Tag { id: "p", warmup: false, repeat: 0 };
    let (g, _) =
        runtime::request::decode(e, d.speculation.as_mut(), &prompt, 32, &sampling, &mut NoSink, tag).expect("decodes");
    g.token_ids
}

#[test]
fn a_measured_entry_turns_speculation_on_with_its_drafter_width_and_settings() {
    let t = table(&[entry("3", 1.2, [1.1, 1.3], 2)]);
    let mut d = decide(&t, &no_flags());
    let s = d.speculation.as_ref().expect("the policy turned speculation on");
    assert_eq!((s.kind, s.width), (DrafterKind::Ngram, width(3)));
    assert_eq!(s.settings, DrafterSettings::ngram(2, 5), "the entry's settings run, not the defaults");
    assert_eq!(d.drafter_from(), "policy");
    let why = &d.resolution.width_from;
    assert!(why.starts_with("speculation on by the policy (no --drafter): measured for ngram on"), "{why}");
    assert!(
        why.contains("at 2 threads (ngram_min 2, ngram_max 5): 1.20x classic") && why.contains("records/test-record"),
        "{why}"
    );
    assert!(s.probe.as_ref().is_some_and(|p| p.passed));
    // The entry that decided is the resolution's (its tokens per verify
    // pass reach the startup event and /metrics); this one predates the field.
    assert_eq!(
        d.resolution.entry().map(|e| (e.record.as_str(), e.emitted_per_verify)),
        Some(("records/test-record", None))
    );
    let with = table(&[entry("3", 1.2, [1.1, 1.3], 2).replace("host =", "emitted_per_verify = 2.5\nhost =")]);
    assert_eq!(decide(&with, &no_flags()).resolution.entry().and_then(|e| e.emitted_per_verify), Some(2.5));
    // Speculation changes speed only: the tokens are classic decoding's.
    let spec = tokens(&mut d);
    let mut classic = decide(&t, &SpeculationSettings { drafter: Some("none".into()), ..no_flags() });
    assert!(classic.speculation.is_none());
    assert_eq!(classic.resolution.width_from, "speculation off: --drafter none");
    assert!(classic.resolution.entry().is_none());
    assert_eq!(spec, tokens(&mut classic));
}

#[test]
fn at_another_thread_count_decoding_is_classic_and_the_reason_names_both_counts() {
    let t = table(&[entry("3", 1.2, [1.1, 1.3], 1)]);
    let d = decide(&t, &no_flags());
    assert!(d.speculation.is_none());
    assert_eq!(d.drafter_from(), "policy");
    let why = &d.resolution.width_from;
    assert!(why.starts_with("speculation off by the policy (no --drafter): no measurement for ngram on"), "{why}");
    assert!(why.contains("target at 2 threads: the table measured it at 1 thread (records/test-record) only"), "{why}");
}

#[test]
fn an_off_entry_keeps_classic_decoding() {
    let t = table(&[entry("\"off\"", 0.9, [0.85, 0.95], 2)]);
    let d = decide(&t, &no_flags());
    assert!(d.speculation.is_none());
    let why = &d.resolution.width_from;
    assert!(why.contains("measured off for ngram") && why.contains("speculation ran 0.90x classic"), "{why}");
    assert!(d.summary().starts_with("classic decoding: "), "{}", d.summary());
}

#[test]
fn a_stale_entry_or_none_keeps_classic_decoding() {
    let stale = entry("3", 1.2, [1.1, 1.3], 2)
        .replace(&fingerprint(&device_class(), Some(&engine().loaded.info.weight_formats)), "0123456789abcdef");
    let d = decide(&table(&[stale]), &no_flags());
    assert!(d.speculation.is_none());
    assert!(d.resolution.width_from.contains("is stale: measured with verify-path fingerprint 0123456789abcdef"));
    let d = decide(&table(&[]), &no_flags());
    assert!(d.speculation.is_none());
    assert!(d.resolution.width_from.contains("no measurement for a weight-free drafter (ngram, layerskip, suffix)"));
}

#[test]
fn explicit_flags_still_win_over_the_policy() {
    let t = table(&[entry("3", 1.2, [1.1, 1.3], 2)]);
    // A width flag decides the width; the drafter's settings are then the defaults.
    let d =
        decide(&t, &SpeculationSettings { drafter: Some("ngram".into()), draft_width: Some("5".into()), ..no_flags() });
    let s = d.speculation.as_ref().unwrap();
    assert_eq!((s.width, d.drafter_from()), (width(5), "flag"));
    assert_eq!(s.settings, DrafterSettings::ngram(3, 4));
    // A named drafter without a width takes the entry, with its settings.
    let d = decide(&t, &SpeculationSettings { drafter: Some("ngram".into()), ..no_flags() });
    let s = d.speculation.as_ref().unwrap();
    assert_eq!((s.width, s.settings.clone()), (width(3), DrafterSettings::ngram(2, 5)));
    // Settings other than the entry's: not the entry's measurement, so the
    // per-kind width, and the runtime's defaults fill what was not given.
    let d = decide(&t, &SpeculationSettings { drafter: Some("ngram".into()), ngram_max: Some(4), ..no_flags() });
    let s = d.speculation.as_ref().unwrap();
    assert_eq!((s.width, s.settings.clone()), (width(4), DrafterSettings::ngram(3, 4)));
    assert!(d.resolution.width_from.contains("other drafter settings: ngram_max 4 (measured 5)"));
    // Flags that only make sense with a drafter are refused without one.
    let e = Speculation::resolve(
        &SpeculationSettings { ngram_min: Some(2), ..no_flags() },
        engine(),
        &Resolver { table: &t, fingerprint: &fingerprint },
    )
    .err()
    .expect("refused");
    assert!(e.to_string().contains("need --drafter"), "{e}");
}

/// The binary without flags does what the compiled table says for this
/// host, says so in its `startup` event, and emits classic decoding's
/// tokens; at 1 thread (the committed entries are measured at 2) it decodes
/// classically and says no measurement exists for 1 thread.
#[test]
fn generate_without_flags_follows_the_compiled_table_and_says_why() {
    let e = engine();
    let device = device_class();
    let compiled = runtime::policy::compiled_resolver();
    let here = runtime::policy::host_class_here();
    let model = e.loaded.info.model_class();
    let path = model_path();
    let file = path.file_name().and_then(|n| n.to_str());
    let host = |threads| Run {
        device: &device,
        host: &here,
        quant: &e.loaded.info.quant,
        model: &model,
        file,
        threads,
        weight_formats: Some(&e.loaded.info.weight_formats),
        precision: None,
    };
    let prompt = ["--prompt", "Repeat this three times: one two three four five.", "--chat", "--max-tokens", "32"];
    let generate = |args: &[&str]| {
        let out = run(Command::new(bin("runtime"))
            .arg("generate")
            .arg("--model")
            .arg(model_path())
            .args(prompt)
            .args(["--json"])
            .args(args)
            .env("DRAFTWISE_LOG", "warn"));
        assert!(out.status.success(), "{}", output_text(&out));
        (json_lines(&out), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (classic, _) = generate(&["--threads", "2", "--drafter", "none"]);
    for threads in [2usize, 1] {
        let want = compiled.auto(&host(threads));
        let (lines, stderr) = generate(&["--threads", &threads.to_string()]);
        let s = &lines[0];
        assert_eq!(s["drafter_from"], "policy");
        assert_eq!(s["width_from"], want.width_from.as_str(), "{threads} threads");
        assert!(stderr.contains(&want.width_from), "the log line says it too: {stderr}");
        match want.drafter {
            Some(k) => {
                assert_eq!(s["drafter"], k.as_str());
                assert_eq!(s["width"].as_u64(), want.width.map(|n| n.get() as u64));
                assert_eq!(lines[2]["event"], "speculative_diagnostics");
                eprintln!("{threads} threads: speculates ({})", want.width_from);
            }
            None => {
                assert_eq!(s["drafter"], "none");
                eprintln!("{threads} threads: classic ({})", want.width_from);
            }
        }
        assert_eq!(lines[1]["token_ids"], classic[1]["token_ids"], "{threads} threads");
    }
    // The committed entries are measured at 2 threads: at 1 the reason names the count.
    let at_one = compiled.auto(&host(1)).width_from;
    assert!(at_one.contains("at 1 thread"), "{at_one}");
    if compiled.table.entries.iter().any(|x| x.key.device == device && x.key.threads == Some(2)) {
        assert!(at_one.contains("the table measured it at 2 threads"), "{at_one}");
    }
}

/// An entry measured on another CPU stands in for this host only when its
/// whole interval is above 1.0, and the `startup` event says where it was
/// measured; one that reaches 1.0 keeps classic decoding and says why.
#[test]
fn an_entry_of_another_cpu_applies_only_wholly_above_classic_and_the_startup_event_says_so() {
    let here = runtime::policy::host_class_here();
    let other = another_host();
    let t = table(&[entry_on(other, "3", 1.2, [1.1, 1.3], 2)]);
    let d = decide(&t, &no_flags());
    let s = d.speculation.as_ref().expect("the other CPU's entry turns speculation on");
    assert_eq!((s.kind, s.width), (DrafterKind::Ngram, width(3)));
    let selection = kernels::dispatch::selected().expect("a kernel family");
    let ev = runtime::events::startup_event(engine(), &selection, &d, SamplingParams::default(), 32, None);
    assert_eq!(ev.host_class.as_deref(), Some(here.as_str()));
    assert_eq!(ev.width, width(3));
    let says = format!("measured on {other}, this host is {here}");
    assert!(
        ev.width_from.contains(&says) && ev.width_from.contains("whole interval is above 1.0"),
        "{}",
        ev.width_from
    );

    let t = table(&[entry_on(other, "3", 1.2, [0.95, 1.3], 2)]);
    let d = decide(&t, &no_flags());
    assert!(d.speculation.is_none(), "{}", d.resolution.width_from);
    let why = &d.resolution.width_from;
    assert!(why.contains(&format!("on {other} with a")) && why.contains("is not wholly above 1.0"), "{why}");
    // This host's own entry, even one that only ties classic, is not overridden by another CPU's.
    let t = table(&[entry("3", 1.05, [0.95, 1.2], 2), entry_on(other, "3", 1.2, [1.1, 1.3], 2)]);
    let d = decide(&t, &no_flags());
    assert!(d.speculation.is_none(), "{}", d.resolution.width_from);
}

#[test]
fn a_policy_file_replaces_the_compiled_table_for_one_run_and_is_named() {
    // A table in <root>/policy/ citing a record folder under <root>, as
    // `tuner propose` leaves the repository's: width 5 for this host at 2 threads.
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("policy")).unwrap();
    std::fs::create_dir_all(root.path().join("records/test-record")).unwrap();
    let file = root.path().join("policy/trial.toml");
    std::fs::write(&file, format!("schema_version = 3\n\n{}", entry("5", 1.4, [1.2, 1.6], 2))).unwrap();
    let run_with = |policy: &std::path::Path| {
        let mut c = Command::new(bin("runtime"));
        c.args(["generate", "--model"]).arg(model_path()).args(["-p", "one two three one two three", "-n", "8"]);
        c.args(["-t", "2", "--json", "--policy"]).arg(policy).env("DRAFTWISE_LOG", "warn");
        run(&mut c)
    };
    let out = run_with(&file);
    assert!(out.status.success(), "{}", output_text(&out));
    let startup = &json_lines(&out)[0];
    assert_eq!(startup["width"], 5, "{startup}");
    assert_eq!(startup["drafter"], "ngram", "{startup}");
    let from = startup["width_from"].as_str().unwrap();
    assert!(from.contains("trial.toml (--policy), not the compiled one"), "{from}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("trial.toml (--policy)"), "{}", output_text(&out));
    // Checked as the build checks the compiled table: a missing record
    // folder, a malformed file and an oversized one are refused, naming it.
    std::fs::remove_dir(root.path().join("records/test-record")).unwrap();
    let out = run_with(&file);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        output_text(&out).contains("--policy") && output_text(&out).contains("records/test-record"),
        "{}",
        output_text(&out)
    );
    std::fs::write(&file, "schema_version = 3\n[[entry]]\ndrafter = 3\n").unwrap();
    let out = run_with(&file);
    assert_eq!(out.status.code(), Some(1));
    assert!(output_text(&out).contains("trial.toml"), "{}", output_text(&out));
    let big = root.path().join("big.toml");
    std::fs::File::create(&big).unwrap().set_len(64 << 20).unwrap();
    let out = run_with(&big);
    assert_eq!(out.status.code(), Some(1));
    assert!(output_text(&out).contains("larger than"), "{}", output_text(&out));
}
