//! The command-line flags of `runtime`: one clap struct per command, each
//! turned into the plain settings its library function takes (the library
//! has no clap types; its tests build the settings directly).

use clap::{Args, Subcommand};
use runtime::commands::drafter_flags::DrafterFlags;
use runtime::commands::policy::ExplainSettings;
use runtime::commands::{BenchSettings, FetchModelSettings, GenerateSettings};
use runtime::open::ModelSettings;
use runtime::serve::ServeSettings;
use runtime::speculative::setup::SpeculationSettings;
use std::path::PathBuf;

/// The flags that name the model and how it is opened (`generate`, `bench`, `serve`).
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A GGUF file, a Hugging Face checkpoint directory, or a known model by name (smollm2-135m,
    /// gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b: fetched on first use); default: smollm2-135m.
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// The most positions a sequence may hold, prompt and completion together (llama.cpp's -c,
    /// vLLM's --max-model-len); at most the model's own context length, which is the default.
    #[arg(short = 'c', long, alias = "max-model-len")]
    pub ctx_size: Option<usize>,
    /// A Jinja chat template file used in place of the model's (for chat prompts and requests).
    #[arg(long, alias = "chat-template-file")]
    pub chat_template: Option<PathBuf>,
    /// Worker threads (default: the CPUs available to this process).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Where forward passes run: cpu, cuda or cuda:N (default: CUDA device 0 when this build has
    /// CUDA and it is usable, else the CPU).
    #[arg(long, env = "DRAFTWISE_DEVICE")]
    pub device: Option<String>,
    /// What the K-quant matrices (Q4_K, Q5_K, Q6_K) multiply on the CPU: int8 (8-bit activations,
    /// llama.cpp's numerics and the faster; the default) or int16 (16-bit activations, closer to
    /// float64). Other formats run 16-bit activations at both; the policy key holds it.
    #[arg(long, value_name = "int8|int16")]
    pub precision: Option<String>,
    #[command(flatten)]
    pub cache: CacheArgs,
}

impl From<ModelArgs> for ModelSettings {
    fn from(a: ModelArgs) -> Self {
        ModelSettings {
            model: a.model,
            device: a.device,
            threads: a.threads,
            cache_dir: a.cache.cache_dir,
            ctx_size: a.ctx_size,
            chat_template: a.chat_template,
            precision: a.precision,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub load: ModelArgs,
    /// The prompt text.
    #[arg(short = 'p', long, conflicts_with = "prompts", required_unless_present = "prompts")]
    pub prompt: Option<String>,
    /// A JSONL prompt set: {"id": ..., "prompt": ...} or {"id": ..., "messages": [...]} per line.
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Render --prompt as a user message through the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// Tokens to generate at most (llama.cpp's -n / --n-predict).
    #[arg(short = 'n', long, alias = "n-predict", default_value_t = 128)]
    pub max_tokens: usize,
    /// 0 is greedy.
    #[arg(long, visible_alias = "temp", default_value_t = 0.0)]
    pub temperature: f32,
    /// 0 keeps every token.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Keep the tokens at least this times as likely as the most likely one (after the temperature); 0 keeps all.
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Repetition penalty (llama.cpp's): a counted token's positive logit is divided by it, a negative one
    /// multiplied; 1 is off.
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Subtracted once from each counted token's logit; 0 is off.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Subtracted per occurrence of each counted token; 0 is off.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// The tokens the penalties count (llama.cpp's): the last N of prompt and output; -1 all, 0 none.
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    pub repeat_last_n: i64,
    /// Seed of the sampler (sampled decoding; greedy ignores it).
    #[arg(short = 's', long, default_value_t = 0)]
    pub seed: u64,
    /// Run each prompt this many times (recorded passes).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Unrecorded passes over the prompt set first, marked `warmup` in events.
    #[arg(long, default_value_t = 0)]
    pub warmup: usize,
    /// JSONL events on stdout (startup, completion); human logs stay on stderr.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub spec: SpeculationArgs,
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    #[command(flatten)]
    pub load: ModelArgs,
    /// Prompt length: one prefill forward pass of this many tokens.
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// Tokens decoded one forward pass at a time after the prefill.
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    /// Recorded repetitions.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Repetitions run first and discarded.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Time one forward pass of R = 1..=--max-rows rows (a verify pass) instead.
    #[arg(long)]
    pub verify_cost: bool,
    /// Most rows of a verify pass for --verify-cost (a draft of W tokens is
    /// verified in a pass of W + 1 rows). `--max-width` is the old name.
    #[arg(long, alias = "max-width", default_value_t = 16)]
    pub max_rows: usize,
    /// One JSON object with every raw sample on stdout.
    #[arg(long)]
    pub json: bool,
    /// Width curve (with --drafter): draft widths to measure against classic decoding.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5,6,7,8")]
    pub widths: Vec<usize>,
    /// Width curve: the prompt set, grouped into tasks by each line's `type`
    /// (default: the repository's prompts/width-curve.jsonl, built in).
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Width curve: tokens generated per prompt.
    #[arg(long, default_value_t = 96)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub spec: SpeculationArgs,
}

/// Speculative decoding settings. Without `--drafter` the measured policy
/// decides: a measurement for this host that beats classic decoding turns its
/// drafter on; otherwise decoding is classic. `--drafter none` is classic.
#[derive(Args, Debug, Clone, Default)]
pub struct SpeculationArgs {
    /// Drafter kind: ngram, suffix, layerskip or draft-model (dflash and mtp are recognized, not loadable yet),
    /// or none for classic decoding. Default: what the policy table measured for this host.
    #[arg(long)]
    pub drafter: Option<String>,
    /// Tokens drafted per verify pass, 1..=32 or off (overrides DRAFTWISE_DRAFT_WIDTH and the policy table).
    /// `--draft-block-size` is its old name.
    /// llama.cpp's `--draft-max` (`--draft`) and SGLang's `--speculative-num-draft-tokens` name the same.
    #[arg(long, aliases = ["draft-block-size", "draft-max", "draft", "speculative-num-draft-tokens", "num-speculative-tokens"])]
    pub draft_width: Option<String>,
    /// The draft checkpoint for `--drafter draft-model` (GGUF, Hugging Face directory, or a known
    /// model's name); llama.cpp's `--model-draft`.
    #[arg(long, aliases = ["model-draft", "speculative-draft-model-path"])]
    pub drafter_model: Option<PathBuf>,
    /// `layerskip` layers: a count K (the first K layers) or a list like 0,1,2,7.
    #[arg(long)]
    pub layerskip_layers: Option<String>,
    #[command(flatten)]
    pub drafter_flags: DrafterFlags,
    /// Speculate even if the block-vs-chain probe finds verify rows that differ from the chain
    /// (forfeits byte-identical output; also DRAFTWISE_ALLOW_INEXACT=1).
    #[arg(long)]
    pub allow_inexact: bool,
    /// A draft-width table (like policy/draft-block-width.toml after `tuner propose`) used in
    /// place of the one compiled in, to try an entry before rebuilding; checked as the build
    /// checks the compiled one, and the startup line names it.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Choose each round's draft length (0 up to the width) per request from the acceptance seen
    /// and the verify pass's measured cost (on), or draft the width every round (off). Default:
    /// what the measured entry chose; --draft-width alone fixes the width.
    #[arg(long, value_name = "on|off", value_parser = runtime::limits::parse_on_off, action = clap::ArgAction::Set)]
    pub adaptive: Option<bool>,
    /// The verify pass's cost for --adaptive, in place of the entry's: CONTEXT=R1,R2,... (a pass
    /// of 1, 2, ... rows after CONTEXT positions, against one row; `runtime bench --verify-cost`
    /// measures it). Up to 4, one per context.
    #[arg(long, value_name = "CONTEXT=R1,R2,...")]
    pub cost_curve: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct CacheArgs {
    /// Model cache directory (default: $DRAFTWISE_CACHE_DIR, else $XDG_CACHE_HOME/draftwise, else ~/.cache/draftwise).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct FetchModelArgs {
    /// Which known model: smollm2-135m (the default), gemma3-270m, qwen2.5-coder-0.5b or
    /// qwen2.5-coder-1.5b.
    #[arg(short = 'm', long, default_value = "smollm2-135m")]
    pub model: String,
    #[command(flatten)]
    pub cache: CacheArgs,
}

/// Serve the model over HTTP with OpenAI's completions and chat completions API.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub load: ModelArgs,
    /// The model, as vLLM's `vllm serve MODEL` gives it: the same as -m/--model.
    #[arg(value_name = "MODEL", conflicts_with = "model")]
    pub model_positional: Option<PathBuf>,
    /// Address to listen on (an IP address). Loopback by default: the server has no authentication.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on; 0 picks a free one (the `listening on` line on stderr names it, and
    /// with --json the `startup` event's `server.address`).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// The name clients pass as `model` (default: the model's file or directory name, without `.gguf`).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Refuse requests with fields this server does not know (400 `unknown_parameter`); by
    /// default they are accepted, ignored and named in a warning line.
    #[arg(long)]
    pub strict_params: bool,
    /// Browser origins allowed to call the API (CORS), comma-separated, e.g.
    /// http://localhost:3000; * allows any. Default: none (no CORS headers).
    #[arg(long, value_delimiter = ',')]
    pub allowed_origins: Vec<String>,
    /// Requests that may wait while one runs; more are refused with 503 (code `queue_full`).
    #[arg(long, default_value_t = 64)]
    pub max_queue: usize,
    /// Requests one client (IP address) may have waiting (tokenizing or queued); more get 429
    /// (code `too_many_requests`). Default: a quarter of --max-queue (at least 1). Behind a
    /// reverse proxy, where every request has the proxy's address, set it to --max-queue.
    #[arg(long)]
    pub max_waiting_per_client: Option<usize>,
    /// Answer clients that shut down their sending side after a complete request
    /// (`shutdown(SHUT_WR)`). Off: the end of a client's input cancels its request at once,
    /// which frees the engine when a client leaves; on, a client that left without reading is
    /// noticed only when its response is written (a non-streaming request then runs to its end).
    #[arg(long)]
    pub half_close: bool,
    /// Largest request body accepted, in bytes; larger ones get 413.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// A request's line and headers must arrive within this many milliseconds of their first
    /// byte; slower ones get 408 and their connection is closed.
    #[arg(long, default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// A request's body must arrive within this many milliseconds of its head; a slower one gets
    /// 408 and its connection is closed (while it arrives, the connection can be evicted).
    #[arg(long, default_value_t = 30_000)]
    pub body_timeout_ms: u64,
    /// A keep-alive connection with no request for this many milliseconds is closed.
    #[arg(long, default_value_t = 30_000)]
    pub idle_timeout_ms: u64,
    /// Open connections at most; at the limit a new one evicts the one waiting longest without
    /// a request running, or, when every one has a request running, gets 503.
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    /// Requests tokenized at once (up to --max-queue more may wait for a turn; more get 429).
    #[arg(long, default_value_t = 2)]
    pub max_preparing: usize,
    /// A request not finished this many seconds after it arrived (waiting included) is
    /// cancelled and answered 408.
    #[arg(long, default_value_t = 600)]
    pub request_timeout_secs: u64,
    /// Require `Authorization: Bearer KEY` on the API endpoints (`/health` and `/metrics` stay
    /// open); also DRAFTWISE_API_KEY.
    #[arg(long, env = "DRAFTWISE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// JSONL events on stdout: `startup`, then `completion` (and `speculative_diagnostics` or
    /// `declined`) per finished request, as `runtime generate --json` writes them.
    #[arg(long)]
    pub json: bool,
    /// Sequences decoding at once (continuous batching): up to N requests share every forward
    /// pass, a new one joining at the next pass and a finished one leaving; more wait in the
    /// queue. vLLM's --max-num-seqs; llama-server's -np maps here. Default: 4 (1 to 256).
    #[arg(long, alias = "max-num-seqs", value_name = "N")]
    pub parallel: Option<usize>,
    /// Prompt tokens per forward pass: a prompt runs in chunks of this many tokens beside the
    /// other sequences' decode steps, so a long prompt delays their next token by one chunk,
    /// not by the whole prompt (1 to 8192).
    #[arg(long, default_value_t = runtime::engine::PREFILL_CHUNK, value_name = "TOKENS")]
    pub prefill_chunk: usize,
    /// The KV cache the running sequences may fill together, in MiB: a request joins once its
    /// prompt, max_tokens and one draft fit beside the running ones' reservations (it waits
    /// until then, in arrival order), and one that could never fit is refused (400
    /// kv_budget_exceeded). Default: a full context for each of --parallel.
    #[arg(long, value_name = "MB")]
    pub kv_budget_mb: Option<u64>,
    #[command(flatten)]
    pub spec: SpeculationArgs,
}

#[derive(Subcommand, Debug, Clone)]
pub enum PolicyCommand {
    /// Print the draft-width table compiled into this binary.
    Show {
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Classify a target's quantization and resolve the draft width step by step.
    Explain(Box<ExplainArgs>),
}

#[derive(Args, Debug, Clone)]
pub struct ExplainArgs {
    /// The target model: a GGUF file, a Hugging Face checkpoint directory, or a known model's
    /// name (its cached file; never fetched here). `--target` is its other name. Default: the
    /// model `generate` runs without -m (smollm2-135m).
    #[arg(short = 'm', long = "model", alias = "target")]
    pub target: Option<PathBuf>,
    /// A draft-width table file (e.g. policy/draft-block-width.toml after `tuner propose`) to
    /// explain against in place of the compiled one, checked as `generate --policy` checks it:
    /// a proposed entry is explained before a rebuild.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Drafter kind (ngram, layerskip, draft-model, dflash, mtp, suffix) as `generate --drafter` takes it;
    /// default: what `generate` does without it, and every kind's width.
    #[arg(long)]
    pub drafter: Option<String>,
    /// Worker threads, as `generate -t/--threads` (default: the CPUs available to this process).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// The K-quant activation precision, as `generate --precision` takes it (int8, the default, or int16).
    #[arg(long, value_name = "int8|int16")]
    pub precision: Option<String>,
    #[command(flatten)]
    pub drafter_flags: DrafterFlags,
    /// The drafter checkpoint (draft-model, dflash): read for a declared width only.
    #[arg(long)]
    pub drafter_model: Option<PathBuf>,
    /// Device class to resolve for (default: this host's, e.g. cpu:x86_64-avx2).
    #[arg(long)]
    pub device: Option<String>,
    /// Host (CPU) class to resolve for (default: this host's, e.g. amd-zen4).
    #[arg(long)]
    pub host_class: Option<String>,
    /// Operator override, as `generate` takes it (a width 1..=32, or off).
    #[arg(long, alias = "draft-block-size")]
    pub draft_width: Option<String>,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

impl From<SpeculationArgs> for SpeculationSettings {
    fn from(a: SpeculationArgs) -> Self {
        SpeculationSettings {
            drafter: a.drafter,
            draft_width: a.draft_width,
            drafter_model: a.drafter_model,
            layerskip_layers: a.layerskip_layers,
            ngram_max: a.drafter_flags.ngram_max,
            ngram_min: a.drafter_flags.ngram_min,
            suffix_min_match: a.drafter_flags.suffix_min_match,
            suffix_max_match: a.drafter_flags.suffix_max_match,
            suffix_min_prob: a.drafter_flags.suffix_min_prob,
            allow_inexact: a.allow_inexact,
            policy: a.policy,
            adaptive: a.adaptive,
            cost_curves: a.cost_curve,
        }
    }
}

impl From<GenerateArgs> for GenerateSettings {
    fn from(a: GenerateArgs) -> Self {
        GenerateSettings {
            load: a.load.into(),
            prompt: a.prompt,
            prompts: a.prompts,
            chat: a.chat,
            max_tokens: a.max_tokens,
            temperature: a.temperature,
            top_k: a.top_k,
            top_p: a.top_p,
            min_p: a.min_p,
            repeat_penalty: a.repeat_penalty,
            presence_penalty: a.presence_penalty,
            frequency_penalty: a.frequency_penalty,
            repeat_last_n: a.repeat_last_n,
            seed: a.seed,
            repeat: a.repeat,
            warmup: a.warmup,
            json: a.json,
            spec: a.spec.into(),
        }
    }
}

impl From<BenchArgs> for BenchSettings {
    fn from(a: BenchArgs) -> Self {
        BenchSettings {
            load: a.load.into(),
            prompt_tokens: a.prompt_tokens,
            gen_tokens: a.gen_tokens,
            reps: a.reps,
            warmup: a.warmup,
            verify_cost: a.verify_cost,
            max_rows: a.max_rows,
            json: a.json,
            widths: a.widths,
            prompts: a.prompts,
            max_tokens: a.max_tokens,
            spec: a.spec.into(),
        }
    }
}

impl From<FetchModelArgs> for FetchModelSettings {
    fn from(a: FetchModelArgs) -> Self {
        FetchModelSettings { model: a.model, cache_dir: a.cache.cache_dir }
    }
}

impl From<ServeArgs> for ServeSettings {
    fn from(mut a: ServeArgs) -> Self {
        a.load.model = a.load.model.or(a.model_positional);
        ServeSettings {
            load: a.load.into(),
            host: a.host,
            port: a.port,
            served_model_name: a.served_model_name,
            max_queue: a.max_queue,
            max_waiting_per_client: a.max_waiting_per_client,
            half_close: a.half_close,
            max_body_bytes: a.max_body_bytes,
            header_timeout_ms: a.header_timeout_ms,
            body_timeout_ms: a.body_timeout_ms,
            idle_timeout_ms: a.idle_timeout_ms,
            max_connections: a.max_connections,
            max_preparing: a.max_preparing,
            request_timeout_secs: a.request_timeout_secs,
            api_key: a.api_key,
            json: a.json,
            strict_params: a.strict_params,
            allowed_origins: a.allowed_origins,
            parallel: a.parallel,
            prefill_chunk: a.prefill_chunk,
            kv_budget_mb: a.kv_budget_mb,
            spec: a.spec.into(),
        }
    }
}

impl From<ExplainArgs> for ExplainSettings {
    fn from(a: ExplainArgs) -> Self {
        ExplainSettings {
            target: a.target,
            policy: a.policy,
            drafter: a.drafter,
            threads: a.threads,
            precision: a.precision,
            ngram_min: a.drafter_flags.ngram_min,
            ngram_max: a.drafter_flags.ngram_max,
            suffix_min_match: a.drafter_flags.suffix_min_match,
            suffix_max_match: a.drafter_flags.suffix_max_match,
            suffix_min_prob: a.drafter_flags.suffix_min_prob,
            drafter_model: a.drafter_model,
            device: a.device,
            host_class: a.host_class,
            draft_width: a.draft_width,
            json: a.json,
        }
    }
}
