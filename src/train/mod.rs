//! Training: the schedule, gradient clipping, and the loop on burn-train.

mod clip;
mod schedule;

pub use clip::{clip_grad_norm, global_grad_norm, scale_grads};
pub use schedule::{WarmupCosine, WarmupCosineState};
