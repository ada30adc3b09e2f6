//! Shared by the real-model test binaries: the default model, loaded once
//! per binary.

use runtime::model::Loaded;
use std::path::PathBuf;
use std::sync::OnceLock;

/// `DRAFTWISE_TEST_MODEL`, else the cached default model (fetched on first use).
pub fn model_path() -> PathBuf {
    match std::env::var_os("DRAFTWISE_TEST_MODEL") {
        Some(p) => p.into(),
        None => runtime::fetch::ensure_default_model(None).expect("fetch the default model"),
    }
}

/// The default model, loaded once.
pub fn model() -> &'static Loaded {
    static M: OnceLock<Loaded> = OnceLock::new();
    M.get_or_init(|| runtime::model::load(&model_path()).expect("load the default model"))
}
