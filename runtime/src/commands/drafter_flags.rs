//! The ngram and suffix drafters' settings as one flag group, flattened
//! into every command that takes them: `runtime generate`, `serve` and
//! `bench` (their speculation flags), `runtime policy explain` and `tuner
//! sweep`. Unset is `None`: the runtime's commands then take the measured
//! entry's settings (else the defaults named in the help), and `tuner
//! sweep` the defaults, which it records.
use crate::speculative::drafter::{
    DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN, DEFAULT_SUFFIX_MAX_MATCH, DEFAULT_SUFFIX_MIN_MATCH, DEFAULT_SUFFIX_MIN_PROB,
};

#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct DrafterFlags {
    /// `ngram`: shortest pattern looked up (default: the measured entry's, else 3; `tuner sweep`:
    /// 3); vLLM's `prompt_lookup_min`.
    #[arg(long, alias = "prompt-lookup-min")]
    pub ngram_min: Option<usize>,
    /// `ngram`: longest pattern looked up (default: the measured entry's, else 4; `tuner sweep`:
    /// 4); vLLM's `prompt_lookup_max`.
    #[arg(long, alias = "prompt-lookup-max")]
    pub ngram_max: Option<usize>,
    /// `suffix`: shortest match that drafts (default: the measured entry's, else 2; `tuner
    /// sweep`: 2).
    #[arg(long)]
    pub suffix_min_match: Option<usize>,
    /// `suffix`: longest match looked for (default: the measured entry's, else 32; `tuner sweep`:
    /// 32).
    #[arg(long)]
    pub suffix_max_match: Option<usize>,
    /// `suffix`: stop a draft where the share of earlier occurrences agreeing with it falls below
    /// this, in (0, 1] (default: the measured entry's, else 0.5; `tuner sweep`: 0.5).
    #[arg(long)]
    pub suffix_min_prob: Option<f64>,
}

impl DrafterFlags {
    /// `(ngram_min, ngram_max)`, the defaults where unset.
    pub fn ngram_or_defaults(&self) -> (usize, usize) {
        (self.ngram_min.unwrap_or(DEFAULT_NGRAM_MIN), self.ngram_max.unwrap_or(DEFAULT_NGRAM_MAX))
    }

    /// `(suffix_min_match, suffix_max_match, suffix_min_prob)`, the defaults where unset.
    pub fn suffix_or_defaults(&self) -> (usize, usize, f64) {
        (
            self.suffix_min_match.unwrap_or(DEFAULT_SUFFIX_MIN_MATCH),
            self.suffix_max_match.unwrap_or(DEFAULT_SUFFIX_MAX_MATCH),
            self.suffix_min_prob.unwrap_or(DEFAULT_SUFFIX_MIN_PROB),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: DrafterFlags,
    }

    #[test]
    fn unset_flags_take_the_defaults_and_vllm_names_parse() {
        let c = Cli::parse_from(["x"]);
        assert_eq!(c.flags, DrafterFlags::default());
        assert_eq!(c.flags.ngram_or_defaults(), (DEFAULT_NGRAM_MIN, DEFAULT_NGRAM_MAX));
        assert_eq!(
            c.flags.suffix_or_defaults(),
            (DEFAULT_SUFFIX_MIN_MATCH, DEFAULT_SUFFIX_MAX_MATCH, DEFAULT_SUFFIX_MIN_PROB)
        );
        let c =
            Cli::parse_from(["x", "--prompt-lookup-min", "2", "--prompt-lookup-max", "6", "--suffix-min-prob", "0.25"]);
        assert_eq!(c.flags.ngram_or_defaults(), (2, 6));
        assert_eq!(c.flags.suffix_or_defaults().2, 0.25);
    }

    /// The help names the defaults as numbers; they must be the constants'.
    #[test]
    fn the_help_states_the_defaults_the_code_uses() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        for (flag, default) in [
            ("ngram-min", DEFAULT_NGRAM_MIN.to_string()),
            ("ngram-max", DEFAULT_NGRAM_MAX.to_string()),
            ("suffix-min-match", DEFAULT_SUFFIX_MIN_MATCH.to_string()),
            ("suffix-max-match", DEFAULT_SUFFIX_MAX_MATCH.to_string()),
            ("suffix-min-prob", DEFAULT_SUFFIX_MIN_PROB.to_string()),
        ] {
            let at = help.find(&format!("--{flag}")).unwrap();
            let text: String =
                help[at..].split("\n\n").next().unwrap().split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(text.contains(&format!("else {default};")), "{flag}: {text}");
            assert!(text.contains(&format!("`tuner sweep`: {default})")), "{flag}: {text}");
        }
    }
}
