//! Which implementation the fused ops run ([`OpPath`]): the fused kernels, or the reference built
//! from Burn's own ops, for the process, a thread or a closure; and whether a backward pass follows
//! the graph being recorded ([`with_backward_following`]).

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

/// Which implementation the model's attention, norms, SwiGLU and RoPE use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OpPath {
    /// One autodiff node per op, with its own backward (flex kernels on flex). The default.
    #[default]
    Fused,
    /// Burn's decomposed ops: the reference the fused ops are tested against.
    Reference,
}

impl OpPath {
    /// The path named by `LAYERNORM_SCALING_OPS` (`fused` or `reference`); `None` when unset.
    ///
    /// Another value is an error that names the variable and the accepted values.
    pub fn from_env() -> Result<Option<OpPath>, crate::config_error::ConfigError> {
        match std::env::var(ENV_VAR) {
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(value)) => Err(crate::config_error::ConfigError::Unknown {
                what: "LAYERNORM_SCALING_OPS value",
                name: value.to_string_lossy().into_owned(),
                expected: "fused, reference".into(),
            }),
            Ok(value) => match value.trim() {
                "" => Ok(None),
                name => match [OpPath::Fused, OpPath::Reference].into_iter().find(|path| path.name() == name) {
                    Some(path) => Ok(Some(path)),
                    None => Err(crate::config_error::ConfigError::Unknown {
                        what: "LAYERNORM_SCALING_OPS value",
                        name: name.to_string(),
                        expected: "fused, reference".into(),
                    }),
                },
            },
        }
    }

    /// The path's name, as `LAYERNORM_SCALING_OPS` and the bench's records write it.
    pub fn name(self) -> &'static str {
        match self {
            OpPath::Fused => "fused",
            OpPath::Reference => "reference",
        }
    }
}

/// The environment variable that sets the process's default [`OpPath`].
pub const ENV_VAR: &str = "LAYERNORM_SCALING_OPS";

const UNSET: u8 = 0;
const FUSED: u8 = 1;
const REFERENCE: u8 = 2;

static DEFAULT_PATH: AtomicU8 = AtomicU8::new(UNSET);

thread_local! {
    static THREAD_PATH: Cell<Option<OpPath>> = const { Cell::new(None) };
}

/// Sets the path for the whole process (every thread without a [`with_path`] of its own).
pub fn set_default_path(path: OpPath) {
    DEFAULT_PATH.store(if path == OpPath::Fused { FUSED } else { REFERENCE }, Ordering::Relaxed);
}

/// Runs `f` with `path` on this thread, then restores the thread's previous choice.
pub fn with_path<R>(path: OpPath, f: impl FnOnce() -> R) -> R {
    with_thread_value(&THREAD_PATH, Some(path), f)
}

thread_local! {
    static BACKWARD_FOLLOWS: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, whose autodiff graph the caller promises to run backward before dropping it (as a
/// training step does): the residual norms ([`residual_rms_norm`](super::residual_rms_norm)) then add the sum's gradient
/// from its other uses inside their backward kernel, one launch fewer per residual add. For that
/// each keeps the sum's node in its graph until the backward pass: a graph recorded here and
/// dropped without one would not be freed. Elsewhere Burn adds the two gradients.
pub fn with_backward_following<R>(f: impl FnOnce() -> R) -> R {
    with_thread_value(&BACKWARD_FOLLOWS, true, f)
}

/// Whether this thread is inside [`with_backward_following`].
#[cfg(feature = "autodiff")]
pub(super) fn backward_follows() -> bool {
    BACKWARD_FOLLOWS.with(Cell::get)
}

/// Runs `f` with the thread-local `cell` set to `value`, then puts its previous value back (also
/// when `f` panics).
pub(super) fn with_thread_value<T: Copy + 'static, R>(
    cell: &'static std::thread::LocalKey<Cell<T>>,
    value: T,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore<T: Copy + 'static>(&'static std::thread::LocalKey<Cell<T>>, T);
    impl<T: Copy + 'static> Drop for Restore<T> {
        fn drop(&mut self) {
            self.0.with(|cell| cell.set(self.1));
        }
    }
    let _restore = Restore(cell, cell.with(|cell| cell.replace(value)));
    f()
}

/// The path in effect on this thread: [`with_path`]'s, else [`set_default_path`]'s, else
/// `LAYERNORM_SCALING_OPS`'s (an invalid value counts as unset; the programs check it at start
/// with [`OpPath::from_env`]), else [`OpPath::Fused`].
pub fn current_path() -> OpPath {
    if let Some(path) = THREAD_PATH.with(Cell::get) {
        return path;
    }
    match DEFAULT_PATH.load(Ordering::Relaxed) {
        FUSED => OpPath::Fused,
        REFERENCE => OpPath::Reference,
        _ => {
            let path = OpPath::from_env().ok().flatten().unwrap_or_default();
            set_default_path(path);
            path
        }
    }
}
