//! Hugging Face interop: load LLaMA, Mistral and Qwen2 checkpoints (`config.json` + safetensors,
//! sharded or not, f32/f16/bf16), switch them to LayerNorm Scaling with
//! [`retrofit`](crate::model::retrofit), and export models back as directories transformers loads.
//!
//! Weights are matched by name and shape against `config.json`; anything missing, misshapen,
//! truncated or unsupported is an [`HfError`] naming the tensor or field. Safetensors files are
//! read and written by burn-store, under one name map for both directions and its PyTorch
//! adapters (`[out, in]` weights); shards and the depth factors folded into exported weights
//! are this module's own.

mod bert;
mod cache;
mod config;
mod export;
mod json_file;
mod layout;
mod load;
mod weights;

pub use crate::hf_error::{BlockPart, CacheMiss, ExportProblem, FieldProblem, HfError, ScoringProblem, Unsupported};
pub use bert::{
    bert_layer_removal, is_bert_dir, load_bert_model, pseudo_log_likelihood, pseudo_perplexity, BertActivation,
    BertConfig, BertEmbeddings, BertForMaskedLm, BertLayer, LayerRemoval, MaskedLmHead,
};
#[cfg(feature = "data")]
pub use bert::{encoder_sequences, BertTokens};
pub use cache::{hub_cache, repo_name, resolve_model_dir, resolve_model_dir_in};
pub use config::{hf_config_json, llama_checkpoint_problem, parse_hf_config, read_hf_config, SCHEME_KEY};
pub use export::{export_hf, export_hf_from};
/// hf-hub's cache handle, for [`resolve_model_dir_in`].
pub use hf_hub::Cache as HubCache;
pub use layout::folded_factors;
pub use load::{load_hf_model, HfModel};
pub use weights::{write_safetensors, Checkpoint};
