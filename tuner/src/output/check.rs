//! `tuner check`'s edit of the table: the entry gains (or replaces) one
//! line, `check = { verify_fingerprint = "...", record = "...", date = ... }`,
//! and every other byte of the table stays as it was (comments included).
use policy::PolicyKey;
use policy::table::{self, RecordCheck};

use crate::analysis::rules::Refusal;
use crate::output::propose::{table_problem, table_region, toml_str};

/// The check's line as the entry holds it.
pub fn check_line(fingerprint: &str, record: &str, date: &str) -> String {
    format!(
        "check = {{ verify_fingerprint = {}, record = {}, date = {date} }}",
        toml_str(fingerprint),
        toml_str(record)
    )
}

/// The table with `key`'s entry's `check` line set to `line`: an existing
/// `check = ` line of the entry replaced, else the line inserted before the
/// entry's `note` (or after its last line).
pub fn set_check(old: &str, key: &PolicyKey, line: &str) -> Result<String, Refusal> {
    let tbl = table::compile(policy::TABLE_FILE, old, RecordCheck::Skip).map_err(|e| table_problem(e.to_string()))?;
    let Some(at) = tbl.entries.iter().position(|e| e.key == *key) else {
        return Err(table_problem(format!("no entry for {key}")));
    };
    let doc = toml_edit::Document::parse(old).map_err(|e| table_problem(format!("malformed TOML: {e}")))?;
    let Some(toml_edit::Item::ArrayOfTables(aot)) = doc.as_table().get("entry") else {
        return Err(table_problem("`entry` is not [[entry]] tables; a check edits [[entry]] tables only"));
    };
    let t = aot.get(at).ok_or_else(|| table_problem("the entry has no table"))?;
    let region = table_region(old, t)?;
    let nl = if old.contains("\r\n") { "\r\n" } else { "\n" };
    let text = &old[region.clone()];
    // Line starts within the region.
    let mut starts = vec![region.start];
    for (i, b) in text.bytes().enumerate() {
        if b == b'\n' && region.start + i + 1 < region.end {
            starts.push(region.start + i + 1);
        }
    }
    let line_at = |prefix: &str| starts.iter().copied().find(|&s| old[s..].starts_with(prefix));
    let end_of = |s: usize| old[s..].find('\n').map_or(old.len(), |i| s + i + 1);
    let mut new = old.to_string();
    if let Some(s) = line_at("check =").or_else(|| line_at("check=")) {
        new.replace_range(s..end_of(s), &format!("{line}{nl}"));
    } else if let Some(s) = line_at("note =").or_else(|| line_at("note=")) {
        new.insert_str(s, &format!("{line}{nl}"));
    } else {
        let end = region.end;
        let prefix = if old[..end].ends_with('\n') { "" } else { nl };
        new.insert_str(end, &format!("{prefix}{line}{nl}"));
    }
    Ok(new)
}
