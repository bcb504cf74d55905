//! Loading a BERT-style Hugging Face directory (`config.json` + safetensors, bert-large's layout)
//! into a [`BertForMaskedLm`].
//!
//! The tensors are read by the crate's [`Checkpoint`] (one file or shards, f32/f16/bf16), each
//! checked against `config.json` by name and shape before anything is built. Checkpoints as they
//! are found on the Hub load too: names with or without the `bert.` prefix, the original
//! `LayerNorm.gamma` / `LayerNorm.beta` names, the decoder tied to the word embeddings (left out
//! of the file) or stored, and the tensors `BertForMaskedLM` does not use (the pooler, the
//! next-sentence head, the `position_ids` buffer) ignored.

use std::cell::RefCell;
use std::collections::HashSet;
use std::path::Path;

use burn::module::Param;
use burn::nn::{Embedding, LayerNorm, LayerNormConfig, Linear};
use burn::tensor::{Device, Tensor, TensorData};

use super::config::BertConfig;
use super::model::{BertEmbeddings, BertForMaskedLm, BertLayer, MaskedLmHead};
use crate::hf::{Checkpoint, FieldProblem, HfError, Unsupported};

/// Tensors a BERT checkpoint may hold that `BertForMaskedLM` does not use (after the prefix).
const UNUSED: [&str; 4] =
    ["pooler.", "embeddings.position_ids", "cls.seq_relationship.", "cls.predictions.decoder.bias"];

/// The checkpoint's tensors under the names of one BERT layout, each one read at most once and
/// remembered, so that what is left over can be told.
struct Tensors<'a> {
    checkpoint: &'a Checkpoint,
    /// `bert.` (a `BertForMaskedLM` or `BertForPreTraining`) or nothing (a bare `BertModel`).
    prefix: &'static str,
    device: &'a Device,
    used: RefCell<HashSet<String>>,
}

impl<'a> Tensors<'a> {
    /// Values of `key`, checked to have `shape`.
    fn read(&self, key: &str, shape: &[usize]) -> Result<Vec<f32>, HfError> {
        self.used.borrow_mut().insert(key.to_string());
        self.checkpoint.tensor(key, shape)
    }

    fn param<const D: usize>(&self, key: &str, shape: [usize; D]) -> Result<Param<Tensor<D>>, HfError> {
        let values = self.read(key, &shape)?;
        Ok(Param::from_tensor(Tensor::from_data(TensorData::new(values, shape), self.device)))
    }

    /// `{prefix}{name}` (an encoder tensor).
    fn encoder_key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn embedding(&self, name: &str, rows: usize, width: usize) -> Result<Embedding, HfError> {
        Ok(Embedding { weight: self.param(&format!("{}.weight", self.encoder_key(name)), [rows, width])? })
    }

    /// `{key}.weight` `[d_out, d_in]` (PyTorch's orientation, turned to Burn's `[d_in, d_out]`) and `{key}.bias`.
    fn linear(&self, key: &str, d_in: usize, d_out: usize) -> Result<Linear, HfError> {
        let weight = self.read(&format!("{key}.weight"), &[d_out, d_in])?;
        let weight = Tensor::<2>::from_data(TensorData::new(weight, [d_out, d_in]), self.device).transpose();
        Ok(Linear { weight: Param::from_tensor(weight), bias: Some(self.param(&format!("{key}.bias"), [d_out])?) })
    }

    /// `{key}.weight` and `{key}.bias`, or the original checkpoints' `{key}.gamma` and `{key}.beta`.
    fn layer_norm(&self, key: &str, width: usize, epsilon: f64) -> Result<LayerNorm, HfError> {
        let name = |new: &str, old: &str| {
            let old_name = format!("{key}.{old}");
            if self.checkpoint.contains(&old_name) && !self.checkpoint.contains(&format!("{key}.{new}")) {
                old_name
            } else {
                format!("{key}.{new}")
            }
        };
        let mut norm = LayerNormConfig::new(width).with_epsilon(epsilon).init(self.device);
        norm.gamma = self.param(&name("weight", "gamma"), [width])?;
        norm.beta = Some(self.param(&name("bias", "beta"), [width])?);
        Ok(norm)
    }
}

/// Checks that the checkpoint holds `config.num_hidden_layers` layers, naming the field if not.
fn check_layer_count(config: &BertConfig, checkpoint: &Checkpoint, prefix: &str) -> Result<(), HfError> {
    let layer_prefix = format!("{prefix}encoder.layer.");
    let index = |key: &str| key.strip_prefix(layer_prefix.as_str())?.split('.').next()?.parse::<usize>().ok();
    let layers = checkpoint.keys().into_iter().filter_map(index).max().map_or(0, |last| last + 1);
    if layers != config.num_hidden_layers {
        let found = format!("the checkpoint holds {layers} layers");
        return Err(HfError::config(
            "num_hidden_layers",
            FieldProblem::ContradictsCheckpoint { value: config.num_hidden_layers, found },
        ));
    }
    Ok(())
}

/// Loads the BERT encoder and masked-LM head of `dir` (or of the model of the local Hugging Face
/// cache it names, `org/name[@revision]`) onto `device`, with its config.
///
/// Every tensor is checked against `config.json` (name, shape, float type) before the model is
/// built; a missing or misshapen tensor, a tensor the architecture does not use, a checkpoint
/// without the masked-LM head, a `config.json` of another model type and weights holding NaN or
/// infinity are errors naming it.
pub fn load_bert_model(dir: impl AsRef<Path>, device: &Device) -> Result<(BertForMaskedLm, BertConfig), HfError> {
    let resolved = crate::hf::resolve_model_dir(dir.as_ref())?;
    let dir = resolved.as_path();
    if !dir.is_dir() {
        return Err(HfError::NoSuchFolder { dir: dir.to_path_buf() });
    }
    let config = BertConfig::read(dir)?;
    let checkpoint = Checkpoint::open(dir)?;
    let prefix = if checkpoint.contains("embeddings.word_embeddings.weight") { "" } else { "bert." };
    if !checkpoint.keys().iter().any(|key| key.starts_with("cls.predictions.")) {
        return Err(Unsupported::NoMaskedLmHead { dir: dir.to_path_buf() }.into());
    }
    check_layer_count(&config, &checkpoint, prefix)?;
    let tensors = Tensors { checkpoint: &checkpoint, prefix, device, used: RefCell::new(HashSet::new()) };
    let model = build(&config, &tensors)?;

    let used = tensors.used.into_inner();
    let unexpected: Vec<&str> = checkpoint
        .keys()
        .into_iter()
        .filter(|key| !used.contains(*key))
        .filter(|key| !UNUSED.iter().any(|unused| key.strip_prefix(prefix).unwrap_or(key).starts_with(unused)))
        // A tied decoder may still be stored (older checkpoints): the word embeddings serve.
        .filter(|key| !(config.tie_word_embeddings && *key == "cls.predictions.decoder.weight"))
        .collect();
    if let Some(key) = unexpected.first() {
        return Err(HfError::UnusedTensors { count: unexpected.len(), example: key.to_string(), bert: true });
    }
    HfError::check_finite(crate::model::first_non_finite_parameter(&model))?;
    Ok((model, config))
}

/// Every module of the model from the checkpoint's tensors, in checkpoint order.
fn build(config: &BertConfig, tensors: &Tensors) -> Result<BertForMaskedLm, HfError> {
    let (hidden, inner, eps) = (config.hidden_size, config.intermediate_size, config.layer_norm_eps);
    let embeddings = BertEmbeddings {
        word_embeddings: tensors.embedding("embeddings.word_embeddings", config.vocab_size, hidden)?,
        position_embeddings: tensors.embedding(
            "embeddings.position_embeddings",
            config.max_position_embeddings,
            hidden,
        )?,
        token_type_embeddings: tensors.embedding("embeddings.token_type_embeddings", config.type_vocab_size, hidden)?,
        layer_norm: tensors.layer_norm(&tensors.encoder_key("embeddings.LayerNorm"), hidden, eps)?,
    };
    let mut layers = Vec::with_capacity(config.num_hidden_layers);
    for i in 0..config.num_hidden_layers {
        let key = |name: &str| tensors.encoder_key(&format!("encoder.layer.{i}.{name}"));
        let linears = [
            tensors.linear(&key("attention.self.query"), hidden, hidden)?,
            tensors.linear(&key("attention.self.key"), hidden, hidden)?,
            tensors.linear(&key("attention.self.value"), hidden, hidden)?,
            tensors.linear(&key("attention.output.dense"), hidden, hidden)?,
            tensors.linear(&key("intermediate.dense"), hidden, inner)?,
            tensors.linear(&key("output.dense"), inner, hidden)?,
        ];
        let norms = [
            tensors.layer_norm(&key("attention.output.LayerNorm"), hidden, eps)?,
            tensors.layer_norm(&key("output.LayerNorm"), hidden, eps)?,
        ];
        layers.push(BertLayer::new(linears, norms, config.num_attention_heads, config.hidden_act));
    }
    let decoder = match config.tie_word_embeddings {
        true => None,
        false => Some(tensors.param("cls.predictions.decoder.weight", [config.vocab_size, hidden])?),
    };
    // Some old checkpoints hold the output bias only as the decoder's.
    let only_decoder_bias = !tensors.checkpoint.contains("cls.predictions.bias")
        && tensors.checkpoint.contains("cls.predictions.decoder.bias");
    let bias_key = if only_decoder_bias { "cls.predictions.decoder.bias" } else { "cls.predictions.bias" };
    let head = MaskedLmHead::new(
        tensors.linear("cls.predictions.transform.dense", hidden, hidden)?,
        tensors.layer_norm("cls.predictions.transform.LayerNorm", hidden, eps)?,
        decoder,
        tensors.param(bias_key, [config.vocab_size])?,
        config.hidden_act,
    );
    Ok(BertForMaskedLm { embeddings, layers, head })
}
