//! The float type of a model's weights: casting them all to one type, as PyTorch's
//! `load_state_dict` copies a checkpoint into the model's own dtype.

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{DType, Device, FloatDType, Tensor};

/// `module` with every float parameter in `dtype` (those already in it untouched), each keeping
/// whether it requires gradients: a bf16 checkpoint loaded onto an f32 device computes in f32,
/// and an f32 one loaded for a pure-bf16 run trains in bf16.
pub fn cast_weights<M: Module>(module: M, dtype: FloatDType) -> M {
    struct Cast(DType);
    impl ModuleMapper for Cast {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let dtype = self.0;
            param.map(|tensor| {
                if tensor.dtype() == dtype {
                    return tensor;
                }
                let tracked = tensor.is_require_grad();
                tensor.cast(dtype).detach().set_require_grad(tracked)
            })
        }
    }
    module.map(&mut Cast(dtype.into()))
}

/// `module` with its weights in `device`'s float type ([`cast_weights`]): what a loader gives, so
/// that the tensors the model makes as it runs (its caches, its position tables) match them.
pub fn cast_weights_to_device<M: Module>(module: M, device: &Device) -> M {
    cast_weights(module, device.settings().float_dtype)
}
