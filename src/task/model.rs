//! The in-memory task model and its `task.toml` schema.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Default per-episode turn limit used for evaluation (the paper's 64).
pub const DEFAULT_MAX_TURNS: u32 = 64;
/// Default working directory of the agent inside the sandbox.
pub const DEFAULT_WORKDIR: &str = "/home/user";
/// Default unprivileged agent account.
pub const DEFAULT_USER: &str = "user";
/// Default final-state test file of a native bundle.
pub const FINAL_TESTS: &str = "test_final_state.py";
/// Default initial-state test file of a native bundle.
pub const INITIAL_TESTS: &str = "test_initial_state.py";

/// A complete task: metadata, what the agent is told, the privileged truth,
/// the environment definition, the tests and an optional oracle solution.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// `task.toml`: identity, agent and verifier limits, environment, provenance.
    pub meta: TaskMeta,
    /// `instruction.md`: what the agent is told.
    pub instruction: String,
    /// `truth.md`: privileged ground truth, never shown to the agent.
    pub truth: String,
    /// Everything under `environment/` (setup.sh | container.def | Dockerfile, files/...).
    pub environment: FileTree,
    /// Everything under `tests/`.
    pub tests: FileTree,
    /// Everything under `solution/` (usually `solve.sh`).
    pub solution: FileTree,
}

impl Task {
    /// A task with only an id and an instruction (tests of what stores,
    /// indexes or records tasks).
    #[cfg(test)]
    pub(crate) fn minimal(id: &str) -> Self {
        let mut meta = TaskMeta::default();
        meta.task.id = id.into();
        Self {
            meta,
            instruction: "do it".into(),
            truth: String::new(),
            environment: Default::default(),
            tests: Default::default(),
            solution: Default::default(),
        }
    }

    /// The task id (`[task] id`).
    pub fn id(&self) -> &str {
        &self.meta.task.id
    }

    /// The oracle script, if the bundle has one.
    pub fn solve_script(&self) -> Option<&str> {
        self.solution.text("solve.sh")
    }

    /// The environment definition this task uses, if any.
    pub fn environment_definition(&self) -> Option<(EnvKind, &str)> {
        EnvKind::ALL.iter().find_map(|kind| {
            self.environment
                .text(kind.file_name())
                .map(|text| (*kind, text))
        })
    }
}

/// The kind of environment definition a bundle carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvKind {
    /// `environment/setup.sh`, run as root in the image layer.
    SetupSh,
    /// `environment/container.def` (Apptainer definition).
    ApptainerDef,
    /// `environment/Dockerfile` (the supported subset).
    Dockerfile,
}

impl EnvKind {
    /// All kinds, in the order they are looked for.
    pub const ALL: [EnvKind; 3] = [EnvKind::SetupSh, EnvKind::ApptainerDef, EnvKind::Dockerfile];

    /// File name of the definition inside `environment/`.
    pub fn file_name(self) -> &'static str {
        match self {
            EnvKind::SetupSh => "setup.sh",
            EnvKind::ApptainerDef => "container.def",
            EnvKind::Dockerfile => "Dockerfile",
        }
    }
}

/// One file of a bundle: bytes plus whether it is executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// The file's contents.
    pub bytes: Vec<u8>,
    /// Whether the file is executable: read from its mode bits, written as 0755 (else 0644).
    pub executable: bool,
}

/// A directory's files keyed by relative `/`-separated path, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileTree(pub BTreeMap<String, FileEntry>);

impl FileTree {
    /// Insert a text file (not executable).
    pub fn insert_text(&mut self, path: impl Into<String>, text: impl Into<String>) {
        self.insert(path, text.into().into_bytes(), false);
    }

    /// Insert a file.
    pub fn insert(&mut self, path: impl Into<String>, bytes: Vec<u8>, executable: bool) {
        self.0.insert(path.into(), FileEntry { bytes, executable });
    }

    /// The file at `path` as UTF-8 text, if present and valid.
    pub fn text(&self, path: &str) -> Option<&str> {
        self.0
            .get(path)
            .and_then(|f| std::str::from_utf8(&f.bytes).ok())
    }

    /// Whether the tree holds `path`.
    pub fn contains(&self, path: &str) -> bool {
        self.0.contains_key(path)
    }

    /// Remove and return a file.
    pub fn remove(&mut self, path: &str) -> Option<FileEntry> {
        self.0.remove(path)
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Iterate over `(path, entry)`.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &FileEntry)> {
        self.0.iter()
    }
}

/// The contents of `task.toml`. Unknown keys are kept in `extra` so that
/// foreign formats (Harbor) round-trip losslessly.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskMeta {
    /// `[task]`.
    pub task: TaskSection,
    /// `[agent]`.
    #[serde(default)]
    pub agent: AgentSection,
    /// `[verifier]`.
    #[serde(default)]
    pub verifier: VerifierSection,
    /// `[environment]`.
    #[serde(default)]
    pub environment: EnvironmentSection,
    /// `[provenance]`; omitted from the file when empty.
    #[serde(default, skip_serializing_if = "Provenance::is_empty")]
    pub provenance: Provenance,
    /// Keys and tables this format does not know, kept verbatim.
    #[serde(default, skip_serializing_if = "toml::Table::is_empty")]
    pub extra: toml::Table,
}

/// `[task]`: identity and classification.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskSection {
    /// Unique task id; also the bundle's directory name and database key (see [`is_valid_id`]).
    pub id: String,
    /// Human-readable title; empty when unknown.
    #[serde(default)]
    pub name: String,
    /// Broad topic (e.g. a generation taxonomy category or procgen family category).
    #[serde(default)]
    pub category: String,
    /// The paper's complexity level, 1 (single command) to 6 (5-10 commands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complexity: Option<u8>,
    /// Framing of the request (who asks and why), as chosen by the generator; empty when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scenario: String,
    /// Free-form difficulty label (`easy`, `medium`, `hard`), as imported or generated.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub difficulty: String,
    /// Free-form labels; copied into the store's task index when the task is added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The format the task was imported from (`native`, `reference`, `harbor`, `tb1`).
    #[serde(default = "native", skip_serializing_if = "is_native")]
    pub source_format: String,
    /// Unknown `[task]` keys, kept verbatim.
    #[serde(flatten)]
    pub extra: toml::Table,
}

fn native() -> String {
    "native".into()
}

fn is_native(s: &String) -> bool {
    s == "native"
}

/// `[agent]`: how the agent runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSection {
    /// Most agent turns (model replies) per episode; default [`DEFAULT_MAX_TURNS`].
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    /// Wall-clock limit of one episode, in seconds.
    #[serde(default = "default_agent_timeout")]
    pub timeout_sec: f64,
    /// Account the agent's shell runs as.
    #[serde(default = "default_user")]
    pub user: String,
    /// Unknown `[agent]` keys, kept verbatim.
    #[serde(flatten)]
    pub extra: toml::Table,
}

impl Default for AgentSection {
    fn default() -> Self {
        Self {
            max_turns: DEFAULT_MAX_TURNS,
            timeout_sec: default_agent_timeout(),
            user: default_user(),
            extra: toml::Table::new(),
        }
    }
}

fn default_max_turns() -> u32 {
    DEFAULT_MAX_TURNS
}
fn default_agent_timeout() -> f64 {
    1800.0
}
fn default_user() -> String {
    DEFAULT_USER.into()
}

/// `[verifier]`: how the final state is checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifierSection {
    /// Wall-clock limit of one verifier run, in seconds (default 120).
    #[serde(default = "default_verifier_timeout")]
    pub timeout_sec: f64,
    /// Pytest files under `tests/` that check the initial state.
    #[serde(default = "default_initial_tests")]
    pub initial_tests: Vec<String>,
    /// Pytest files under `tests/` that check the final state.
    #[serde(default = "default_final_tests")]
    pub final_tests: Vec<String>,
    /// A script under `tests/` run as-is instead of pytest (e.g. a custom Harbor
    /// `test.sh`); it passes when it writes `1` to `/logs/verifier/reward.txt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// The `X.Y` Python version the tests need in their sealed verifier
    /// environment (see [`crate::task::formats::VerifierEnvSpec`]); none: the image's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
    /// PyPI packages (`name==version`) the tests import, installed in the
    /// sealed verifier environment (none, with no `python` or `apt`
    /// either: the built-in runtime runs the tests).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<String>,
    /// Debian packages the verifier environment's build installs first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apt: Vec<String>,
    /// Package indexes (URLs) the verifier environment's build searches
    /// besides PyPI, in order (Harbor's `uvx --index URL`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub index: Vec<String>,
    /// The pytest options the task's own test runner gave (Harbor's
    /// `tests/test.sh`: `-rA`, `--ctrf /logs/verifier/ctrf.json`, `-k ...`),
    /// passed through to the verifier's pytest; only options that cannot
    /// change the verdict are kept (see `task/formats/pytest_args.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pytest_args: Vec<String>,
    /// The tests import packages the agent (or the oracle) installs during
    /// the episode with the image's own `pip`, as when Harbor's `test.sh`
    /// runs the image's `pytest`: the tests then run in a sealed
    /// environment of the image's Python that also searches the image's
    /// live site directories, after its own (pytest and its plugins stay
    /// the environment's). Code the agent installed runs in the test
    /// process and could forge the verdict, as in Harbor: such verdicts
    /// trust the agent's packages, and `tasks validate` and `tasks audit`
    /// say so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub agent_packages: bool,
    /// Unknown `[verifier]` keys, kept verbatim.
    #[serde(flatten)]
    pub extra: toml::Table,
}

impl Default for VerifierSection {
    fn default() -> Self {
        Self {
            timeout_sec: default_verifier_timeout(),
            initial_tests: default_initial_tests(),
            final_tests: default_final_tests(),
            script: None,
            python: None,
            packages: Vec::new(),
            apt: Vec::new(),
            index: Vec::new(),
            pytest_args: Vec::new(),
            agent_packages: false,
            extra: toml::Table::new(),
        }
    }
}

fn default_verifier_timeout() -> f64 {
    120.0
}
fn default_initial_tests() -> Vec<String> {
    vec![INITIAL_TESTS.into()]
}
fn default_final_tests() -> Vec<String> {
    vec![FINAL_TESTS.into()]
}

/// `[environment]`: where and how the agent's shell lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentSection {
    /// The agent's working directory inside the sandbox; default [`DEFAULT_WORKDIR`].
    #[serde(default = "default_workdir")]
    pub workdir: String,
    /// Whether the agent's sandbox (and the image build) may reach the network; off by default.
    #[serde(default)]
    pub network: bool,
    /// Unknown `[environment]` keys, kept verbatim.
    #[serde(flatten)]
    pub extra: toml::Table,
}

impl Default for EnvironmentSection {
    fn default() -> Self {
        Self {
            workdir: default_workdir(),
            network: false,
            extra: toml::Table::new(),
        }
    }
}

fn default_workdir() -> String {
    DEFAULT_WORKDIR.into()
}

/// `[provenance]`: where the task came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// What produced the task: `llm-pipeline` or `procgen/<family>`; empty for hand-written or imported tasks.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub generator: String,
    /// Name of the generator model (LLM pipeline only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// The generation seed: the pipeline run's, or the procgen task's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// RFC 3339 creation time.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub created: String,
    /// Attempts per pipeline stage, e.g. `environment = 2`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attempts: BTreeMap<String, u32>,
    /// The stage-4 record: the solver's episodes and pass@k.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solvability: Option<Solvability>,
    /// The final tests' verdicts on the untouched initial state (written by
    /// validation); the partial reward pays only for progress over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<super::Baseline>,
    /// Other provenance keys (e.g. the pipeline's `solver`, `candidate`, `prompt_hashes`), kept verbatim.
    #[serde(flatten)]
    pub extra: toml::Table,
}

/// `[provenance.solvability]`: how the solvability filter (stage 4) went.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Solvability {
    /// The solver model, e.g. `o3`.
    pub solver: String,
    /// Solution episodes run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u32>,
    /// Solution episodes that passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successes: Option<u32>,
    /// pass@k keyed by k.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pass_at_k: BTreeMap<String, f64>,
    /// The bundle file the record was read from (kept verbatim beside it),
    /// e.g. `solution/o3_summary.json` for a reference import.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
}

impl Provenance {
    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.generator.is_empty()
            && self.model.is_empty()
            && self.seed.is_none()
            && self.created.is_empty()
            && self.attempts.is_empty()
            && self.solvability.is_none()
            && self.baseline.is_none()
            && self.extra.is_empty()
    }
}

/// Turn free text into a safe task id: lowercase ASCII letters, digits, `-` and `_`.
pub fn slugify(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if (c == '-' || c == '_' || c.is_whitespace() || c == '.') && !out.ends_with('-') {
            out.push(if c == '_' { '_' } else { '-' });
        }
    }
    let trimmed = out.trim_matches(|c| c == '-' || c == '_');
    trimmed.chars().take(80).collect()
}

/// Whether `id` is usable as a directory name and database key.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && !id.starts_with('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugify_makes_ids() {
        assert_eq!(slugify("Hello, World! 2"), "hello-world-2");
        assert_eq!(slugify("  --x__y--  "), "x__y");
        assert!(is_valid_id(&slugify("Ünïcode task / name")));
    }

    #[test]
    fn ids_reject_path_tricks() {
        assert!(!is_valid_id("../etc"));
        assert!(!is_valid_id(".hidden"));
        assert!(!is_valid_id("a/b"));
        assert!(is_valid_id("task_000001-abc.v2"));
    }

    #[test]
    fn meta_keeps_unknown_keys() {
        let text = "version = \"1.0\"\n[task]\nid = \"t\"\nfoo = 3\n[agent]\nbar = \"x\"\n";
        let err = toml::from_str::<TaskMeta>(text);
        // `version` at top level is unknown to the native schema: it must be under [extra].
        assert!(err.is_err());
        let text =
            "[task]\nid = \"t\"\nfoo = 3\n[agent]\nbar = \"x\"\n[extra]\nversion = \"1.0\"\n";
        let meta: TaskMeta = toml::from_str(text).unwrap();
        assert_eq!(meta.task.extra["foo"].as_integer(), Some(3));
        assert_eq!(meta.agent.extra["bar"].as_str(), Some("x"));
        assert_eq!(meta.extra["version"].as_str(), Some("1.0"));
        let back: TaskMeta = toml::from_str(&toml::to_string(&meta).unwrap()).unwrap();
        assert_eq!(back, meta);
    }
}
