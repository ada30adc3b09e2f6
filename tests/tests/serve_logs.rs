//! `runtime serve`'s log lines carry client text escaped and bounded: an
//! unknown field name with a newline cannot forge an access-log line, and
//! a body of 60,000 unknown keys does not write a line of their names.
use draftwise_tests::model_path;
use draftwise_tests::serve::Server;
use serde_json::{Map, Value, json};
use std::time::Duration;

#[test]
fn unknown_field_names_reach_the_log_escaped_and_bounded() {
    let model = runtime::serve::default_model_id(&model_path());
    let server = Server::start(&[]);
    let forged = "a\n2026-12-07T00:00:00.000000Z  INFO draftwise::access: request client=6.6.6.6 status=200";
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("prompt".into(), json!("Hello"));
    body.insert("max_tokens".into(), json!(1));
    body.insert(forged.into(), json!(1));
    for i in 0..60_000 {
        body.insert(format!("k{i}"), json!(0));
    }
    let r = server.post("/v1/completions", &Value::Object(body));
    assert_eq!(r.status, 200, "{}", r.text());
    let (status, log) = server.terminate(Duration::from_secs(15));
    assert!(status.success(), "{log}");
    assert!(log.contains("ignored request fields"), "{log}");
    // The name is the first of the line (names sort), on the warning's own line.
    assert!(!log.lines().any(|l| l.starts_with("2026-12-07T00:00:00")), "a forged access line:\n{log}");
    assert!(log.contains("a\\n2026-12-07T00:00:00"), "the name is shown escaped:\n{log}");
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 4096, "one request wrote a log line of {longest} bytes");
    assert!(log.contains("and 59985 more"), "the rest are counted");
}
