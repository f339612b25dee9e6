//! What the processor offers the kernels, detected once ([`cpu`]): every kernel's choice of
//! code (the f32 dot product's [`Level`], the element-wise kernels, the bfloat16 products'
//! [`Kernel`](crate::bf16::Kernel)) reads this one record.
use std::sync::OnceLock;

/// The instruction sets this processor offers Sift's kernels ([`cpu`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cpu {
    /// AVX2 with FMA.
    pub avx2_fma: bool,
    /// AVX-512 Foundation.
    pub avx512f: bool,
    /// AVX-512 byte and word instructions.
    pub avx512bw: bool,
    /// AVX-512 vector-length extensions.
    pub avx512vl: bool,
    /// AVX512-BF16 (`vdpbf16ps`, `vcvtne2ps2bf16`).
    pub avx512bf16: bool,
    /// Intel AMX tiles with bfloat16 products (AMX-TILE, AMX-BF16), and Linux lets this
    /// process use them (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, asked once,
    /// at detection).
    pub amx: bool,
}

/// The widest instruction set the f32 kernels may use on this processor ([`Cpu::level`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// AVX-512F with AVX2 and FMA.
    Avx512,
    /// AVX2 with FMA.
    Avx2,
    /// Neither (or not an x86-64 processor): the portable loops.
    Baseline,
}

/// This processor's [`Cpu`], detected on the first call (the AMX permission asked then).
pub fn cpu() -> &'static Cpu {
    static CPU: OnceLock<Cpu> = OnceLock::new();
    CPU.get_or_init(Cpu::detect)
}

/// The [`Level`] of this processor ([`cpu`]).
pub fn level() -> Level {
    cpu().level()
}

impl Cpu {
    /// Probes the processor (and, for the AMX tiles, asks Linux for them).
    fn detect() -> Cpu {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            Cpu {
                avx2_fma: has!("avx2") && has!("fma"),
                avx512f: has!("avx512f"),
                avx512bw: has!("avx512bw"),
                avx512vl: has!("avx512vl"),
                avx512bf16: has!("avx512bf16"),
                amx: amx_granted(),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Cpu::default()
    }

    /// The widest of AVX-512 (with AVX2 and FMA), AVX2 with FMA, or neither.
    pub fn level(&self) -> Level {
        match (self.avx2_fma, self.avx512f) {
            (true, true) => Level::Avx512,
            (true, false) => Level::Avx2,
            (false, _) => Level::Baseline,
        }
    }

    /// AVX512-BF16 with the AVX-512 foundation and byte/word instructions its kernels also
    /// use.
    pub fn dot_bf16(&self) -> bool {
        self.avx512f && self.avx512bw && self.avx512bf16
    }
}

/// Whether the processor has AMX-BF16 and AMX-TILE (CPUID) and Linux grants this process the
/// tile state.
fn amx_granted() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        // CPUID.(EAX=7, ECX=0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE
        let r = std::arch::x86_64::__cpuid_count(7, 0);
        if (r.edx >> 22) & 1 == 0 || (r.edx >> 24) & 1 == 0 {
            return false;
        }
        let ret: i64;
        // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18) only
        // changes which register state the kernel saves for this process; it reads and
        // writes no memory of ours. rcx and r11 are clobbered by `syscall`.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") 158i64 => ret,
                in("rdi") 0x1023i64,
                in("rsi") 18i64,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret == 0
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_agrees_with_the_standard_library_and_its_derived_checks() {
        let c = cpu();
        assert!(std::ptr::eq(c, cpu()), "detected once");
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            assert_eq!(c.avx2_fma, has!("avx2") && has!("fma"));
            assert_eq!(c.avx512f, has!("avx512f"));
            assert_eq!(
                c.dot_bf16(),
                has!("avx512f") && has!("avx512bw") && has!("avx512bf16")
            );
        }
        let want = if c.avx2_fma && c.avx512f {
            Level::Avx512
        } else if c.avx2_fma {
            Level::Avx2
        } else {
            Level::Baseline
        };
        assert_eq!(level(), want);
    }
}
