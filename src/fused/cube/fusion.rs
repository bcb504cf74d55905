//! A CubeCL kernel as one op on Burn's fusion stream.
//!
//! With kernel fusion on (the `wgpu` and `cuda` features turn it on), a `Cube` tensor is a lazy
//! id on a fusion stream, not a GPU buffer. [`custom_op`] queues a function of the underlying
//! `CubeTensor`s as an opaque op of that stream: it runs in order with the ops around it, on the
//! fusion thread, without waiting for the GPU.

use burn::backend::fusion::custom::{
    CustomOpIr, HandleContainer, OperationFn, OperationIr, ScalarIr, StreamId, TensorIr, TensorSpec,
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
    let outputs = custom_op_of_many(name, inputs.into(), outputs.into(), scalars, move |inputs| {
        let inputs: [CubeTensor; I] = inputs.try_into().unwrap_or_else(|_| unreachable!("{name}: {I} inputs"));
        run(inputs).into()
    });
    outputs.try_into().unwrap_or_else(|_| unreachable!("{name}: {O} outputs"))
}

/// [`custom_op`] over any number of inputs and outputs.
pub(super) fn custom_op_of_many(
    name: &'static str,
    inputs: Vec<FusionTensor<Runtime>>,
    outputs: Vec<TensorSpec>,
    scalars: &[f64],
    run: impl Fn(Vec<CubeTensor>) -> Vec<CubeTensor> + Send + Sync + 'static,
) -> Vec<FusionTensor<Runtime>> {
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
        let tensors = inputs.iter().map(|input| handles.get_float_tensor::<CubeBackend>(input)).collect();
        let results = run(tensors);
        assert_eq!(results.len(), outputs.len(), "{name}: outputs");
        for (output, tensor) in outputs.iter().zip(results) {
            // Fusion trusts the description: a kernel that returned another shape would corrupt silently.
            debug_assert_eq!((tensor.shape(), tensor.dtype), (output.shape.clone(), output.dtype), "{name}: output");
            handles.register_float_tensor::<CubeBackend>(&output.id, tensor);
        }
        Ok(())
    });
    client.register(StreamId::current(), OperationIr::Custom(description), operation)
}
