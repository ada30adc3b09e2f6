//! `runtime serve` driven by the official `openai` Python client (PyPI
//! `openai`, pinned in scripts/test-requirements.txt): streaming and not,
//! chat and completions. Text must equal classic `runtime generate`'s and
//! usage its own counts. The client runs from the test venv
//! (`scripts/test-env.sh` creates `.venv-test`; `DRAFTWISE_TEST_VENV`
//! points elsewhere); without it this test fails and says how to make it.

use draftwise_tests::model_path;
use draftwise_tests::serve::{Prompt, Server, generate_expected};
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const MAX_TOKENS: usize = 20;

const PROMPTS: [Prompt; 4] = [
    Prompt::Chat("What is the capital of France?"),
    Prompt::Text("Once upon a time"),
    Prompt::Chat("Écris une phrase sur le café."),
    Prompt::Text("def fibonacci(n):"),
];

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// The venv's interpreter, checked to import `openai`.
fn venv_python() -> PathBuf {
    let venv = std::env::var_os("DRAFTWISE_TEST_VENV")
        .filter(|v| !v.is_empty())
        .map_or_else(|| workspace_root().join(".venv-test"), PathBuf::from);
    let python = venv.join("bin").join("python");
    let how = "create it with `scripts/test-env.sh` (a venv at .venv-test with the pinned `openai` package; \
               .ci/run does this), or point DRAFTWISE_TEST_VENV at a venv that has it";
    assert!(python.exists(), "the openai client test needs a Python venv, and {} has none: {how}", venv.display());
    let ok = Command::new(&python).args(["-c", "import openai"]).status().expect("run the venv's python");
    assert!(ok.success(), "{} cannot import openai: {how}", python.display());
    python
}

#[test]
fn the_official_openai_client_gets_runtime_generates_text_and_usage() {
    let python = venv_python();
    let expected = generate_expected(&PROMPTS, MAX_TOKENS);
    assert_eq!(expected.len(), PROMPTS.len());
    let server = Server::start(&[]);
    let model = runtime::serve::default_model_id(&model_path());
    let cases: Vec<Value> = PROMPTS
        .iter()
        .map(|p| match p {
            Prompt::Chat(t) => json!({"kind": "chat", "prompt": t, "max_tokens": MAX_TOKENS}),
            Prompt::Text(t) => json!({"kind": "text", "prompt": t, "max_tokens": MAX_TOKENS}),
        })
        .collect();
    let mut child = Command::new(&python)
        .arg(workspace_root().join("tests/python/openai_client.py"))
        .arg(format!("http://{}/v1", server.addr))
        .arg(&model)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the openai client script");
    child.stdin.take().unwrap().write_all(Value::Array(cases).to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the openai client script failed:\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.stderr()
    );
    let got: Value = serde_json::from_slice(&out.stdout).expect("the script prints one JSON object");
    println!("openai client {}", got["openai_version"]);
    assert_eq!(got["models"], json!([model]));

    let results = got["results"].as_array().unwrap();
    assert_eq!(results.len(), 2 * PROMPTS.len());
    for r in results {
        let i = r["case"].as_u64().unwrap() as usize;
        let want = &expected[i];
        let what = format!("{:?} (stream: {})", PROMPTS[i], r["stream"]);
        assert_eq!(r["text"].as_str(), Some(want.text.as_str()), "{what}");
        assert_eq!(r["finish_reason"], json!([want.outcome.finish_reason]), "{what}");
        assert_eq!(
            r["usage"],
            json!({
                "prompt_tokens": want.outcome.usage.prompt_tokens,
                "completion_tokens": want.outcome.usage.completion_tokens,
                "total_tokens": want.outcome.usage.total_tokens,
            }),
            "{what}"
        );
        assert_eq!(r["ids"].as_array().map(Vec::len), Some(1), "one id per response: {what}");
    }
    // Errors reach the client as its typed exceptions, with OpenAI's fields.
    assert_eq!(got["unknown_model"], json!({"status": 404, "code": "model_not_found", "param": "model"}));
    assert_eq!(got["n_2"]["status"], 400);
    assert_eq!(got["n_2"]["param"], "n");
    assert_eq!(got["n_2"]["code"], "unsupported_parameter");
    let (status, stderr) = server.terminate(std::time::Duration::from_secs(15));
    assert!(status.success(), "{stderr}");
}

/// Runs `tests/python/SCRIPT` against `server` with the model's name and
/// `extra` arguments; the script prints one JSON object.
fn script_call(python: &std::path::Path, script: &str, server: &Server, model: &str, extra: &[&str]) -> Value {
    let out = Command::new(python)
        .arg(workspace_root().join("tests/python").join(script))
        .arg(format!("http://{}/v1", server.addr))
        .arg(model)
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} failed:\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.stderr()
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{script} prints one JSON object: {e}"))
}

/// Runs tests/python/openai_extra_body.py against `server`.
fn extra_body_call(python: &std::path::Path, server: &Server, model: &str) -> Value {
    script_call(python, "openai_extra_body.py", server, model, &[])
}

#[test]
fn fields_other_servers_take_are_ignored_and_logged_unless_strict_params() {
    let python = venv_python();
    let model = runtime::serve::default_model_id(&model_path());
    let expected = generate_expected(&[Prompt::Chat("What is the capital of France?")], 8);

    // Default: the request runs as if the fields were absent, and one
    // warning line names them.
    let server = Server::start(&[]);
    let got = extra_body_call(&python, &server, &model);
    assert_eq!(got["text"].as_str(), Some(expected[0].text.as_str()), "{got}");
    let log = server.stderr();
    let warning = log
        .lines()
        .find(|l| l.contains("ignored request fields"))
        .unwrap_or_else(|| panic!("no warning line for the ignored fields:\n{log}"));
    for f in ["cache_prompt", "chat_template_kwargs", "skip_special_tokens"] {
        assert!(warning.contains(f), "{f} is not named: {warning}");
    }
    let (status, stderr) = server.terminate(std::time::Duration::from_secs(15));
    assert!(status.success(), "{stderr}");

    // --strict-params: the client gets a typed 400 naming the first field.
    let server = Server::start(&["--strict-params"]);
    let got = extra_body_call(&python, &server, &model);
    assert_eq!(got["error"]["status"], 400, "{got}");
    assert_eq!(got["error"]["code"], "unknown_parameter", "{got}");
    assert_eq!(got["error"]["param"], "cache_prompt", "{got}");
    let (status, stderr) = server.terminate(std::time::Duration::from_secs(15));
    assert!(status.success(), "{stderr}");
}

/// Runs tests/python/openai_tool_messages.py against `server`.
fn tool_messages_call(python: &std::path::Path, server: &Server, model: &str, rendered: &str) -> Value {
    script_call(python, "openai_tool_messages.py", server, model, &[rendered])
}

#[test]
fn a_tool_conversation_is_rendered_by_the_template_or_refused_when_the_template_drops_results() {
    let python = venv_python();
    let model = runtime::serve::default_model_id(&model_path());
    let dir = std::env::temp_dir().join(format!("draftwise-tool-messages-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // SmolLM2's own template writes every turn as `<|im_start|>ROLE\nCONTENT<|im_end|>\n`
    // (the tool call's turn has empty content): the chat request must
    // decode exactly what a completion of that text, written out here by
    // hand, decodes.
    let rendered = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
                    <|im_start|>user\nWhat is 2 + 3? Use the add tool.<|im_end|>\n\
                    <|im_start|>assistant\n<|im_end|>\n\
                    <|im_start|>tool\n5<|im_end|>\n\
                    <|im_start|>assistant\n";
    let prompt_file = dir.join("rendered.txt");
    std::fs::write(&prompt_file, rendered).unwrap();
    let server = Server::start(&[]);
    let got = tool_messages_call(&python, &server, &model, prompt_file.to_str().unwrap());
    assert!(got["chat"]["text"].is_string(), "{got}");
    assert_eq!(got["chat"], got["completion"], "the tool conversation is the hand-rendered prompt");
    let (status, stderr) = server.terminate(std::time::Duration::from_secs(15));
    assert!(status.success(), "{stderr}");

    // A template that writes only user and assistant turns would drop the
    // tool's result: a typed 400 that says so.
    let template = dir.join("no-tools.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}{% if m['role'] in ['user', 'assistant'] %}<|im_start|>{{ m['role'] }}\n\
         {{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}<|im_start|>assistant\n",
    )
    .unwrap();
    let server = Server::start(&["--chat-template", template.to_str().unwrap()]);
    let got = tool_messages_call(&python, &server, &model, "-");
    assert_eq!(got["chat"]["error"]["status"], 400, "{got}");
    assert_eq!(got["chat"]["error"]["param"], "messages", "{got}");
    let message = got["chat"]["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("message 2 is a tool result"), "{got}");
    let (status, stderr) = server.terminate(std::time::Duration::from_secs(15));
    assert!(status.success(), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
