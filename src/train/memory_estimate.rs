//! How much memory a training run needs at its peak, term by term: what the run allocates, so
//! that one which cannot fit is refused before anything is allocated (a failed allocation aborts
//! the process, and the kernel's OOM killer ends it without a word).
//!
//! The terms are those of a run on a CPU device (flex), in the order a run meets them: the
//! program itself; the weights and Adam's two moments, held throughout; a training step (its
//! gradients, the activations its backward pass keeps, the LM head's block of logits); the
//! validation's logits; the copies a checkpoint is written from; the data loader's index. The
//! peak is the state held throughout plus the largest of the step, the validation and the
//! checkpoint, which come one after the other. Each term is counted from the shapes; the counts
//! of activations per token, and the share of a step's memory that malloc keeps when the step
//! ends, are measured (`tests/memory.rs` holds the measured peaks, with the command that measured
//! them, and checks the estimate against each within 15%). The other devices that allocate in the
//! machine's memory (ndarray, wgpu on a CPU adapter, LibTorch's CPU) are checked with the same
//! counts.

use crate::memory::{format_bytes, MMAP_THRESHOLD, TRIM_THRESHOLD};
use crate::{device::Precision, model::LlamaConfig};

/// What the program holds whatever the model (its code, threads, the tokenizer, the metrics, the
/// built-in corpus's index): a run of the `tiny` preset at 1 x 16 tokens peaks at 32 MiB
/// resident, of which its weights, Adam's moments and a checkpoint's copies take about 6 MiB.
pub const RUNTIME_BYTES: u64 = 26 << 20;

/// Values per token that a layer keeps for the backward pass, per unit of `d_model`, and per unit
/// of `d_ff`: its inputs of the norms and the products, q, k, v, the attention's output, the
/// feed-forward's gate, up and SwiGLU output (counted: 8 and 3), as measured (least squares over
/// nine runs of models with a byte vocabulary, where they are most of the memory: 6.4 and 3.7).
const SAVED_PER_LAYER: (f64, f64) = (6.5, 3.75);

/// Values per token, per unit of `d_model`, kept outside the layers (the embeddings' output, the
/// final norm's input and output, the LM head's input and its gradient) and made by the backward
/// pass of one layer at a time (fitted with [`SAVED_PER_LAYER`]).
const SAVED_PER_TOKEN: f64 = 12.5;

/// The activations' bytes against f32's: pure bf16 keeps bf16 values (half, measured 0.48-0.5);
/// mixed precision keeps the residual stream and the norms in f32 and the products' inputs in the
/// half type (measured 0.73-0.89).
fn activation_share(precision: Precision) -> f64 {
    match precision {
        Precision::F32 => 1.0,
        Precision::Bf16 => 0.5,
        Precision::Bf16Mixed | Precision::F16Mixed => 0.85,
    }
}

/// Copies of the attention scores `[batch, heads, seq, seq]` in f32 that the attention of one
/// layer makes at a time in half precision (the portable path: the scores, their softmax and its
/// gradient; measured 2.5). In f32, flex's attention kernel makes none (it keeps the row
/// statistics only).
const SCORE_COPIES: f64 = 3.0;

/// Logits the LM head makes at once on a CPU (`FusedKernels::LM_HEAD_BLOCK_VALUES`).
const LM_HEAD_BLOCK_VALUES: f64 = (1u64 << 23) as f64;

/// Bytes the LM head's weight gradient `[d_model, vocab]` takes per weight: in f32, flex's kernel
/// makes it once (f32); in half precision the portable path makes each block's f32 gradient, their
/// f32 sum, and the sum cast for the backward pass, 3 times f32's (measured: the 20m preset's step
/// in bf16 at 1 x 16 tokens).
fn lm_head_gradient_bytes(precision: Precision) -> f64 {
    if precision == Precision::F32 {
        4.0
    } else {
        12.0
    }
}

/// Copies of the validation's `[tokens, vocab]` logits, in f32's bytes, that the loss holds at
/// once (it computes them whole, without autodiff): in f32 the logits and the loss's gradient; in
/// pure bf16 the bf16 logits, their f32 copy and the gradient, some freed before the next is made
/// (measured 1.7); under mixed precision the half-precision logits, their f32 copy and the
/// gradient (measured 2.2-2.3).
fn validation_logit_copies(precision: Precision) -> f64 {
    match precision {
        Precision::F32 => 2.0,
        Precision::Bf16 => 1.5,
        Precision::Bf16Mixed | Precision::F16Mixed => 2.25,
    }
}

/// The shape of a run, as far as memory goes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunShape {
    /// The training precision.
    pub precision: Precision,
    /// Sequences per micro-batch and device.
    pub batch_size: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Micro-batches per optimiser step.
    pub grad_accum: usize,
    /// Devices training together (each one a micro-batch; the first holds the optimiser).
    pub devices: usize,
}

/// The bytes a training run holds at its peak, term by term ([`peak`](Self::peak) adds them up).
#[derive(Clone, Debug, PartialEq)]
pub struct TrainingMemory {
    /// The program itself ([`RUNTIME_BYTES`]).
    pub runtime: u64,
    /// The weights, in the device's float type (bf16 under pure bf16, f32 otherwise).
    pub weights: u64,
    /// Adam's two moments, in the weights' type.
    pub optimizer: u64,
    /// The gradients, in the weights' type; twice that while micro-batches are accumulated (the
    /// sum so far and the micro-batch's own).
    pub gradients: u64,
    /// Under mixed precision, the half-precision copy of every weight that the products cast to
    /// and keep for their backward pass (2 bytes a parameter).
    pub half_weights: u64,
    /// The activations the backward pass needs, all held at the end of the forward pass:
    /// `SAVED_PER_LAYER` per token and layer, `SAVED_PER_TOKEN` per token.
    pub activations: u64,
    /// Half precision only: the attention scores of one layer (`SCORE_COPIES`).
    pub attention_scores: u64,
    /// The LM head's block of f32 logits (all tokens' rows up to `LM_HEAD_BLOCK_VALUES` logits)
    /// and its weight's gradient `[d_model, vocab]` (`lm_head_gradient_bytes`), which the fused
    /// head makes in the forward pass.
    pub lm_head: u64,
    /// The validation's logits, whole (`[tokens, vocab]` arrays, `validation_logit_copies` in
    /// f32's bytes, for the global batch of `batch_size` x devices sequences).
    pub validation_logits: u64,
    /// A checkpoint being written: a copy of the weights and of Adam's moments (the records
    /// written to disk).
    pub checkpoint: u64,
    /// The data loader's index: the token cache's document offsets, the sequences' spans and the
    /// shuffled order of the training sequences (0 until the data is tokenised).
    pub data: u64,
    /// Every device after the first: a copy of the weights, and a training step of its own.
    pub other_devices: u64,
    /// One f32 array of the validation's logits.
    validation_array: u64,
}

impl TrainingMemory {
    /// The memory of training `model` in `shape`.
    pub fn new(model: &LlamaConfig, shape: RunShape) -> Self {
        let params = model.num_params() as f64;
        let weight_bytes = if shape.precision == Precision::Bf16 { 2.0 } else { 4.0 };
        let half = matches!(shape.precision, Precision::Bf16Mixed | Precision::F16Mixed);
        let (d, d_ff, layers) = (model.d_model as f64, model.d_ff as f64, model.n_layers as f64);
        let (vocab, heads) = (model.vocab_size as f64, model.n_heads as f64);
        let (batch, seq) = (shape.batch_size as f64, shape.seq_len as f64);
        let tokens = batch * seq;
        let per_token = layers * (SAVED_PER_LAYER.0 * d + SAVED_PER_LAYER.1 * d_ff) + SAVED_PER_TOKEN * d;
        let weights = params * weight_bytes;
        let block_rows = (LM_HEAD_BLOCK_VALUES / vocab.max(1.0)).floor().max(1.0);
        let valid_tokens = tokens * shape.devices.max(1) as f64;
        let mut memory = Self {
            runtime: RUNTIME_BYTES,
            weights: bytes(weights),
            optimizer: bytes(2.0 * weights),
            gradients: bytes(weights * if shape.grad_accum > 1 { 2.0 } else { 1.0 }),
            half_weights: bytes(if half { 2.0 * params } else { 0.0 }),
            activations: bytes(tokens * per_token * 4.0 * activation_share(shape.precision)),
            attention_scores: bytes(if shape.precision == Precision::F32 {
                0.0
            } else {
                SCORE_COPIES * batch * heads * seq * seq * 4.0
            }),
            lm_head: bytes(tokens.min(block_rows) * vocab * 4.0 + d * vocab * lm_head_gradient_bytes(shape.precision)),
            validation_logits: bytes(validation_logit_copies(shape.precision) * valid_tokens * vocab * 4.0),
            checkpoint: bytes(3.0 * weights),
            data: 0,
            other_devices: 0,
            validation_array: bytes(valid_tokens * vocab * 4.0),
        };
        memory.other_devices =
            (shape.devices.max(1) as u64 - 1).saturating_mul(memory.weights.saturating_add(memory.step()));
        memory
    }

    /// With the data loader's index of `documents` documents and `sequences` training sequences:
    /// 8 bytes a document for the token cache's offsets, at most 24 for the spans of the
    /// sequences, and 4 a training sequence for their shuffled order.
    pub fn with_data(mut self, documents: u64, sequences: u64) -> Self {
        self.data = documents.saturating_mul(32).saturating_add(sequences.saturating_mul(4));
        self
    }

    /// A training step beyond the state held throughout: at the end of the forward pass (every
    /// activation held), or midway through the backward pass (the gradients made and about half
    /// the activations, which the backward pass frees layer by layer), whichever is more; plus
    /// the half-precision weights and the LM head.
    pub fn step(&self) -> u64 {
        let end_of_forward = self.activations.saturating_add(self.attention_scores);
        let backward = self.gradients.saturating_add(self.activations / 2).saturating_add(self.attention_scores);
        end_of_forward.max(backward).saturating_add(self.half_weights).saturating_add(self.lm_head)
    }

    /// The validation beyond the state held throughout. Logits in arrays of [`MMAP_THRESHOLD`] or
    /// more get pages of their own, while malloc keeps memory the step freed: all of it up to
    /// [`TRIM_THRESHOLD`] (`memory::reuse_freed_memory`), and of a larger step about half (freed
    /// in the middle of its heap; measured 37-100%): the two add up. Smaller logits reuse the
    /// step's memory.
    pub fn validation(&self) -> u64 {
        if self.validation_array >= MMAP_THRESHOLD {
            let kept = self.step().min(TRIM_THRESHOLD.max(self.step() / 2));
            kept.saturating_add(self.validation_logits)
        } else {
            self.step().max(self.validation_logits)
        }
    }

    /// The resident memory the run reaches at its peak: the program, the data's index, the
    /// weights and Adam's moments (held throughout), the largest of a step, a validation and a
    /// checkpoint (which come one after the other), and the other devices.
    pub fn peak(&self) -> u64 {
        let phase = self.step().max(self.validation()).max(self.checkpoint);
        [self.runtime, self.data, self.weights, self.optimizer, phase, self.other_devices]
            .into_iter()
            .fold(0u64, u64::saturating_add)
    }

    /// The terms, for a message: what is held throughout, then the three phases whose largest
    /// counts ("weights 221.5 MiB, Adam's moments 443.1 MiB, the program 26.0 MiB held throughout,
    /// plus the largest of a training step of 288.0 MiB (gradients ..., LM head 94.5 MiB), a
    /// validation of ... and a checkpoint's copies of 664.6 MiB"); terms of 0 bytes left out.
    pub fn breakdown(&self) -> String {
        let list = |terms: &[(&str, u64)]| {
            let shown: Vec<String> = terms
                .iter()
                .filter(|(_, size)| *size > 0)
                .map(|(name, size)| format!("{name} {}", format_bytes(*size)))
                .collect();
            shown.join(", ")
        };
        let held = list(&[
            ("weights", self.weights),
            ("Adam's moments", self.optimizer),
            ("data index", self.data),
            ("other devices", self.other_devices),
            ("the program", self.runtime),
        ]);
        let step = list(&[
            ("gradients", self.gradients),
            ("half-precision weights", self.half_weights),
            ("activations", self.activations),
            ("attention scores", self.attention_scores),
            ("LM head", self.lm_head),
        ]);
        let kept = self.validation().saturating_sub(self.validation_logits);
        let validation = list(&[("logits", self.validation_logits), ("kept of the step", kept)]);
        format!(
            "{held} held throughout, plus the largest of a training step of {} ({step}), a validation of {} \
             ({validation}) and a checkpoint's copies of {}",
            format_bytes(self.step()),
            format_bytes(self.validation()),
            format_bytes(self.checkpoint),
        )
    }
}

/// A byte count computed in f64, saturated to `u64::MAX` (which `format_bytes` reads "at least
/// 16 EiB").
fn bytes(value: f64) -> u64 {
    value.ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = (1u64 << 20) as f64;

    fn shape(precision: Precision, batch_size: usize, seq_len: usize) -> RunShape {
        RunShape { precision, batch_size, seq_len, grad_accum: 1, devices: 1 }
    }

    #[test]
    fn each_term_is_its_count_of_the_shapes() {
        // 20m: d 256, d_ff 688, 4 layers, 4 heads, vocabulary 32000: 19548416 parameters.
        let model = LlamaConfig::llama_20m();
        let params = 19_548_416u64;
        assert_eq!(model.num_params() as u64, params);
        let f32_run = TrainingMemory::new(&model, shape(Precision::F32, 8, 128));
        assert_eq!((f32_run.weights, f32_run.optimizer, f32_run.gradients), (4 * params, 8 * params, 4 * params));
        assert_eq!(f32_run.checkpoint, 12 * params);
        assert_eq!((f32_run.half_weights, f32_run.attention_scores, f32_run.data, f32_run.other_devices), (0, 0, 0, 0));
        // 1024 tokens x (4 x (6.5 x 256 + 3.75 x 688) + 12.5 x 256) values x 4 bytes.
        assert_eq!(f32_run.activations, 1024 * (4 * (1664 + 2580) + 3200) * 4);
        // A block of 2^23 / 32000 = 262 of the 1024 rows, and the head's weight gradient
        // 256 x 32000, in f32.
        assert_eq!(f32_run.lm_head, 262 * 32000 * 4 + 256 * 32000 * 4);
        assert_eq!(f32_run.validation_logits, 2 * 1024 * 32000 * 4);

        let bf16 = TrainingMemory::new(&model, shape(Precision::Bf16, 8, 128));
        assert_eq!((bf16.weights, bf16.optimizer, bf16.checkpoint), (2 * params, 4 * params, 6 * params));
        assert_eq!(bf16.lm_head, 262 * 32000 * 4 + 256 * 32000 * 12);
        assert_eq!(bf16.validation_logits, 3 * 1024 * 32000 * 2);
        assert_eq!(bf16.activations, f32_run.activations / 2);
        // 3 copies of [8, 4, 128, 128] f32 scores.
        assert_eq!(bf16.attention_scores, 3 * 8 * 4 * 128 * 128 * 4);

        let mixed = TrainingMemory::new(&model, shape(Precision::F16Mixed, 8, 128));
        assert_eq!((mixed.weights, mixed.half_weights), (4 * params, 2 * params));
        assert_eq!(mixed.activations, (f32_run.activations as f64 * 0.85).ceil() as u64);
        assert_eq!(mixed.validation_logits, 9 * 1024 * 32000);

        let accumulated = TrainingMemory::new(&model, RunShape { grad_accum: 2, ..shape(Precision::F32, 8, 128) });
        assert_eq!(accumulated.gradients, 8 * params);
        let two = TrainingMemory::new(&model, RunShape { devices: 2, ..shape(Precision::F32, 8, 128) });
        assert_eq!(two.validation_logits, 2 * f32_run.validation_logits);
        assert_eq!(two.other_devices, f32_run.weights + f32_run.step());
        assert_eq!(f32_run.clone().with_data(1000, 500).data, 32_000 + 2_000);
    }

    #[test]
    fn the_peak_is_the_state_plus_the_largest_phase() {
        let model = LlamaConfig::llama_20m();
        // At 1 x 16 tokens the checkpoint's copies (12 bytes a parameter) are the largest phase:
        // 26 MiB + 12 + 12 bytes a parameter.
        let small = TrainingMemory::new(&model, shape(Precision::F32, 1, 16));
        assert!(small.checkpoint > small.step() && small.checkpoint > small.validation());
        assert_eq!(small.peak(), RUNTIME_BYTES + 24 * 19_548_416);
        // The step: the gradients and half the activations (the backward pass) beat the
        // activations alone when the gradients are larger, and the other way round.
        let run = TrainingMemory::new(&model, shape(Precision::F32, 8, 128));
        let backward = run.gradients + run.activations / 2;
        assert!(backward > run.activations);
        assert_eq!(run.step(), backward + run.lm_head);
        // Validation logits of 125 MiB each get pages of their own: on top of what malloc keeps
        // of the step (all of it, under 256 MiB).
        assert!(run.step() < TRIM_THRESHOLD);
        assert_eq!(run.validation(), run.step() + run.validation_logits);
        // Of a step over 512 MiB, half.
        let long = TrainingMemory::new(&LlamaConfig::llama_60m(), shape(Precision::F32, 8, 512));
        assert!(long.step() > 2 * TRIM_THRESHOLD);
        assert_eq!(long.validation(), long.step() / 2 + long.validation_logits);
        assert_eq!(run.peak(), RUNTIME_BYTES + run.weights + run.optimizer + run.validation());
        // A byte vocabulary's logits are small: they reuse the step's memory.
        let tiny = TrainingMemory::new(&LlamaConfig::tiny(), shape(Precision::F32, 16, 256));
        assert_eq!(tiny.validation(), tiny.step().max(tiny.validation_logits));
        assert_eq!(tiny.step(), tiny.activations + tiny.lm_head);
        // The 60m preset at 1 x 16, the issue's case: about 1.3 GiB, not 886 MiB.
        let issue = TrainingMemory::new(&LlamaConfig::llama_60m(), shape(Precision::F32, 1, 16));
        let mib = issue.peak() as f64 / MIB;
        assert!((1300.0..1400.0).contains(&mib), "{mib} MiB");
    }

    #[test]
    fn sizes_too_large_to_count_saturate_and_say_so() {
        let absurd = LlamaConfig::new(usize::MAX / 2, usize::MAX / 2, usize::MAX / 2, 1);
        let memory = TrainingMemory::new(&absurd, shape(Precision::F32, usize::MAX, usize::MAX));
        assert_eq!(memory.peak(), u64::MAX);
        assert!(memory.breakdown().contains("weights at least 16 EiB"), "{}", memory.breakdown());
    }
}
