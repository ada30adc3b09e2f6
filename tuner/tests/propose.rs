//! `tuner propose`: the policy table edited as a document, and the
//! provenance refusals with the flags that override them.
//!
//! The table edits are library calls on crafted tables, compared byte for
//! byte. The refusals are library calls on the committed record
//! `records/2026-11-29-cpu-x86_64-avx512vnni-ngram-r16` (read, never
//! written) with its startup events altered in memory; the flags are then
//! driven through the binary on a scratch copy of `SCRATCH_RECORD`. That record
//! was written before the runtime reported the verify-path fingerprint of a
//! key, the target's weight formats and the drafter settings: as committed
//! it is refused as a key problem (re-measure), so the tests of the other
//! refusals first give its startup events those fields, as this build's
//! runtime reports them.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use tuner::data::plan::{arm, arms};

use policy::table::{self, RecordCheck};
use policy::{DeviceClass, DrafterKind, DrafterSettings, Entry, HostClass, ModelClass, PolicyKey, TABLE_FILE, Width};
use runtime::policy::KERNEL_FINGERPRINT;
use serde_json::Value;
use tuner::analysis::rules::{self, Allow, Refusal};
use tuner::analysis::summary::Summary;
use tuner::data::raw::{RawFile, RawLine};
use tuner::output::propose::{self, Fields};

const RECORD: &str = "records/2026-11-29-cpu-x86_64-avx512vnni-ngram-r16";
/// The committed record's date and key.
const RECORD_DATE: &str = "2026-11-29";
/// The committed record the binary tests copy: one whose decision today's
/// rules accept (the r16 record, re-summarized, now chooses its widest width,
/// which `propose` refuses), with a CPU signature and schema-2 startup
/// fields but no host class or parameter count (events before schema 2).
const SCRATCH_RECORD: &str = "records/2026-12-02-cpu-x86_64-avx512vnni-ngram-3";
const SCRATCH_DATE: &str = "2026-12-02";

/// (drafter, device class, quantization, threads): the parts of a key these
/// tests vary; every key is on [`HOST`] for the default model.
type Key = (DrafterKind, &'static str, &'static str, Option<usize>);
/// The host class the upgraded record and the crafted tables name.
const HOST: &str = "amd-zen4";
/// The default model's parameter count.
const PARAMS: u64 = 134_515_008;
/// The `model` and `prompts` fields of a crafted entry.
const MODEL_TOML: &str = "{ architecture = \"llama\", parameters = 134515008, file = \"m.gguf\", sha256 = \
\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" }";
const PROMPTS_TOML: &str = "{ name = \"prompts/sweep.jsonl\", sha256 = \
\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\" }";

fn pk(k: Key) -> PolicyKey {
    PolicyKey {
        drafter: k.0,
        device: DeviceClass::parse(k.1).unwrap(),
        host: HostClass::parse(HOST).unwrap(),
        quant: k.2.into(),
        model: ModelClass { architecture: "llama".into(), parameters: PARAMS },
        threads: k.3,
        precision: None,
        concurrency: 1,
    }
}

fn w(n: usize) -> Option<policy::Drafting> {
    Some(policy::Drafting::Fixed(Width::new(n).unwrap()))
}

const RECORD_KEY: Key = (DrafterKind::Ngram, "cpu:x86_64-avx512vnni", "q4_1", Some(2));
/// The weight formats of the record's target (the default model): its
/// layers are Q4_1, its embedding Q8_0.
const RECORD_FORMATS: [&str; 2] = ["q4_1", "q8_0"];

const NGRAM: Key = (DrafterKind::Ngram, "cpu:x86_64-avx2", "q4_1", Some(2));
const LAYERSKIP: Key = (DrafterKind::Layerskip, "cpu:x86_64-avx2", "q4_1", Some(2));
/// A key no crafted table has.
const NEW_KEY: Key = (DrafterKind::Ngram, "cpu:x86_64-avx512vnni", "q4_1", Some(2));

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// An entry's fields as `propose` writes them, in the schema's order.
fn fields(key: Key, width: &str, date: &str) -> Fields {
    let mut f: Fields = vec![
        ("drafter", format!("\"{}\"", key.0)),
        ("device_class", format!("\"{}\"", key.1)),
        ("host_class", format!("\"{HOST}\"")),
        ("target_quant", format!("\"{}\"", key.2)),
        ("target_quant_format", "\"gguf\"".into()),
    ];
    if let Some(t) = key.3 {
        f.push(("threads", t.to_string()));
    }
    f.push(("model", MODEL_TOML.into()));
    f.push(("prompts", PROMPTS_TOML.into()));
    let settings = match key.0 {
        DrafterKind::Ngram => "{ ngram_min = 3, ngram_max = 4 }",
        DrafterKind::Layerskip => "{ layers = [0, 1] }",
        _ => "{}",
    };
    f.extend([
        ("drafter_settings", settings.to_string()),
        ("weight_formats", "[\"q4_1\", \"q8_0\"]".into()),
        ("width", width.to_string()),
        ("record", "\"records/new\"".into()),
        ("date", date.to_string()),
        ("ratio", "1.4".into()),
        ("ratio_interval", "[1.3, 1.5]".into()),
        ("host", "\"a test host\"".into()),
        ("verify_fingerprint", "\"fedcba9876543210\"".into()),
        ("note", "\"tuner propose: a test\"".into()),
    ]);
    f
}

fn compile(text: &str) -> table::Table {
    table::compile(TABLE_FILE, text, RecordCheck::Skip).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// `[[entry]]` tables with comments before, between, inside and after
/// them, odd spacing, and blank lines.
const TABLES: &str = concat!(
    "# The policy table, for a test.\n",
    "schema_version = 3\n",
    "\n",
    "# ngram on avx2: measured in January.\n",
    "[[entry]]\n",
    "drafter = \"ngram\"\n",
    "device_class = \"cpu:x86_64-avx2\"\n",
    "host_class = \"amd-zen4\"\n",
    "target_quant = \"q4_1\"\n",
    "threads = 2\n",
    "model = { architecture = \"llama\", parameters = 134515008, file = \"m.gguf\", sha256 = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" }\n",
    "prompts = { name = \"prompts/sweep.jsonl\", sha256 = \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\" }\n",
    "drafter_settings = { ngram_min = 3, ngram_max = 4 }\n",
    "weight_formats = [\"q4_1\", \"q8_0\"]\n",
    "width = 3\n",
    "record = \"records/a\"\n",
    "date = 2026-01-01\n",
    "ratio = 1.2\n",
    "ratio_interval = [1.1, 1.3]\n",
    "host = \"h\"\n",
    "verify_fingerprint = \"0123456789abcdef\"   # the January build\n",
    "# A reviewer's comment after the ngram entry.\n",
    "\n",
    "\n",
    "  #   layerskip, indented\n",
    "[[entry]]\n",
    "drafter   =   \"layerskip\"\n",
    "device_class = \"cpu:x86_64-avx2\"\n",
    "host_class='amd-zen4'\n",
    "  target_quant = \"q4_1\"\n",
    "threads=2\n",
    "model = {architecture='llama', parameters=134515008, file='m.gguf', sha256='aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'}\n",
    "prompts = {name='prompts/sweep.jsonl', sha256='bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb'}\n",
    "drafter_settings = {layers=[0,1]}\n",
    "weight_formats = [ 'q4_1' ]\n",
    "width = \"off\"\n",
    "record = \"records/b\"\n",
    "date = \"2026-02-01\"\n",
    "ratio = 0.5\n",
    "ratio_interval = [ 0.4 , 0.6 ]\n",
    "host = 'h'\n",
    "verify_fingerprint = \"0123456789abcdef\"\n",
    "\n",
    "# The end.\n",
);

/// The byte range of `entry` (from its `[[entry]]` header to the end of its
/// last field's line) in `TABLES`.
fn region(text: &str, first_line: &str, last_line: &str) -> std::ops::Range<usize> {
    let start = text.find(first_line).unwrap();
    let end = start + text[start..].find(last_line).unwrap() + last_line.len();
    start..end
}

#[test]
fn every_byte_outside_the_replaced_entry_is_kept() {
    let f = fields(NGRAM, "5", "2026-03-01");
    let new = propose::edit_table(TABLES, &pk(NGRAM), &f).unwrap();
    let r = region(TABLES, "[[entry]]\ndrafter = \"ngram\"", "# the January build\n");
    let expected = format!("{}{}{}", &TABLES[..r.start], propose::entry_table_text(&f), &TABLES[r.end..]);
    assert_eq!(new, expected);
    let t = compile(&new);
    assert_eq!(t.entries.len(), 2);
    assert_eq!(t.entries[0].drafting, w(5));
    assert_eq!(t.entries[1].drafting, None);
}

#[test]
fn comments_after_the_replaced_entry_are_kept() {
    let new = propose::edit_table(TABLES, &pk(NGRAM), &fields(NGRAM, "5", "2026-03-01")).unwrap();
    assert!(new.contains("ratio = 1.4\n"), "{new}");
    assert!(
        new.contains("\n# A reviewer's comment after the ngram entry.\n\n\n  #   layerskip, indented\n[[entry]]\n"),
        "{new}"
    );
    // The last entry: what follows it up to the end of the file stays.
    let new = propose::edit_table(TABLES, &pk(LAYERSKIP), &fields(LAYERSKIP, "\"off\"", "2026-03-01")).unwrap();
    assert!(new.ends_with("note = \"tuner propose: a test\"\n\n# The end.\n"), "{new}");
    assert!(new.contains("  #   layerskip, indented\n[[entry]]\ndrafter = \"layerskip\"\n"), "{new}");
    assert_eq!(compile(&new).entries.len(), 2);
}

#[test]
fn the_same_key_at_another_thread_count_is_a_new_entry() {
    // Threads are part of a CPU key: a 4-thread measurement does not replace
    // the 2-thread entry.
    let key = (NGRAM.0, NGRAM.1, NGRAM.2, Some(4));
    let f = fields(key, "2", "2026-03-01");
    let new = propose::edit_table(TABLES, &pk(key), &f).unwrap();
    assert_eq!(new, format!("{TABLES}\n{}", propose::entry_table_text(&f)));
    let t = compile(&new);
    assert_eq!(t.entries.len(), 3);
    assert_eq!((t.entries[0].key.threads, t.entries[0].drafting), (Some(2), w(3)));
    assert_eq!((t.entries[2].key.threads, t.entries[2].drafting), (Some(4), w(2)));
    assert_eq!(t.exact(&pk((NGRAM.0, NGRAM.1, NGRAM.2, Some(4)))).unwrap().record, "records/new");
    assert_eq!(t.exact(&pk(NGRAM)).unwrap().record, "records/a");
}

#[test]
fn a_new_key_is_appended_to_an_entry_table_as_an_entry_table() {
    let f = fields(NEW_KEY, "2", "2026-03-01");
    let new = propose::edit_table(TABLES, &pk(NEW_KEY), &f).unwrap();
    assert_eq!(new, format!("{TABLES}\n{}", propose::entry_table_text(&f)));
    let t = compile(&new);
    assert_eq!(t.entries.len(), 3);
    assert_eq!(t.entries[2].key.device.as_str(), "cpu:x86_64-avx512vnni");
}

const NGRAM_INLINE: &str = "{ drafter = \"ngram\", device_class = \"cpu:x86_64-avx2\", host_class = \"amd-zen4\", \
target_quant = \"q4_1\", threads = 2, model = { architecture = \"llama\", parameters = 134515008, file = \"m.gguf\", \
sha256 = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" }, prompts = { name = \"p\", \
sha256 = \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\" }, \
drafter_settings = { ngram_min = 3, ngram_max = 4 }, weight_formats = [\"q4_1\", \"q8_0\"], \
width = 3, record = \"records/a\", date = 2026-01-01, ratio = 1.2, ratio_interval = [1.1, 1.3], host = \"h\", \
verify_fingerprint = \"0123456789abcdef\" }";
const LAYERSKIP_INLINE: &str = "{drafter=\"layerskip\",device_class=\"cpu:x86_64-avx2\",host_class=\"amd-zen4\",\
target_quant=\"q4_1\",threads=2,model={architecture=\"llama\",parameters=134515008,file=\"m.gguf\",\
sha256=\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"},prompts={name=\"p\",\
sha256=\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"},drafter_settings={layers=[0,1]},\
weight_formats=[\"q4_1\"],width=\"off\",record=\"records/b\",date=2026-02-01,ratio=0.5,ratio_interval=[0.4,0.6],host=\"h\",\
verify_fingerprint=\"0123456789abcdef\"}";

/// The same two entries as one inline array, one element per line, with
/// comments inside and around it.
fn inline_table() -> String {
    format!(
        "schema_version = 3\n# Entries written inline.\nentry = [\n  # ngram, January\n  {NGRAM_INLINE},\n  \
         {LAYERSKIP_INLINE}, # layerskip\n]\n# after the array\n"
    )
}

#[test]
fn an_inline_array_keeps_its_other_entries_and_comments_byte_for_byte() {
    let old = inline_table();
    assert_eq!(compile(&old).entries.len(), 2);
    let f = fields(NGRAM, "5", "2026-03-01");
    let new = propose::edit_table(&old, &pk(NGRAM), &f).unwrap();
    assert_eq!(new, old.replacen(NGRAM_INLINE, &propose::entry_inline_text(&f), 1));
    let t = compile(&new);
    assert_eq!(t.entries.len(), 2);
    assert_eq!((t.entries[0].drafting, t.entries[1].key.drafter), (w(5), DrafterKind::Layerskip));

    let f = fields(LAYERSKIP, "\"off\"", "2026-03-01");
    let new = propose::edit_table(&old, &pk(LAYERSKIP), &f).unwrap();
    assert_eq!(new, old.replacen(LAYERSKIP_INLINE, &propose::entry_inline_text(&f), 1));
    assert_eq!(compile(&new).entries[1].record, "records/new");
}

#[test]
fn a_new_key_is_appended_to_an_inline_array_in_its_layout() {
    let f = fields(NEW_KEY, "2", "2026-03-01");
    let inline = propose::entry_inline_text(&f);

    // One element per line, trailing comma: a new line with the same indent.
    let old = inline_table();
    let new = propose::edit_table(&old, &pk(NEW_KEY), &f).unwrap();
    assert_eq!(new, old.replacen("# layerskip\n", &format!("# layerskip\n  {inline},\n"), 1));
    assert_eq!(compile(&new).entries.len(), 3);

    // One element per line, no trailing comma: the comma goes after the old last one.
    let old = format!("schema_version = 3\nentry = [\n    {NGRAM_INLINE},\n    {LAYERSKIP_INLINE}\n]\n");
    let new = propose::edit_table(&old, &pk(NEW_KEY), &f).unwrap();
    assert_eq!(
        new,
        format!("schema_version = 3\nentry = [\n    {NGRAM_INLINE},\n    {LAYERSKIP_INLINE},\n    {inline}\n]\n")
    );
    assert_eq!(compile(&new).entries.len(), 3);

    // All on one line.
    let old = format!("schema_version = 3\nentry = [{NGRAM_INLINE}, {LAYERSKIP_INLINE}] # two\n");
    let new = propose::edit_table(&old, &pk(NEW_KEY), &f).unwrap();
    assert_eq!(new, format!("schema_version = 3\nentry = [{NGRAM_INLINE}, {LAYERSKIP_INLINE}, {inline}] # two\n"));
    assert_eq!(compile(&new).entries.len(), 3);
}

#[test]
fn the_committed_entry_rewritten_with_its_own_values_is_byte_identical() {
    // `propose` writes an entry as the committed one is written: the same
    // fields in the same order, one `key = value` line each, so re-proposing
    // the same numbers changes no byte of the table.
    let committed = std::fs::read_to_string(repo().join(TABLE_FILE)).unwrap();
    let t = compile(&committed);
    let e = t.entries.first().expect("a committed entry");
    let start = committed.find("\n[[entry]]\n").unwrap() + "\n[[entry]]\n".len();
    let own: Vec<(&str, String)> = committed[start..]
        .lines()
        .take_while(|l| !l.is_empty() && !l.starts_with('['))
        .map(|l| l.split_once(" = ").map(|(k, v)| (k, v.to_string())).unwrap_or_else(|| panic!("{l:?}")))
        .collect();
    let names: Vec<&str> = fields(RECORD_KEY, "1", "2026-01-01").iter().map(|(k, _)| *k).collect();
    assert_eq!(e.key.threads, RECORD_KEY.3);
    assert_eq!(own.iter().map(|(k, _)| *k).collect::<Vec<_>>(), names, "the committed field order");
    assert_eq!(propose::edit_table(&committed, &e.key, &own).unwrap(), committed);
    // Whichever record the committed entry cites (it moves with each re-measurement).
    assert!(e.record.starts_with("records/"), "{}", e.record);
}

/// This build's verify-path fingerprint for the record's key.
fn current() -> String {
    let formats: Vec<String> = RECORD_FORMATS.iter().map(|f| f.to_string()).collect();
    runtime::policy::verify_fingerprint(&DeviceClass::parse(RECORD_KEY.1).unwrap(), Some(&formats))
}

/// The committed record as committed, summarized once.
fn committed() -> &'static (RawFile, Summary) {
    static R: OnceLock<(RawFile, Summary)> = OnceLock::new();
    R.get_or_init(|| {
        tuner::analysis::summarize::summarize_dir(&repo().join(RECORD)).expect("the committed record summarizes")
    })
}

/// The committed record with the startup fields this build's runtime
/// reports (verify-path fingerprint `fingerprint`, weight formats, drafter
/// settings on speculative arms, the declaring format), summarized.
fn upgraded(raw: &RawFile, fingerprint: &str) -> (RawFile, Summary) {
    let mut raw = raw.clone();
    let mut n = 0;
    for l in &mut raw.lines {
        if let RawLine::Startup(a) = l {
            let st = &mut a.startup;
            st.verify_fingerprint = fingerprint.to_string();
            st.target.weight_formats = RECORD_FORMATS.iter().map(|f| f.to_string()).collect();
            st.target.quant.format = Some("gguf".into());
            st.target.parameters = PARAMS;
            st.host_class = Some(HOST.into());
            let speculative = st.drafter != "none";
            st.drafter_from = if speculative { "flag" } else { "none" }.into();
            st.drafter_settings = speculative.then(|| DrafterSettings::ngram(3, 4));
            n += 1;
        }
    }
    assert!(n > 0, "the record has startup events");
    let s = tuner::analysis::summarize::summarize(&raw).expect("the upgraded record summarizes");
    (raw, s)
}

/// The committed record as this build would have recorded it, summarized once.
fn record() -> &'static (RawFile, Summary) {
    static R: OnceLock<(RawFile, Summary)> = OnceLock::new();
    R.get_or_init(|| upgraded(&committed().0, &current()))
}

/// The record with `git_dirty` set to `state` in the startup events of `arms`.
fn with_git_dirty(raw: &RawFile, arms: &[usize], state: &str) -> RawFile {
    let mut raw = raw.clone();
    let mut n = 0;
    for l in &mut raw.lines {
        if let RawLine::Startup(a) = l
            && arms.contains(&a.arm)
        {
            a.startup.build.git_dirty = runtime::build_info::GitDirty::from_name(state);
            n += 1;
        }
    }
    assert!(n >= arms.len(), "the record has startup events for arms {arms:?}");
    raw
}

/// The record's own fingerprint: "this build" for the checks that are not about it.
fn fp(s: &Summary) -> &str {
    s.verify_fingerprint.as_deref().expect("the upgraded record has one verify-path fingerprint")
}

#[test]
fn the_upgraded_record_has_a_key_with_threads_settings_and_formats() {
    let (raw, s) = record();
    assert_eq!(s.key_problem, None);
    assert_eq!(fp(s), current());
    assert_eq!(rules::current_fingerprint(s).as_deref(), Some(current().as_str()));
    assert_eq!(s.threads, RECORD_KEY.3);
    assert_eq!(s.drafter_settings, Some(DrafterSettings::ngram(3, 4)));
    assert_eq!(s.weight_formats.as_deref(), Some(&["q4_1".to_string(), "q8_0".to_string()][..]));
    assert_eq!(s.target_quant_format.as_deref(), Some("gguf"));
    rules::check(s).unwrap();
    // Its entry has the fields of the committed table, in its order.
    let f = propose::entry_fields(raw, s, "records/r").unwrap();
    let names: Vec<&str> = f.iter().map(|(k, _)| *k).collect();
    let mut want: Vec<&str> = fields(RECORD_KEY, "1", RECORD_DATE).iter().map(|(k, _)| *k).collect();
    // The chosen width's tokens per verify pass, an optional field, stand after the interval.
    let at = want.iter().position(|k| *k == "ratio_interval").unwrap() + 1;
    want.insert(at, "emitted_per_verify");
    assert_eq!(names, want);
    let value = |k: &str| f.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str()).unwrap();
    assert_eq!(value("threads"), "2");
    assert_eq!(value("drafter_settings"), "{ ngram_min = 3, ngram_max = 4 }");
    assert_eq!(value("weight_formats"), "[\"q4_1\", \"q8_0\"]");
    assert_eq!(value("verify_fingerprint"), format!("\"{}\"", current()));
    let chosen =
        s.widths.iter().find(|w| Some(w.width) == s.decision.width).and_then(|w| w.emitted_per_verify).unwrap();
    assert_eq!(value("emitted_per_verify").parse::<f64>().unwrap(), (chosen * 1000.0).round() / 1000.0);
}

#[test]
fn a_record_without_the_new_startup_fields_is_refused_as_a_key_problem_to_re_measure() {
    // The committed record: its runtime reported no verify-path fingerprint
    // of the key, no weight formats and no drafter settings.
    let (raw, s) = committed();
    let k = s.key_problem.as_deref().expect("an old record has a key problem");
    for what in ["verify-path fingerprint", "weight formats", "drafter settings"] {
        assert!(k.contains(what), "{what}: {k}");
    }
    assert!(k.contains("re-measure"), "{k}");
    assert_eq!(
        (s.verify_fingerprint.as_ref(), s.weight_formats.as_ref(), s.drafter_settings.as_ref()),
        (None, None, None)
    );
    let r = rules::check(s).unwrap_err();
    assert!(matches!(&r, Refusal::Key(m) if m.contains("re-measure")), "{r:?}");
    // No flag overrides it, and no entry can be written from it.
    let all = Allow { dirty: true, stale_fingerprint: true, older: true, loose_gate: true, weak_plan: true };
    let r = rules::check_provenance(raw, s, None, &current(), all).unwrap_err();
    assert!(matches!(&r, Refusal::Key(m) if m.contains("re-measure")), "{r:?}");
    let r = propose::entry_fields(raw, s, "records/r").unwrap_err();
    assert!(matches!(r, Refusal::Key(_)), "{r:?}");
}

#[test]
fn a_missing_field_alone_is_a_key_problem() {
    let (raw, _) = record();
    // Speculative arms without drafter settings.
    let mut r = raw.clone();
    for l in &mut r.lines {
        if let RawLine::Startup(a) = l {
            a.startup.drafter_settings = None;
        }
    }
    let s = tuner::analysis::summarize::summarize(&r).unwrap();
    let k = s.key_problem.expect("a key problem");
    assert!(k.contains("drafter settings") && k.contains("re-measure") && !k.contains("weight formats"), "{k}");
    // Arms that disagree on the thread count have no CPU key.
    let mut r = raw.clone();
    for l in &mut r.lines {
        if let RawLine::Startup(a) = l
            && a.arm == 3
        {
            a.startup.threads = 1;
        }
    }
    let s = tuner::analysis::summarize::summarize(&r).unwrap();
    assert!(s.key_problem.as_deref().is_some_and(|k| k.contains("thread count")), "{:?}", s.key_problem);
    assert_eq!(s.threads, None);
    assert!(matches!(rules::check(&s), Err(Refusal::Key(_))));
}

#[test]
fn a_clean_record_of_this_build_passes_every_provenance_check() {
    let (raw, s) = record();
    assert_eq!(s.date, RECORD_DATE);
    assert_eq!(rules::check_provenance(raw, s, None, fp(s), Allow::default()).unwrap(), Vec::<String>::new());
}

#[test]
fn a_dirty_build_is_refused_and_allowed_with_allow_dirty() {
    let (raw, s) = record();
    let dirty = with_git_dirty(raw, &[3], "true");
    let r = rules::check_build(&dirty).unwrap_err();
    assert!(matches!(r, Refusal::DirtyBuild { .. }), "{r:?}");
    let m = r.to_string();
    assert!(m.contains("arm(s) 3 ran a dirty build") && m.contains("--allow-dirty"), "{m}");
    let r = rules::check_provenance(&dirty, s, None, fp(s), Allow::default()).unwrap_err();
    assert!(matches!(r, Refusal::DirtyBuild { .. }), "{r:?}");

    let allow = Allow { dirty: true, ..Allow::default() };
    let overridden = rules::check_provenance(&dirty, s, None, fp(s), allow).unwrap();
    assert_eq!(overridden.len(), 1);
    assert!(overridden[0].starts_with("--allow-dirty: arm(s) 3 ran a dirty build"), "{overridden:?}");
}

#[test]
fn an_unknown_dirty_state_is_refused_like_a_dirty_one_unless_allow_dirty() {
    let (raw, s) = record();
    let unknown = with_git_dirty(raw, &[0, 5], "unknown");
    let r = rules::check_build(&unknown).unwrap_err();
    assert!(matches!(r, Refusal::DirtyUnknown { .. }), "{r:?}");
    let m = r.to_string();
    assert!(m.contains("arm(s) 0, 5") && m.contains("null (unknown)") && m.contains("--allow-dirty"), "{m}");
    let allow = Allow { dirty: true, ..Allow::default() };
    assert_eq!(rules::check_provenance(&unknown, s, None, fp(s), allow).unwrap().len(), 1);
}

#[test]
fn a_stale_fingerprint_is_refused_and_allowed_with_allow_stale_fingerprint() {
    let (raw, s) = record();
    let current = "ffffffffffffffff";
    assert_ne!(fp(s), current);
    let r = rules::check_fingerprint(s, current).unwrap_err();
    let m = r.to_string();
    assert!(matches!(r, Refusal::StaleFingerprint { .. }), "{r:?}");
    assert!(m.contains(fp(s)) && m.contains(current) && m.contains("--allow-stale-fingerprint"), "{m}");
    assert!(rules::check_provenance(raw, s, None, current, Allow::default()).is_err());
    // The other flags do not cover it.
    let wrong = Allow { dirty: true, older: true, ..Allow::default() };
    assert!(rules::check_provenance(raw, s, None, current, wrong).is_err());

    let allow = Allow { stale_fingerprint: true, ..Allow::default() };
    let overridden = rules::check_provenance(raw, s, None, current, allow).unwrap();
    assert!(overridden.len() == 1 && overridden[0].starts_with("--allow-stale-fingerprint: "), "{overridden:?}");
}

/// The committed key's entry, dated `date`.
fn entry_dated(date: &str) -> Entry {
    let text = format!(
        "schema_version = 3\n[[entry]]\ndrafter = \"ngram\"\ndevice_class = \"cpu:x86_64-avx512vnni\"\n\
         host_class = \"{HOST}\"\ntarget_quant = \"q4_1\"\nthreads = 2\nmodel = {MODEL_TOML}\nprompts = {PROMPTS_TOML}\n\
         drafter_settings = {{ ngram_min = 3, ngram_max = 4 }}\n\
         weight_formats = [\"q4_1\", \"q8_0\"]\nwidth = 4\nrecord = \"records/later\"\ndate = {date}\n\
         ratio = 1.2\nratio_interval = [1.1, 1.3]\nhost = \"h\"\nverify_fingerprint = \"0123456789abcdef\"\n"
    );
    compile(&text).entries.remove(0)
}

#[test]
fn an_older_record_is_refused_and_allowed_with_allow_older() {
    let (raw, s) = record();
    let newer = entry_dated("2026-12-01");
    let r = rules::check_not_older(s, Some(&newer)).unwrap_err();
    let m = r.to_string();
    assert!(matches!(r, Refusal::Older { .. }), "{r:?}");
    assert!(m.contains(RECORD_DATE) && m.contains("2026-12-01") && m.contains("records/later"), "{m}");
    assert!(m.contains("--allow-older"), "{m}");
    assert!(rules::check_provenance(raw, s, Some(&newer), fp(s), Allow::default()).is_err());

    let allow = Allow { older: true, ..Allow::default() };
    let overridden = rules::check_provenance(raw, s, Some(&newer), fp(s), allow).unwrap();
    assert!(overridden.len() == 1 && overridden[0].starts_with("--allow-older: "), "{overridden:?}");

    // Same day: allowed (the table keeps only the day). Older entry: allowed.
    assert!(rules::check_not_older(s, Some(&entry_dated(RECORD_DATE))).is_ok());
    assert!(rules::check_not_older(s, Some(&entry_dated("2026-11-28"))).is_ok());
}

#[test]
fn a_record_date_that_is_not_a_date_is_refused_whatever_the_flags() {
    let (raw, s) = record();
    let mut s = s.clone();
    s.date = "29/11/2026".into();
    let all = Allow { dirty: true, stale_fingerprint: true, older: true, loose_gate: true, weak_plan: true };
    let r = rules::check_provenance(raw, &s, Some(&entry_dated("2026-12-01")), "ffffffffffffffff", all).unwrap_err();
    assert!(matches!(r, Refusal::BadDate(_)), "{r:?}");
}

/// A scratch repository: a table with comments and an entry for the
/// record's key dated `entry_date`, and a copy of [`SCRATCH_RECORD`] whose
/// startup events report `git_dirty` and, with `fingerprint`, the fields
/// this build's runtime reports, with that verify-path fingerprint
/// (without, the record stays as old runtimes wrote it).
struct Scratch {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    dir: PathBuf,
}

/// A line for `dir` in its records/ledger.jsonl, hashing its raw.jsonl as
/// it is now (as `tuner sweep` writes one when a sweep ends): `propose`
/// pools only records the ledger vouches for.
fn vouch(dir: &Path) {
    let (records, line) =
        tuner::output::ledger::for_sweep(dir, "complete".into(), Err("a test's copy of a record".into())).unwrap();
    tuner::output::ledger::append(&records, &line).unwrap();
}

fn scratch(entry_date: &str, git_dirty: &str, fingerprint: Option<&str>) -> Scratch {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let dir = root.join("records/r");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(root.join("records/later")).unwrap();
    std::fs::create_dir_all(root.join("policy")).unwrap();
    let raw = std::fs::read_to_string(repo().join(SCRATCH_RECORD).join("raw.jsonl")).unwrap();
    let mut out = String::new();
    for l in raw.lines() {
        let mut v: Value = serde_json::from_str(l).unwrap();
        if v["kind"] == "startup" {
            let st = &mut v["startup"];
            st["build"]["git_dirty"] = git_dirty.into();
            // The build identity (`kernel_fingerprint`) stays as recorded:
            // propose compares the key's verify-path fingerprint.
            if let Some(fp) = fingerprint {
                st["verify_fingerprint"] = fp.into();
                st["target"]["weight_formats"] = serde_json::json!(RECORD_FORMATS);
                st["target"]["quant"]["format"] = "gguf".into();
                st["target"]["parameters"] = PARAMS.into();
                st["host_class"] = HOST.into();
                let speculative = st["drafter"] != "none";
                st["drafter_from"] = if speculative { "flag" } else { "none" }.into();
                st["drafter_settings"] =
                    if speculative { serde_json::json!({"ngram_min": 3, "ngram_max": 4}) } else { Value::Null };
            }
        }
        out.push_str(&v.to_string());
        out.push('\n');
    }
    std::fs::write(dir.join("raw.jsonl"), out).unwrap();
    vouch(&dir);
    let table = format!(
        "# scratch table\nschema_version = 3\n\n# the entry the record replaces\n[[entry]]\ndrafter = \"ngram\"\n\
         device_class = \"cpu:x86_64-avx512vnni\"\nhost_class = \"{HOST}\"\ntarget_quant = \"q4_1\"\nthreads = 2\n\
         model = {MODEL_TOML}\nprompts = {PROMPTS_TOML}\n\
         drafter_settings = {{ ngram_min = 3, ngram_max = 4 }}\nweight_formats = [\"q4_1\", \"q8_0\"]\nwidth = 4\n\
         record = \"records/later\"\ndate = {entry_date}\nratio = 1.2\nratio_interval = [1.1, 1.3]\nhost = \"h\"\n\
         verify_fingerprint = \"0123456789abcdef\"\n# kept after the entry\n\n# the end\n"
    );
    std::fs::write(root.join(TABLE_FILE), table).unwrap();
    Scratch { _tmp: tmp, root, dir }
}

impl Scratch {
    /// `tuner propose` with `flags` and `--allow-weak-plan`: the scratch
    /// record is a copy of a committed record swept before every arm was read
    /// twice and before the bracket plan could detect a 10 % drift (the
    /// refusal itself is tested below, through [`Scratch::propose_strict`]).
    fn propose(&self, flags: &[&str]) -> Output {
        let mut all = flags.to_vec();
        all.push("--allow-weak-plan");
        self.propose_strict(&all)
    }

    fn propose_strict(&self, flags: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_tuner")).arg("propose").arg(&self.dir).args(flags).output().expect("run tuner")
    }

    fn table(&self) -> String {
        std::fs::read_to_string(self.root.join(TABLE_FILE)).unwrap()
    }
}

fn text(o: &Output) -> String {
    draftwise_tests::output_text(o)
}

fn assert_refused(o: &Output, flag: &str) {
    assert_eq!(o.status.code(), Some(5), "{}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refused") && err.contains(flag), "{}", text(o));
}

#[test]
fn the_binary_refuses_a_dirty_record_and_proposes_it_with_allow_dirty() {
    let f = scratch("2026-01-01", "true", Some(&current()));
    let before = f.table();
    assert_refused(&f.propose(&["--dry-run"]), "--allow-dirty");
    let o = f.propose(&["--dry-run", "--allow-dirty"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("warning: overridden by --allow-dirty"), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("+record = \"records/r\"\n"), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("uncommitted changes, allowed by --allow-dirty"),
        "the entry's note names the override: {}",
        text(&o)
    );
    assert_eq!(f.table(), before, "--dry-run writes nothing");
}

#[test]
fn the_binary_refuses_a_stale_or_older_record_until_each_flag_is_given() {
    let stale = "0000000000000000";
    assert_ne!(stale, current());
    let f = scratch("2026-12-31", "false", Some(stale));
    let before = f.table();
    let o = f.propose(&[]);
    assert_refused(&o, "--allow-stale-fingerprint");
    assert!(String::from_utf8_lossy(&o.stderr).contains(&current()), "{}", text(&o));
    assert_refused(&f.propose(&["--allow-stale-fingerprint"]), "--allow-older");
    assert_refused(&f.propose(&["--allow-older"]), "--allow-stale-fingerprint");
    assert_eq!(f.table(), before, "a refusal writes nothing");

    let o = f.propose(&["--allow-stale-fingerprint", "--allow-older"]);
    assert!(o.status.success(), "{}", text(&o));
    let after = f.table();
    // The diff printed is the diff of exactly the bytes written.
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with(&propose::diff(&before, &after, TABLE_FILE)), "{out}");
    let t = table::compile(TABLE_FILE, &after, RecordCheck::Under(&f.root)).unwrap();
    assert_eq!(t.entries.len(), 1);
    assert_eq!((t.entries[0].record.as_str(), t.entries[0].date.as_str()), ("records/r", SCRATCH_DATE));
    assert_eq!(t.entries[0].verify_fingerprint, stale);
    assert_eq!(t.entries[0].key.threads, Some(2));
    assert_eq!(t.entries[0].drafter_settings, DrafterSettings::ngram(3, 4));
    assert_eq!(t.entries[0].weight_formats, RECORD_FORMATS);
    let head = "# scratch table\nschema_version = 3\n\n# the entry the record replaces\n[[entry]]\n";
    assert!(after.starts_with(head) && after.ends_with("\"\n# kept after the entry\n\n# the end\n"), "{after}");
}

#[test]
fn the_binary_refuses_an_old_record_whatever_the_flags_and_says_to_re_measure() {
    let f = scratch("2026-01-01", "false", None);
    let before = f.table();
    for flags in [&[][..], &["--allow-dirty", "--allow-stale-fingerprint", "--allow-older"][..]] {
        let o = f.propose(flags);
        assert_eq!(o.status.code(), Some(5), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("refused") && err.contains("re-measure"), "{}", text(&o));
    }
    assert_eq!(f.table(), before, "a refusal writes nothing");
}

#[test]
fn a_record_of_a_dirty_build_is_left_out_of_the_pool_and_named() {
    // Two records of one key and fingerprint: this one clean, the other
    // measured by a dirty build. The other is refused alone, so it does not
    // count in the pool either (unless --allow-dirty), and propose says so.
    let f = scratch("2026-01-01", "false", Some(&current()));
    let other = f.root.join("records/r-dirty");
    std::fs::create_dir_all(&other).unwrap();
    let raw = std::fs::read_to_string(f.dir.join("raw.jsonl")).unwrap();
    assert!(raw.contains("\"git_dirty\":\"false\""), "the scratch record states its build clean");
    // Another sweep: its own start time (a copy of one sweep is pooled once).
    let raw = raw.replacen("\"started_at_unix_ms\":", "\"started_at_unix_ms\":1", 1);
    std::fs::write(other.join("raw.jsonl"), raw.replace("\"git_dirty\":\"false\"", "\"git_dirty\":\"true\"")).unwrap();
    vouch(&other);
    let o = f.propose(&["--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("left out: records/r-dirty") && err.contains("dirty"), "{}", text(&o));
    // Not pooled; the note names it as left out.
    assert_eq!(pool_of(&o).0, "+pooled = [\"records/r\"]", "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("left out of the pool: records/r-dirty (refused alone)"));
    // With --allow-dirty it counts, and the entry names both records.
    let o = f.propose(&["--dry-run", "--allow-dirty"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(pool_of(&o).0, "+pooled = [\"records/r\", \"records/r-dirty\"]", "{}", text(&o));
}

#[test]
fn a_record_of_this_build_is_proposed_although_its_build_fingerprint_differs() {
    // The key's verify-path fingerprint decides: the record's whole-build
    // fingerprint (`kernel_fingerprint`, another build's) does not matter.
    let (_, s) = committed();
    assert_ne!(s.kernel_fingerprint.as_deref(), Some(KERNEL_FINGERPRINT), "the record is another build's");
    let f = scratch("2026-01-01", "false", Some(&current()));
    let o = f.propose(&[]);
    assert!(o.status.success(), "{}", text(&o));
    let t = table::compile(TABLE_FILE, &f.table(), RecordCheck::Under(&f.root)).unwrap();
    assert_eq!((t.entries.len(), t.entries[0].record.as_str()), (1, "records/r"));
    assert_eq!(t.entries[0].verify_fingerprint, current());
}

#[test]
fn a_decision_for_the_widest_width_measured_is_refused_with_how_to_widen_the_range() {
    let (raw, s) = record();
    let widths = raw.header.settings.design.widths.clone();
    let widest = *widths.iter().max().unwrap();
    let mut s = s.clone();
    s.decision.width = Some(widest);
    let r = tuner::analysis::rules::plan::check_range(&s, &widths).unwrap_err();
    assert!(matches!(r, Refusal::WidestWidth { width, .. } if width == widest), "{r:?}");
    assert!(r.to_string().contains("--widths"), "{r}");
    // A narrower width, or the widest a width may be, is not refused.
    s.decision.width = Some(arm(widths[0].code().min(widest.code() - 1).max(1)));
    assert!(tuner::analysis::rules::plan::check_range(&s, &widths).is_ok());
    s.decision.width = Some(arm(policy::MAX_WIDTH));
    assert!(tuner::analysis::rules::plan::check_range(&s, &arms(&[1, policy::MAX_WIDTH])).is_ok());
}

#[test]
fn the_binary_refuses_a_record_swept_with_a_looser_gate_unless_allowed_and_the_note_says_so() {
    let f = scratch("2026-01-01", "false", Some(&current()));
    // The record's header as if swept with --host-cpu-threshold 90.
    let raw = std::fs::read_to_string(f.dir.join("raw.jsonl")).unwrap();
    let mut lines: Vec<String> = raw.lines().map(str::to_string).collect();
    let mut h: Value = serde_json::from_str(&lines[0]).unwrap();
    h["settings"]["gate"]["host_cpu_threshold_pct"] = 90.0.into();
    lines[0] = h.to_string();
    std::fs::write(f.dir.join("raw.jsonl"), lines.join("\n") + "\n").unwrap();
    vouch(&f.dir);
    let before = f.table();
    assert_refused(&f.propose(&[]), "--allow-loose-gate");
    assert_eq!(f.table(), before);
    let o = f.propose(&["--allow-loose-gate"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--host-cpu-threshold 90"), "{}", text(&o));
    assert!(f.table().contains("gate looser than the defaults, allowed by --allow-loose-gate"), "{}", f.table());
}

#[test]
fn the_binary_refuses_a_record_whose_plan_is_weaker_than_the_rules_unless_allowed_and_the_note_says_so() {
    let f = scratch("2026-01-01", "false", Some(&current()));
    let before = f.table();
    let o = f.propose_strict(&[]);
    assert_refused(&o, "re-run `tuner sweep`");
    let err = String::from_utf8_lossy(&o.stderr);
    // Its arms were read by the gate fewer than twice (swept before the rule).
    assert!(err.contains("fewer than 2 times"), "{}", text(&o));
    assert_eq!(f.table(), before);
    let o = f.propose_strict(&["--allow-weak-plan"]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("overridden by --allow-weak-plan"), "{}", text(&o));
    // Both weaknesses are named: the readings and the drift test's power.
    assert!(err.contains("cannot detect a 10% drift") && err.contains("--bracket-arms"), "{}", text(&o));
    assert!(f.table().contains("plan weaker than the rules, allowed by --allow-weak-plan"), "{}", f.table());
}

#[test]
fn a_table_larger_than_the_cap_is_refused_before_it_is_read_whole() {
    let s = scratch("2026-11-01", "false", Some(&current()));
    // The table is a sparse file of 64 GiB of zeros: read whole, it would
    // take minutes and all the memory there is.
    let table = s.root.join(TABLE_FILE);
    std::fs::OpenOptions::new().write(true).open(&table).unwrap().set_len(64 << 30).unwrap();
    let t0 = std::time::Instant::now();
    let o = s.propose(&["--dry-run", "--table", table.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(text(&o).contains("is larger than 1048576 bytes"), "{}", text(&o));
    assert!(t0.elapsed() < std::time::Duration::from_secs(30), "{:?}", t0.elapsed());
}

#[test]
fn a_record_that_cannot_be_read_is_an_error_not_a_refusal() {
    let s = scratch("2026-11-01", "false", Some(&current()));
    let gone = s.root.join("records/no-such-record");
    let o = Command::new(draftwise_tests::bin("tuner"))
        .args(["propose", gone.to_str().unwrap(), "--dry-run"])
        .output()
        .expect("run tuner");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("error") && err.contains("no-such-record") && !err.contains("refused"), "{err}");
}

/// `records/<name>`: a copy of the scratch record's raw.jsonl as another
/// sweep would have written it (its own start time), vouched for by a
/// ledger line when `vouched`.
fn another_sweep(f: &Scratch, name: &str, start: u64, vouched: bool) -> PathBuf {
    let raw = std::fs::read_to_string(f.dir.join("raw.jsonl")).unwrap();
    let mut lines: Vec<String> = raw.lines().map(str::to_string).collect();
    let mut h: Value = serde_json::from_str(&lines[0]).unwrap();
    h["started_at_unix_ms"] = start.into();
    lines[0] = h.to_string();
    let dir = f.root.join("records").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("raw.jsonl"), lines.join("\n") + "\n").unwrap();
    if vouched {
        vouch(&dir);
    }
    dir
}

/// What `propose --dry-run` of the scratch record pooled (`+pooled = [...]`)
/// and said it left out.
fn pool_of(o: &Output) -> (String, String) {
    let out = String::from_utf8_lossy(&o.stdout);
    let pooled = out.lines().find(|l| l.starts_with("+pooled = ")).unwrap_or_default().to_string();
    (pooled, String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn a_copied_record_is_pooled_once_whatever_its_name_or_ledger_line() {
    let f = scratch("2026-01-01", "false", Some(&current()));
    // Another sweep of the key: pooled.
    another_sweep(&f, "r2", 1_796_000_000_001, true);
    let o = f.propose(&["--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let (pooled, _) = pool_of(&o);
    assert_eq!(pooled, "+pooled = [\"records/r\", \"records/r2\"]", "{}", text(&o));
    // A byte-for-byte copy of each, with a ledger line of its own (a copy's
    // line copied too): one sweep's rounds count once.
    for (from, to) in [("r", "r-copy"), ("r2", "z-copy-of-r2")] {
        let dir = f.root.join("records").join(to);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(f.root.join("records").join(from).join("raw.jsonl"), dir.join("raw.jsonl")).unwrap();
        vouch(&dir);
    }
    // A copy of r2 whose raw.jsonl differs by a byte: the same start time.
    let raw = std::fs::read_to_string(f.root.join("records/r2/raw.jsonl")).unwrap();
    let dir = f.root.join("records/r2-touched");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("raw.jsonl"), raw + "\n").unwrap();
    vouch(&dir);
    let o = f.propose(&["--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let (pooled, err) = pool_of(&o);
    assert_eq!(pooled, "+pooled = [\"records/r\", \"records/r2\"]", "{}", text(&o));
    assert!(err.contains("left out: records/r-copy: the same sweep as records/r ("), "{err}");
    assert!(err.contains("left out: records/z-copy-of-r2: the same sweep as records/r2 ("), "{err}");
    assert!(err.contains("left out: records/r2-touched: the same sweep as records/r2 ("), "{err}");
    let note = String::from_utf8_lossy(&o.stdout);
    assert!(note.contains("left out of the pool: records/r-copy (the same sweep as records/r)"), "{note}");
}

#[test]
fn a_record_edited_after_its_ledger_line_is_left_out_and_is_not_proposed() {
    let f = scratch("2026-01-01", "false", Some(&current()));
    let r2 = another_sweep(&f, "r2", 1_796_000_000_001, true);
    // Edited after its line (its date, here: the ledger's hash no longer
    // matches, whatever the edit says).
    let raw = std::fs::read_to_string(r2.join("raw.jsonl")).unwrap();
    assert!(raw.contains("\"date\":\"2026-12-02\""));
    std::fs::write(r2.join("raw.jsonl"), raw.replacen("\"date\":\"2026-12-02\"", "\"date\":\"2026-12-01\"", 1))
        .unwrap();
    // And a folder the ledger never named.
    another_sweep(&f, "r3", 1_796_000_000_002, false);
    let o = f.propose(&["--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let (pooled, err) = pool_of(&o);
    assert_eq!(pooled, "+pooled = [\"records/r\"]", "{}", text(&o));
    assert!(err.contains("left out: records/r2: its raw.jsonl (sha256 ") && err.contains("edited after"), "{err}");
    assert!(err.contains("left out: records/r3: no line of records/ledger.jsonl"), "{err}");
    let note = String::from_utf8_lossy(&o.stdout);
    assert!(
        note.contains("records/r2 (raw.jsonl edited after its ledger line), records/r3 (not in the ledger)"),
        "{note}"
    );
    // Proposed itself, the edited record is refused (exit 5), and so is the
    // unvouched one, each saying why.
    for (dir, why) in [(r2, "edited after the sweep"), (f.root.join("records/r3"), "no line of records/ledger.jsonl")] {
        let o = Command::new(env!("CARGO_BIN_EXE_tuner"))
            .args(["propose", dir.to_str().unwrap(), "--dry-run", "--allow-weak-plan"])
            .output()
            .unwrap();
        assert_refused(&o, why);
        assert!(text(&o).contains("is not the sweep records/ledger.jsonl records"), "{}", text(&o));
    }
    // A later line that hashes the edit (a deliberate edit, said in the
    // ledger) vouches for it again.
    vouch(&f.root.join("records/r2"));
    let (pooled, _) = pool_of(&f.propose(&["--dry-run"]));
    assert_eq!(pooled, "+pooled = [\"records/r\", \"records/r2\"]");
}

#[test]
fn a_symlinked_record_folder_or_raw_file_is_not_pooled() {
    let f = scratch("2026-01-01", "false", Some(&current()));
    // A record outside the repository, vouched for where it lies, and a
    // link to it under records/.
    let outside = tempfile::tempdir().unwrap();
    let out_records = outside.path().join("records");
    let elsewhere = {
        let d = another_sweep(&f, "elsewhere", 1_796_000_000_003, false);
        let to = out_records.join("linked");
        std::fs::create_dir_all(&out_records).unwrap();
        std::fs::rename(&d, &to).unwrap();
        to
    };
    std::os::unix::fs::symlink(&elsewhere, f.root.join("records/linked")).unwrap();
    // The ledger says what a line for it would say, hash and all.
    let sha = runtime::events::sha256_hex(&std::fs::read(elsewhere.join("raw.jsonl")).unwrap());
    let mut line = tuner::output::ledger::read(&f.root.join("records")).unwrap()[0].clone();
    (line.folder, line.raw_sha256) = ("linked".into(), Some(sha));
    tuner::output::ledger::append(&f.root.join("records"), &line).unwrap();
    // A real folder whose raw.jsonl is a link to another sweep's file.
    let real = f.root.join("records/r4");
    std::fs::create_dir_all(&real).unwrap();
    std::os::unix::fs::symlink(elsewhere.join("raw.jsonl"), real.join("raw.jsonl")).unwrap();
    vouch(&real);
    let o = f.propose(&["--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let (pooled, err) = pool_of(&o);
    assert_eq!(pooled, "+pooled = [\"records/r\"]", "{}", text(&o));
    assert!(err.contains("left out: records/linked: a symbolic link (to "), "{err}");
    assert!(err.contains("left out: records/r4: its raw.jsonl is a symbolic link"), "{err}");
}

#[test]
fn a_record_from_before_the_ledger_is_backfilled_once_and_marked() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("records/2026-12-02-old");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(repo().join(SCRATCH_RECORD).join("raw.jsonl"), dir.join("raw.jsonl")).unwrap();
    let tuner = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_tuner")).args(args).output().unwrap();
    let d = dir.to_str().unwrap();
    let o = tuner(&["ledger", "backfill", d]);
    assert!(o.status.success(), "{}", text(&o));
    let lines = tuner::output::ledger::read(&tmp.path().join("records")).unwrap();
    assert_eq!(lines.len(), 1);
    let l = &lines[0];
    assert!(l.backfilled && l.outcome.contains("backfilled"), "{l:?}");
    assert_eq!(l.folder, "2026-12-02-old");
    let sha = runtime::events::sha256_hex(&std::fs::read(dir.join("raw.jsonl")).unwrap());
    assert_eq!(l.raw_sha256.as_deref(), Some(sha.as_str()));
    assert_eq!(tuner::output::ledger::vouched(&lines, "2026-12-02-old", &sha), Ok(0));
    // The field is written only when set, and read back.
    let text_of = std::fs::read_to_string(tmp.path().join("records/ledger.jsonl")).unwrap();
    assert!(text_of.contains("\"backfilled\":true"), "{text_of}");
    let o = tuner(&["ledger", "show", tmp.path().join("records").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("2026-12-02-old [backfilled]: "), "{}", text(&o));
    // Once: a folder the ledger names is not backfilled again.
    let o = tuner(&["ledger", "backfill", d]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(text(&o).contains("already has a line"), "{}", text(&o));
    // Nor a record from the ledger's first day on: its sweep wrote its own line.
    let later = tmp.path().join("records/2026-12-05-new");
    std::fs::create_dir_all(&later).unwrap();
    let raw = std::fs::read_to_string(dir.join("raw.jsonl")).unwrap();
    std::fs::write(later.join("raw.jsonl"), raw.replacen("\"date\":\"2026-12-02\"", "\"date\":\"2026-12-05\"", 1))
        .unwrap();
    let o = tuner(&["ledger", "backfill", later.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(text(&o).contains("not before 2026-12-03"), "{}", text(&o));
    assert_eq!(tuner::output::ledger::read(&tmp.path().join("records")).unwrap().len(), 1);
}
