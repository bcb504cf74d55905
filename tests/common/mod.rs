//! Helpers shared by the integration tests.
#![allow(dead_code)]

use burn::module::{ModuleVisitor, Param};
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use layernorm_scaling::parse_device;

/// The CPU device every test uses unless it compares backends.
pub fn cpu() -> Device {
    parse_device("flex").expect("the default `flex` feature is compiled in")
}

/// Every backend compiled into this test build, CPU first. `wgpu` runs on a software Vulkan
/// adapter (Mesa lavapipe), which `.ci/run` installs.
pub fn all_backends() -> Vec<(&'static str, Device)> {
    let mut devices = vec![("flex", cpu())];
    if cfg!(feature = "ndarray") {
        devices.push(("ndarray", parse_device("ndarray").unwrap()));
    }
    if cfg!(feature = "wgpu") {
        devices.push(("wgpu-cpu", parse_device("wgpu-cpu").unwrap()));
    }
    devices
}

/// Random token ids `[batch, seq]` in `0..vocab`, reproducible for a seed.
pub fn random_tokens(batch: usize, seq: usize, vocab: usize, seed: u64, device: &Device) -> Tensor<2, Int> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let ids: Vec<i64> = (0..batch * seq)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) % vocab as u64) as i64
        })
        .collect();
    Tensor::from_data(TensorData::new(ids, [batch, seq]), device)
}

/// A random normal tensor.
pub fn randn<const D: usize>(shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

/// The values of a tensor as f32.
pub fn values<const D: usize>(t: &Tensor<D>) -> Vec<f32> {
    t.to_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// The largest absolute difference between two tensors of the same shape.
pub fn max_abs_diff<const D: usize>(a: &Tensor<D>, b: &Tensor<D>) -> f32 {
    assert_eq!(a.dims(), b.dims());
    values(a).iter().zip(values(b)).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Mean and (population) standard deviation of a tensor's values.
pub fn mean_std<const D: usize>(t: &Tensor<D>) -> (f64, f64) {
    let v = values(t);
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Collects every float parameter with its path and its values.
#[derive(Default)]
pub struct ParamValues {
    pub path: Vec<String>,
    pub params: Vec<(String, Vec<f32>)>,
}

impl ModuleVisitor for ParamValues {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.params.push((self.path.join("."), values(&param.val())));
    }
}
