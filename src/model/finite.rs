//! Finding non-finite weights (NaN or infinity), the mark of a run that diverged, and the one
//! refusal of a model that holds them.

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{FloatDType, Tensor};

use crate::error::Error;

/// [`Error::NonFinite`] naming the first non-finite parameter of `model`, with `advice` (what to
/// do, made only when needed); `Ok` when every weight is finite.
pub fn check_finite<M: Module>(model: &M, advice: impl FnOnce() -> String) -> Result<(), Error> {
    match first_non_finite_parameter(model) {
        Some(parameter) => Err(Error::NonFinite { parameter, advice: advice() }),
        None => Ok(()),
    }
}

/// The path of the first parameter of `model` holding a NaN or an infinity (e.g.
/// `layers.3.mlp.down_proj.weight`), or `None` when every weight is finite.
pub fn first_non_finite_parameter<M: Module>(model: &M) -> Option<String> {
    struct FirstNonFinite {
        path: Vec<String>,
        found: Option<String>,
    }
    impl ModuleVisitor for FirstNonFinite {
        // An enum's variant is no step of the path a checkpoint names (`norm.gamma`, not
        // `norm.RmsNorm.gamma`).
        fn enter_module(&mut self, name: &str, container_type: &str) {
            if !container_type.starts_with("Enum:") {
                self.path.push(name.to_string());
            }
        }
        fn exit_module(&mut self, _name: &str, container_type: &str) {
            if !container_type.starts_with("Enum:") {
                self.path.pop();
            }
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if self.found.is_some() {
                return;
            }
            // In f32: a reduced-precision tensor is widened exactly, and every backend checks f32.
            let finite = param.val().cast(FloatDType::F32).is_finite().all().into_scalar::<bool>();
            if !finite {
                self.found = Some(self.path.join("."));
            }
        }
    }
    let mut visitor = FirstNonFinite { path: Vec::new(), found: None };
    model.visit(&mut visitor);
    visitor.found
}
