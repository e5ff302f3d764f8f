//! The one place the hand kernels' instruction set is chosen: the best
//! [`CpuLevel`] this processor runs, detected once at run time, or the one
//! named by [`ENV_VAR`] (`ENDLESS_KERNELS=portable|avx2|avx512|avx512-vnni`)
//! for tests and A/B timings. A level the processor lacks is refused with
//! [`KernelsError::Unsupported`], never run.
//!
//! AMX is not a level: no kernel here has an AMX path (none could be tested
//! on the machines this crate is developed on).

use std::sync::OnceLock;

/// The environment variable that forces a [`CpuLevel`].
pub const ENV_VAR: &str = "ENDLESS_KERNELS";

/// An instruction set the hand kernels have paths for, slowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CpuLevel {
    /// Plain Rust (vectorised by the compiler for the build's target CPU).
    Portable,
    /// AVX2 and FMA intrinsics (`maddubs` byte products).
    Avx2,
    /// AVX-512 F, BW and VL: two weight blocks per 512-bit register,
    /// `maddubs` byte products.
    Avx512,
    /// [`CpuLevel::Avx512`] with VNNI: byte products summed by `vpdpbusd`.
    Avx512Vnni,
}

/// Why the kernel level asked for cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelsError {
    /// The variable names no level.
    #[error(
        "{ENV_VAR}={value}: unknown kernel level (expected one of: {})",
        CpuLevel::names()
    )]
    Unknown {
        /// What the variable held.
        value: String,
    },
    /// The processor lacks the instructions of the level asked for.
    #[error("{ENV_VAR}={}: this CPU lacks {} (the best it runs is {})", .asked.name(), .asked.needs(), .best.name())]
    Unsupported {
        /// The level asked for.
        asked: CpuLevel,
        /// The best level this processor runs.
        best: CpuLevel,
    },
}

impl CpuLevel {
    /// Every level, slowest first.
    pub const ALL: [CpuLevel; 4] = [
        CpuLevel::Portable,
        CpuLevel::Avx2,
        CpuLevel::Avx512,
        CpuLevel::Avx512Vnni,
    ];

    /// The level's name, as [`ENV_VAR`] takes it and reports print it.
    pub fn name(self) -> &'static str {
        match self {
            CpuLevel::Portable => "portable",
            CpuLevel::Avx2 => "avx2",
            CpuLevel::Avx512 => "avx512",
            CpuLevel::Avx512Vnni => "avx512-vnni",
        }
    }

    /// The processor features the level runs on.
    pub fn needs(self) -> &'static str {
        match self {
            CpuLevel::Portable => "nothing",
            CpuLevel::Avx2 => "avx2+fma+f16c",
            CpuLevel::Avx512 => "avx512f+avx512bw+avx512vl (and avx2+fma+f16c)",
            CpuLevel::Avx512Vnni => "avx512f+avx512bw+avx512vl+avx512vnni (and avx2+fma+f16c)",
        }
    }

    fn names() -> String {
        Self::ALL.map(Self::name).join(", ")
    }

    /// The level named `s` (case and surrounding spaces ignored).
    pub fn parse(s: &str) -> Result<Self, KernelsError> {
        let t = s.trim().to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|l| l.name() == t || (t == "avx512vnni" && *l == CpuLevel::Avx512Vnni))
            .ok_or_else(|| KernelsError::Unknown {
                value: s.to_string(),
            })
    }

    /// Whether this processor has the level's instructions.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::is_x86_feature_detected as has;
            let avx2 = || has!("avx2") && has!("fma") && has!("f16c");
            let avx512 = || avx2() && has!("avx512f") && has!("avx512bw") && has!("avx512vl");
            match self {
                CpuLevel::Portable => true,
                CpuLevel::Avx2 => avx2(),
                CpuLevel::Avx512 => avx512(),
                CpuLevel::Avx512Vnni => avx512() && has!("avx512vnni"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == CpuLevel::Portable
        }
    }

    /// The best level this processor runs.
    pub fn detect() -> Self {
        *DETECTED.get_or_init(|| {
            Self::ALL
                .into_iter()
                .rev()
                .find(|l| l.available())
                .unwrap_or(CpuLevel::Portable)
        })
    }

    /// `asked` if given (the value of [`ENV_VAR`]) and available, else the
    /// best detected level.
    pub fn choose(asked: Option<&str>) -> Result<Self, KernelsError> {
        match asked.map(str::trim).filter(|s| !s.is_empty()) {
            None => Ok(Self::detect()),
            Some(s) => {
                let asked = Self::parse(s)?;
                if asked.available() {
                    Ok(asked)
                } else {
                    Err(KernelsError::Unsupported {
                        asked,
                        best: Self::detect(),
                    })
                }
            }
        }
    }

    /// The level every hand kernel uses in this process: [`ENV_VAR`] read
    /// once, on the first call.
    pub fn selected() -> Result<Self, KernelsError> {
        SELECTED
            .get_or_init(|| Self::choose(std::env::var(ENV_VAR).ok().as_deref()))
            .clone()
    }
}

impl std::fmt::Display for CpuLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for CpuLevel {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

static DETECTED: OnceLock<CpuLevel> = OnceLock::new();
static SELECTED: OnceLock<Result<CpuLevel, KernelsError>> = OnceLock::new();

/// The selected level for a candle op: its error as candle's.
pub(super) fn selected_for_candle() -> candle_core::Result<CpuLevel> {
    CpuLevel::selected().map_err(|e| candle_core::Error::Msg(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_are_refused_where_missing() {
        for l in CpuLevel::ALL {
            assert_eq!(CpuLevel::parse(l.name()), Ok(l));
            assert_eq!(
                CpuLevel::parse(&format!(" {} ", l.name().to_uppercase())),
                Ok(l)
            );
        }
        assert_eq!(CpuLevel::parse("avx512vnni"), Ok(CpuLevel::Avx512Vnni));
        let e = CpuLevel::parse("amx").unwrap_err();
        assert!(e.to_string().contains("ENDLESS_KERNELS=amx"), "{e}");
        assert!(e.to_string().contains("avx512-vnni"), "{e}");
        assert_eq!(CpuLevel::choose(None), Ok(CpuLevel::detect()));
        assert_eq!(CpuLevel::choose(Some("")), Ok(CpuLevel::detect()));
        assert!(CpuLevel::Portable.available());
        let best = CpuLevel::detect();
        assert!(best.available());
        for l in CpuLevel::ALL {
            match CpuLevel::choose(Some(l.name())) {
                Ok(got) => {
                    assert_eq!(got, l);
                    assert!(l <= best);
                }
                Err(e) => {
                    assert!(l > best, "{l} refused on a CPU that runs {best}");
                    let msg = e.to_string();
                    assert!(
                        msg.contains("this CPU lacks") && msg.contains(best.name()),
                        "{msg}"
                    );
                }
            }
        }
    }
}
