//! bf16: set where the device computes in it, refused with a clear message where it cannot.
//! (A device's float type is process-wide, so this lives in its own test binary.)

mod common;

use burn::tensor::{DType, FloatDType};
use common::{random_tokens, values};
use layernorm_scaling::{parse_device, set_precision, LlamaConfig, Precision};

#[test]
fn bf16_where_supported_and_a_clear_error_where_not() {
    let mut device = parse_device("flex").unwrap();
    let supported = device.supports_dtype(FloatDType::BF16);
    let result = set_precision(&mut device, Precision::Bf16);
    if supported {
        result.unwrap();
        let model = LlamaConfig::tiny().init(&device).unwrap();
        let logits = model.forward(random_tokens(1, 8, 256, 1, &device));
        assert_eq!(logits.dtype(), DType::BF16);
        assert!(values(&logits).iter().all(|v| v.is_finite()));
    } else {
        let err = result.unwrap_err().to_string();
        assert!(err.contains("cannot compute in Bf16"), "{err}");
    }
    // Once tensors exist the precision is locked, and saying so is an error, not a panic.
    let _ = LlamaConfig::tiny().init(&device).unwrap();
    let err = set_precision(&mut device, Precision::F32).unwrap_err().to_string();
    assert!(err.contains("already been initialized"), "{err}");
}
