//! `tuner propose`: turns a record into an entry of
//! `policy/draft-block-width.toml`, or refuses with the reason and the fix.
//!
//! Principal items: [`propose`] (the whole command), [`edit_table`] (the
//! table edited as a document), [`diff`] (what is written). What it refuses
//! and why is [`crate::analysis::rules`]: [`check`] (is the record's measurement
//! clean?), [`check_provenance`] (was it measured by this build, clean, and
//! is it newer than what it replaces? each refusal has an `--allow-*` flag,
//! [`Allow`]), [`Refusal`].
//!
//! The table is read and the result validated with the runtime's own
//! compiler ([`policy::table::compile`], the one `build.rs` runs),
//! so a proposed table is one the build accepts. The edit itself is a splice
//! of the original text at the spans `toml_edit` reports: only the bytes of
//! the entry for the record's key change (or the new entry's are added), so
//! every other entry, comment, blank line and layout byte is kept as written.
use std::ops::Range;
use std::path::{Path, PathBuf};

use policy::table::{self, RecordCheck};
use policy::{Drafting, PolicyKey, TABLE_FILE, Width};

use crate::analysis::rules::{Allow, Refusal, check, check_provenance, current_fingerprint, record_key};
use crate::analysis::summary::Summary;
use crate::data::plan::SpeculativeArm;
use crate::data::raw::RawFile;

/// Why `propose` did not produce a table: a refusal (exit 5), or a record
/// that cannot be read or summarized (an error).
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// raw.jsonl could not be read or summarized (the message names the file and line).
    #[error("{0}")]
    Record(String),
}

/// The table above `dir`: the first ancestor holding `policy/draft-block-width.toml`.
pub fn find_table(dir: &Path) -> Result<PathBuf, Refusal> {
    let start = dir.canonicalize().map_err(|source| Refusal::Io { path: dir.to_path_buf(), source })?;
    start
        .ancestors()
        .map(|a| a.join(TABLE_FILE))
        .find(|p| p.is_file())
        .ok_or_else(|| Refusal::NoTable(start.display().to_string()))
}

/// A one-line TOML basic string (TOML 1.0, "Basic strings").
pub(crate) fn toml_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A short host identity for the entry's `host` field.
pub fn short_host(raw: &RawFile) -> String {
    crate::host::identity::short_host(&raw.header.identity)
}

/// The entry's fields in the order they are written, each value as TOML.
pub type Fields = Vec<(&'static str, String)>;

/// An entry's key as its first fields, in the table's order: drafter,
/// device and host class, target quantization (and its format), the
/// activation precision where it applies, threads, and the bucket above one
/// sequence. Measured (`propose`) and predicted (`predicted`) entries
/// share it, so neither can drop a part of the key the table reads.
pub fn key_fields(key: &policy::PolicyKey, target_quant_format: Option<&str>) -> Fields {
    let mut fields: Fields = vec![
        ("drafter", toml_str(key.drafter.as_str())),
        ("device_class", toml_str(key.device.as_str())),
        ("host_class", toml_str(key.host.as_str())),
        ("target_quant", toml_str(&key.quant)),
    ];
    if let Some(f) = target_quant_format {
        fields.push(("target_quant_format", toml_str(f)));
    }
    if let Some(p) = key.precision {
        fields.push(("precision", toml_str(p.as_str())));
    }
    if let Some(t) = key.threads {
        fields.push(("threads", t.to_string()));
    }
    if key.concurrency > 1 {
        fields.push(("concurrency", key.concurrency.to_string()));
    }
    fields
}

/// The prompt set as an entry names it ([`crate::data::profile::entry_prompts_name`]).
fn prompts_name(source: &str) -> String {
    crate::data::profile::entry_prompts_name(source)
}

/// The entry's fields, in the schema's order, values written as TOML.
pub fn entry_fields(raw: &RawFile, s: &Summary, record: &str) -> Result<Fields, Refusal> {
    let key = record_key(s)?;
    let Some(fp) = &s.verify_fingerprint else {
        return Err(Refusal::Key(s.key_problem.clone().unwrap_or_else(|| "no verify-path fingerprint".into())));
    };
    let Some((model_file, model_sha)) = &s.model_file else {
        return Err(Refusal::Key("the identity has no sha256 of the target model".into()));
    };
    let (Some(settings), Some(formats)) = (&s.drafter_settings, &s.weight_formats) else {
        return Err(Refusal::Key(
            s.key_problem.clone().unwrap_or_else(|| "no drafter settings or weight formats".into()),
        ));
    };
    let (Some(ratio), Some((lo, hi))) = (s.decision.ratio, s.decision.ratio_interval) else {
        return Err(Refusal::NoDecision(s.decision.why.clone()));
    };
    // Rounded outward, so the written interval still contains the written ratio.
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    let (ratio, lo, hi) = (r3(ratio), (lo * 1000.0).floor() / 1000.0, (hi * 1000.0).ceil() / 1000.0);
    let cap = raw.header.settings.design.adaptive_cap();
    let drafting = s.decision.width.map(|a| a.drafting(cap));
    let width = width_text(drafting);
    let note = format!(
        "tuner propose: {}the record's {}; {} rounds (the unit of the interval), each {} classic arm(s) a side x {} \
         burst(s) and one arm per width x {} burst(s) over {} prompts, widths [{}]",
        match (s.served, s.concurrency) {
            (false, _) => String::new(),
            (true, 1) => "served sweep (end-to-end tok/s of streamed requests): ".to_string(),
            (true, n) => format!(
                "served sweep at {n} concurrent clients (end-to-end tok/s of streamed requests; a bucket for {n} \
                 or more sequences in a pass): "
            ),
        },
        decision_note(s),
        s.complete_rounds,
        raw.header.settings.design.bracket_arms,
        raw.header.settings.design.bursts_of(None),
        raw.header.settings.design.bursts,
        raw.header.prompts.len(),
        raw.header.settings.design.widths.iter().map(SpeculativeArm::to_string).collect::<Vec<_>>().join(", ")
    );
    let mut fields = key_fields(&key, s.target_quant_format.as_deref());
    let prompts = prompts_name(&raw.header.settings.prompts_source);
    fields.extend([
        (
            "model",
            format!(
                "{{ architecture = {}, parameters = {}, file = {}, sha256 = {} }}",
                toml_str(&key.model.architecture),
                key.model.parameters,
                toml_str(model_file),
                toml_str(model_sha)
            ),
        ),
        (
            "prompts",
            format!("{{ name = {}, sha256 = {} }}", toml_str(&prompts), toml_str(&raw.header.settings.prompts_sha256)),
        ),
        ("drafter_settings", settings_inline(settings)),
        ("weight_formats", format!("[{}]", formats.iter().map(|f| toml_str(f)).collect::<Vec<_>>().join(", "))),
        ("width", width),
    ]);
    if drafting.is_some_and(Drafting::is_adaptive) {
        fields.push(("adaptive", "true".into()));
    }
    fields.extend([
        ("record", toml_str(record)),
        // A TOML local date, unquoted (the compiler accepts it and the string form).
        ("date", s.date.clone()),
        ("ratio", ratio.to_string()),
        ("ratio_interval", format!("[{lo}, {hi}]")),
    ]);
    if let Some(e) = emitted_per_verify(s, s.decision.width, cap) {
        fields.push(("emitted_per_verify", e));
    }
    fields.extend([("host", toml_str(&short_host(raw))), ("verify_fingerprint", toml_str(fp))]);
    if let Some(curves) = verify_cost_text(&s.verify_cost) {
        fields.push(("verify_cost", curves));
    }
    fields.push(("note", toml_str(&note)));
    Ok(fields)
}

/// The record's decision as the note says it: the record's headline
/// sentence (the one interval the record gives for its decision, as its
/// headline and plot give it), why the adaptive arm was not chosen where
/// the record has one, and, for a drifted record whose choice survives,
/// what either bracket alone chose. The decision rule's own wording (which
/// states the two-sided interval a drifted record does not show) is left
/// to the record.
fn decision_note(s: &Summary) -> String {
    let (lead, rest) = crate::output::record::decision_sentence(s);
    let mut note = format!("{}{}", lead.to_lowercase(), rest.trim_end_matches('.'));
    if let Some((_, adaptive)) = s.decision.why.split_once("; the adaptive arm is not chosen: ") {
        let adaptive = adaptive.split("; the host drifted").next().unwrap_or(adaptive);
        note.push_str(&format!("; the adaptive arm is not chosen: {adaptive}"));
    }
    if let Some(d) = s.drift_survival.as_ref().filter(|d| s.drift && d.survives) {
        note.push_str(&format!(
            "; the host drifted and the choice survives it ({}), so its interval holds both",
            d.say()
        ));
    }
    note
}

/// The record's tokens per verify pass at `width` (its median over
/// requests), as the entry writes it (three decimals); `None` for `off` or
/// a width the record did not measure.
fn emitted_per_verify(s: &Summary, arm: Option<SpeculativeArm>, cap: Width) -> Option<String> {
    let a = arm?;
    let e = s.widths.iter().find(|x| x.width == a)?.emitted_per_verify?;
    let most = a.drafting(cap).max().verify_rows();
    let e = ((e * 1000.0).round() / 1000.0).clamp(1.0, most as f64);
    Some(format!("{e:?}"))
}

/// The entry's `width` for a decision: the number, `"off"`, or for the
/// adaptive draft length its most (the widest fixed width; the entry then
/// says `adaptive = true`).
pub(crate) fn width_text(drafting: Option<Drafting>) -> String {
    match drafting {
        Some(d) => d.max().to_string(),
        None => "\"off\"".to_string(),
    }
}

/// The record's verify-cost curves as the entry writes them, `[{ context =
/// 64, relative = [1.0, 1.083, ...] }, ...]` (three decimals); `None` when
/// the sweep measured none. A curve is written only with every pass size
/// measured from one row up.
fn verify_cost_text(curves: &[crate::data::verify_cost::CostCurve]) -> Option<String> {
    let written: Vec<String> = curves
        .iter()
        .filter(|c| c.points.len() >= 2 && c.points.iter().enumerate().all(|(i, p)| p.rows == i + 1))
        .map(|c| {
            let rel: Vec<String> =
                c.points.iter().map(|p| format!("{:?}", (p.relative * 1000.0).round() / 1000.0)).collect();
            format!("{{ context = {}, relative = [{}] }}", c.context, rel.join(", "))
        })
        .collect();
    (!written.is_empty()).then(|| format!("[{}]", written.join(", ")))
}

/// `{ ngram_min = 3, ngram_max = 4 }`: the settings as a TOML inline table.
pub(crate) fn settings_inline(d: &policy::DrafterSettings) -> String {
    let mut kv = Vec::new();
    if let Some(n) = d.ngram_min {
        kv.push(format!("ngram_min = {n}"));
    }
    if let Some(n) = d.ngram_max {
        kv.push(format!("ngram_max = {n}"));
    }
    if let Some(l) = &d.layers {
        kv.push(format!("layers = [{}]", l.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")));
    }
    if let Some(n) = d.suffix_min_match {
        kv.push(format!("suffix_min_match = {n}"));
    }
    if let Some(n) = d.suffix_max_match {
        kv.push(format!("suffix_max_match = {n}"));
    }
    if let Some(p) = d.suffix_min_prob {
        // `{:?}` keeps a decimal point (0.5, 1.0), so TOML reads a float.
        kv.push(format!("suffix_min_prob = {:?}", p.0));
    }
    if kv.is_empty() { "{}".into() } else { format!("{{ {} }}", kv.join(", ")) }
}

/// The entry as an `[[entry]]` table, one `key = value` line per field,
/// ending with a newline.
pub fn entry_table_text(fields: &[(&str, String)]) -> String {
    let mut out = String::from("[[entry]]\n");
    for (k, v) in fields {
        out.push_str(&format!("{k} = {v}\n"));
    }
    out
}

/// The entry as a one-line inline table, `{ key = value, ... }` (one line:
/// TOML 1.0 inline tables cannot span lines).
pub fn entry_inline_text(fields: &[(&str, String)]) -> String {
    let kv: Vec<String> = fields.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    format!("{{ {} }}", kv.join(", "))
}

/// The entry's text in the `[[entry]]` form.
pub fn entry_text(raw: &RawFile, s: &Summary, record: &str) -> Result<String, Refusal> {
    Ok(entry_table_text(&entry_fields(raw, s, record)?))
}

/// One replacement of a byte range of the old text.
struct Splice {
    at: Range<usize>,
    text: String,
}

/// A table problem, naming the file.
pub(crate) fn table_problem(what: impl std::fmt::Display) -> Refusal {
    Refusal::Table(format!("{TABLE_FILE}: {what}"))
}

/// The byte just past the end of the line holding `at` (past its `\n`), or
/// the end of the text.
fn end_of_line(text: &str, at: usize) -> usize {
    text[at..].find('\n').map_or(text.len(), |i| at + i + 1)
}

/// The `[[entry]]` table's own bytes: from its header to the end of the line
/// of its last value (that line's comment included). Comments and blank
/// lines after it belong to what follows and are not touched.
pub(crate) fn table_region(text: &str, t: &toml_edit::Table) -> Result<Range<usize>, Refusal> {
    let header = t.span().ok_or_else(|| table_problem("an [[entry]] header has no position (toml_edit)"))?;
    let mut end = header.end;
    for (keys, v) in t.get_values() {
        let name = keys.iter().map(|k| k.get()).collect::<Vec<_>>().join(".");
        let span = v.span().ok_or_else(|| table_problem(format!("the value of {name:?} has no position")))?;
        end = end.max(span.end);
    }
    Ok(header.start..end_of_line(text, end))
}

/// Skips whitespace (newlines included) and `#` comments from `at`; the
/// index of the next significant byte, or `limit`.
fn skip_blank(text: &str, mut at: usize, limit: usize) -> usize {
    let b = text.as_bytes();
    while at < limit {
        match b[at] {
            b' ' | b'\t' | b'\r' | b'\n' => at += 1,
            b'#' => at = end_of_line(text, at).min(limit),
            _ => break,
        }
    }
    at
}

/// The splices that append `inline` to the inline array `arr`, in the
/// array's layout: on its own line with the last element's indentation when
/// elements are one per line, else after a comma on the same line.
fn append_to_array(text: &str, arr: &toml_edit::Array, inline: &str, nl: &str) -> Result<Vec<Splice>, Refusal> {
    let span = arr.span().ok_or_else(|| table_problem("the `entry` array has no position (toml_edit)"))?;
    let close = span.end.saturating_sub(1); // the `]`
    let Some(last) = arr.iter().last() else {
        return Ok(vec![Splice { at: span.start + 1..span.start + 1, text: inline.to_string() }]);
    };
    let last = last.span().ok_or_else(|| table_problem("an `entry` element has no position (toml_edit)"))?;
    let next = skip_blank(text, last.end, close);
    let has_comma = next < close && text.as_bytes()[next] == b',';
    let after = if has_comma { next + 1 } else { last.end };
    match text[after..close].find('\n') {
        // One element per line: a new line after the last element's.
        Some(i) => {
            let line_start = text[..last.start].rfind('\n').map_or(0, |j| j + 1);
            let line = &text[line_start..last.start];
            let indent = &line[..line.len() - line.trim_start_matches([' ', '\t']).len()];
            let at = after + i + 1;
            let mut out = Vec::new();
            if !has_comma {
                out.push(Splice { at: last.end..last.end, text: ",".into() });
            }
            let sep = if has_comma { "," } else { "" };
            out.push(Splice { at: at..at, text: format!("{indent}{inline}{sep}{nl}") });
            Ok(out)
        }
        None if has_comma => Ok(vec![Splice { at: after..after, text: format!(" {inline},") }]),
        None => Ok(vec![Splice { at: last.end..last.end, text: format!(", {inline}") }]),
    }
}

/// The splice that appends an `[[entry]]` block at the end of the text,
/// after a blank line (none added when the text already ends with one).
fn append_block(old: &str, block: &str, nl: &str) -> Splice {
    let mut text = String::new();
    if !old.is_empty() && !old.ends_with('\n') {
        text.push_str(nl);
    }
    if !old.is_empty() && !old.ends_with(&format!("{nl}{nl}")) {
        text.push_str(nl);
    }
    text.push_str(block);
    Splice { at: old.len()..old.len(), text }
}

/// The new table text: the entry for `key` replaced by `fields`, or the entry
/// appended when the key has none. Entries written as `[[entry]]` tables get
/// an `[[entry]]` table; an inline `entry = [{...}, ...]` array gets an
/// inline table in its place, or at its end. Every byte outside the replaced
/// entry (or the insertion) is kept as it was; new lines use the file's line
/// ending.
pub fn edit_table(old: &str, key: &PolicyKey, fields: &[(&str, String)]) -> Result<String, Refusal> {
    let doc = toml_edit::Document::parse(old).map_err(|e| table_problem(format!("malformed TOML: {e}")))?;
    // Which entry has the record's key is the compiler's answer, not a
    // second reader's: the table compiles (as `build.rs` compiles it; keys
    // are unique there) and its entries are in the document's order, so
    // the entry's index is its place in `entry`.
    let table = table::compile(TABLE_FILE, old, RecordCheck::Skip).map_err(|e| table_problem(e.to_string()))?;
    let at = table.entries.iter().position(|e| e.key == *key);
    let nl = if old.contains("\r\n") { "\r\n" } else { "\n" };
    let block = entry_table_text(fields).replace('\n', nl);
    let splices: Vec<Splice> = match doc.as_table().get("entry") {
        None => vec![append_block(old, &block, nl)],
        Some(toml_edit::Item::ArrayOfTables(aot)) => match at.and_then(|i| aot.get(i)) {
            None => vec![append_block(old, &block, nl)],
            Some(t) => vec![Splice { at: table_region(old, t)?, text: block }],
        },
        Some(toml_edit::Item::Value(toml_edit::Value::Array(arr))) => {
            let inline = entry_inline_text(fields);
            match at.and_then(|i| arr.get(i)) {
                None => append_to_array(old, arr, &inline, nl)?,
                Some(v) => {
                    let t = v.as_inline_table().ok_or_else(|| {
                        table_problem("`entry` holds a value that is not a table; write `[[entry]]` tables")
                    })?;
                    let at = t.span().ok_or_else(|| table_problem("an `entry` element has no position"))?;
                    vec![Splice { at, text: inline }]
                }
            }
        }
        Some(_) => {
            return Err(table_problem(
                "`entry` is neither [[entry]] tables nor an array of inline tables; write `[[entry]]` tables",
            ));
        }
    };
    let mut new = old.to_string();
    let mut splices = splices;
    // Back to front, so earlier offsets stay valid.
    splices.sort_by_key(|s| std::cmp::Reverse(s.at.start));
    for s in splices {
        if s.at.end > new.len() || !new.is_char_boundary(s.at.start) || !new.is_char_boundary(s.at.end) {
            return Err(table_problem(format!("position {}..{} is not in the table", s.at.start, s.at.end)));
        }
        new.replace_range(s.at, &s.text);
    }
    Ok(new)
}

/// Lines of context around each change in [`diff`].
const DIFF_CONTEXT: usize = 3;

/// Above this many cells (changed lines before × after) [`diff`] shows the
/// changed region as removed and re-added instead of matching lines within
/// it: a proposal changes one entry (about a dozen lines), so only a table
/// rewritten wholesale gets there.
const DIFF_MAX_CELLS: usize = 1 << 22;

/// One line of a diff: kept, removed (`-`) or added (`+`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op<'a> {
    Keep(&'a str),
    Del(&'a str),
    Add(&'a str),
}

/// The line operations turning `a` into `b`: a longest common subsequence
/// of the lines between the common prefix and suffix.
fn line_ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Op<'a>> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..].iter().rev().zip(b[pre..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (am, bm) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let mut ops: Vec<Op<'a>> = a[..pre].iter().map(|l| Op::Keep(l)).collect();
    let (n, m) = (am.len(), bm.len());
    if n.saturating_mul(m) > DIFF_MAX_CELLS {
        ops.extend(am.iter().map(|l| Op::Del(l)));
        ops.extend(bm.iter().map(|l| Op::Add(l)));
    } else {
        // lcs[i][j]: the LCS length of am[i..] and bm[j..], row-major.
        let w = m + 1;
        let mut lcs = vec![0u32; (n + 1) * w];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[i * w + j] = if am[i] == bm[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && am[i] == bm[j] {
                ops.push(Op::Keep(am[i]));
                (i, j) = (i + 1, j + 1);
            } else if j == m || (i < n && lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
                ops.push(Op::Del(am[i]));
                i += 1;
            } else {
                ops.push(Op::Add(bm[j]));
                j += 1;
            }
        }
    }
    ops.extend(a[a.len() - suf..].iter().map(|l| Op::Keep(l)));
    ops
}

/// A unified diff (`diff -u`, three lines of context) of exactly the bytes
/// written: lines keep their terminators, so a change of line ending or of
/// the final newline shows too (`\ No newline at end of file`, as diff
/// writes it). Identical bytes: `NAME: unchanged`.
pub fn diff(old: &str, new: &str, name: &str) -> String {
    if old == new {
        return format!("{name}: unchanged\n");
    }
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    let ops = line_ops(&a, &b);
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| !matches!(ops[k], Op::Keep(_))).collect();
    // Hunks: runs of changes less than two contexts apart, with their context.
    let mut hunks: Vec<Range<usize>> = Vec::new();
    for &k in &changed {
        let (start, end) = (k.saturating_sub(DIFF_CONTEXT), (k + 1 + DIFF_CONTEXT).min(ops.len()));
        match hunks.last_mut() {
            Some(h) if start <= h.end => h.end = end,
            _ => hunks.push(start..end),
        }
    }
    let mut out = format!("--- a/{name}\n+++ b/{name}\n");
    // Lines of a and b before op k.
    let before = |k: usize| {
        let a_n = ops[..k].iter().filter(|o| !matches!(o, Op::Add(_))).count();
        let b_n = ops[..k].iter().filter(|o| !matches!(o, Op::Del(_))).count();
        (a_n, b_n)
    };
    // A unified range: 1-based start and count; an empty one starts at the line before.
    let range = |start: usize, len: usize| if len == 0 { format!("{start},0") } else { format!("{},{len}", start + 1) };
    for h in hunks {
        let (a0, b0) = before(h.start);
        let hunk = &ops[h];
        let a_len = hunk.iter().filter(|o| !matches!(o, Op::Add(_))).count();
        let b_len = hunk.iter().filter(|o| !matches!(o, Op::Del(_))).count();
        out.push_str(&format!("@@ -{} +{} @@\n", range(a0, a_len), range(b0, b_len)));
        for op in hunk {
            let (mark, l) = match *op {
                Op::Keep(l) => (' ', l),
                Op::Del(l) => ('-', l),
                Op::Add(l) => ('+', l),
            };
            out.push(mark);
            out.push_str(l);
            if !l.ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
    }
    out
}

/// What `propose` did.
#[derive(Debug)]
pub struct Proposal {
    pub table: PathBuf,
    /// [`diff`] of the table as read and as written (or as it would be).
    pub diff: String,
    pub written: bool,
    /// Refusals an `--allow-*` flag overrode, each naming its flag.
    pub overridden: Vec<String>,
    /// The key's earlier sweeps with the same verify-path fingerprint, from
    /// the ledger, those that chose otherwise marked.
    pub history: Vec<String>,
    /// The rule on every pooled record of the key, and what it did to the entry.
    pub pooled: crate::analysis::pool::Pooled,
    pub verdict: crate::analysis::pool::Verdict,
    /// Records of `records/` left out of the pool, each with why
    /// ([`crate::output::pool_records`]).
    pub excluded: Vec<LeftOut>,
}

pub use crate::output::pool_records::{Gathered, LeftOut, MAX_POOL_FOLDERS, SweepId, gather_pool};

/// Puts the pooled decision into the entry's fields: the verdict's width,
/// its pooled ratio and interval, the records it rests on, and the verdict
/// in the note.
pub fn apply_pool(
    fields: &mut Fields,
    s: &Summary,
    pooled: &crate::analysis::pool::Pooled,
    verdict: &crate::analysis::pool::Verdict,
    left_out: &[LeftOut],
) {
    let width = verdict.width();
    // The adaptive arm's cap: the widest fixed width the record measured.
    let cap = s.widths.iter().filter_map(|w| w.width.width()).max().unwrap_or_else(|| Width::new(1).expect("a width"));
    let drafting = width.map(|a| a.drafting(cap));
    // The tokens per verify pass are the proposed record's at the pooled width.
    fields.retain(|(k, _)| *k != "emitted_per_verify" && *k != "adaptive");
    if let (Some(e), Some(i)) =
        (emitted_per_verify(s, width, cap), fields.iter().position(|(k, _)| *k == "ratio_interval"))
    {
        fields.insert(i + 1, ("emitted_per_verify", e));
    }
    if let (true, Some(i)) =
        (drafting.is_some_and(Drafting::is_adaptive), fields.iter().position(|(k, _)| *k == "width"))
    {
        fields.insert(i + 1, ("adaptive", "true".into()));
    }
    // A pool of this record alone that keeps its decision states the
    // record's own interval (its headline's, drift-widened the record's
    // way): one decision, one interval.
    let own = pooled.records.len() == 1 && width == s.decision.width;
    let shown = width.or(pooled.best).and_then(|w| pooled.width(w)).filter(|_| !own);
    let set = |fields: &mut Fields, k: &str, v: String| {
        if let Some((_, x)) = fields.iter_mut().find(|(key, _)| *key == k) {
            *x = v;
        }
    };
    set(fields, "width", width_text(drafting));
    if let Some(x) = shown {
        let r3 = |v: f64| (v * 1000.0).round() / 1000.0;
        set(fields, "ratio", r3(x.ratio).to_string());
        set(
            fields,
            "ratio_interval",
            format!("[{}, {}]", (x.interval.0 * 1000.0).floor() / 1000.0, (x.interval.1 * 1000.0).ceil() / 1000.0),
        );
    }
    let list = pooled.records.iter().map(|r| toml_str(r)).collect::<Vec<_>>().join(", ");
    if let Some(i) = fields.iter().position(|(k, _)| *k == "record") {
        fields.insert(i + 1, ("pooled", format!("[{list}]")));
    }
    if let Some((_, note)) = fields.iter_mut().find(|(k, _)| *k == "note") {
        let body = note.trim_end_matches('"');
        let say = verdict.say().replace('\\', "\\\\").replace('"', "\\\"");
        *note = format!("{body}; pooled over {} record(s): {say}", pooled.records.len());
        if !left_out.is_empty() {
            // Folder names are anyone's: escaped as TOML (the note is one basic string).
            let named = crate::output::pool_records::note_text(left_out);
            let named = toml_str(&named);
            note.push_str(&format!("; left out of the pool: {}", &named[1..named.len() - 1]));
        }
        note.push('"');
    }
}

/// What the entry's note says for each provenance check the operator
/// overrode ([`check_provenance`]'s flags).
const PROVENANCE_NOTES: [(&str, &str); 3] = [
    ("--allow-dirty", "arms ran a build with uncommitted changes, allowed by --allow-dirty"),
    ("--allow-stale-fingerprint", "measured under another kernel fingerprint, allowed by --allow-stale-fingerprint"),
    ("--allow-older", "dated before the entry it replaced, allowed by --allow-older"),
];

/// Proposes the entry for the record in `dir`; writes the table unless `dry_run`.
pub fn propose(dir: &Path, table_path: Option<&Path>, dry_run: bool, allow: Allow) -> Result<Proposal, ProposeError> {
    // The hash is of the very bytes summarized: the ledger vouches for them.
    let (raw, raw_sha256) = crate::data::raw::read_raw_with_sha256(&dir.join("raw.jsonl"))
        .map_err(|e| ProposeError::Record(e.to_string()))?;
    let s = crate::analysis::summarize::summarize(&raw).map_err(|e| ProposeError::Record(format!("{e:#}")))?;
    check(&s)?;
    crate::analysis::rules::plan::check_range(&s, &raw.header.settings.design.widths)?;
    let weak = crate::analysis::rules::plan::check_plan(&s, raw.header.settings.design.bracket_arms, allow.weak_plan)?;
    let (table_abs, root, record) = table_and_record(dir, table_path)?;
    let root = root.as_path();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Refusal::Io { path, source }
    };
    // One writer at a time, from reading the table to the rename: a run
    // that exits 0 has its entry in the table, whoever else ran at once.
    let lock = match dry_run {
        true => None,
        false => Some(
            crate::output::table_lock::TableLock::acquire(&table_abs, crate::output::table_lock::LOCK_WAIT)
                .map_err(io(&crate::output::table_lock::lock_path(&table_abs)))?,
        ),
    };
    let old = read_table(&table_abs)?;
    let tbl = table::compile(TABLE_FILE, &old, RecordCheck::Skip).map_err(|e| Refusal::Table(e.to_string()))?;
    let key = record_key(&s)?;
    // The ledger of the repository's records/ (the record is under it:
    // `table_and_record`): it must vouch for this record's raw.jsonl as it
    // does for every record pooled with it.
    let lines = crate::output::ledger::read_own(&root.join("records")).map_err(|e| match e {
        crate::output::ledger::LedgerError::Io { path, source } => Refusal::Io { path, source }.into(),
        e => ProposeError::Record(e.to_string()),
    })?;
    let folder = record.strip_prefix("records/").unwrap_or(&record);
    crate::output::ledger::vouched(&lines, folder, &raw_sha256)
        .map_err(|u| Refusal::Unvouched { record: record.clone(), why: u.to_string() })?;
    let this_sweep = SweepId { started_at_unix_ms: raw.header.started_at_unix_ms, raw_sha256 };
    let history = crate::output::ledger::history(
        &lines,
        &key.to_string(),
        s.verify_fingerprint.as_deref().unwrap_or_default(),
        folder,
        &crate::output::ledger::decision_of(&s),
    );
    // Only this key's entry: a record of another CPU or model adds its own.
    let existing = tbl.exact(&key);
    let current = current_fingerprint(&s).unwrap_or_default();
    let mut overridden = check_provenance(&raw, &s, existing, &current, allow)?;
    let loose = crate::analysis::rules::plan::check_gate(&raw.header.settings.gate, allow.loose_gate)?;
    let fp = s.verify_fingerprint.clone().unwrap_or_default();
    let (pool_records, excluded) = gather_pool(root, &record, &this_sweep, &s, &key, &fp, allow, &lines)?;
    let pooled = crate::analysis::pool::pool(&pool_records);
    // An entry of another verify fingerprint rests on other code: the
    // pooled data decide afresh.
    let current = existing.filter(|e| e.verify_fingerprint == fp).map(|e| e.drafting.map(SpeculativeArm::of));
    let verdict = crate::analysis::pool::hysteresis(current, &pooled, &pool_records);
    let mut fields = entry_fields(&raw, &s, &record)?;
    apply_pool(&mut fields, &s, &pooled, &verdict, &excluded);
    // The entry says what the reviewer allowed, each override in its note.
    let mut allowed: Vec<&str> = PROVENANCE_NOTES
        .iter()
        .filter(|(flag, _)| overridden.iter().any(|o| o.starts_with(&format!("{flag}:"))))
        .map(|(_, say)| *say)
        .collect();
    if let Some(o) = loose {
        allowed.push("gate looser than the defaults, allowed by --allow-loose-gate");
        overridden.push(o);
    }
    if !weak.is_empty() {
        allowed.push("plan weaker than the rules, allowed by --allow-weak-plan");
        overridden.extend(weak);
    }
    if let Some((_, note)) = fields.iter_mut().find(|(k, _)| *k == "note") {
        for say in allowed {
            let body = note.trim_end_matches('"');
            *note = format!("{body}; {say}\"");
        }
    }
    let d = write_entry(&old, &key, &fields, root, &table_abs, lock.as_ref())?;
    Ok(Proposal { table: table_abs, diff: d, written: !dry_run, overridden, history, pooled, verdict, excluded })
}

/// `key`'s entry set to `fields` in the table `old` (read under `lock`,
/// `None` for a dry run), checked as the build compiles it (records under
/// `root`), and written through the lock; the diff of the change.
pub fn write_entry(
    old: &str,
    key: &PolicyKey,
    fields: &[(&'static str, String)],
    root: &Path,
    table_abs: &Path,
    lock: Option<&crate::output::table_lock::TableLock>,
) -> Result<String, Refusal> {
    let new = edit_table(old, key, fields)?;
    // The result must compile exactly as the build will compile it.
    table::compile(TABLE_FILE, &new, RecordCheck::Under(root))
        .map_err(|e| Refusal::Table(format!("the proposed table does not compile: {e}")))?;
    let d = diff(old, &new, TABLE_FILE);
    if let Some(lock) = lock {
        crate::output::table_lock::write_table(lock, table_abs, &new)
            .map_err(|source| Refusal::Io { path: table_abs.to_path_buf(), source })?;
    }
    Ok(d)
}

/// The table (`table_path`, else the one above `dir`), the repository root
/// it sits in, and `dir` as an entry cites it (`records/<folder>`), or the
/// refusal: a record folder outside `root/records/`.
pub fn table_and_record(dir: &Path, table_path: Option<&Path>) -> Result<(PathBuf, PathBuf, String), Refusal> {
    let table_path = match table_path {
        Some(p) => p.to_path_buf(),
        None => find_table(dir)?,
    };
    let table_abs = table_path.canonicalize().map_err(|source| Refusal::Io { path: table_path.clone(), source })?;
    let root = table_abs
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| Refusal::NoTable(table_abs.display().to_string()))?
        .to_path_buf();
    let dir_abs = dir.canonicalize().map_err(|source| Refusal::Io { path: dir.to_path_buf(), source })?;
    let record = match dir_abs.strip_prefix(&root) {
        Ok(rel) if rel.starts_with("records") && rel.components().count() >= 2 => {
            rel.to_string_lossy().replace(std::path::MAIN_SEPARATOR, "/")
        }
        _ => {
            return Err(Refusal::NotUnderRecords {
                dir: dir_abs.display().to_string(),
                root: root.display().to_string(),
            });
        }
    };
    Ok((table_abs, root, record))
}

/// The policy table's text, read at most [`table::MAX_TABLE_BYTES`] + 1
/// bytes from a regular file: a larger file is refused before it is read
/// whole, a FIFO or a device before it is opened.
pub fn read_table(path: &Path) -> Result<String, ProposeError> {
    use std::io::Read;
    let cap = table::MAX_TABLE_BYTES as u64;
    let mut buf = Vec::new();
    crate::data::bounded::open_regular(path)
        .and_then(|f| f.take(cap + 1).read_to_end(&mut buf))
        .map_err(|source| Refusal::Io { path: path.to_path_buf(), source })?;
    if buf.len() as u64 > cap {
        return Err(Refusal::Table(format!(
            "{} is larger than {cap} bytes, the most a policy table may be (it is reviewed by hand)",
            path.display()
        ))
        .into());
    }
    String::from_utf8(buf).map_err(|_| Refusal::Table(format!("{} is not UTF-8", path.display())).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::{DeviceClass, DrafterKind, HostClass};

    #[test]
    fn settings_inline_tables_read_back_as_the_same_settings() {
        use policy::DrafterSettings;
        for d in [
            DrafterSettings::ngram(3, 4),
            DrafterSettings::layerskip(vec![0, 1, 2]),
            DrafterSettings::suffix(2, 32, 0.5),
            DrafterSettings::suffix(1, 64, 1.0),
            DrafterSettings::default(),
        ] {
            let text = settings_inline(&d);
            let back: DrafterSettings = toml::from_str(&format!("v = {text}"))
                .map(|t: toml::Table| t["v"].clone().try_into().unwrap())
                .unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(back, d, "{text}");
        }
        assert_eq!(settings_inline(&DrafterSettings::ngram(3, 4)), "{ ngram_min = 3, ngram_max = 4 }");
        assert_eq!(
            settings_inline(&DrafterSettings::suffix(2, 32, 1.0)),
            "{ suffix_min_match = 2, suffix_max_match = 32, suffix_min_prob = 1.0 }"
        );
    }

    const MODEL: &str = "model = { architecture = \"llama\", parameters = 134515008, file = \"m.gguf\", sha256 = \
\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" }\nprompts = { name = \"prompts/sweep.jsonl\", \
sha256 = \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\" }\n";

    fn table_text() -> String {
        format!(
            "schema_version = 3\n\n[[entry]]\ndrafter = \"ngram\"\ndevice_class = \"cpu:x86_64-avx2\"\n\
host_class = \"amd-zen4\"\ntarget_quant = \"q4_1\"\nthreads = 2\n{MODEL}drafter_settings = {{ ngram_min = 3, ngram_max = 4 }}\n\
weight_formats = [\"q4_1\", \"q8_0\"]\nwidth = 3\nrecord = \"records/a\"\ndate = 2026-01-01\nratio = 1.2\n\
ratio_interval = [1.1, 1.3]\nhost = \"h\"\nverify_fingerprint = \"0123456789abcdef\"\n\n[[entry]]\n\
drafter = \"layerskip\"\ndevice_class = \"cpu:x86_64-avx2\"\nhost_class = \"amd-zen4\"\ntarget_quant = \"q4_1\"\n\
threads = 2\n{MODEL}drafter_settings = {{ layers = [0, 1] }}\nweight_formats = [\"q4_1\", \"q8_0\"]\nwidth = \"off\"\n\
record = \"records/b\"\ndate = 2026-01-01\nratio = 0.5\nratio_interval = [0.4, 0.6]\nhost = \"h\"\n\
verify_fingerprint = \"0123456789abcdef\"\n"
        )
    }

    fn key_on(device: &str, host: &str, threads: Option<usize>) -> PolicyKey {
        PolicyKey {
            drafter: DrafterKind::Ngram,
            device: DeviceClass::parse(device).unwrap(),
            host: HostClass::parse(host).unwrap(),
            quant: "q4_1".into(),
            precision: None,
            model: policy::ModelClass { architecture: "llama".into(), parameters: 134_515_008 },
            threads,
            concurrency: 1,
        }
    }

    fn key() -> PolicyKey {
        key_on("cpu:x86_64-avx2", "amd-zen4", Some(2))
    }

    fn fields(w: &str) -> Fields {
        let (model, prompts) = MODEL.split_once('\n').unwrap();
        vec![
            ("drafter", "\"ngram\"".into()),
            ("device_class", "\"cpu:x86_64-avx2\"".into()),
            ("host_class", "\"amd-zen4\"".into()),
            ("target_quant", "\"q4_1\"".into()),
            ("threads", "2".into()),
            ("model", model.trim_start_matches("model = ").into()),
            ("prompts", prompts.trim_start_matches("prompts = ").trim_end().into()),
            ("drafter_settings", "{ ngram_min = 3, ngram_max = 4 }".into()),
            ("weight_formats", "[\"q4_1\", \"q8_0\"]".into()),
            ("width", w.into()),
            ("record", "\"records/c\"".into()),
            ("date", "2026-11-29".into()),
            ("ratio", "1.4".into()),
            ("ratio_interval", "[1.3, 1.5]".into()),
            ("host", "\"h\"".into()),
            ("verify_fingerprint", "\"0123456789abcdef\"".into()),
        ]
    }

    fn w(n: usize) -> Option<policy::Drafting> {
        Some(policy::Drafting::Fixed(policy::Width::new(n).unwrap()))
    }

    #[test]
    fn an_existing_key_is_replaced_in_place_and_others_are_kept() {
        let table_s = table_text();
        let new = edit_table(&table_s, &key(), &fields("5")).unwrap();
        let c = table::compile("t", &new, RecordCheck::Skip).unwrap();
        assert_eq!(c.entries.len(), 2);
        assert_eq!(c.entries[0].drafting, w(5));
        assert_eq!(c.entries[0].record, "records/c");
        assert_eq!(c.entries[1].key.drafter, DrafterKind::Layerskip);
        let d = diff(&table_s, &new, "t");
        assert!(d.contains("-width = 3") && d.contains("+width = 5"), "{d}");
        let second = table_s.find("\n\n[[entry]]\ndrafter = \"layerskip\"").unwrap();
        assert!(new.ends_with(&table_s[second..]), "{new}");
    }

    #[test]
    fn the_thread_count_the_cpu_and_the_model_are_part_of_the_key() {
        // The same (drafter, device, quantization) at another thread count is
        // another key: appended, the 2-thread entry kept as it was.
        let table_s = table_text();
        let mut f = fields("5");
        f[4].1 = "4".into();
        let new = edit_table(&table_s, &key_on("cpu:x86_64-avx2", "amd-zen4", Some(4)), &f).unwrap();
        assert!(new.starts_with(&table_s), "{new}");
        let c = table::compile("t", &new, RecordCheck::Skip).unwrap();
        assert_eq!(c.entries.len(), 3);
        assert_eq!((c.entries[0].key.threads, c.entries[0].drafting), (Some(2), w(3)));
        assert_eq!((c.entries[2].key.threads, c.entries[2].drafting), (Some(4), w(5)));
        // A record of another CPU adds its entry and replaces none.
        let mut f = fields("5");
        f[2].1 = "\"amd-zen5\"".into();
        let new = edit_table(&table_s, &key_on("cpu:x86_64-avx2", "amd-zen5", Some(2)), &f).unwrap();
        assert!(new.starts_with(&table_s), "{new}");
        let c = table::compile("t", &new, RecordCheck::Skip).unwrap();
        assert_eq!(c.entries.len(), 3);
        assert_eq!(c.entries[2].key.host.as_str(), "amd-zen5");
        // So does a record of another model.
        let mut f = fields("5");
        f[5].1 = f[5].1.replace("\"llama\", parameters = 134515008", "\"gemma3\", parameters = 268098176");
        let mut k = key();
        k.model = policy::ModelClass { architecture: "gemma3".into(), parameters: 268_098_176 };
        let new = edit_table(&table_s, &k, &f).unwrap();
        assert!(new.starts_with(&table_s), "{new}");
        assert_eq!(table::compile("t", &new, RecordCheck::Skip).unwrap().entries.len(), 3);
        // A key without threads (CUDA) never matches a CPU entry that has them.
        let cuda = table_s.replace(
            "device_class = \"cpu:x86_64-avx2\"\nhost_class = \"amd-zen4\"\ntarget_quant = \"q4_1\"\nthreads = 2\n",
            "device_class = \"cuda:sm_90\"\nhost_class = \"amd-zen4\"\ntarget_quant = \"q4_1\"\n",
        );
        let mut g = fields("5");
        g.remove(4);
        g[1].1 = "\"cuda:sm_90\"".into();
        let new = edit_table(&cuda, &key_on("cuda:sm_90", "amd-zen4", None), &g).unwrap();
        let c = table::compile("t", &new, RecordCheck::Skip).unwrap();
        assert_eq!(c.entries.len(), 2, "{new}");
        assert_eq!((c.entries[0].key.threads, c.entries[0].drafting), (None, w(5)));
    }

    #[test]
    fn a_new_key_is_appended_after_one_blank_line() {
        let new = edit_table("schema_version = 3\n", &key(), &fields("\"off\"")).unwrap();
        assert!(new.starts_with("schema_version = 3\n\n[[entry]]\ndrafter = \"ngram\"\n"), "{new}");
        let c = table::compile("t", &new, RecordCheck::Skip).unwrap();
        assert_eq!(c.entries[0].drafting, None);
        assert_eq!(c.schema_version, 3);
        let again = edit_table("schema_version = 3\n\n", &key(), &fields("2")).unwrap();
        assert!(again.starts_with("schema_version = 3\n\n[[entry]]\n"), "no second blank line: {again:?}");
    }

    #[test]
    fn the_entry_table_form_is_one_field_per_line_in_schema_order() {
        let t = entry_table_text(&fields("5"));
        assert!(t.starts_with("[[entry]]\ndrafter = \"ngram\"\ndevice_class = \"cpu:x86_64-avx2\"\n"), "{t}");
        assert!(t.ends_with("ratio_interval = [1.3, 1.5]\nhost = \"h\"\nverify_fingerprint = \"0123456789abcdef\"\n"));
        let i = entry_inline_text(&fields("5"));
        assert!(i.starts_with("{ drafter = \"ngram\", device_class = ") && i.ends_with(" }") && !i.contains('\n'));
    }

    #[test]
    fn a_crlf_table_gets_crlf_lines() {
        let crlf = table_text().replace('\n', "\r\n");
        let new = edit_table(&crlf, &key(), &fields("5")).unwrap();
        assert!(!new.replace("\r\n", "").contains('\n'), "a bare LF was written: {new:?}");
        table::compile("t", &new, RecordCheck::Skip).unwrap();
    }

    #[test]
    fn an_empty_inline_array_receives_the_entry() {
        let new = edit_table("schema_version = 3\nentry = []\n", &key(), &fields("5")).unwrap();
        assert_eq!(new, format!("schema_version = 3\nentry = [{}]\n", entry_inline_text(&fields("5"))));
        table::compile("t", &new, RecordCheck::Skip).unwrap();
    }

    #[test]
    fn a_malformed_table_is_an_error_naming_the_file_not_a_panic() {
        let e = edit_table("schema_version = 3\n[[entry]\n", &key(), &fields("5")).unwrap_err().to_string();
        assert!(e.contains(TABLE_FILE) && e.contains("malformed TOML"), "{e}");
        // A table the compiler refuses (which entry has the key is its answer): its refusal, naming the file.
        for bad in ["schema_version = 3\nentry = 3\n", "schema_version = 3\nentry = [3]\n"] {
            let e = edit_table(bad, &key(), &fields("5")).unwrap_err().to_string();
            assert!(e.contains(TABLE_FILE) && e.contains("`entry` must be an array of tables"), "{e}");
        }
    }

    #[test]
    fn a_prompt_set_is_named_by_its_repository_path_or_its_file_name() {
        assert_eq!(prompts_name("prompts/sweep.jsonl (compiled into the tuner)"), "prompts/sweep.jsonl");
        assert_eq!(prompts_name("/home/me/edits.jsonl"), "edits.jsonl");
        assert_eq!(prompts_name("prompts/mine.jsonl"), "prompts/mine.jsonl");
    }

    #[test]
    fn the_diff_is_a_unified_diff_of_the_bytes_written() {
        let d = diff("a\nb\nc\n", "a\nB\nc\n", "t");
        assert_eq!(d, "--- a/t\n+++ b/t\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n");
        let d = diff("a\nb", "a\nb\n", "t");
        assert_eq!(d, "--- a/t\n+++ b/t\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n", "{d}");
        let d = diff("", "x\n", "t");
        assert_eq!(d, "--- a/t\n+++ b/t\n@@ -0,0 +1,1 @@\n+x\n");
        assert_eq!(diff("same\n", "same\n", "t"), "t: unchanged\n");
    }

    #[test]
    fn the_diff_keeps_unchanged_lines_inside_a_change_and_splits_distant_hunks() {
        let d = diff("a\nb\nc\nd\n", "a\nB\nc\nD\n", "t");
        assert_eq!(d, "--- a/t\n+++ b/t\n@@ -1,4 +1,4 @@\n a\n-b\n+B\n c\n-d\n+D\n");
        let old: String = (0..20).map(|i| format!("{i}\n")).collect();
        let new: String = (0..20)
            .map(|i| match i {
                1 => "one\n".to_string(),
                18 => "eighteen\n".to_string(),
                i => format!("{i}\n"),
            })
            .collect();
        let d = diff(&old, &new, "t");
        assert!(
            d.contains(
                "@@ -1,5 +1,5 @@\n 0\n-1\n+one\n 2\n 3\n 4\n@@ -16,5 +16,5 @@\n 15\n 16\n 17\n-18\n+eighteen\n 19\n"
            ),
            "{d}"
        );
    }

    #[test]
    fn verify_cost_curves_are_written_as_the_compiler_reads_them() {
        use crate::data::verify_cost::{CostCurve, CostPoint};
        let point = |rows: usize, relative: f64| CostPoint { rows, relative, interval: None, per_round: vec![] };
        let curve = |context: usize, points: Vec<CostPoint>| CostCurve {
            context,
            rounds: 2,
            one_row_ms: Some(10.0),
            points,
            missing: vec![],
        };
        let curves = vec![
            curve(64, vec![point(1, 1.0), point(2, 1.08349), point(3, 1.2)]),
            // One pass size is no curve; a gap is none either.
            curve(128, vec![point(1, 1.0)]),
            curve(512, vec![point(1, 1.0), point(3, 1.5)]),
            curve(2048, vec![point(1, 1.0), point(2, 1.5)]),
        ];
        let text = verify_cost_text(&curves).unwrap();
        assert_eq!(text, "[{ context = 64, relative = [1.0, 1.083, 1.2] }, { context = 2048, relative = [1.0, 1.5] }]");
        assert_eq!(verify_cost_text(&[]), None);
        let mut f = fields("4");
        f.push(("verify_cost", text));
        let t = policy::table::compile(
            "t",
            &format!("schema_version = 3\n{}", entry_table_text(&f)),
            policy::table::RecordCheck::Skip,
        )
        .unwrap();
        assert_eq!(t.entries[0].verify_cost[0].relative, vec![1.0, 1.083, 1.2]);
        assert_eq!(t.entries[0].verify_cost[1].context, 2048);
    }

    #[test]
    fn strings_are_escaped_as_toml() {
        assert_eq!(toml_str("a \"b\"\n"), "\"a \\\"b\\\"\\n\"");
    }

    /// A committed record re-summarized into a temporary copy (its raw.jsonl
    /// only), as `tuner summarize` writes it.
    fn resummarized(name: &str) -> (tempfile::TempDir, crate::data::raw::RawFile, crate::analysis::summary::Summary) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../records");
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(root.join(name).join("raw.jsonl"), dir.path().join("raw.jsonl")).unwrap();
        let (raw, s) = crate::analysis::summarize::summarize_dir(dir.path()).unwrap();
        crate::output::record::write_all(dir.path(), &raw, &s).unwrap();
        (dir, raw, s)
    }

    #[test]
    fn a_pool_of_one_drifted_record_keeps_the_records_interval() {
        // A served record at 4 clients whose `off` survives the drift: the
        // record's interval holds both one-sided ones; the pool of it alone
        // (which widens drift its own way) must not restate another.
        let name = "2026-12-07-cpu-x86_64-avx512vnni-amd-zen4-ngram-c4";
        let (_dir, raw, s) = resummarized(name);
        assert!(s.drift, "the record drifted");
        let rec = format!("records/{name}");
        let mut fields = super::entry_fields(&raw, &s, &rec).unwrap();
        let before = fields.iter().find(|(k, _)| *k == "ratio_interval").unwrap().1.clone();
        let rounds = [crate::analysis::pool::RecordRounds::of(&rec, &s)];
        let pooled = crate::analysis::pool::pool(&rounds);
        let verdict = crate::analysis::pool::hysteresis(None, &pooled, &rounds);
        assert_eq!(verdict.width(), s.decision.width, "the pool keeps the record's decision");
        super::apply_pool(&mut fields, &s, &pooled, &verdict, &[]);
        let after = &fields.iter().find(|(k, _)| *k == "ratio_interval").unwrap().1;
        assert_eq!(after, &before, "one decision, one interval");
        let (lo, hi) = s.decision.ratio_interval.unwrap();
        assert_eq!(before, format!("[{}, {}]", (lo * 1000.0).floor() / 1000.0, (hi * 1000.0).ceil() / 1000.0));
    }

    #[test]
    fn a_records_headline_plot_and_proposal_note_give_its_decision_one_interval() {
        // A drifted record whose adaptive choice survives (its interval
        // widened to hold both brackets'), and a clean fixed-width one.
        for name in [
            "2026-12-06-cpu-x86_64-avx512vnni-intel-family6-model167-ngram-12",
            "2026-12-07-cpu-x86_64-avx512vnni-amd-zen4-ngram-2",
        ] {
            let (dir, raw, s) = resummarized(name);
            let voice = crate::output::record::decision_interval(&s).expect("the record decides");
            let md = std::fs::read_to_string(dir.path().join("record.md")).unwrap();
            let headline = md.lines().find(|l| l.starts_with("**Decision")).unwrap();
            let svg = std::fs::read_to_string(dir.path().join("plot.svg")).unwrap();
            let fields = super::entry_fields(&raw, &s, &format!("records/{name}")).unwrap();
            let note = &fields.iter().find(|(k, _)| *k == "note").unwrap().1;
            for (what, text) in [("headline", headline), ("plot", svg.as_str()), ("note", note.as_str())] {
                assert_eq!(text.matches(&voice).count(), 1, "{name}: the {what} states {voice} once: {text}");
            }
            // The chosen arm's two-sided interval, where it is not the
            // decision's (a drifted record), is in none of them.
            let chosen = s.widths.iter().find(|w| Some(w.width) == s.decision.width).unwrap();
            let two_sided = crate::output::record::ratio(&chosen.ratio);
            let (lo, hi) = s.decision.ratio_interval.unwrap();
            assert_eq!(s.drift, !two_sided.ends_with(&format!("[{lo:.3}, {hi:.3}]")), "{name}: {two_sided}");
            if s.drift {
                for text in [headline, svg.as_str(), note.as_str(), md.as_str()] {
                    assert!(!text.contains(&two_sided), "{name}: {two_sided} in {text}");
                }
                assert!(svg.contains("drifted: vs each bracket alone"), "{name}");
                assert!(svg.contains("vs opening brackets") && svg.contains("vs closing brackets"), "{name}");
            }
            // The adaptive arm is named as such wherever a person reads it.
            let conclusions = crate::output::record::conclusions(&s).join("\n");
            for text in [md.as_str(), note.as_str(), conclusions.as_str()] {
                assert!(!text.contains("width 0"), "{name}: {text}");
            }
            assert!(note.contains(", adaptive]"), "{name}: {note}");
            assert!(svg.lines().any(|l| l.trim() == "adaptive"), "{name}: the x axis names the adaptive arm");
        }
    }
}
