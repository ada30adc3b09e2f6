//! The OpenAI request bodies this server accepts, checked field by field
//! into a [`Request`]; each refusal is an [`ApiError`] (`error.rs`).
//!
//! Parsing never panics and never allocates by a length the client states:
//! the body is already bounded by the server's byte limit when it gets here,
//! and `serde_json` bounds nesting depth.

use super::error::ApiError;
use crate::engine::Engine;
use crate::sampling::{
    MAX_PENALTY_WINDOW, MAX_PRESENCE_FREQUENCY, MAX_REPETITION_PENALTY, PenaltyScope, SamplingParams,
};
use crate::tokenizer::chat::{Message, Turn};
use serde_json::{Map, Value};

/// Most stop strings a request may give (OpenAI's limit).
pub const MAX_STOP_STRINGS: usize = 4;
/// Longest stop string, in bytes.
pub const MAX_STOP_BYTES: usize = 256;
/// Highest temperature accepted (OpenAI's range is `0..=2`).
pub const MAX_TEMPERATURE: f32 = 2.0;
/// `max_tokens` for `/v1/completions` when the request gives none (OpenAI's default).
pub const COMPLETIONS_DEFAULT_MAX_TOKENS: usize = 16;

/// Which endpoint a body was sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/completions`
    Completions,
    /// `POST /v1/chat/completions`
    Chat,
    /// `POST /completion`: llama-server's native endpoint (`prompt`,
    /// `n_predict`, `stop`, `stream`; answered in its shape, `llama.rs`).
    /// `model` is optional there, as llama-server serves one model.
    Llama,
}

/// llama-server's default temperature on `/completion` (OpenAI's is 1).
pub const LLAMA_DEFAULT_TEMPERATURE: f32 = 0.8;

/// What to run the model on.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    Text(String),
    /// A prompt given as token ids (`/v1/completions` only).
    Tokens(Vec<u32>),
    Chat(Vec<Turn>),
}

/// A request body that passed every check that does not need the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub endpoint: Endpoint,
    pub prompt: Prompt,
    /// `None`: the endpoint's default ([`Request::default_max_tokens`]);
    /// else the value and the field that gave it.
    pub max_tokens: Option<(u64, &'static str)>,
    pub sampling: SamplingParams,
    /// The request gave a seed (otherwise sampled requests draw one).
    pub seed_given: bool,
    pub stop: Vec<String>,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk carries the usage.
    pub include_usage: bool,
    /// vLLM's `ignore_eos`: generate exactly `max_tokens` (or to the end of
    /// the context), end-of-generation tokens included.
    pub ignore_eos: bool,
    /// Fields this server does not know, accepted and ignored (vLLM's and
    /// llama-server's behaviour; the handler logs them); refused instead
    /// under `--strict-params`.
    pub ignored: Vec<String>,
    /// Log probabilities asked for: `Some(n)` alternatives per token
    /// (completions' `logprobs: n`, chat's `logprobs: true` with
    /// `top_logprobs: n`), returned from a scoring pass (`logprobs.rs`).
    pub logprobs: Option<usize>,
    /// Completions' `echo`: the prompt's text (and with `logprobs`, its
    /// tokens' log probabilities) comes before the completion's.
    pub echo: bool,
}

/// A request ready for the engine: its prompt tokens and resolved budget.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub request: Request,
    pub prompt_ids: Vec<u32>,
    pub max_tokens: usize,
}

/// Parameters the server accepts and ignores (they change nothing here).
const IGNORED: &[&str] = &["user", "metadata", "store", "service_tier", "parallel_tool_calls"];

/// llama-server's fields that only qualify a sampler this server lacks
/// (DRY, XTC, mirostat, dynamic temperature): with that sampler off, as
/// this server requires, they change nothing, so any value is accepted.
const QUALIFIERS: &[&str] = &[
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "xtc_threshold",
    "mirostat_tau",
    "mirostat_eta",
    "dynatemp_exponent",
];

/// Removes `name`, treating JSON `null` as absent (as OpenAI does).
fn take(obj: &mut Map<String, Value>, name: &str) -> Option<Value> {
    obj.remove(name).filter(|v| !v.is_null())
}

/// A message field only `owner` messages carry (`tool_calls`: assistant,
/// `tool_call_id`: tool): refused, naming `path`, on another role's message.
fn only_for_role<T>(value: Option<T>, role: &str, owner: &str, path: &str) -> Result<Option<T>, ApiError> {
    if value.is_some() && role != owner {
        return Err(ApiError::invalid(format!("{path} is only for {owner} messages"), Some(path), "invalid_value"));
    }
    Ok(value)
}

fn type_error(name: &str, want: &str) -> ApiError {
    ApiError::invalid(format!("{name} must be {want}"), Some(name), "invalid_type")
}

fn take_bool(obj: &mut Map<String, Value>, name: &str) -> Result<Option<bool>, ApiError> {
    take(obj, name).map(|v| v.as_bool().ok_or_else(|| type_error(name, "a boolean"))).transpose()
}

fn take_f32(obj: &mut Map<String, Value>, name: &str) -> Result<Option<f32>, ApiError> {
    take(obj, name)
        .map(|v| match v.as_f64() {
            Some(x) if x.is_finite() => Ok(x as f32),
            _ => Err(type_error(name, "a finite number")),
        })
        .transpose()
}

/// A non-negative integer (rejects `1.5`, `-1` and strings).
fn take_u64(obj: &mut Map<String, Value>, name: &str) -> Result<Option<u64>, ApiError> {
    take(obj, name).map(|v| v.as_u64().ok_or_else(|| type_error(name, "a non-negative integer"))).transpose()
}

/// A body that must be one JSON object.
fn body_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("the body is not valid JSON: {e}"), None, "invalid_json"))?;
    let Value::Object(obj) = value else {
        return Err(ApiError::invalid("the body must be a JSON object", None, "invalid_json"));
    };
    Ok(obj)
}

/// `model`: the served model's name (required where `required`).
fn check_model(v: Option<Value>, served_model: &str, required: bool) -> Result<(), ApiError> {
    match v {
        None if !required => Ok(()),
        None => Err(ApiError::invalid(
            format!(
                "model is required on the OpenAI routes (/v1/completions, /v1/chat/completions): give \
                 \"model\": {served_model:?} (GET /v1/models lists it); llama-server's POST /completion takes \
                 a request without one"
            ),
            Some("model"),
            "missing_required_parameter",
        )),
        Some(Value::String(m)) if m == served_model => Ok(()),
        Some(Value::String(m)) => Err(ApiError::model_not_found(&m, served_model)),
        Some(_) => Err(type_error("model", "a string")),
    }
}

/// How a body's unknown fields are treated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnknownFields {
    /// Accepted and ignored, listed in [`Request::ignored`] (the default:
    /// clients written for vLLM or llama-server send fields such as
    /// `chat_template_kwargs`, `skip_special_tokens` or `cache_prompt`).
    #[default]
    Ignore,
    /// Refused with 400 `unknown_parameter` (`--strict-params`).
    Refuse,
}

/// Checks a body sent to `endpoint` against the served model's name.
/// Known parameters this server cannot honour are refused at any value but
/// their neutral one, whatever `unknown` says: only fields it does not
/// know at all may be ignored.
pub fn parse(endpoint: Endpoint, body: &[u8], served_model: &str, unknown: UnknownFields) -> Result<Request, ApiError> {
    let mut obj = body_object(body)?;
    check_model(take(&mut obj, "model"), served_model, endpoint != Endpoint::Llama)?;
    let mut ignored_in_messages = Vec::new();
    let prompt = match endpoint {
        Endpoint::Completions | Endpoint::Llama => parse_prompt(take(&mut obj, "prompt"))?,
        Endpoint::Chat => Prompt::Chat(parse_messages(take(&mut obj, "messages"), unknown, &mut ignored_in_messages)?),
    };
    // (value, the field that gave it), for error messages. Each endpoint has
    // a second name for it: chat's newer `max_completion_tokens`, and
    // llama-server's `n_predict` on completions.
    if endpoint == Endpoint::Llama && obj.get("n_predict").and_then(Value::as_i64) == Some(-1) {
        // llama-server's -1: until the end of generation or of the context,
        // which is this endpoint's default.
        obj.remove("n_predict");
    }
    let max_tokens = take_max_tokens(
        &mut obj,
        match endpoint {
            Endpoint::Completions | Endpoint::Llama => "n_predict",
            Endpoint::Chat => "max_completion_tokens",
        },
    )?;
    if let Some((0, param)) = max_tokens {
        return Err(ApiError::invalid(format!("{param} must be at least 1"), Some(param), "invalid_value"));
    }
    let default_temperature = if endpoint == Endpoint::Llama { LLAMA_DEFAULT_TEMPERATURE } else { 1.0 };
    let temperature = take_f32(&mut obj, "temperature")?.unwrap_or(default_temperature);
    if !(0.0..=MAX_TEMPERATURE).contains(&temperature) {
        return Err(ApiError::invalid(
            format!("temperature {temperature} is out of range: give 0 (greedy) to {MAX_TEMPERATURE}"),
            Some("temperature"),
            "invalid_value",
        ));
    }
    let top_p = take_f32(&mut obj, "top_p")?.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(format!("top_p {top_p} must be in (0, 1]"), Some("top_p"), "invalid_value"));
    }
    // `top_k` is not OpenAI's, but common servers accept it; 0 and vLLM's
    // -1 keep every token.
    let top_k = match take(&mut obj, "top_k") {
        None => 0,
        Some(v) => match (v.as_u64(), v.as_i64()) {
            (Some(k), _) => usize::try_from(k).unwrap_or(usize::MAX),
            (None, Some(-1)) => 0,
            _ => return Err(type_error("top_k", "a non-negative integer, or -1 (every token)")),
        },
    };
    let penalties = take_penalties(endpoint, &mut obj)?;
    let ignore_eos = take_bool(&mut obj, "ignore_eos")?.unwrap_or(false);
    // OpenAI seeds are 64-bit integers; negative ones keep their bit pattern.
    let seed = match take(&mut obj, "seed") {
        None => None,
        Some(v) => {
            Some(v.as_u64().or_else(|| v.as_i64().map(|s| s as u64)).ok_or_else(|| type_error("seed", "an integer"))?)
        }
    };
    let stop = parse_stop(take(&mut obj, "stop"))?;
    let stream = take_bool(&mut obj, "stream")?.unwrap_or(false);
    let (logprobs, echo) = parse_logprobs(endpoint, &mut obj, stream)?;
    let include_usage = match take(&mut obj, "stream_options") {
        None => false,
        Some(_) if !stream => {
            return Err(ApiError::invalid(
                "stream_options is only allowed when stream is true",
                Some("stream_options"),
                "invalid_value",
            ));
        }
        Some(Value::Object(mut o)) => {
            let u = take_bool(&mut o, "include_usage")?.unwrap_or(false);
            if let Some(k) = o.keys().next() {
                return Err(ApiError::unsupported(&format!("stream_options.{k}"), "only include_usage is"));
            }
            u
        }
        Some(_) => return Err(type_error("stream_options", "an object")),
    };
    let mut ignored = check_rest(obj, endpoint, unknown)?;
    ignored.extend(ignored_in_messages);
    Ok(Request {
        endpoint,
        prompt,
        max_tokens,
        sampling: SamplingParams { temperature, top_k, top_p, seed: seed.unwrap_or(0), ..penalties },
        seed_given: seed.is_some(),
        stop,
        stream,
        include_usage,
        ignore_eos,
        ignored,
        logprobs,
        echo,
    })
}

/// Two spellings of one setting (vLLM's and llama-server's), which must
/// agree when both are given: the value and the field that gave it.
fn take_either(
    obj: &mut Map<String, Value>,
    names: [&'static str; 2],
) -> Result<Option<(f32, &'static str)>, ApiError> {
    let a = take_f32(obj, names[0])?;
    let b = take_f32(obj, names[1])?;
    match (a, b) {
        (Some(x), Some(y)) if x != y => Err(ApiError::invalid(
            format!("{} ({x}) and {} ({y}) are two names of one penalty and disagree; give one", names[0], names[1]),
            Some(names[1]),
            "invalid_value",
        )),
        (Some(x), _) => Ok(Some((x, names[0]))),
        (None, y) => Ok(y.map(|y| (y, names[1]))),
    }
}

/// The penalties and min-p, in both spellings: vLLM's and OpenAI's
/// (`repetition_penalty`, `presence_penalty`, `frequency_penalty`,
/// `min_p`) and llama-server's (`repeat_penalty`, `repeat_last_n` or
/// `penalty_last_n`, `penalize_nl`). Which tokens the penalties count
/// follows the spelling: on `/completion`, or when the request uses a
/// llama.cpp name (`repeat_penalty`, `repeat_last_n`), llama.cpp's window
/// (the last `repeat_last_n` tokens of prompt and output, default 64, for
/// all three); otherwise vLLM's (repetition over the prompt and output,
/// presence and frequency over the output). Returned as the sampling
/// settings' penalty fields (the rest default).
fn take_penalties(endpoint: Endpoint, obj: &mut Map<String, Value>) -> Result<SamplingParams, ApiError> {
    let range = |name: &str, v: f32, ok: bool, want: String| {
        if ok {
            Ok(v)
        } else {
            Err(ApiError::invalid(format!("{name} {v} must be {want}"), Some(name), "invalid_value"))
        }
    };
    // A llama.cpp name asks for llama.cpp's window (null counts as absent).
    let llama_named =
        ["repeat_penalty", "repeat_last_n", "penalty_last_n"].iter().any(|k| obj.get(*k).is_some_and(|v| !v.is_null()));
    let repetition = match take_either(obj, ["repetition_penalty", "repeat_penalty"])? {
        None => 1.0,
        Some((r, name)) => range(
            name,
            r,
            r > 0.0 && r <= MAX_REPETITION_PENALTY,
            format!("in (0, {MAX_REPETITION_PENALTY}] (1 is off; above 1 discourages repeats)"),
        )?,
    };
    let mut pf = [0.0f32; 2];
    for (slot, name) in pf.iter_mut().zip(["presence_penalty", "frequency_penalty"]) {
        if let Some(v) = take_f32(obj, name)? {
            let m = MAX_PRESENCE_FREQUENCY;
            *slot = range(name, v, (-m..=m).contains(&v), format!("in [-{m}, {m}] (0 is off)"))?;
        }
    }
    let min_p = match take_f32(obj, "min_p")? {
        None => 0.0,
        Some(v) => range("min_p", v, (0.0..=1.0).contains(&v), "in [0, 1] (0 keeps every token)".into())?,
    };
    let window = |obj: &mut Map<String, Value>, name: &'static str| -> Result<Option<(i64, &'static str)>, ApiError> {
        take(obj, name)
            .map(|v| {
                v.as_i64().map(|n| (n, name)).ok_or_else(|| {
                    type_error(
                        name,
                        &format!("an integer: -1 (the whole context), 0 (off) or 1 to {MAX_PENALTY_WINDOW}"),
                    )
                })
            })
            .transpose()
    };
    let last_n = match (window(obj, "repeat_last_n")?, window(obj, "penalty_last_n")?) {
        (Some((a, _)), Some((b, _))) if a != b => {
            return Err(ApiError::invalid(
                format!("repeat_last_n ({a}) and penalty_last_n ({b}) disagree; give one"),
                Some("penalty_last_n"),
                "invalid_value",
            ));
        }
        (a, b) => a.or(b),
    };
    let penalty_scope = match last_n {
        Some((n, name)) => PenaltyScope::from_repeat_last_n(n)
            .map_err(|e| ApiError::invalid(e.replacen("repeat_last_n", name, 1), Some(name), "invalid_value"))?,
        None if endpoint == Endpoint::Llama || llama_named => PenaltyScope::LLAMA_DEFAULT,
        None => PenaltyScope::Vllm,
    };
    let p = SamplingParams {
        min_p,
        repetition_penalty: repetition,
        presence_penalty: pf[0],
        frequency_penalty: pf[1],
        penalty_scope,
        ..SamplingParams::default()
    };
    // llama.cpp's old `penalize_nl: false` kept newlines out of the
    // penalties; newlines count like any token here (as in llama.cpp since
    // it dropped the option), so `false` is refused where a penalty applies.
    if take_bool(obj, "penalize_nl")? == Some(false) && p.penalized() {
        return Err(ApiError::unsupported(
            "penalize_nl",
            "newlines are penalized like every other token here, as llama.cpp does since it dropped the option \
             (give true, or leave it out)",
        ));
    }
    Ok(p)
}

/// `max_tokens` or its other name `alias`, which must agree when both are
/// given: the value and the field that gave it.
fn take_max_tokens(obj: &mut Map<String, Value>, alias: &'static str) -> Result<Option<(u64, &'static str)>, ApiError> {
    let legacy = take_u64(obj, "max_tokens")?;
    let other = take_u64(obj, alias)?;
    match (legacy, other) {
        (Some(a), Some(b)) if a != b => Err(ApiError::invalid(
            format!("max_tokens ({a}) and {alias} ({b}) disagree; give one"),
            Some(alias),
            "invalid_value",
        )),
        (Some(a), _) => Ok(Some((a, "max_tokens"))),
        (None, b) => Ok(b.map(|b| (b, alias))),
    }
}

/// A field this server does not know, refused under `--strict-params`.
fn unknown_field(path: &str) -> ApiError {
    ApiError::invalid(
        format!("unrecognized request argument supplied: {path} (this server runs with --strict-params)"),
        Some(path),
        "unknown_parameter",
    )
}

/// The fields left in a body once every known one is taken: null ones are
/// skipped, the others refused under [`UnknownFields::Refuse`] or added to
/// `ignored`.
fn unknown_rest(obj: Map<String, Value>, unknown: UnknownFields, ignored: &mut Vec<String>) -> Result<(), ApiError> {
    for (k, v) in obj {
        if v.is_null() {
            continue;
        }
        if unknown == UnknownFields::Refuse {
            return Err(unknown_field(&k));
        }
        ignored.push(k);
    }
    Ok(())
}

/// `logprobs`, `top_logprobs` and `echo`, as OpenAI's two endpoints take
/// them: completions `logprobs: 0..=20` (alternatives per token) and
/// `echo: bool`; chat `logprobs: bool` and `top_logprobs: 0..=20` (only
/// with `logprobs: true`). Returned on non-streaming requests.
fn parse_logprobs(
    endpoint: Endpoint,
    obj: &mut Map<String, Value>,
    stream: bool,
) -> Result<(Option<usize>, bool), ApiError> {
    use super::logprobs::MAX_TOP_LOGPROBS;
    let max = MAX_TOP_LOGPROBS as u64;
    let count = |name: &str, v: &Value| match v.as_u64() {
        Some(n) if n <= max => Ok(n as usize),
        _ => Err(ApiError::invalid(format!("{name} must be an integer from 0 to {max}"), Some(name), "invalid_value")),
    };
    let (logprobs, echo) = match endpoint {
        Endpoint::Llama => {
            for param in ["logprobs", "echo"] {
                if take(obj, param).is_some_and(|v| v != Value::Bool(false)) {
                    return Err(ApiError::unsupported(
                        param,
                        "on POST /completion it is not returned; POST /v1/completions returns it",
                    ));
                }
            }
            (None, false)
        }
        Endpoint::Completions => {
            let lp = match take(obj, "logprobs") {
                None | Some(Value::Bool(false)) => None,
                Some(v) => Some(count("logprobs", &v)?),
            };
            (lp, take_bool(obj, "echo")?.unwrap_or(false))
        }
        Endpoint::Chat => {
            let on = take_bool(obj, "logprobs")?.unwrap_or(false);
            let top = take(obj, "top_logprobs").map(|v| count("top_logprobs", &v)).transpose()?;
            if top.is_some() && !on {
                return Err(ApiError::invalid(
                    "top_logprobs needs logprobs: true",
                    Some("top_logprobs"),
                    "invalid_value",
                ));
            }
            if take_bool(obj, "echo")? == Some(true) {
                return Err(ApiError::unsupported("echo", "echo is a completions parameter (give false)"));
            }
            (on.then(|| top.unwrap_or(0)), false)
        }
    };
    if stream && (logprobs.is_some() || echo) {
        let param = if logprobs.is_some() { "logprobs" } else { "echo" };
        return Err(ApiError::unsupported(param, "it is returned on non-streaming requests only (give stream: false)"));
    }
    Ok((logprobs, echo))
}

/// `/v1/completions`' `prompt`: a string, a list holding one string, or
/// token ids (a list of integers, or a list holding one such list).
fn parse_prompt(v: Option<Value>) -> Result<Prompt, ApiError> {
    let several = || {
        ApiError::unsupported(
            "prompt",
            "one prompt per request (a list of several prompts is a batch; send them as separate requests)",
        )
    };
    match v {
        None => Err(ApiError::invalid("prompt is required", Some("prompt"), "missing_required_parameter")),
        Some(Value::String(s)) => Ok(Prompt::Text(s)),
        Some(Value::Array(items)) => {
            if items.is_empty() {
                return Err(ApiError::invalid("prompt is an empty list", Some("prompt"), "invalid_value"));
            }
            if items.iter().all(Value::is_number) {
                return token_ids(&items, "prompt").map(Prompt::Tokens);
            }
            if items.len() > 1 {
                return Err(several());
            }
            match items.into_iter().next() {
                Some(Value::String(s)) => Ok(Prompt::Text(s)),
                Some(Value::Array(ids)) if !ids.is_empty() => token_ids(&ids, "prompt").map(Prompt::Tokens),
                _ => Err(type_error("prompt", "a string, a list of token ids, or a list holding one of those")),
            }
        }
        Some(_) => Err(type_error("prompt", "a string or a list of token ids")),
    }
}

/// Refuses the first id outside the vocabulary, naming `param`.
fn in_vocabulary(ids: &[u32], vocab: usize, param: &str) -> Result<(), ApiError> {
    match ids.iter().find(|&&i| i as usize >= vocab) {
        Some(bad) => Err(ApiError::invalid(
            format!("token id {bad} is outside the vocabulary (size {vocab})"),
            Some(param),
            "invalid_value",
        )),
        None => Ok(()),
    }
}

/// A list of token ids (`param` names the field for the error).
fn token_ids(items: &[Value], param: &str) -> Result<Vec<u32>, ApiError> {
    items
        .iter()
        .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
        .collect::<Option<Vec<u32>>>()
        .ok_or_else(|| type_error(param, "a list of token ids (integers in 0..2^32)"))
}

/// Most tool calls one assistant message may carry.
pub const MAX_TOOL_CALLS: usize = 128;

/// Chat messages: `role` and `content` (a string, or a list of text parts).
/// A conversation may replay tool use: an assistant message's `tool_calls`
/// (content may then be null) and `tool` messages with their
/// `tool_call_id` go to the chat template, which renders them or refuses
/// ([`crate::tokenizer::Tokenizer::render_turns`]). Other fields of a
/// message that are null are skipped (clients echo an assistant message
/// back with `"tool_calls": null`, `"refusal": null`); unknown ones follow
/// `unknown` (their paths, such as `messages[1].reasoning_content`, go to
/// `ignored`).
fn parse_messages(v: Option<Value>, unknown: UnknownFields, ignored: &mut Vec<String>) -> Result<Vec<Turn>, ApiError> {
    let Some(v) = v else {
        return Err(ApiError::invalid("messages is required", Some("messages"), "missing_required_parameter"));
    };
    let Value::Array(items) = v else { return Err(type_error("messages", "a list of message objects")) };
    if items.is_empty() {
        return Err(ApiError::invalid("messages must hold at least one message", Some("messages"), "invalid_value"));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = |field: &str| format!("messages[{i}].{field}");
        let Value::Object(mut m) = item else {
            return Err(type_error(&format!("messages[{i}]"), "an object with role and content"));
        };
        let role = match take(&mut m, "role") {
            Some(Value::String(r)) => r,
            Some(_) => return Err(type_error(&at("role"), "a string")),
            None => {
                return Err(ApiError::invalid(
                    format!("{} is required", at("role")),
                    Some(&at("role")),
                    "missing_required_parameter",
                ));
            }
        };
        let role = match role.as_str() {
            "system" | "user" | "assistant" | "tool" => role,
            // OpenAI's newer name for the system role.
            "developer" => "system".to_string(),
            "function" => {
                return Err(ApiError::unsupported(
                    &at("role"),
                    "function messages (the deprecated form of tool results) are not accepted; send role \"tool\" \
                     with a tool_call_id",
                ));
            }
            other => {
                return Err(ApiError::invalid(
                    format!("{} {other:?} is not a role: give system, user, assistant or tool", at("role")),
                    Some(&at("role")),
                    "invalid_value",
                ));
            }
        };
        let tool_calls = only_for_role(take(&mut m, "tool_calls"), &role, "assistant", &at("tool_calls"))?
            .map(|v| tool_calls(v, &at("tool_calls")))
            .transpose()?;
        let id = match take(&mut m, "tool_call_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id),
            Some(_) => return Err(type_error(&at("tool_call_id"), "a string")),
        };
        let tool_call_id = only_for_role(id, &role, "tool", &at("tool_call_id"))?;
        let content = match take(&mut m, "content") {
            Some(Value::String(s)) => s,
            Some(Value::Array(parts)) => text_parts(parts, &at("content"))?,
            // An assistant turn that only calls tools has no content.
            None | Some(Value::Null) if tool_calls.is_some() => String::new(),
            Some(_) => return Err(type_error(&at("content"), "a string or a list of text parts")),
            None => {
                return Err(ApiError::invalid(
                    format!("{} is required", at("content")),
                    Some(&at("content")),
                    "missing_required_parameter",
                ));
            }
        };
        // `name` labels a participant; the chat template has no use for it.
        m.remove("name");
        for (k, v) in m {
            if v.is_null() {
                continue;
            }
            match k.as_str() {
                "function_call" => {
                    return Err(ApiError::unsupported(
                        &at(&k),
                        "function_call (the deprecated form of tool_calls) is not accepted; send tool_calls",
                    ));
                }
                _ if unknown == UnknownFields::Refuse => return Err(unknown_field(&at(&k))),
                _ => ignored.push(at(&k)),
            }
        }
        out.push(Turn { message: Message { role, content }, tool_calls, tool_call_id });
    }
    Ok(out)
}

/// An assistant message's `tool_calls`: a list of at most
/// [`MAX_TOOL_CALLS`] objects, each with a `function` object that names the
/// function (`name`, a string); the rest (`id`, `type`, `arguments`) goes
/// to the template as given, except that `arguments` written as a string
/// holding a JSON object (OpenAI's form) becomes that object, as vLLM
/// passes it: templates write it with `tojson` and expect a mapping (a
/// string would reach the prompt quoted twice).
fn tool_calls(mut v: Value, at: &str) -> Result<Value, ApiError> {
    let Value::Array(calls) = &mut v else { return Err(type_error(at, "a list of tool call objects")) };
    if calls.len() > MAX_TOOL_CALLS {
        return Err(ApiError::invalid(
            format!("{at} holds {} tool calls, more than the {MAX_TOOL_CALLS} accepted", calls.len()),
            Some(at),
            "invalid_value",
        ));
    }
    for (j, c) in calls.iter_mut().enumerate() {
        let named = c.get("function").and_then(|f| f.get("name")).is_some_and(Value::is_string);
        if !c.is_object() || !named {
            return Err(type_error(
                &format!("{at}[{j}]"),
                "an object {\"id\", \"type\": \"function\", \"function\": {\"name\": string, \"arguments\"}}",
            ));
        }
        if let Some(args) = c.get_mut("function").and_then(|f| f.get_mut("arguments"))
            && let Some(Ok(obj @ Value::Object(_))) = args.as_str().map(serde_json::from_str::<Value>)
        {
            *args = obj;
        }
    }
    Ok(v)
}

/// Concatenates `[{"type": "text", "text": ...}, ...]`.
fn text_parts(parts: Vec<Value>, at: &str) -> Result<String, ApiError> {
    let mut s = String::new();
    for (j, p) in parts.into_iter().enumerate() {
        let here = format!("{at}[{j}]");
        let Value::Object(mut p) = p else { return Err(type_error(&here, "a content part object")) };
        match take(&mut p, "type") {
            Some(Value::String(t)) if t == "text" => {}
            Some(Value::String(t)) => {
                return Err(ApiError::unsupported(&format!("{here}.type"), &format!("{t:?} parts are not (text is)")));
            }
            _ => return Err(type_error(&format!("{here}.type"), "\"text\"")),
        }
        match take(&mut p, "text") {
            Some(Value::String(t)) => s.push_str(&t),
            _ => return Err(type_error(&format!("{here}.text"), "a string")),
        }
    }
    Ok(s)
}

/// `stop`: a string or a list of up to four strings.
fn parse_stop(v: Option<Value>) -> Result<Vec<String>, ApiError> {
    let list = match v {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(items)) => {
            if items.len() > MAX_STOP_STRINGS {
                return Err(ApiError::invalid(
                    format!("stop has {} strings; at most {MAX_STOP_STRINGS} are allowed", items.len()),
                    Some("stop"),
                    "invalid_value",
                ));
            }
            items
                .into_iter()
                .map(|x| match x {
                    Value::String(s) => Ok(s),
                    _ => Err(type_error("stop", "a string or a list of strings")),
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        Some(_) => return Err(type_error("stop", "a string or a list of strings")),
    };
    for s in &list {
        if s.is_empty() || s.len() > MAX_STOP_BYTES {
            return Err(ApiError::invalid(
                format!("each stop string must be 1 to {MAX_STOP_BYTES} bytes long"),
                Some("stop"),
                "invalid_value",
            ));
        }
    }
    Ok(list)
}

/// Whatever is left: parameters that are accepted only at their neutral
/// value (named when they are not), ignored ones, and unknown ones (the
/// names returned, or refused under [`UnknownFields::Refuse`]).
fn check_rest(obj: Map<String, Value>, endpoint: Endpoint, unknown: UnknownFields) -> Result<Vec<String>, ApiError> {
    let mut ignored = Vec::new();
    for (k, v) in obj {
        if v.is_null() || IGNORED.contains(&k.as_str()) {
            continue;
        }
        // llama-server's settings that only qualify a penalty (refused
        // below unless neutral, and then they change nothing).
        if QUALIFIERS.contains(&k.as_str()) {
            continue;
        }
        let neutral = match k.as_str() {
            "n" | "best_of" => v.as_u64() == Some(1),
            // llama-server's other samplers, off at these values.
            "typical_p" | "tfs_z" => v.as_f64() == Some(1.0),
            "mirostat" | "dry_multiplier" | "xtc_probability" | "dynatemp_range" => v.as_f64() == Some(0.0),
            "top_n_sigma" => v.as_f64().is_some_and(|x| x <= 0.0),
            // llama-server's alternatives per token (`logprobs` on the OpenAI routes).
            "n_probs" => v.as_u64() == Some(0),
            // vLLM's beam search and banned words.
            "use_beam_search" => v.as_bool() == Some(false),
            "length_penalty" => v.as_f64() == Some(1.0),
            "bad_words" => v.as_array().is_some_and(Vec::is_empty),
            // vLLM's: no minimum length.
            "min_tokens" => v.as_u64() == Some(0),
            "logit_bias" => v.as_object().is_some_and(Map::is_empty),
            "tools" | "functions" => v.as_array().is_some_and(Vec::is_empty),
            "tool_choice" | "function_call" => v.as_str() == Some("none"),
            "response_format" => v.get("type").and_then(Value::as_str) == Some("text"),
            "modalities" => v.as_array().is_some_and(|a| a.iter().all(|m| m.as_str() == Some("text"))),
            "suffix" => v.as_str() == Some(""),
            "audio" | "prediction" | "reasoning_effort" | "web_search_options" | "guided_json" | "guided_regex"
            | "guided_choice" | "grammar" => false,
            other if unknown == UnknownFields::Refuse => return Err(unknown_field(other)),
            _ => {
                ignored.push(k);
                continue;
            }
        };
        if !neutral {
            let why = match k.as_str() {
                "n" | "best_of" => "one choice per request (send separate requests)",
                "typical_p" | "tfs_z" => "this sampler is not implemented (give 1, or leave it out)",
                "mirostat" | "dry_multiplier" | "xtc_probability" | "dynatemp_range" => {
                    "this sampler is not implemented (give 0, or leave it out)"
                }
                "top_n_sigma" => "this sampler is not implemented (give -1, or leave it out)",
                "n_probs" if endpoint == Endpoint::Llama => {
                    "probabilities are not returned on POST /completion (give 0); POST /v1/completions returns \
                     logprobs"
                }
                "use_beam_search" | "length_penalty" => "beam search is not implemented (give false)",
                "bad_words" => "banned words are not implemented (give an empty list)",
                "min_tokens" => "a minimum length is not implemented (give 0, or use ignore_eos)",
                "tools" | "functions" | "tool_choice" | "function_call" => {
                    "tool calling is not implemented (give none, or an empty list)"
                }
                "response_format" | "guided_json" | "guided_regex" | "guided_choice" | "grammar" => {
                    "constrained output is not (only {\"type\": \"text\"})"
                }
                _ => "this server does not implement it",
            };
            return Err(ApiError::unsupported(&k, why));
        }
    }
    Ok(ignored)
}

/// A `POST /tokenize` body, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenizeRequest {
    /// `Text` from `prompt` (or llama-server's `content`), `Chat` from `messages`.
    pub prompt: Prompt,
    /// `add_special_tokens` (default true): the model's BOS where a prompt gets one.
    pub add_special_tokens: bool,
    /// Unknown fields, accepted and ignored (as for completions).
    pub ignored: Vec<String>,
}

/// Checks a `/tokenize` body: `model` optional (when given, the served
/// one), exactly one of `prompt`, `content` and `messages`.
pub fn parse_tokenize(body: &[u8], served_model: &str, unknown: UnknownFields) -> Result<TokenizeRequest, ApiError> {
    let mut obj = body_object(body)?;
    check_model(take(&mut obj, "model"), served_model, false)?;
    let given: Vec<&str> = ["prompt", "content", "messages"].into_iter().filter(|k| obj.contains_key(*k)).collect();
    if given.len() != 1 {
        return Err(ApiError::invalid(
            "give exactly one of prompt (or content) and messages",
            Some(given.get(1).copied().unwrap_or("prompt")),
            if given.is_empty() { "missing_required_parameter" } else { "invalid_value" },
        ));
    }
    let mut ignored = Vec::new();
    let prompt = match given[0] {
        "messages" => Prompt::Chat(parse_messages(take(&mut obj, "messages"), unknown, &mut ignored)?),
        k => match take(&mut obj, k) {
            Some(Value::String(s)) => Prompt::Text(s),
            _ => return Err(type_error(k, "a string")),
        },
    };
    let add_special_tokens = take_bool(&mut obj, "add_special_tokens")?.unwrap_or(true);
    match take_bool(&mut obj, "add_generation_prompt")? {
        Some(false) => {
            return Err(ApiError::unsupported(
                "add_generation_prompt",
                "messages are always tokenized with the generation prompt, as the chat endpoint runs them (give true)",
            ));
        }
        _ if matches!(prompt, Prompt::Chat(_)) && !add_special_tokens => {
            return Err(ApiError::unsupported(
                "add_special_tokens",
                "messages are tokenized as the chat endpoint runs them (give true)",
            ));
        }
        _ => {}
    }
    // llama-server's `with_pieces` at its default is no request for anything.
    if obj.get("with_pieces").and_then(Value::as_bool) == Some(false) {
        obj.remove("with_pieces");
    }
    unknown_rest(obj, unknown, &mut ignored)?;
    Ok(TokenizeRequest { prompt, add_special_tokens, ignored })
}

impl TokenizeRequest {
    /// The ids, as [`Request::prepare`] would encode the prompt (bounded by
    /// the context the same way: a prompt past it is refused, not counted).
    pub fn run(&self, engine: &Engine) -> Result<Vec<u32>, ApiError> {
        let tok = &engine.loaded.tokenizer;
        let context = engine.loaded.info.context_length;
        let param = if matches!(self.prompt, Prompt::Chat(_)) { "messages" } else { "prompt" };
        let ids = match &self.prompt {
            Prompt::Text(t) if self.add_special_tokens => tok.encode_prompt_bounded(t, context),
            Prompt::Text(t) => {
                if t.len().div_ceil(tok.longest_token_bytes.unwrap_or(usize::MAX).max(1)) > context {
                    return Err(too_long_to_count(context, param));
                }
                tok.encode(t)
            }
            Prompt::Chat(m) => tok.encode_turns(m, context),
            Prompt::Tokens(ids) => Ok(ids.clone()),
        }
        .map_err(|e| ApiError::invalid(format!("{param}: {e}"), Some(param), "invalid_value"))?;
        if ids.len() > context {
            return Err(too_long_to_count(context, param));
        }
        Ok(ids)
    }
}

fn too_long_to_count(context: usize, param: &str) -> ApiError {
    ApiError::invalid(
        format!("the text is longer than this model's maximum context length of {context} tokens; it is not counted"),
        Some(param),
        "context_length_exceeded",
    )
}

/// Checks a `/detokenize` body: `tokens`, a list of ids in the vocabulary;
/// the ids and the unknown fields ignored.
pub fn parse_detokenize(
    body: &[u8],
    served_model: &str,
    vocab: usize,
    unknown: UnknownFields,
) -> Result<(Vec<u32>, Vec<String>), ApiError> {
    let mut obj = body_object(body)?;
    check_model(take(&mut obj, "model"), served_model, false)?;
    let ids = match take(&mut obj, "tokens") {
        Some(Value::Array(items)) => token_ids(&items, "tokens")?,
        Some(_) => return Err(type_error("tokens", "a list of token ids")),
        None => {
            return Err(ApiError::invalid(
                "tokens is required: a list of token ids",
                Some("tokens"),
                "missing_required_parameter",
            ));
        }
    };
    in_vocabulary(&ids, vocab, "tokens")?;
    let mut ignored = Vec::new();
    unknown_rest(obj, unknown, &mut ignored)?;
    Ok((ids, ignored))
}

impl Request {
    /// OpenAI's defaults: 16 tokens for completions; for chat (and
    /// llama-server's `/completion`), as many as the context has room for.
    pub fn default_max_tokens(&self, room: usize) -> usize {
        match self.endpoint {
            Endpoint::Completions => COMPLETIONS_DEFAULT_MAX_TOKENS.min(room),
            // llama-server's `n_predict: -1`, its default.
            Endpoint::Chat | Endpoint::Llama => room,
        }
    }

    /// The field that holds the prompt, for error bodies.
    fn prompt_param(&self) -> &'static str {
        match self.endpoint {
            Endpoint::Completions | Endpoint::Llama => "prompt",
            Endpoint::Chat => "messages",
        }
    }

    /// Refuses, before tokenizing, a prompt whose byte length alone proves
    /// it cannot fit the context: no token is longer than
    /// `longest_token_bytes`, so `b` bytes are at least `b / longest` tokens.
    /// A flood of oversized prompts then costs no tokenizer memory.
    pub fn check_bytes(&self, engine: &Engine) -> Result<(), ApiError> {
        let Some(longest) = engine.loaded.tokenizer.longest_token_bytes else { return Ok(()) };
        let bytes = match &self.prompt {
            Prompt::Text(t) => t.len(),
            Prompt::Chat(m) => m.iter().map(|t| t.message.content.len()).sum(),
            Prompt::Tokens(_) => return Ok(()),
        };
        let context = engine.loaded.info.context_length;
        let least = bytes.div_ceil(longest);
        if least >= context {
            let param = self.prompt_param();
            return Err(ApiError::invalid(
                format!(
                    "this model's maximum context length is {context} tokens, and the prompt is {bytes} bytes: \
                     no token of this model is longer than {longest} bytes, so it is at least {least} tokens; \
                     shorten it"
                ),
                Some(param),
                "context_length_exceeded",
            ));
        }
        Ok(())
    }

    /// Tokenizes the prompt (through the model's chat template for chat) and
    /// checks it and `max_tokens` against the model's context.
    pub fn prepare(self, engine: &Engine) -> Result<Prepared, ApiError> {
        let tok = &engine.loaded.tokenizer;
        let param = self.prompt_param();
        self.check_bytes(engine)?;
        let ids = match &self.prompt {
            // Stopping once past the context: an over-long prompt costs one
            // piece's worth of tokenizer memory past it, not its whole length.
            Prompt::Text(t) => tok.encode_prompt_bounded(t, engine.loaded.info.context_length),
            Prompt::Chat(m) => tok.encode_turns(m, engine.loaded.info.context_length),
            Prompt::Tokens(ids) => {
                in_vocabulary(ids, engine.loaded.info.vocab, param)?;
                Ok(ids.clone())
            }
        }
        .map_err(|e| ApiError::invalid(format!("{param}: {e}"), Some(param), "invalid_value"))?;
        if ids.is_empty() {
            return Err(ApiError::invalid(
                format!("{param} encodes to no tokens; at least one is needed"),
                Some(param),
                "invalid_value",
            ));
        }
        let context = engine.loaded.info.context_length;
        if ids.len() >= context {
            return Err(ApiError::invalid(
                format!(
                    "this model's maximum context length is {context} tokens, and the prompt alone is {}{} tokens; \
                     shorten it so at least one token can be generated",
                    if ids.len() > context { "at least " } else { "" },
                    ids.len()
                ),
                Some(param),
                "context_length_exceeded",
            ));
        }
        let room = context - ids.len();
        let max_tokens = match self.max_tokens {
            None => self.default_max_tokens(room),
            Some((n, _)) if n as u128 <= room as u128 => n as usize,
            Some((n, param)) => {
                return Err(ApiError::invalid(
                    format!(
                        "this model's maximum context length is {context} tokens; the prompt is {} tokens, so \
                         {param} can be at most {room} (asked for {n})",
                        ids.len()
                    ),
                    Some(param),
                    "context_length_exceeded",
                ));
            }
        };
        Ok(Prepared { request: self, prompt_ids: ids, max_tokens })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use serde_json::json;

    fn chat(body: &str) -> Result<Request, ApiError> {
        parse(Endpoint::Chat, body.as_bytes(), "m", UnknownFields::Ignore)
    }

    fn completions(body: &str) -> Result<Request, ApiError> {
        parse(Endpoint::Completions, body.as_bytes(), "m", UnknownFields::Ignore)
    }

    #[test]
    fn a_minimal_chat_request_parses_with_openai_defaults() {
        let r = chat(r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#).unwrap();
        assert_eq!(r.prompt, Prompt::Chat(vec![Message { role: "user".into(), content: "hi".into() }.into()]));
        assert_eq!(r.sampling.temperature, 1.0);
        assert_eq!(r.max_tokens, None);
        assert!(!r.stream && !r.include_usage && !r.seed_given);
        assert_eq!(r.default_max_tokens(100), 100);
    }

    #[test]
    fn completions_accept_text_a_one_string_list_and_token_ids() {
        let p = |b: &str| completions(b).map(|r| r.prompt);
        assert_eq!(p(r#"{"model":"m","prompt":"a"}"#).unwrap(), Prompt::Text("a".into()));
        assert_eq!(p(r#"{"model":"m","prompt":["a"]}"#).unwrap(), Prompt::Text("a".into()));
        assert_eq!(p(r#"{"model":"m","prompt":[1,2]}"#).unwrap(), Prompt::Tokens(vec![1, 2]));
        assert_eq!(p(r#"{"model":"m","prompt":[[3]]}"#).unwrap(), Prompt::Tokens(vec![3]));
        let e = p(r#"{"model":"m","prompt":["a","b"]}"#).unwrap_err();
        assert_eq!((e.param.as_deref(), e.code), (Some("prompt"), Some("unsupported_parameter")));
        assert_eq!(p(r#"{"model":"m","prompt":[-1]}"#).unwrap_err().code, Some("invalid_type"));
        assert_eq!(p(r#"{"model":"m","prompt":[]}"#).unwrap_err().code, Some("invalid_value"));
        assert_eq!(completions(r#"{"model":"m","prompt":"a"}"#).unwrap().default_max_tokens(100), 16);
    }

    #[test]
    fn malformed_json_and_non_objects_are_invalid_json() {
        for b in ["{", "", "[1]", "\"x\"", "{\"model\": \"m\",}"] {
            let e = chat(b).unwrap_err();
            assert_eq!((e.status, e.code), (StatusCode::BAD_REQUEST, Some("invalid_json")), "{b:?}");
        }
        // Deep nesting is refused by the JSON parser's depth limit, not a stack overflow.
        let deep = format!("{{\"model\":\"m\",\"x\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(chat(&deep).unwrap_err().code, Some("invalid_json"));
    }

    #[test]
    fn missing_fields_are_named() {
        let e = chat(r#"{"messages": []}"#).unwrap_err();
        assert_eq!((e.param.as_deref(), e.code), (Some("model"), Some("missing_required_parameter")));
        let e = chat(r#"{"model": "m"}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        let e = completions(r#"{"model": "m"}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("prompt"));
        let e = chat(r#"{"model": "m", "messages": [{"role": "user"}]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content"));
    }

    #[test]
    fn an_unknown_model_is_a_404_naming_the_served_one() {
        let e = chat(r#"{"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}"#).unwrap_err();
        assert_eq!(e.status, StatusCode::NOT_FOUND);
        assert!(e.message.contains("\"m\""), "{}", e.message);
    }

    /// Settings out of range (the first group) and sampling settings this
    /// server does not run at a non-neutral value (the second) are refused
    /// with 400, naming the field in `param` and in the message.
    #[test]
    fn out_of_range_and_unsupported_settings_name_their_field() {
        let base = r#""model": "m", "prompt": "x""#;
        for (extra, param) in [
            (r#""max_tokens": 0"#, "max_tokens"),
            (r#""max_tokens": -3"#, "max_tokens"),
            (r#""max_tokens": 1.5"#, "max_tokens"),
            (r#""temperature": 2.5"#, "temperature"),
            (r#""temperature": -1"#, "temperature"),
            (r#""top_p": 0"#, "top_p"),
            (r#""stop": ["a","b","c","d","e"]"#, "stop"),
            (r#""stop": [""]"#, "stop"),
            (r#""stream": "yes""#, "stream"),
            (r#""stream_options": {"include_usage": true}"#, "stream_options"),
            // Penalties and min-p out of their bounds.
            (r#""repetition_penalty": 0"#, "repetition_penalty"),
            (r#""repetition_penalty": -1.1"#, "repetition_penalty"),
            (r#""repeat_penalty": 1000"#, "repeat_penalty"),
            (r#""repetition_penalty": "1.1""#, "repetition_penalty"),
            (r#""frequency_penalty": 2.5"#, "frequency_penalty"),
            (r#""presence_penalty": -3"#, "presence_penalty"),
            (r#""min_p": 1.5"#, "min_p"),
            (r#""min_p": -0.1"#, "min_p"),
            (r#""repeat_last_n": -2"#, "repeat_last_n"),
            (r#""repeat_last_n": 1e12"#, "repeat_last_n"),
            (r#""penalty_last_n": 2000000"#, "penalty_last_n"),
            (r#""repeat_last_n": 1.5"#, "repeat_last_n"),
            (r#""repetition_penalty": 1.1, "repeat_penalty": 1.2"#, "repeat_penalty"),
            // Not neutral: not run here.
            (r#""min_tokens": 3"#, "min_tokens"),
            (r#""top_k": -2"#, "top_k"),
            (r#""ignore_eos": "yes""#, "ignore_eos"),
        ] {
            let e = completions(&format!("{{{base}, {extra}}}")).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (StatusCode::BAD_REQUEST, Some(param)), "{extra}: {e:?}");
            assert!(e.message.contains(param), "{extra}: {}", e.message);
        }
    }

    fn llama(body: &str, unknown: UnknownFields) -> Result<Request, ApiError> {
        parse(Endpoint::Llama, body.as_bytes(), "m", unknown)
    }

    /// llama-server's `/completion`: no `model` needed, `n_predict` (-1:
    /// to the end of the context, its default), its default temperature,
    /// `stop` and `stream`; the OpenAI routes still need `model`, and say
    /// where a request without one goes.
    #[test]
    fn llama_servers_completion_takes_its_own_fields() {
        let r =
            llama(r#"{"prompt": "hi", "n_predict": 8, "stop": ["."], "stream": true}"#, UnknownFields::Ignore).unwrap();
        assert_eq!((r.endpoint, r.max_tokens, r.stream), (Endpoint::Llama, Some((8, "n_predict")), true));
        assert_eq!((&r.stop[..], r.sampling.temperature), (&[".".to_string()][..], LLAMA_DEFAULT_TEMPERATURE));
        assert_eq!(r.default_max_tokens(100), 100);
        let r = llama(r#"{"prompt": "hi", "n_predict": -1, "model": "m"}"#, UnknownFields::Ignore).unwrap();
        assert_eq!(r.max_tokens, None);
        let e = llama(r#"{"prompt": "hi", "model": "other"}"#, UnknownFields::Ignore).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("model"));
        // llama-server's fields that change nothing at these values, and the
        // penalty qualifiers (with every penalty neutral), are taken even strictly.
        let neutral = r#"{"prompt": "hi", "repeat_penalty": 1.0, "repeat_last_n": 64, "penalize_nl": true,
            "typical_p": 1.0, "mirostat": 0, "n_probs": 0, "top_n_sigma": -1}"#;
        assert_eq!(llama(neutral, UnknownFields::Refuse).unwrap().ignored, Vec::<String>::new());
        let e = completions(r#"{"prompt": "x"}"#).unwrap_err();
        assert!(e.message.contains("POST /completion") && e.message.contains("GET /v1/models"), "{}", e.message);
    }

    /// A sampling control this server lacks is refused with 400 naming it,
    /// in llama-server's spelling too, lenient or strict; never ignored.
    #[test]
    fn sampling_controls_this_server_lacks_are_refused_by_name_in_every_spelling() {
        for extra in [
            r#""typical_p": 0.9"#,
            r#""mirostat": 2"#,
            r#""dry_multiplier": 0.8"#,
            r#""xtc_probability": 0.5"#,
            r#""n_probs": 3"#,
        ] {
            let name = extra.split('"').nth(1).unwrap();
            for unknown in [UnknownFields::Ignore, UnknownFields::Refuse] {
                let e = llama(&format!(r#"{{"prompt": "x", {extra}}}"#), unknown).unwrap_err();
                assert_eq!((e.status, e.param.as_deref()), (StatusCode::BAD_REQUEST, Some(name)), "{extra}");
                assert!(e.message.contains("not implemented") || e.message.contains("not returned"), "{}", e.message);
            }
            if name != "n_probs" {
                let e = completions(&format!(r#"{{"model": "m", "prompt": "x", {extra}}}"#)).unwrap_err();
                assert_eq!(e.param.as_deref(), Some(name), "{extra}");
            }
        }
        let e = llama(r#"{"prompt": "x", "logprobs": 2}"#, UnknownFields::Ignore).unwrap_err();
        assert!(e.message.contains("POST /v1/completions returns it"), "{}", e.message);
    }

    /// The penalties and min-p in each spelling, and which tokens the
    /// penalties count: llama.cpp's window on `/completion` and wherever a
    /// llama.cpp name is used, vLLM's scopes otherwise.
    #[test]
    fn penalties_and_min_p_parse_in_vllm_and_llama_server_spellings() {
        let r = completions(
            r#"{"model": "m", "prompt": "x", "repetition_penalty": 1.3, "presence_penalty": 0.5,
                "frequency_penalty": -0.25, "min_p": 0.05}"#,
        )
        .unwrap();
        let s = r.sampling;
        assert_eq!((s.repetition_penalty, s.presence_penalty, s.frequency_penalty), (1.3, 0.5, -0.25));
        assert_eq!((s.min_p, s.penalty_scope), (0.05, PenaltyScope::Vllm));
        // A llama.cpp name on an OpenAI route: llama.cpp's window.
        let r =
            chat(r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "repeat_penalty": 1.1}"#).unwrap();
        assert_eq!((r.sampling.repetition_penalty, r.sampling.penalty_scope), (1.1, PenaltyScope::Last(64)));
        let r = completions(r#"{"model": "m", "prompt": "x", "frequency_penalty": 1, "repeat_last_n": -1}"#).unwrap();
        assert_eq!(r.sampling.penalty_scope, PenaltyScope::Context);
        // Both names of the repetition penalty, agreeing, are one.
        let r =
            completions(r#"{"model": "m", "prompt": "x", "repetition_penalty": 1.2, "repeat_penalty": 1.2}"#).unwrap();
        assert_eq!(r.sampling.repetition_penalty, 1.2);
        // llama-server's /completion, strict: every field is known.
        for (body, scope) in [
            (
                r#"{"prompt": "x", "repeat_penalty": 1.1, "presence_penalty": 0.2, "min_p": 0.1}"#,
                PenaltyScope::Last(64),
            ),
            (r#"{"prompt": "x", "repeat_penalty": 1.1, "repeat_last_n": 0}"#, PenaltyScope::Off),
            (
                r#"{"prompt": "x", "repeat_penalty": 1.1, "repeat_last_n": 256, "penalize_nl": true}"#,
                PenaltyScope::Last(256),
            ),
            (r#"{"prompt": "x", "frequency_penalty": 0.3, "penalty_last_n": -1}"#, PenaltyScope::Context),
            (r#"{"prompt": "x", "repetition_penalty": 1.1}"#, PenaltyScope::Last(64)),
        ] {
            let r = llama(body, UnknownFields::Refuse).unwrap_or_else(|e| panic!("{body}: {e:?}"));
            assert_eq!(r.sampling.penalty_scope, scope, "{body}");
            assert!(r.sampling.penalized() || scope == PenaltyScope::Off, "{body}");
            assert!(r.ignored.is_empty(), "{body}");
        }
        // llama.cpp's old penalize_nl: false (newlines exempt) is not run
        // here: refused where a penalty applies, taken where none does.
        let e = llama(r#"{"prompt": "x", "repeat_penalty": 1.1, "penalize_nl": false}"#, UnknownFields::Ignore)
            .unwrap_err();
        assert_eq!((e.param.as_deref(), e.code), (Some("penalize_nl"), Some("unsupported_parameter")));
        llama(r#"{"prompt": "x", "penalize_nl": false}"#, UnknownFields::Refuse).unwrap();
        // Absent, null and neutral: no penalty.
        for body in [
            r#"{"model": "m", "prompt": "x"}"#,
            r#"{"model": "m", "prompt": "x", "repetition_penalty": null, "min_p": null}"#,
            r#"{"model": "m", "prompt": "x", "repetition_penalty": 1, "presence_penalty": 0, "frequency_penalty": 0}"#,
        ] {
            let s = completions(body).unwrap().sampling;
            assert!(!s.penalized() && s.min_p == 0.0, "{body}");
            s.validate().unwrap();
        }
    }

    #[test]
    fn unsupported_parameters_are_named_unless_neutral() {
        let base = r#""model": "m", "messages": [{"role": "user", "content": "x"}]"#;
        for extra in [
            r#""n": 2"#,
            r#""top_logprobs": 2"#,
            r#""tools": [{"type": "function"}]"#,
            r#""response_format": {"type": "json_object"}"#,
        ] {
            let e = chat(&format!("{{{base}, {extra}}}")).unwrap_err();
            let name = extra.split('"').nth(1).unwrap();
            assert_eq!(e.param.as_deref(), Some(name), "{extra}: {e:?}");
            assert!(e.message.contains(name));
        }
        for extra in
            [r#""n": 1"#, r#""logprobs": false"#, r#""user": "u""#, r#""presence_penalty": 0"#, r#""tools": null"#]
        {
            chat(&format!("{{{base}, {extra}}}")).unwrap();
        }
    }

    #[test]
    fn unknown_fields_are_ignored_and_listed_unless_strict() {
        let body = r#"{"model": "m", "frobnicate": 1, "chat_template_kwargs": {"enable_thinking": false},
            "skip_special_tokens": true, "cache_prompt": true, "n": 1,
            "messages": [{"role": "user", "content": "x"},
                         {"role": "assistant", "content": "y", "tool_calls": null, "refusal": null, "reasoning_content": "r"},
                         {"role": "user", "content": "z"}]}"#;
        let r = chat(body).unwrap();
        let mut got = r.ignored.clone();
        got.sort();
        assert_eq!(
            got,
            [
                "cache_prompt",
                "chat_template_kwargs",
                "frobnicate",
                "messages[1].reasoning_content",
                "skip_special_tokens"
            ]
        );
        // Strict: the first unknown one is named (a top-level one, or one inside a message).
        let e = parse(Endpoint::Chat, body.as_bytes(), "m", UnknownFields::Refuse).unwrap_err();
        assert_eq!(e.code, Some("unknown_parameter"));
        assert!(e.message.contains("--strict-params"), "{}", e.message);
        let msg_only = r#"{"model": "m", "messages": [{"role": "user", "content": "x", "reasoning_content": "r"}]}"#;
        let e = parse(Endpoint::Chat, msg_only.as_bytes(), "m", UnknownFields::Refuse).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].reasoning_content"), "{e:?}");
        // A malformed tool call is refused either way; known parameters at
        // a value this server cannot honour are too.
        let tool = r#"{"model": "m", "messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}]}"#;
        let e = chat(tool).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].tool_calls[0]"), "{e:?}");
        assert_eq!(
            chat(r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2}"#)
                .unwrap_err()
                .param
                .as_deref(),
            Some("n")
        );
    }

    #[test]
    fn logprobs_and_echo_parse_as_each_endpoint_takes_them() {
        let r = completions(r#"{"model": "m", "prompt": "x", "logprobs": 3, "echo": true}"#).unwrap();
        assert_eq!((r.logprobs, r.echo), (Some(3), true));
        let r = completions(r#"{"model": "m", "prompt": "x", "logprobs": 0}"#).unwrap();
        assert_eq!(r.logprobs, Some(0));
        assert_eq!(completions(r#"{"model": "m", "prompt": "x", "logprobs": null}"#).unwrap().logprobs, None);
        let r = chat(
            r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 5}"#,
        )
        .unwrap();
        assert_eq!(r.logprobs, Some(5));
        let r = chat(r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": false}"#).unwrap();
        assert_eq!(r.logprobs, None);
        for (body, param) in [
            (r#"{"model": "m", "prompt": "x", "logprobs": 21}"#, "logprobs"),
            (r#"{"model": "m", "prompt": "x", "logprobs": -1}"#, "logprobs"),
            (r#"{"model": "m", "prompt": "x", "logprobs": 1, "stream": true}"#, "logprobs"),
            (r#"{"model": "m", "prompt": "x", "echo": true, "stream": true}"#, "echo"),
        ] {
            assert_eq!(completions(body).unwrap_err().param.as_deref(), Some(param), "{body}");
        }
        for (body, param) in [
            (r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}"#, "top_logprobs"),
            (r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "echo": true}"#, "echo"),
        ] {
            assert_eq!(chat(body).unwrap_err().param.as_deref(), Some(param), "{body}");
        }
    }

    #[test]
    fn llama_servers_n_predict_is_max_tokens() {
        let r = completions(r#"{"model": "m", "prompt": "x", "n_predict": 7}"#).unwrap();
        assert_eq!(r.max_tokens, Some((7, "n_predict")));
        let r = completions(r#"{"model": "m", "prompt": "x", "n_predict": 7, "max_tokens": 7}"#).unwrap();
        assert_eq!(r.max_tokens, Some((7, "max_tokens")));
        let e = completions(r#"{"model": "m", "prompt": "x", "n_predict": 7, "max_tokens": 8}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("n_predict"));
    }

    #[test]
    fn neutral_sampling_values_that_benchmark_clients_send_are_accepted() {
        let base = r#""model": "m", "prompt": "x""#;
        for extra in [
            r#""repetition_penalty": 1.0"#,
            r#""repetition_penalty": 1"#,
            r#""presence_penalty": 0.0, "frequency_penalty": 0"#,
            r#""min_p": 0"#,
            r#""top_k": -1"#,
            r#""top_k": 0"#,
            r#""ignore_eos": false"#,
            r#""min_tokens": 0"#,
            r#""logprobs": null"#,
        ] {
            let r = completions(&format!("{{{base}, {extra}}}")).unwrap_or_else(|e| panic!("{extra}: {e:?}"));
            assert_eq!(r.sampling.top_k, 0, "{extra}");
            assert!(!r.ignore_eos);
        }
        assert!(completions(&format!("{{{base}, \"ignore_eos\": true}}")).unwrap().ignore_eos);
        assert_eq!(completions(&format!("{{{base}, \"top_k\": 5}}")).unwrap().sampling.top_k, 5);
    }

    /// The bodies of vLLM's serving benchmark client
    /// (`benchmarks/backend_request_func.py`, `async_request_openai_completions`
    /// and `async_request_openai_chat_completions`), with and without ignore_eos.
    #[test]
    fn vllm_benchmark_bodies_parse() {
        for ignore in [None, Some(true)] {
            let mut c = json!({
                "model": "m", "prompt": "hello", "temperature": 0.0, "repetition_penalty": 1.0,
                "max_tokens": 8, "logprobs": null, "stream": true, "stream_options": {"include_usage": true},
            });
            let mut chat = json!({
                "model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
                "temperature": 0.0, "max_completion_tokens": 8, "stream": true,
                "stream_options": {"include_usage": true},
            });
            if let Some(i) = ignore {
                c["ignore_eos"] = json!(i);
                chat["ignore_eos"] = json!(i);
            }
            let r = completions(&c.to_string()).unwrap();
            assert_eq!((r.ignore_eos, r.stream, r.include_usage), (ignore.is_some(), true, true));
            let r = parse(Endpoint::Chat, chat.to_string().as_bytes(), "m", UnknownFields::Ignore).unwrap();
            assert_eq!((r.ignore_eos, r.max_tokens), (ignore.is_some(), Some((8, "max_completion_tokens"))));
        }
    }

    #[test]
    fn stream_options_and_stop_and_seed_parse() {
        let r = completions(
            r#"{"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true},"stop":"\n","seed":-1}"#,
        )
        .unwrap();
        assert!(r.stream && r.include_usage && r.seed_given);
        assert_eq!(r.stop, vec!["\n".to_string()]);
        assert_eq!(r.sampling.seed, u64::MAX);
    }

    #[test]
    fn chat_content_parts_concatenate_and_other_parts_are_refused() {
        let r = chat(r#"{"model":"m","messages":[{"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}"#)
            .unwrap();
        assert_eq!(r.prompt, Prompt::Chat(vec![Message { role: "system".into(), content: "ab".into() }.into()]));
        let e = chat(r#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}"#)
            .unwrap_err();
        assert_eq!(e.code, Some("unsupported_parameter"));
        let e = chat(r#"{"model":"m","messages":[{"role":"function","content":"x"}]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        assert!(e.message.contains("send role \"tool\""), "{}", e.message);
    }

    #[test]
    fn a_tool_conversation_parses_into_turns_and_misplaced_fields_are_refused() {
        let call = r#"{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2}"}}"#;
        let body = format!(
            r#"{{"model": "m", "messages": [{{"role": "user", "content": "2+3?"}},
                {{"role": "assistant", "content": null, "tool_calls": [{call}]}},
                {{"role": "tool", "tool_call_id": "c1", "content": "5"}}]}}"#
        );
        let r = chat(&body).unwrap();
        let Prompt::Chat(turns) = &r.prompt else { panic!("{:?}", r.prompt) };
        assert_eq!(turns.len(), 3);
        assert_eq!((turns[1].message.role.as_str(), turns[1].message.content.as_str()), ("assistant", ""));
        assert_eq!(turns[1].tool_calls.as_ref().unwrap()[0]["function"]["name"], "add");
        // The arguments string becomes the object it holds (what templates expect).
        assert_eq!(turns[1].tool_calls.as_ref().unwrap()[0]["function"]["arguments"], json!({"a": 2}));
        assert_eq!((turns[2].message.role.as_str(), turns[2].tool_call_id.as_deref()), ("tool", Some("c1")));
        // Each field only where it belongs, each with its type.
        for (bad, param) in [
            (r#"{"role": "user", "content": "x", "tool_calls": []}"#, "messages[0].tool_calls"),
            (r#"{"role": "user", "content": "x", "tool_call_id": "c1"}"#, "messages[0].tool_call_id"),
            (r#"{"role": "tool", "content": "x", "tool_call_id": 7}"#, "messages[0].tool_call_id"),
            (r#"{"role": "assistant", "content": null, "tool_calls": {"id": "c1"}}"#, "messages[0].tool_calls"),
            (r#"{"role": "assistant", "content": null}"#, "messages[0].content"),
            (r#"{"role": "assistant", "content": "", "function_call": {"name": "f"}}"#, "messages[0].function_call"),
        ] {
            let e = chat(&format!(r#"{{"model": "m", "messages": [{bad}]}}"#)).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{bad}: {e:?}");
        }
        let many = vec![call; MAX_TOOL_CALLS + 1].join(",");
        let e = chat(&format!(r#"{{"model": "m", "messages": [{{"role": "assistant", "tool_calls": [{many}]}}]}}"#))
            .unwrap_err();
        assert!(e.message.contains("more than the 128"), "{}", e.message);
    }

    #[test]
    fn error_bodies_have_the_openai_shape() {
        let b = ApiError::unsupported("n", "why").body();
        let e = &b["error"];
        assert!(e["message"].is_string() && e["type"] == "invalid_request_error");
        assert_eq!((e["param"].as_str(), e["code"].as_str()), (Some("n"), Some("unsupported_parameter")));
    }
}
