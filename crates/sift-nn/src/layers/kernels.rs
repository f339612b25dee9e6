//! Which kernels the layers run: the CPU's fused ones, or candle's generic operations
//! (what CUDA and Metal run; `SIFT_KERNELS=generic` forces them on the CPU too).
use candle_core::Device;
use std::sync::OnceLock;

/// Which kernels the layers run: [`Kernels::Auto`] (the CPU's fused kernels on the CPU,
/// candle's ops elsewhere) unless `SIFT_KERNELS=generic` asks for candle's ops everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernels {
    /// Fused custom kernels on the CPU (f32, packed bfloat16), candle's ops on GPUs.
    Auto,
    /// candle's ops on every device: on the CPU, the arithmetic a GPU runs.
    Generic,
}

impl Kernels {
    /// The kernels of this process, read once from `SIFT_KERNELS` (`auto`, the default, or
    /// `generic`; anything else is reported on stderr and read as `auto`).
    pub fn current() -> Kernels {
        static KERNELS: OnceLock<Kernels> = OnceLock::new();
        *KERNELS.get_or_init(|| match std::env::var("SIFT_KERNELS").as_deref() {
            Err(_) | Ok("") | Ok("auto") => Kernels::Auto,
            Ok("generic") => Kernels::Generic,
            Ok(other) => {
                eprintln!("SIFT_KERNELS={other:?}: expected auto or generic; using auto");
                Kernels::Auto
            }
        })
    }

    /// `auto` or `generic`.
    pub fn name(self) -> &'static str {
        match self {
            Kernels::Auto => "auto",
            Kernels::Generic => "generic",
        }
    }
}

/// Whether the CPU's fused kernels run for tensors on `device`: on the CPU, unless
/// `SIFT_KERNELS=generic`.
pub fn fused_cpu(device: &Device) -> bool {
    device.is_cpu() && Kernels::current() == Kernels::Auto
}
