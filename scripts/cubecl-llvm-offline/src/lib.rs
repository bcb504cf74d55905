//! The items of `cubecl-llvm` 0.11.3 that cubecl-cuda 0.11.3 names, without LLVM.
//!
//! cubecl-cuda builds both of its kernel compilers and picks one: CUDA C++ through NVRTC when its
//! `cpp` feature is on, LLVM otherwise. The offline build turns `cpp` on (this crate's feature
//! `cuda-nvrtc` does), so the LLVM compiler below is never asked; if it is, it refuses the kernel
//! with an error that says how to get the NVRTC one.

use core::fmt;

use cubecl_core::ir::nvidia::SmArch;
use cubecl_core::ir::DeviceProperties;
use cubecl_environment::backtrace::BackTrace;
use cubecl_runtime::compiler::{CompilationError, Compiler};
use cubecl_runtime::kernel::{BufferIOAttr, KernelDefinition};

/// Why every kernel is refused here.
const NO_LLVM: &str = "this build of cubecl-cuda has no LLVM compiler (the offline stand-in for cubecl-llvm, \
     scripts/cubecl-llvm-offline): build with the `cuda-nvrtc` feature, which compiles kernels with CUDA C++ \
     through NVRTC";

/// The target an LLVM compiler emits for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LlvmTarget {
    /// The host CPU.
    #[default]
    Cpu,
    /// NVIDIA GPUs (PTX).
    Nvptx,
}

/// The LLVM kernel compiler's options, as cubecl-cuda fills them in.
#[derive(Clone, Debug, Default)]
pub struct PlironOptions {
    /// AMD architecture (never set by cubecl-cuda).
    pub arch: Option<()>,
    /// The NVIDIA architecture.
    pub sm_arch: Option<SmArch>,
    /// The PTX version to emit.
    pub ptx_version: Option<nvptx::ptx_version::PtxVersion>,
    /// Whether scalars travel in the kernel parameter block.
    pub grid_constants: bool,
}

/// A compiled PTX module.
#[derive(Clone, Debug)]
pub struct NvptxModule {
    /// NUL-terminated PTX.
    pub ptx: Vec<core::ffi::c_char>,
    /// The kernel's entry point.
    pub entrypoint: String,
    /// The module's IR, for logs.
    pub ir: String,
    /// Shared memory a launch needs, in bytes.
    pub shared_memory_size: usize,
    /// What the kernel does with each buffer, in binding order.
    pub io: Vec<BufferIOAttr>,
}

/// What the LLVM compiler produces.
#[derive(Clone, Debug)]
pub enum PlironArtifact {
    /// A PTX module.
    NvptxCode(NvptxModule),
    /// A module for another target.
    Other,
}

impl fmt::Display for PlironArtifact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlironArtifact::NvptxCode(module) => f.write_str(&module.ir),
            PlironArtifact::Other => f.write_str("(no module)"),
        }
    }
}

/// The LLVM kernel compiler: here, one that refuses every kernel ([`NO_LLVM`]).
#[derive(Clone, Debug, Default)]
pub struct PlironCompiler {
    /// The target it would emit for.
    pub target: LlvmTarget,
}

impl Compiler for PlironCompiler {
    type Representation = PlironArtifact;
    type CompilationOptions = PlironOptions;

    fn compile(
        &mut self,
        _kernel: KernelDefinition,
        _options: &Self::CompilationOptions,
    ) -> Result<Self::Representation, CompilationError> {
        Err(CompilationError::Generic { reason: NO_LLVM.to_string(), backtrace: BackTrace::capture() })
    }

    fn extension(&self) -> &'static str {
        "ll"
    }

    fn lang_tag(&self) -> &'static str {
        "llvm"
    }
}

/// NVIDIA specifics.
pub mod nvptx {
    /// The PTX version the LLVM compiler would emit.
    pub mod ptx_version {
        use core::fmt;

        /// A PTX ISA version as the NVPTX target spells it (8.7 is 87).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct PtxVersion(pub u32);

        impl PtxVersion {
            /// The version for a driver of CUDA `driver` (12.8 is 12080): `None` here, as no PTX
            /// is emitted by this crate (NVRTC picks its own).
            pub fn for_driver(_driver: i32) -> Option<Self> {
                None
            }
        }

        impl fmt::Display for PtxVersion {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "ptx{}", self.0)
            }
        }
    }
}

/// Items shared by the LLVM targets.
pub mod shared {
    /// What the LLVM compiler can lower, per target.
    pub mod lowered_features {
        use super::super::DeviceProperties;

        /// The GPU an LLVM compiler emits for.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum GpuTarget {
            /// NVIDIA (PTX).
            Nvptx,
        }

        /// Narrows `props` to what the LLVM compiler lowers for `target`: nothing to narrow here,
        /// as cubecl-cuda calls this only when the LLVM compiler is its choice, which the offline
        /// build's `cpp` feature rules out.
        pub fn restrict_features(_props: &mut DeviceProperties, _target: GpuTarget) {}
    }
}
