//! bf16: set where the device computes in it, refused with a clear message where it cannot.
//! (A device's float type is process-wide, so this lives in its own test binary.)

mod common;

use burn::tensor::DType;
use common::{random_tokens, values};
use layernorm_scaling::{parse_device, set_precision, LlamaConfig, Precision};

#[test]
fn flex_computes_in_bf16_and_locks_its_precision_once_used() {
    let mut device = parse_device("flex").unwrap();
    set_precision(&mut device, Precision::Bf16).unwrap();
    let model = LlamaConfig::tiny().init(&device).unwrap();
    let logits = model.forward(random_tokens(1, 8, 256, 1, &device));
    assert_eq!(logits.dtype(), DType::BF16);
    assert!(values(&logits).iter().all(|v| v.is_finite()));
    // Once tensors exist the precision is locked, and saying so is an error, not a panic.
    let err = set_precision(&mut device, Precision::F32).unwrap_err().to_string();
    assert!(err.contains("already been initialized"), "{err}");
}

#[cfg(feature = "ndarray")]
#[test]
fn ndarray_refuses_bf16_with_a_clear_message() {
    let mut device = parse_device("ndarray").unwrap();
    let err = set_precision(&mut device, Precision::Bf16).unwrap_err().to_string();
    assert!(err.contains("cannot compute in bf16") && err.contains("use --precision f32 (what"), "{err}");
    // Nor in either mixed precision: f32 is all it is offered.
    let err = set_precision(&mut device, Precision::Bf16Mixed).unwrap_err().to_string();
    assert!(err.contains("cannot compute in bf16-mixed: use --precision f32 (what"), "{err}");
}
