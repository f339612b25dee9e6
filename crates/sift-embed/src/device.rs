use std::str::FromStr;

use candle_core::Device;

use crate::{Error, Result};

/// Where to run a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DevicePref {
    /// The CPU.
    #[default]
    Cpu,
    /// CUDA device N (build with `--features cuda`).
    Cuda(usize),
    /// Apple Metal (build with `--features metal`).
    Metal,
    /// CUDA 0 or Metal when available, else the CPU.
    Auto,
}

impl FromStr for DevicePref {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(DevicePref::Cpu),
            "metal" => Ok(DevicePref::Metal),
            "auto" => Ok(DevicePref::Auto),
            "cuda" => Ok(DevicePref::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(str::parse) {
                Some(Ok(n)) => Ok(DevicePref::Cuda(n)),
                _ => Err(Error::Device(format!(
                    "{s:?}: expected cpu, cuda, cuda:N, metal or auto"
                ))),
            },
        }
    }
}

/// The candle device for `pref`.
pub fn select_device(pref: DevicePref) -> Result<Device> {
    match pref {
        DevicePref::Cpu => Ok(Device::Cpu),
        DevicePref::Cuda(n) => {
            if !candle_core::utils::cuda_is_available() {
                return Err(Error::Device(format!(
                    "cuda:{n}: this build has no CUDA support (rebuild with --features cuda)"
                )));
            }
            Device::new_cuda(n).map_err(|e| Error::Device(format!("cuda:{n}: {e}")))
        }
        DevicePref::Metal => {
            if !candle_core::utils::metal_is_available() {
                return Err(Error::Device(
                    "metal: this build has no Metal support (rebuild with --features metal)".into(),
                ));
            }
            Device::new_metal(0).map_err(|e| Error::Device(format!("metal: {e}")))
        }
        DevicePref::Auto => {
            if candle_core::utils::cuda_is_available()
                && let Ok(d) = Device::new_cuda(0)
            {
                return Ok(d);
            }
            if candle_core::utils::metal_is_available()
                && let Ok(d) = Device::new_metal(0)
            {
                return Ok(d);
            }
            Ok(Device::Cpu)
        }
    }
}
