//! BERT-style encoders from Hugging Face (`config.json` + safetensors in bert-large's layout):
//! the Post-LN side of the paper's figure 2. A [`BertForMaskedLm`] computes what transformers'
//! `BertForMaskedLM` does; its performance is the masked-token [`pseudo_perplexity`], measured
//! with each layer removed by [`bert_layer_removal`].
//!
//! The paper scores BERT-Large on SQuAD v1.1 (reading comprehension, after fine-tuning).
//! Pseudo-perplexity is this crate's stand-in: it needs no fine-tuned head and runs on any text,
//! but it is another metric, so compare the shape of the curves with the paper's, not the numbers.

mod config;
mod load;
mod model;
mod pseudo_perplexity;
#[cfg(feature = "data")]
mod sequences;

pub(crate) use config::describes_bert;
pub use config::{is_bert_dir, BertActivation, BertConfig};
pub use load::load_bert_model;
pub use model::{BertEmbeddings, BertForMaskedLm, BertLayer, MaskedLmHead};
pub use pseudo_perplexity::{bert_layer_removal, pseudo_log_likelihood, pseudo_perplexity, LayerRemoval};
#[cfg(feature = "data")]
pub use sequences::{encoder_sequences, BertTokens};
