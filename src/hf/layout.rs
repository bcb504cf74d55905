//! How our model maps onto the Hugging Face LLaMA layout: one name map for both directions, the
//! `[out, in]` weight orientation (burn-store's PyTorch adapters), and the depth factors folded
//! into weights on export.

use std::collections::HashMap;
use std::sync::Arc;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_store::burn_pack::{Error as PackError, Tensor as PackTensor};
use burn_store::{
    bridge, BurnToPyTorchAdapter, FloatCastAdapter, KeyRemapper, ModuleAdapter, ModuleContext, PyTorchToBurnAdapter,
};

use super::{BlockPart, ExportProblem, HfError};
use crate::model::Block;
use crate::model::Llama;
use crate::norm::{BranchGate, LayerPlan, NormKind, Placement};

/// The one name map, Hugging Face name <-> module path (enum variants such as `Norm::RmsNorm`
/// left out); `{i}` is a block index. An entry ending in `.` maps a prefix, any other a whole
/// name; specific entries come before the prefixes that contain them. `lm_head.weight` is the
/// same on both sides, and the projections keep their names under `self_attn.` and `mlp.`.
const NAMES: [(&str, &str); 5] = [
    ("model.embed_tokens.", "embed_tokens."),
    ("model.layers.{i}.input_layernorm.weight", "layers.{i}.attn_norm.gamma"),
    ("model.layers.{i}.post_attention_layernorm.weight", "layers.{i}.ffn_norm.gamma"),
    ("model.layers.{i}.", "layers.{i}."),
    ("model.norm.weight", "norm.gamma"),
];

/// [`NAMES`] as a pair of burn-store key remappers.
pub struct NameMap {
    /// Hugging Face names -> module paths (loading).
    pub to_burn: KeyRemapper,
    /// Module paths -> Hugging Face names (export).
    pub to_hf: KeyRemapper,
}

impl NameMap {
    pub fn new() -> Self {
        // `model.layers.{i}.` becomes `^model\.layers\.(\d+)\.` and `${1}` on the other side;
        // a whole name is anchored at both ends.
        let pattern = |name: &str| {
            let end = if name.ends_with('.') { "" } else { "$" };
            format!("^{}{end}", name.replace('.', r"\.").replace("{i}", r"(\d+)"))
        };
        let replacement = |name: &str| name.replace("{i}", "${1}");
        let remapper = |pairs: Vec<(String, String)>| {
            KeyRemapper::from_patterns(pairs).expect("the name map's patterns are valid regular expressions")
        };
        Self {
            to_burn: remapper(NAMES.iter().map(|(hf, burn)| (pattern(hf), replacement(burn))).collect()),
            to_hf: remapper(NAMES.iter().map(|(hf, burn)| (pattern(burn), replacement(hf))).collect()),
        }
    }
}

/// The factors a scheme applies inside block: `[attention norm, feed-forward norm, attention
/// output, feed-forward output]`. A Hugging Face LLaMA has none, so export multiplies them into
/// the norm weights and the `o_proj`/`down_proj` weights (exact: RMSNorm and both projections are
/// linear in those weights), and loading divides them out again.
///
/// Schemes with no such counterpart are refused.
pub fn folded_factors(block: &Block) -> Result<[f64; 4], HfError> {
    let plan = block.plan();
    check_exportable_plan(plan)?;
    Ok([block.attn_norm.scale(), block.ffn_norm.scale(), plan.attn_output_scale, plan.ffn_output_scale])
}

/// An error unless a LLaMA checkpoint can express a block of this plan ([`plan_problem`]).
pub(crate) fn check_exportable_plan(plan: &LayerPlan) -> Result<(), HfError> {
    match plan_problem(plan) {
        Some(problem) => Err(HfError::NotExportable { scheme: None, problem }),
        None => Ok(()),
    }
}

/// Why a LLaMA checkpoint cannot express a block of this plan, `None` when it can: Post-LN,
/// Sandwich-LN, Peri-LN, branch gates, GPAS, LNS before the norm and DeepNorm's residual scale
/// have no counterpart there.
pub(crate) fn plan_problem(plan: &LayerPlan) -> Option<ExportProblem> {
    let part = match plan.placement {
        Placement::Post => BlockPart::PostLn,
        Placement::Sandwich => BlockPart::OutputNorm,
        Placement::Reordered => BlockPart::OutputNormOnly,
        Placement::Pre if plan.gpas => BlockPart::Gpas,
        Placement::Pre if plan.gate != BranchGate::None => BlockPart::BranchGate,
        Placement::Pre if plan.norm_input_scale != 1.0 => BlockPart::NormInputScale,
        Placement::Pre if plan.residual_scale != 1.0 => BlockPart::ResidualScale,
        Placement::Pre => return None,
    };
    Some(ExportProblem::Block(part))
}

/// Multiplies the weights at some module paths by a factor, in f64 and rounded once to f32.
///
/// burn-store has no per-layer scaling of its own: this is the depth factors of
/// [`folded_factors`], multiplied in on export and divided out on load.
#[derive(Clone)]
pub struct FoldAdapter {
    factors: Arc<HashMap<String, f64>>,
}

impl FoldAdapter {
    /// The factors of every block of `model`, or their reciprocals (`load`) to divide them out.
    fn new(model: &Llama, load: bool) -> Result<Self, HfError> {
        let norms = model.layers.iter().flat_map(|block| [&block.attn_norm, &block.ffn_norm]);
        if let Some(norm) = std::iter::once(&model.norm).chain(norms).find(|norm| norm.kind() != NormKind::RmsNorm) {
            return Err(HfError::NotExportable { scheme: None, problem: ExportProblem::NormKind(norm.kind()) });
        }
        let mut factors = HashMap::new();
        for (i, block) in model.layers.iter().enumerate() {
            let paths = ["attn_norm.gamma", "ffn_norm.gamma", "self_attn.o_proj.weight", "mlp.down_proj.weight"];
            for (path, factor) in paths.into_iter().zip(folded_factors(block)?) {
                if factor != 1.0 {
                    factors.insert(format!("layers.{i}.{path}"), if load { 1.0 / factor } else { factor });
                }
            }
        }
        Ok(Self { factors: Arc::new(factors) })
    }
}

impl ModuleAdapter for FoldAdapter {
    fn adapt(&self, tensor: PackTensor, _ctx: ModuleContext<'_>) -> PackTensor {
        let Some(&factor) = self.factors.get(&tensor.name) else { return tensor };
        let (name, shape) = (tensor.name.clone(), tensor.shape.clone());
        bridge::map_data(tensor, name, DType::F32, shape, move |data| {
            let values: Vec<f32> = data.iter::<f32>().map(|v| (v as f64 * factor) as f32).collect();
            TensorData::new(values, data.shape().clone())
        })
    }

    fn clone_box(&self) -> Box<dyn ModuleAdapter> {
        Box::new(self.clone())
    }
}

/// Loading: `[out, in]` weights transposed, every float type read as f32, the depth factors
/// divided out, then the device's float type (as `Tensor::from_data` would give).
pub fn load_adapter(model: &Llama, device: &Device) -> Result<impl ModuleAdapter, HfError> {
    let float: DType = device.settings().float_dtype.into();
    Ok(PyTorchToBurnAdapter
        .chain(FloatCastAdapter::to(DType::F32))
        .chain(FoldAdapter::new(model, true)?)
        .chain(FloatCastAdapter::to(float)))
}

/// Export: weights transposed to `[out, in]`, as f32, with the depth factors multiplied in.
pub fn export_adapter(model: &Llama) -> Result<impl ModuleAdapter, HfError> {
    Ok(BurnToPyTorchAdapter.chain(FloatCastAdapter::to(DType::F32)).chain(FoldAdapter::new(model, false)?))
}

/// The Hugging Face name and `[out, in]` shape of every parameter of `model`, in module order:
/// what export writes, through the same adapter and name map, from the parameters' shapes alone
/// (a freshly built model's lazy weights are neither initialised nor read).
pub fn hf_shapes(model: &Llama, names: &NameMap) -> Vec<(String, Vec<usize>)> {
    #[derive(Default)]
    struct Shapes {
        path: Vec<String>,
        containers: Vec<String>,
        tensors: Vec<PackTensor>,
    }
    impl ModuleVisitor for Shapes {
        fn enter_module(&mut self, name: &str, container_type: &str) {
            self.containers.push(container_type.to_string());
            if !container_type.starts_with("Enum:") {
                self.path.push(name.to_string());
            }
        }
        fn exit_module(&mut self, _name: &str, container_type: &str) {
            self.containers.pop();
            if !container_type.starts_with("Enum:") {
                self.path.pop();
            }
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let shape_only = || Err(PackError::ValidationError("a shape, not data".into()));
            let tensor = bridge::deferred(self.path.join("."), DType::F32, param.lazy_shape(), None, shape_only);
            self.tensors.push(BurnToPyTorchAdapter.adapt(tensor, ModuleContext::new(&self.containers)));
        }
    }
    let mut shapes = Shapes::default();
    model.visit(&mut shapes);
    let (tensors, _) = names.to_hf.remap(shapes.tensors);
    tensors.into_iter().map(|t| (t.name, t.shape.to_vec())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_name_map_serves_both_directions() {
        let names = NameMap::new();
        let pairs = [
            ("model.embed_tokens.weight", "embed_tokens.weight"),
            ("model.layers.0.input_layernorm.weight", "layers.0.attn_norm.gamma"),
            ("model.layers.12.post_attention_layernorm.weight", "layers.12.ffn_norm.gamma"),
            ("model.layers.3.self_attn.k_proj.bias", "layers.3.self_attn.k_proj.bias"),
            ("model.layers.10.mlp.down_proj.weight", "layers.10.mlp.down_proj.weight"),
            ("model.norm.weight", "norm.gamma"),
            ("lm_head.weight", "lm_head.weight"),
        ];
        let tensor = |name: &str| bridge::from_data(TensorData::new(vec![0f32], [1]), name.to_string(), None);
        let names_of = |tensors: Vec<PackTensor>| tensors.into_iter().map(|t| t.name).collect::<Vec<_>>();
        let (burn, _) = names.to_burn.remap(pairs.iter().map(|(hf, _)| tensor(hf)).collect());
        assert_eq!(names_of(burn), pairs.map(|(_, burn)| burn.to_string()));
        let (hf, _) = names.to_hf.remap(pairs.iter().map(|(_, burn)| tensor(burn)).collect());
        assert_eq!(names_of(hf), pairs.map(|(hf, _)| hf.to_string()));
    }
}
