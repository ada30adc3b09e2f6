//! The table compiler: malformed, duplicate, out-of-range and old-schema tables, and the bounds of every
//! field.

mod common;

use common::*;
use policy::table::{Problem, RecordCheck, TableError, compile};

fn compile_err(text: &str) -> TableError {
    compile("policy/t.toml", text, RecordCheck::Skip).expect_err("must not compile")
}

const HEAD: &str = "schema_version = 3\n\n";

#[test]
fn malformed_toml_fails_with_the_file_and_position() {
    let e = compile_err("schema_version = 2\n[[entry]\ndrafter = \"ngram\"\n");
    assert!(matches!(e.problem, Problem::Malformed(_)), "{e}");
    let s = e.to_string();
    assert!(s.starts_with("policy/t.toml: malformed TOML") && s.contains("line 2"), "{s}");
    // A key written twice inside one entry is TOML's own duplicate.
    let e = compile_err(&format!(
        "{HEAD}{}",
        entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP).replace("host =", "ratio = 1.5\nhost =")
    ));
    assert!(matches!(e.problem, Problem::Malformed(_)) && e.to_string().contains("duplicate"), "{e}");
}

#[test]
fn an_unknown_or_missing_schema_version_fails() {
    let e = compile_err("schema_version = 4\n");
    assert_eq!(e.problem, Problem::UnknownSchemaVersion("4".into()));
    assert!(e.to_string().contains("this runtime compiles schema 3"), "{e}");
    let e = compile_err("schema_version = \"3\"\n");
    assert!(matches!(e.problem, Problem::UnknownSchemaVersion(_)), "{e}");
    let e = compile_err(&entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP));
    assert_eq!(e.problem, Problem::MissingSchemaVersion);
    let e = compile_err("schema_version = 3\nwidth = 4\n");
    assert_eq!(e.problem, Problem::UnknownTopLevelKey("width".into()));
}

#[test]
fn duplicate_keys_fail_naming_both_entries() {
    let a = entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let b = entry("ngram", "cpu:x86_64-avx512vnni", "q4_1", "5", FP);
    let e = compile_err(&format!("{HEAD}{a}{b}{a}"));
    assert_eq!(e.problem, Problem::DuplicateKey { first: "entry 1 (line 3)".into() });
    assert_eq!(e.entry.as_deref(), Some("entry 3 (line 39) (ngram, cpu:x86_64-avx2, amd-zen4, q4_1, 2 threads)"));
    assert!(
        e.to_string().starts_with(
            "policy/t.toml: entry 3 (line 39) (ngram, cpu:x86_64-avx2, amd-zen4, q4_1, 2 threads): duplicate key"
        ),
        "{e}"
    );
    // The same (drafter, device, quantization) at another thread count is another key.
    let c = a.replace("threads = 2", "threads = 1");
    let t = compile("t", &format!("{HEAD}{a}{c}"), RecordCheck::Skip).unwrap();
    assert_eq!(t.entries.iter().map(|e| e.key.threads).collect::<Vec<_>>(), [Some(2), Some(1)]);
    // And the same key at another concurrency (a bucket): its phrase says so.
    let c4 = a.replace("threads = 2", "threads = 2\nconcurrency = 4");
    let t = compile("t", &format!("{HEAD}{a}{c4}"), RecordCheck::Skip).unwrap();
    assert_eq!(t.entries.iter().map(|e| e.key.concurrency).collect::<Vec<_>>(), [1, 4]);
    assert!(t.entries[1].key.to_string().ends_with("at 2 threads, 4 sequences at once"), "{}", t.entries[1].key);
    let e = compile_err(&format!("{HEAD}{a}{c4}{c4}"));
    assert!(e.to_string().contains("2 threads, 4 sequences at once): duplicate key"), "{e}");
    // So is the same measurement on another CPU, or of another model.
    let zen5 = entry_on("amd-zen5", "llama", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let gemma = entry_on(HOST, "gemma3", 268_098_176, "ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let t = compile("t", &format!("{HEAD}{a}{zen5}{gemma}"), RecordCheck::Skip).unwrap();
    assert_eq!(t.entries.len(), 3);
    // A raw spelling of a named class is that class: a duplicate.
    let raw = entry_on("amd-family25-model17", "llama", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let e = compile_err(&format!("{HEAD}{a}{raw}"));
    assert!(matches!(e.problem, Problem::DuplicateKey { .. }), "{e}");
}

#[test]
fn the_schema_3_fields_are_checked_with_the_field_named() {
    let ok = format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP));
    compile("t", &ok, RecordCheck::Skip).unwrap();
    let sha = "a".repeat(64);
    let cases = [
        ("host_class = \"amd-zen4\"", "host_class = \"AMD Zen 4\"", "host_class"),
        ("architecture = \"llama\"", "architecture = \"Llama 3\"", "model.architecture"),
        ("parameters = 134515008", "parameters = 0", "model.parameters"),
        ("parameters = 134515008", "parameters = \"135M\"", "model.parameters"),
        ("file = \"m.gguf\"", "file = \"/root/.cache/m.gguf\"", "model.file"),
        ("file = \"m.gguf\"", "file = \"models/m.gguf\"", "model.file"),
        (&format!("sha256 = \"{sha}\""), "sha256 = \"abc\"", "model.sha256"),
        ("name = \"prompts/sweep.jsonl\"", "name = \"/work/main/prompts/sweep.jsonl\"", "prompts.name"),
        ("name = \"prompts/sweep.jsonl\"", "name = \"../prompts.jsonl\"", "prompts.name"),
    ];
    for (from, to, field) in cases {
        assert!(ok.contains(from), "{from}");
        let e = compile_err(&ok.replacen(from, to, 1));
        assert!(matches!(&e.problem, Problem::BadValue { field: f, .. } if *f == field), "{to}: {e}");
    }
    // Every schema-3 field is required.
    for field in ["host_class = ", "model = ", "prompts = "] {
        let line = ok.lines().find(|l| l.starts_with(field)).unwrap();
        let e = compile_err(&ok.replace(&format!("{line}\n"), ""));
        assert!(matches!(&e.problem, Problem::Field(m) if m.contains(field.trim_end_matches(" = "))), "{e}");
    }
    // The schema-2 name of the width is named, with the new one.
    let e = compile_err(&ok.replace("width = 4", "block_size = 4"));
    assert!(
        matches!(&e.problem, Problem::BadValue { field: "block_size", problem } if problem.contains("`width`")),
        "{e}"
    );
}

#[test]
fn a_schema_2_table_is_refused_with_how_to_migrate() {
    let old = "schema_version = 2\n\n[[entry]]\ndrafter = \"ngram\"\ndevice_class = \"cpu:x86_64-avx2\"\n\
               target_quant = \"q4_1\"\nthreads = 2\ndrafter_settings = { ngram_min = 3, ngram_max = 4 }\n\
               weight_formats = [\"q4_1\"]\nblock_size = 3\nrecord = \"records/r1\"\ndate = 2026-01-15\n\
               ratio = 1.5\nratio_interval = [1.4, 1.6]\nhost = \"h\"\nverify_fingerprint = \"0123456789abcdef\"\n";
    let e = compile_err(old);
    assert_eq!(e.problem, Problem::Schema2);
    let m = e.to_string();
    for want in
        ["schema_version = 3", "block_size", "`width`", "host_class", "model", "prompts", "Migrating from schema 2"]
    {
        assert!(m.contains(want), "{want:?} missing from {m}");
    }
}

#[test]
fn widths_out_of_range_fail() {
    for (w, problem) in [("0", "0 is out of range"), ("33", "33 is out of range"), ("-2", "-2 is out of range")] {
        let e = compile_err(&format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", w, FP)));
        assert!(matches!(e.problem, Problem::WidthOutOfRange(_)), "{w}: {e}");
        assert!(e.to_string().contains(problem) && e.to_string().contains("entry 1 (line 3) (ngram"), "{e}");
    }
    let e = compile_err(&format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", "\"of\"", FP)));
    assert!(matches!(e.problem, Problem::BadValue { field: "width", .. }), "{e}");
    let e = compile_err(&format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", "4.5", FP)));
    assert!(matches!(e.problem, Problem::BadValue { field: "width", .. }), "{e}");
    // The range ends are fine.
    for w in ["1", "32", "\"off\""] {
        compile("t", &format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", w, FP)), RecordCheck::Skip)
            .unwrap();
    }
}

#[test]
fn an_unknown_drafter_kind_fails() {
    let e = compile_err(&format!("{HEAD}{}", entry("eagle3", "cpu:x86_64-avx2", "q4_1", "4", FP)));
    assert_eq!(e.problem, Problem::UnknownDrafter("eagle3".into()));
    assert!(
        e.to_string()
            .contains("entry 1 (line 3) (eagle3, cpu:x86_64-avx2, amd-zen4, q4_1, 2 threads): drafter \"eagle3\""),
        "{e}"
    );
}

#[test]
fn a_record_path_that_does_not_exist_fails() {
    let root = tempfile::tempdir().unwrap();
    let text = format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP));
    let e = compile("policy/t.toml", &text, RecordCheck::Under(root.path())).unwrap_err();
    assert!(matches!(&e.problem, Problem::MissingRecord { record, .. } if record == "records/r1"), "{e}");
    assert!(e.to_string().contains("commit the record with its entry"), "{e}");
    std::fs::create_dir_all(root.path().join("records/r1")).unwrap();
    compile("policy/t.toml", &text, RecordCheck::Under(root.path())).unwrap();
    // Paths must stay under records/.
    for bad in ["/etc/passwd", "records/../Cargo.toml", "policy/x", "records/"] {
        let e = compile_err(&text.replace("records/r1", bad));
        assert!(matches!(e.problem, Problem::BadValue { field: "record", .. }), "{bad}: {e}");
    }
}

#[test]
fn other_bad_fields_fail_with_the_field_named() {
    let ok = format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP));
    let cases: [(&str, &str, &str); 19] = [
        ("device_class = \"cpu:x86_64-avx2\"", "device_class = \"gpu0\"", "device_class"),
        ("target_quant = \"q4_1\"", "target_quant = \"unknown\"", "target_quant"),
        ("target_quant = \"q4_1\"", "target_quant = \"Q4_1\"", "target_quant"),
        ("date = 2026-01-15", "date = \"15/01/2026\"", "date"),
        ("ratio = 1.5", "ratio = -1.0", "ratio"),
        ("ratio_interval = [1.4, 1.6]", "ratio_interval = [1.6, 1.7]", "ratio_interval"),
        ("ratio_interval = [1.4, 1.6]", "ratio_interval = [1.4]", "ratio_interval"),
        ("host = \"test host\"", "host = \" \"", "host"),
        (FP, "0123", "verify_fingerprint"),
        ("threads = 2\n", "", "threads"),
        ("threads = 2", "threads = 0", "threads"),
        ("threads = 2", "threads = 100000", "threads"),
        ("threads = 2", "threads = 2\nconcurrency = 0", "concurrency"),
        ("threads = 2", "threads = 2\nconcurrency = 257", "concurrency"),
        ("threads = 2", "threads = 2\nconcurrency = \"4\"", "concurrency"),
        ("ngram_min = 3", "ngram_min = 5", "drafter_settings"),
        ("{ ngram_min = 3, ngram_max = 4 }", "{ layers = [1] }", "drafter_settings"),
        ("weight_formats = [\"q4_1\", \"q8_0\"]", "weight_formats = []", "weight_formats"),
        ("weight_formats = [\"q4_1\", \"q8_0\"]", "weight_formats = [\"Q4_1\"]", "weight_formats"),
    ];
    for (from, to, field) in cases {
        let e = compile_err(&ok.replace(from, to));
        assert!(matches!(&e.problem, Problem::BadValue { field: f, .. } if *f == field), "{to}: {e}");
        assert!(e.to_string().contains(field), "{e}");
    }
    let e = compile_err(&ok.replace("host = ", "colour = \"red\"\nhost = "));
    assert!(matches!(&e.problem, Problem::Field(m) if m.contains("colour")), "{e}");
    let e = compile_err(&ok.replace("host = \"test host\"\n", ""));
    assert!(matches!(&e.problem, Problem::Field(m) if m.contains("host")), "{e}");
    // Device classes the dispatcher and CUDA produce are accepted (CUDA
    // entries without a thread count: it is not part of their key).
    for d in ["cpu:x86_64-avx512vnni", "cpu:aarch64-neon", "cuda:sm_90", "cuda:sm_90a", "cuda:sm_121"] {
        let text = ok.replace("cpu:x86_64-avx2", d);
        let text = if d.starts_with("cuda:") { text.replace("threads = 2\n", "") } else { text };
        compile("t", &text, RecordCheck::Skip).unwrap_or_else(|e| panic!("{d}: {e}"));
    }
    let e = compile_err(&ok.replace("cpu:x86_64-avx2", "cuda:sm_90"));
    assert!(matches!(&e.problem, Problem::BadValue { field: "threads", .. }), "{e}");
    // An unknown settings field is named.
    let e = compile_err(&ok.replace("ngram_min = 3", "ngram_min = 3, colour = 1"));
    assert!(
        matches!(&e.problem, Problem::BadValue { field: "drafter_settings", problem } if problem.contains("colour")),
        "{e}"
    );
}

#[test]
fn a_schema_1_table_is_refused_with_how_to_migrate() {
    let old = "schema_version = 1\n\n[[entry]]\ndrafter = \"ngram\"\ndevice_class = \"cpu:x86_64-avx2\"\n\
               target_quant = \"q4_1\"\nblock_size = 3\nrecord = \"records/r1\"\ndate = 2026-01-15\nratio = 1.5\n\
               ratio_interval = [1.4, 1.6]\nhost = \"h\"\nkernel_fingerprint = \"0123456789abcdef\"\n";
    let e = compile_err(old);
    assert_eq!(e.problem, Problem::OldSchema(1));
    let m = e.to_string();
    for want in
        ["schema_version = 2", "verify_fingerprint", "threads", "drafter_settings", "weight_formats", "tuner sweep"]
    {
        assert!(m.contains(want), "{want:?} missing from {m}");
    }
}

#[test]
fn a_verify_cost_curve_is_read_and_every_bound_is_checked() {
    let base = entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let with = |curves: &str| base.replace("host =", &format!("verify_cost = {curves}\nhost ="));
    let t = compile(
        "t",
        &format!(
            "{HEAD}{}",
            with("[{ context = 64, relative = [1.0, 1.1, 1.25] }, { context = 2048, relative = [1, 1.3] }]")
        ),
        RecordCheck::Skip,
    )
    .unwrap();
    let c = &t.entries[0].verify_cost;
    assert_eq!((c.len(), c[0].context, c[1].context), (2, 64, 2048));
    assert_eq!((c[0].relative.clone(), c[1].relative.clone()), (vec![1.0, 1.1, 1.25], vec![1.0, 1.3]));
    // Absent: no curve (entries of sweeps before the cost was measured).
    let t = compile("t", &format!("{HEAD}{base}"), RecordCheck::Skip).unwrap();
    assert!(t.entries[0].verify_cost.is_empty());
    let bad = |curves: &str, says: &str| {
        let e = compile_err(&format!("{HEAD}{}", with(curves)));
        assert!(
            matches!(&e.problem, Problem::BadValue { field: "verify_cost", .. }) && e.to_string().contains(says),
            "{curves}: {e}"
        );
    };
    bad("[{ context = 64, relative = [1.1, 1.2] }]", "starts at 1.1");
    bad("[{ context = 64, relative = [1.0] }]", "has 1 values");
    bad(&format!("[{{ context = 64, relative = [{}] }}]", ["1.0"; 34].join(", ")), "has 34 values");
    bad("[{ context = 0, relative = [1.0, 1.2] }]", "context 0");
    bad("[{ context = 2000000, relative = [1.0, 1.2] }]", "context 2000000");
    bad("[{ context = 64, relative = [1.0, -1.2] }]", "positive");
    bad("[{ context = 64, relative = [1.0, 1e9] }]", "above 1000");
    bad("[{ context = 64, relative = [1.0, \"x\"] }]", "not a number");
    bad("[{ context = 64, relative = [1.0, 1.2] }, { context = 64, relative = [1.0, 1.2] }]", "does not increase");
    bad("[{ context = 64, relative = [1.0, 1.2], rows = 2 }]", "unknown field `rows`");
    bad("[{ relative = [1.0, 1.2] }]", "no `context`");
    bad("[1, 2]", "is not a table");
    let five = ["{ context = 64, relative = [1.0, 1.2] }"; 5].join(", ");
    bad(&format!("[{five}]"), "has 5 curves");
}

#[test]
fn emitted_per_verify_is_read_and_bounded_by_the_width() {
    let base = entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let with = |v: &str| base.replace("host =", &format!("emitted_per_verify = {v}\nhost ="));
    let t = compile("t", &format!("{HEAD}{}", with("2.31")), RecordCheck::Skip).unwrap();
    assert_eq!(t.entries[0].emitted_per_verify, Some(2.31));
    let t = compile("t", &format!("{HEAD}{base}"), RecordCheck::Skip).unwrap();
    assert_eq!(t.entries[0].emitted_per_verify, None);
    // Width 4: a pass emits 1..=5 tokens.
    for (v, says) in [("5.5", "not 1..=5"), ("0.5", "not 1..=5"), ("-1", "positive"), ("\"x\"", "not a number")] {
        let e = compile_err(&format!("{HEAD}{}", with(v)));
        assert!(
            matches!(&e.problem, Problem::BadValue { field: "emitted_per_verify", .. }) && e.to_string().contains(says),
            "{v}: {e}"
        );
    }
}

#[test]
fn an_adaptive_entry_needs_a_width_and_a_cost_curve() {
    let curve = "verify_cost = [{ context = 64, relative = [1.0, 1.1, 1.2] }]\n";
    let base = entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let with = |b: &str, extra: &str| b.replace("host =", &format!("{extra}host ="));
    let t = compile("t", &format!("{HEAD}{}", with(&base, &format!("{curve}adaptive = true\n"))), RecordCheck::Skip)
        .unwrap();
    assert_eq!(t.entries[0].drafting, Some(policy::Drafting::Adaptive { max: policy::Width::new(4).unwrap() }));
    let t = compile("t", &format!("{HEAD}{base}"), RecordCheck::Skip).unwrap();
    assert_eq!(
        t.entries[0].drafting,
        Some(policy::Drafting::Fixed(policy::Width::new(4).unwrap())),
        "absent: a fixed width, as in every older entry"
    );
    let bad = |text: String, says: &str| {
        let e = compile_err(&format!("{HEAD}{text}"));
        assert!(
            matches!(&e.problem, Problem::BadValue { field: "adaptive", .. }) && e.to_string().contains(says),
            "{text}: {e}"
        );
    };
    bad(with(&base, "adaptive = true\n"), "needs a `verify_cost` curve");
    bad(with(&base, &format!("{curve}adaptive = 1\n")), "not true or false");
    let off = entry("ngram", "cpu:x86_64-avx2", "q4_1", "\"off\"", FP);
    bad(with(&off, &format!("{curve}adaptive = true\n")), "`off` entry");
}

#[test]
fn cost_curves_typed_on_the_command_line_are_bounded_like_an_entrys() {
    use policy::table::parse_cost_curves;
    let v = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let c = parse_cost_curves(&v(&["2048=1,1.3", "64=1, 1.05,1.1"])).unwrap();
    assert_eq!((c[0].context, c[0].relative.clone(), c[1].context), (64, vec![1.0, 1.05, 1.1], 2048));
    assert!(parse_cost_curves(&[]).unwrap().is_empty());
    for (bad, says) in [
        ("64", "CONTEXT=R1,R2"),
        ("0=1,1.1", "not 1..="),
        ("x=1,1.1", "not 1..="),
        ("64=1", "1 values"),
        ("64=1.1,1.2", "starts at 1.1"),
        ("64=1,-2", "not a relative cost"),
        ("64=1,NaN", "not a relative cost"),
        ("64=1,inf", "not a relative cost"),
        ("64=1,2000", "not a relative cost"),
    ] {
        let e = parse_cost_curves(&v(&[bad])).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
    let long = format!("64=1{}", ",1.1".repeat(33));
    assert!(parse_cost_curves(&v(&[&long])).unwrap_err().contains("34 values"));
    assert!(parse_cost_curves(&v(&["64=1,2", "64=1,3"])).unwrap_err().contains("given twice"));
    assert!(parse_cost_curves(&v(&["1=1,2", "2=1,2", "3=1,2", "4=1,2", "5=1,2"])).unwrap_err().contains("at most 4"));
}

#[test]
fn a_table_of_more_entry_headers_than_the_cap_is_refused_by_count() {
    use policy::table::{MAX_ENTRIES, MAX_TABLE_BYTES};
    // 100,000 empty `[[entry]]` headers fit in the byte cap; each used to
    // cost a count of the newlines before it (16 s for 900 KB).
    let n = (MAX_TABLE_BYTES - HEAD.len()) / "[[entry]]\n".len();
    assert!(n > 20 * MAX_ENTRIES);
    let text = format!("{HEAD}{}", "[[entry]]\n".repeat(n));
    let e = compile_err(&text);
    assert_eq!(e.problem, Problem::TooManyEntries { entries: n }, "{e}");
    assert!(e.to_string().contains(&format!("over the limit of {MAX_ENTRIES}")), "{e}");
    // At the cap, the entries are read (and the first, empty, named with its line).
    let text = format!("{HEAD}{}", "[[entry]]\n".repeat(MAX_ENTRIES));
    let e = compile_err(&text);
    assert!(matches!(e.problem, Problem::Field(_)), "{e}");
    assert_eq!(e.entry.as_deref(), Some("entry 1 (line 3)"), "{e}");
}

#[test]
fn a_build_warns_of_stale_entries_of_its_own_host_class_only() {
    use policy::HostClass;
    use policy::table::stale_report;
    let mine_stale = entry_on(HOST, "llama", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "4", OTHER_FP);
    let mine_fresh = entry_on(HOST, "qwen2", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let mine_checked = format!(
        "{}\ncheck = {{ verify_fingerprint = \"{FP}\", record = \"records/r1-check\", date = 2026-02-01 }}\n",
        entry_on(HOST, "gemma3", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "4", OTHER_FP).trim_end()
    );
    let zen5 = entry_on("amd-zen5", "llama", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "4", OTHER_FP);
    let zen5_b = entry_on("amd-zen5", "qwen2", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "4", OTHER_FP);
    let intel = entry_on("intel-sapphire-rapids", "llama", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "4", OTHER_FP);
    let t = table(&[mine_stale, mine_fresh, mine_checked, zen5, zen5_b, intel]);
    let with_fps = || t.entries.iter().map(|e| (e, FP.to_string()));
    let here = HostClass::parse(HOST).unwrap();
    let r = stale_report("policy/t.toml", with_fps(), Ok(&here));
    // One warning: this host's stale entry (the fresh and the re-checked ones are used).
    assert_eq!(r.warnings.len(), 1, "{r:?}");
    assert!(
        r.warnings[0].starts_with("policy/t.toml: entry ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama"),
        "{r:?}"
    );
    assert!(r.warnings[0].contains(&format!("measured with verify-path fingerprint {OTHER_FP}, this build has {FP}")));
    // The other classes' three, counted in one line that is not a warning.
    let q = r.quiet.unwrap();
    assert_eq!(
        q,
        "policy/t.toml: 3 stale entries of other host classes than this one (amd-zen4): amd-zen5, \
         intel-sapphire-rapids; `runtime policy explain` names each"
    );
    // A host with no entries of its own: no warning at all.
    let elsewhere = HostClass::parse("arm-neoverse-v2").unwrap();
    let r = stale_report("policy/t.toml", with_fps(), Ok(&elsewhere));
    assert!(r.warnings.is_empty() && r.quiet.as_deref().is_some_and(|q| q.contains("4 stale entries")), "{r:?}");
    // A host whose class cannot be read: the one line is the warning.
    let r = stale_report("policy/t.toml", with_fps(), Err("/proc/cpuinfo: not found"));
    assert_eq!(r.warnings.len(), 1, "{r:?}");
    assert!(r.warnings[0].contains("4 stale entries (this build's host class could not be read: /proc/cpuinfo"));
    // Nothing stale: nothing said.
    let r = stale_report("policy/t.toml", t.entries.iter().map(|e| (e, e.verify_fingerprint.clone())), Ok(&here));
    assert_eq!(r, Default::default());
}
