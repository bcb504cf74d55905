//! `BertForMaskedLm`: a Post-LN BERT encoder with its masked-language-model head, as
//! transformers' `BertForMaskedLM` computes it in eval mode (no dropout; every token of segment
//! type 0, no padding). Field names follow the checkpoint's (`load.rs` fills them).

use burn::module::{Module, Param};
use burn::nn::{Embedding, LayerNorm, Linear};
use burn::tensor::activation::{gelu, gelu_approximate, relu, silu};
use burn::tensor::module::{attention, linear};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Int, Tensor};

use super::config::BertActivation;
use crate::config_error::ConfigError;

/// Word, position and segment embeddings, summed and normed:
/// `LN(word[ids] + type[0] + position[0..seq])`.
#[derive(Module, Debug)]
pub struct BertEmbeddings {
    /// `[vocab, hidden]` (`embeddings.word_embeddings.weight`).
    pub word_embeddings: Embedding,
    /// `[max_position_embeddings, hidden]`.
    pub position_embeddings: Embedding,
    /// `[type_vocab_size, hidden]`; every token here has type 0.
    pub token_type_embeddings: Embedding,
    /// `embeddings.LayerNorm`.
    pub layer_norm: LayerNorm,
}

impl BertEmbeddings {
    /// `[batch, seq]` token ids -> `[batch, seq, hidden]`.
    fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        let seq = tokens.dims()[1];
        let words = self.word_embeddings.forward(tokens); // [b, s, h]
        let hidden = words.dims()[2];
        let token_type = self.token_type_embeddings.weight.val().slice([0..1, 0..hidden]); // [1, h]
        let positions = self.position_embeddings.weight.val().slice([0..seq, 0..hidden]); // [s, h]
        self.layer_norm.forward(words + token_type.unsqueeze::<3>() + positions.unsqueeze::<3>())
    }
}

/// One Post-LN encoder layer (`encoder.layer.{i}`):
/// `a = LN(x + Attn(x))`, `y = LN(a + FFN(a))`, with bidirectional attention.
#[derive(Module, Debug)]
pub struct BertLayer {
    /// `attention.self.query`, `hidden -> hidden`.
    pub query: Linear,
    /// `attention.self.key`.
    pub key: Linear,
    /// `attention.self.value`.
    pub value: Linear,
    /// `attention.output.dense`, `hidden -> hidden`.
    pub attention_output: Linear,
    /// `attention.output.LayerNorm`, after the attention residual.
    pub attention_norm: LayerNorm,
    /// `intermediate.dense`, `hidden -> intermediate`, then the activation.
    pub intermediate: Linear,
    /// `output.dense`, `intermediate -> hidden`.
    pub output: Linear,
    /// `output.LayerNorm`, after the feed-forward residual.
    pub output_norm: LayerNorm,
    n_heads: usize,
    #[module(skip)]
    activation: BertActivation,
}

impl BertLayer {
    pub(super) fn new(
        [query, key, value, attention_output, intermediate, output]: [Linear; 6],
        [attention_norm, output_norm]: [LayerNorm; 2],
        n_heads: usize,
        activation: BertActivation,
    ) -> Self {
        Self {
            query,
            key,
            value,
            attention_output,
            attention_norm,
            intermediate,
            output,
            output_norm,
            n_heads,
            activation,
        }
    }

    /// `[batch, seq, hidden] -> [batch, seq, hidden]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [batch, seq, hidden] = x.dims();
        let head_dim = hidden / self.n_heads;
        // [b, s, h] -> [b, heads, s, head_dim]
        let heads = |t: Tensor<3>| t.reshape([batch, seq, self.n_heads, head_dim]).swap_dims(1, 2);
        let query = heads(self.query.forward(x.clone()));
        let key = heads(self.key.forward(x.clone()));
        let value = heads(self.value.forward(x.clone()));
        let options = AttentionModuleOptions { scale: None, softcap: None, is_causal: false };
        let context = attention(query, key, value, None, None, options); // [b, heads, s, head_dim]
        let context = context.swap_dims(1, 2).reshape([batch, seq, hidden]);
        let after_attention = self.attention_norm.forward(self.attention_output.forward(context) + x);
        let inner = activate(self.activation, self.intermediate.forward(after_attention.clone())); // [b, s, inter]
        self.output_norm.forward(self.output.forward(inner) + after_attention)
    }
}

/// `activation` applied element-wise.
fn activate<const D: usize>(activation: BertActivation, x: Tensor<D>) -> Tensor<D> {
    match activation {
        BertActivation::Gelu => gelu(x),
        BertActivation::GeluTanh => gelu_approximate(x),
        BertActivation::Relu => relu(x),
        BertActivation::Silu => silu(x),
    }
}

/// The masked-LM head (`cls.predictions`): `LN(act(dense(h))) @ decoderᵀ + bias`.
#[derive(Module, Debug)]
pub struct MaskedLmHead {
    /// `cls.predictions.transform.dense`, `hidden -> hidden`.
    pub transform: Linear,
    /// `cls.predictions.transform.LayerNorm`.
    pub transform_norm: LayerNorm,
    /// `cls.predictions.decoder.weight`, `[vocab, hidden]`; `None` when tied to the word embeddings.
    pub decoder: Option<Param<Tensor<2>>>,
    /// `cls.predictions.bias`, `[vocab]`.
    pub bias: Param<Tensor<1>>,
    #[module(skip)]
    activation: BertActivation,
}

impl MaskedLmHead {
    pub(super) fn new(
        transform: Linear,
        transform_norm: LayerNorm,
        decoder: Option<Param<Tensor<2>>>,
        bias: Param<Tensor<1>>,
        activation: BertActivation,
    ) -> Self {
        Self { transform, transform_norm, decoder, bias, activation }
    }
}

/// A BERT encoder with its masked-language-model head. Load one with
/// [`load_bert_model`](super::load_bert_model).
#[derive(Module, Debug)]
pub struct BertForMaskedLm {
    /// `bert.embeddings`.
    pub embeddings: BertEmbeddings,
    /// `bert.encoder.layer`, bottom (layer 1) first.
    pub layers: Vec<BertLayer>,
    /// `cls.predictions`.
    pub head: MaskedLmHead,
}

impl BertForMaskedLm {
    /// The number of encoder layers.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// The vocabulary size (rows of the word embeddings).
    pub fn vocab_size(&self) -> usize {
        self.embeddings.word_embeddings.weight.dims()[0]
    }

    /// The longest sequence the model has position embeddings for.
    pub fn max_positions(&self) -> usize {
        self.embeddings.position_embeddings.weight.dims()[0]
    }

    /// Logits `[batch, seq, vocab]` of token ids `[batch, seq]` (all of segment 0, none padding).
    ///
    /// Token ids must be below [`vocab_size`](Self::vocab_size) (not checked here: that would read
    /// the ids back from the device); a sequence longer than
    /// [`max_positions`](Self::max_positions) is an error.
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Result<Tensor<3>, ConfigError> {
        self.forward_skipping(tokens, &[])
    }

    /// [`forward`](Self::forward) with the layers `skip` (1-based) removed: their input passes
    /// straight to the next layer.
    pub fn forward_skipping(&self, tokens: Tensor<2, Int>, skip: &[usize]) -> Result<Tensor<3>, ConfigError> {
        Ok(self.masked_lm_logits(self.encode(tokens, skip)?))
    }

    /// The last layer's hidden states `[batch, seq, hidden]` with the layers `skip` (1-based) removed.
    pub fn encode(&self, tokens: Tensor<2, Int>, skip: &[usize]) -> Result<Tensor<3>, ConfigError> {
        self.check_layers(skip)?;
        let seq = tokens.dims()[1];
        if seq > self.max_positions() {
            return Err(ConfigError::Conflict(format!(
                "a sequence of {seq} tokens is longer than the {} positions the encoder has embeddings for \
                 (max_position_embeddings); use shorter sequences",
                self.max_positions()
            )));
        }
        let mut x = self.embeddings.forward(tokens);
        for (index, layer) in self.layers.iter().enumerate() {
            if !skip.contains(&(index + 1)) {
                x = layer.forward(x);
            }
        }
        Ok(x)
    }

    /// The masked-LM head: hidden states `[.., hidden]` -> logits `[.., vocab]`.
    pub fn masked_lm_logits<const D: usize>(&self, hidden: Tensor<D>) -> Tensor<D> {
        let head = &self.head;
        let transformed = head.transform_norm.forward(activate(head.activation, head.transform.forward(hidden)));
        let decoder = head.decoder.as_ref().unwrap_or(&self.embeddings.word_embeddings.weight).val(); // [v, h]
        linear(transformed, decoder.transpose(), Some(head.bias.val()))
    }

    /// An error unless every layer of `layers` (1-based) exists.
    pub fn check_layers(&self, layers: &[usize]) -> Result<(), ConfigError> {
        crate::model::check_layer_numbers(layers, self.n_layers())
    }
}
