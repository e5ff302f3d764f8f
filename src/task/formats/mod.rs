//! Foreign task formats: detection, import and export.
//!
//! | format      | marker file  | layout                                                      |
//! |-------------|--------------|-------------------------------------------------------------|
//! | `native`    | `task.toml` with `[task] id` | see [`crate::task`]                          |
//! | `reference` | `task.json`  | container.def, test_initial_state.py, test_final_state.py   |
//! | `harbor`    | `task.toml`  | instruction.md, environment/Dockerfile, tests/test.sh       |
//! | `tb1`       | `task.yaml`  | Dockerfile, run-tests.sh, solution.sh, tests/               |

mod convert;
mod harbor;
mod network;
mod pytest_args;
mod reference;
mod solver_summary;
mod tb1;
mod test_script;
mod verifier_spec;

use std::path::Path;

pub use pytest_args::safe_options as safe_pytest_options;
pub use verifier_spec::{parse_test_sh, Package, Runner, VerifierEnvSpec, VerifierSpec};

use serde::{Deserialize, Serialize};

use super::{read_native_in, write_native, BundleError, Task};
use crate::task::{BundleDir, ReadLimits};

/// A supported on-disk task format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// This crate's bundle: `task.toml` with `[task] id`, `instruction.md`, `truth.md`, `environment/`, `tests/`, `solution/`.
    Native,
    /// The reference implementation's flat layout around `task.json` and `container.def`.
    Reference,
    /// Harbor / Terminal-Bench 2.0: `task.toml` without `[task] id`, `environment/Dockerfile`, `tests/test.sh`.
    Harbor,
    /// Terminal-Bench 1: `task.yaml`, `Dockerfile`, `run-tests.sh`, `solution.sh`.
    Tb1,
}

impl Format {
    /// The name used on the command line and in `source_format`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Native => "native",
            Format::Reference => "reference",
            Format::Harbor => "harbor",
            Format::Tb1 => "tb1",
        }
    }

    /// Which format `dir` holds, if it looks like a task at all.
    pub fn detect(dir: &Path) -> Option<Format> {
        Self::detect_in(&BundleDir::open(dir).ok()?)
    }

    /// Which format the opened directory `dir` holds (its marker files are
    /// looked at through its descriptor, see [`BundleDir`]).
    pub fn detect_in(dir: &BundleDir) -> Option<Format> {
        if dir.is_file("task.toml") {
            let is_native = dir
                .read_text("task.toml", &ReadLimits::default())
                .ok()
                .and_then(|t| t.parse::<toml::Table>().ok())
                .is_some_and(|t| t.get("task").and_then(|s| s.get("id")).is_some());
            return Some(if is_native {
                Format::Native
            } else {
                Format::Harbor
            });
        }
        if dir.is_file("task.json") {
            return Some(Format::Reference);
        }
        if dir.is_file("task.yaml") {
            return Some(Format::Tb1);
        }
        None
    }

    /// Read the task in `dir` in this format.
    pub fn read(self, dir: &Path, limits: &ReadLimits) -> Result<Task, BundleError> {
        self.read_in(&BundleDir::open(dir)?, limits)
    }

    /// Read the task in the opened directory `dir` in this format: every
    /// file through its descriptor, never leaving it (see [`BundleDir`]).
    pub fn read_in(self, dir: &BundleDir, limits: &ReadLimits) -> Result<Task, BundleError> {
        match self {
            Format::Native => read_native_in(dir, limits),
            Format::Reference => reference::read(dir, limits),
            Format::Harbor => harbor::read(dir, limits),
            Format::Tb1 => tb1::read(dir, limits),
        }
    }

    /// Write `task` into the existing, empty directory `dir` in this format.
    pub fn write(self, task: &Task, dir: &Path) -> Result<(), BundleError> {
        match self {
            Format::Native => write_native(task, dir),
            Format::Reference => reference::write(task, dir),
            Format::Harbor => harbor::write(task, dir),
            Format::Tb1 => tb1::write(task, dir),
        }
    }
}
