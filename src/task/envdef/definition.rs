//! What an environment definition parses into: build steps in order,
//! grouped in stages, with where each was written.

use crate::task::BundleError;

/// One build step, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Copy `src` (relative to `environment/`, a file or a directory) to `dst`
    /// in the image; a `dst` ending in `/` is a directory.
    Copy {
        /// Source, relative to `environment/`.
        src: String,
        /// Destination path in the image.
        dst: String,
    },
    /// Run a shell script as the current build user in the current workdir.
    Run(String),
    /// Run `environment/<file>` with bash, with the build context as cwd.
    Script(String),
    /// Set an environment variable for later steps and for agent sessions.
    Env {
        /// The variable's name.
        key: String,
        /// Its value (a Dockerfile's `$VAR` references already expanded).
        value: String,
    },
    /// Change the working directory (created if missing).
    Workdir(String),
    /// Change the user later steps run as.
    User(String),
    /// Copy `src` from the result of an earlier build stage (`COPY
    /// --from=<stage>`) to `dst`.
    CopyFrom {
        /// The stage, as written (a name or a number).
        stage: String,
        /// Its position in [`EnvDefinition::stages`].
        index: usize,
        /// Absolute path in the stage's file system.
        src: String,
        /// Destination path in the image; a `dst` ending in `/` is a directory.
        dst: String,
    },
}

/// An earlier stage of a multi-stage build (`FROM <image> AS <name>`),
/// whose results later stages copy from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stage {
    /// Its name (`AS <name>`), if any.
    pub name: Option<String>,
    /// Its base image.
    pub base: Option<String>,
    /// Its build steps.
    pub steps: Vec<Step>,
    /// The line each step comes from, parallel to `steps`.
    pub lines: Vec<usize>,
}

/// A parsed environment definition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvDefinition {
    /// The requested base image (`FROM` / `From:`), mapped to the sandbox base.
    pub base: Option<String>,
    /// The build steps, in the order the definition gives them.
    pub steps: Vec<Step>,
    /// Shell code sourced at the start of every session (`%environment`).
    pub session_script: String,
    /// The definition's file (`environment/Dockerfile`), for messages.
    pub file: String,
    /// The line each step comes from (1-based), parallel to `steps`;
    /// missing or 0 where unknown.
    pub lines: Vec<usize>,
    /// The stages before the last one (multi-stage builds); `base`,
    /// `steps` and `lines` above are the last stage's, which is the image.
    pub stages: Vec<Stage>,
}

impl EnvDefinition {
    /// Environment variables set by `Env` steps, in order.
    pub fn env_vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.steps.iter().filter_map(|s| match s {
            Step::Env { key, value } => Some((key.as_str(), value.as_str())),
            _ => None,
        })
    }

    /// Where step `i` (0-based) is written: `environment/Dockerfile line 3`.
    pub fn origin(&self, i: usize) -> Option<String> {
        match self.lines.get(i) {
            Some(&line) if line > 0 && !self.file.is_empty() => {
                Some(format!("{} line {line}", self.file))
            }
            _ => None,
        }
    }

    /// The last `Workdir`, if any.
    pub fn workdir(&self) -> Option<&str> {
        self.steps.iter().rev().find_map(|s| match s {
            Step::Workdir(w) => Some(w.as_str()),
            _ => None,
        })
    }
}

/// A parse error at `line` of `file`.
pub(super) fn line_error(file: &str, line: usize, message: impl Into<String>) -> BundleError {
    BundleError::invalid(file, Some(&format!("line {line}")), message)
}
