//! A CubeCL kernel as one op on Burn's fusion stream.
//!
//! With kernel fusion on (the `wgpu` and `cuda` features turn it on), a `Cube` tensor is a lazy
//! id on a fusion stream, not a GPU buffer. [`custom_op`] queues a function of the underlying
//! `CubeTensor`s as an opaque op of that stream: it runs in order with the ops around it, on the
//! fusion thread, without waiting for the GPU.

use burn::backend::fusion::custom::{
    CustomOpIr, HandleContainer, OperationFn, OperationIr, OperationOutput, ScalarIr, StreamId, TensorIr, TensorSpec,
};
use burn::backend::fusion::{FusionRuntime, FusionTensor};
use burn::backend::{Scalar, TensorMetadata};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeBackend;

type Runtime = <CubeBackend as burn::backend::fusion::FusionBackend>::FusionRuntime;
type Handle = <Runtime as FusionRuntime>::FusionHandle;

/// Queues `run` over the `CubeTensor`s behind `inputs`, whose results are described by `outputs`
/// (their exact shapes and dtypes: fusion does not check them); `scalars` are the op's settings,
/// recorded with it. Returns the outputs as lazy tensors.
pub(super) fn custom_op<const I: usize, const O: usize>(
    name: &'static str,
    inputs: [FusionTensor<Runtime>; I],
    outputs: [TensorSpec; O],
    scalars: &[f64],
    run: impl Fn([CubeTensor; I]) -> [CubeTensor; O] + Send + Sync + 'static,
) -> [FusionTensor<Runtime>; O] {
    let client = inputs[0].client.clone();
    let inputs: Vec<TensorIr> = inputs.into_iter().map(FusionTensor::into_ir).collect();
    let outputs: Vec<TensorIr> = outputs
        .into_iter()
        .map(|spec| TensorIr::uninit(client.create_empty_handle(), spec.shape, spec.dtype))
        .collect();
    let description = CustomOpIr {
        id: name.into(),
        inputs: inputs.clone(),
        outputs: outputs.clone(),
        scalars: scalars.iter().map(|&value| ScalarIr::from(Scalar::from(value))).collect(),
    };
    let operation = OperationFn(move |handles: &mut HandleContainer<Handle>| {
        let tensors: [CubeTensor; I] = std::array::from_fn(|i| handles.get_float_tensor::<CubeBackend>(&inputs[i]));
        for (output, tensor) in outputs.iter().zip(run(tensors)) {
            // Fusion trusts the description: a kernel that returned another shape would corrupt silently.
            debug_assert_eq!((tensor.shape(), tensor.dtype), (output.shape.clone(), output.dtype), "{name}: output");
            handles.register_float_tensor::<CubeBackend>(&output.id, tensor);
        }
        Ok(())
    });
    client.register(StreamId::current(), OperationIr::Custom(description), operation).outputs::<O>()
}
