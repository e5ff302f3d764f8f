//! Settings: built-in defaults (`assets/config.toml`), then the user's
//! config file, then the workspace's `endless.toml`, then `ENDLESS_*`
//! environment variables. Paths come from the `directories` crate.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::task::text::parse_toml;
use crate::task::BundleError;

/// The built-in defaults, documented.
pub const DEFAULTS: &str = include_str!("../assets/config.toml");

/// The effective configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[sandbox]`: which backend runs environments and its limits.
    pub sandbox: SandboxConfig,
    /// `[agent]`: turn limits, command timeout and protocol of episodes.
    pub agent: AgentConfig,
    /// `[llm]`: the OpenAI-compatible server used for generation and LLM agents.
    pub llm: LlmConfig,
    /// `[generate]`: the task-generation pipeline.
    pub generate: GenerateConfig,
    /// `[train]`: defaults of the PPO recipe of `endless train`.
    pub train: TrainSettings,
    /// `[images]`: where task base images come from.
    pub images: ImagesConfig,
    /// `[tui]`: theme and key overrides.
    pub tui: TuiConfig,
    /// `[serve]`: what `endless serve` answers without a token.
    #[serde(default)]
    pub serve: ServeConfig,
    /// `[record]`: what is written beside each episode's result.
    #[serde(default)]
    pub record: RecordConfig,
    /// `[slurm]`: what `endless slurm submit` adds to every batch script.
    #[serde(default)]
    pub slurm: SlurmConfig,
}

/// `[slurm]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmConfig {
    /// sbatch options for every job of a submission, each `--name=value`
    /// or `--name` (a site's `--account`, `--reservation`...), written as
    /// `#SBATCH` lines before the command line's `--sbatch-arg`s.
    #[serde(default)]
    pub extra: Vec<String>,
}

/// `[record]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordConfig {
    /// Write each finished episode (`eval`, `run`, `serve`) as an ATIF
    /// trajectory, `<n>.atif.json`, beside its result. Default false
    /// (`endless episodes export --format atif` writes them afterwards).
    #[serde(default)]
    pub atif: bool,
}

/// `[serve]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    /// Let `GET /v1/health` and `GET /metrics` answer without a token, for
    /// a local scraper or health check that cannot send one; allowed on a
    /// loopback `--bind` only (the server refuses to start otherwise).
    /// Default false: every request needs a token, as health tells the
    /// version and session counts and metrics every client's load and
    /// errors (`--open-metrics` sets it for one server).
    #[serde(default)]
    pub open_metrics: bool,
    /// Most CPUs one sandbox of `/v1/sandboxes` may ask for (`cpus`; a
    /// served task's own is cut to it). Unset: the host's cores
    /// (`--max-cpus` sets it for one server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cpus: Option<f64>,
    /// Most memory one sandbox may ask for, in MiB (`memory_mb`, which sets
    /// its memory limit; a served task's own is cut to it). Unset and at
    /// most: a session's own limit, 4096 (`--max-memory-mb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_mb: Option<u64>,
    /// Registries on loopback, link-local or private addresses that
    /// clients may still name in a sandbox's images (`"host:port"`, or
    /// `"host"` for any port); others are refused, so that a client cannot
    /// make the server contact its own machine or network
    /// (`--allow-registry` adds one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_registries: Vec<String>,
}

/// `[sandbox]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// Which backend runs environments: `local` (bubblewrap + overlayfs),
    /// `apptainer` or `oci`. Default `local`.
    pub backend: String,
    /// Cap on an episode's asciicast recording and live output, in bytes.
    pub max_recording_bytes: u64,
    /// Sandboxes kept started ahead per image asked for (`local`; 0: none).
    pub pool: usize,
    /// Seconds an image's pre-started sandboxes live after its last request.
    pub pool_idle_secs: u64,
}

/// `[agent]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Turn limit of an evaluation episode. Default 64 (as in the paper).
    pub max_turns: u32,
    /// Turn limit of a training episode (the solvability filter of `generate`
    /// uses at least 16). Default 16.
    pub train_max_turns: u32,
    /// Seconds one command may run before it is interrupted. Default 60.
    pub command_timeout_sec: f64,
    /// The protocol profile: `endless` (ours), `reference` (the
    /// reference implementation's switches) or `tools` (tool calls);
    /// `--protocol` overrides it.
    pub protocol: String,
    /// Which `<command>` tag runs: `first` or `last`; empty: the profile's.
    pub command_tag: String,
    /// A file whose text replaces the built-in system prompt; empty: ours.
    /// Relative paths are relative to the working directory.
    pub system_prompt_file: String,
}

/// `[llm]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// Base URL of the OpenAI-compatible server (vLLM, SGLang, llama.cpp,
    /// Ollama, OpenAI). Default `http://127.0.0.1:8000/v1`.
    pub url: String,
    /// Model name sent to the server; empty (the default): none, so commands
    /// that need one ask for `--model`.
    pub model: String,
    /// Sampling temperature. Default 1.0.
    pub temperature: f64,
    /// Nucleus-sampling `top_p`. Default 1.0.
    pub top_p: f64,
    /// Tokens per completion at most. Default 2048.
    pub max_tokens: u32,
    /// Requests in flight at once, per server. Default 16.
    pub concurrency: usize,
    /// Seconds one request may take (at least 1). Default 300.
    pub timeout_sec: f64,
    /// Retries of a failed request. Default 5.
    pub retries: u32,
}

/// `[generate]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateConfig {
    /// Whether stage 2's environment definitions may install software.
    pub allow_installs: bool,
    /// Solution episodes of the solvability filter (pass@n > 0 keeps a task).
    /// Default 16.
    pub solutions: u32,
    /// Environment attempts (build + initial tests, with feedback) before a
    /// candidate is rejected. Default 3.
    pub max_env_attempts: u32,
    /// Candidates in flight at once. Default 8.
    pub concurrency: usize,
    /// Offline tasks written into a fresh workspace. Default 60.
    pub seed_tasks: usize,
}

/// `[train]`: defaults of the PPO recipe (`endless train` flags override
/// them; `endless train --print-config` shows the result). `lr` and
/// `critic_lr` of 0 mean: chosen by the initial policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainSettings {
    /// Episodes per task per step. Default 16 (as the reference).
    pub samples: u32,
    /// Tasks per PPO step. Default 1 (reference: 16), to keep a CPU step to minutes.
    pub prompts_per_step: usize,
    /// Rollout temperature, also used for the trained log-probs. Default 0.7.
    pub temperature: f64,
    /// Tokens per reply at most. Default 256 (reference: 2048).
    pub max_tokens: usize,
    /// Passes over each batch, with old log-probs, values and advantages
    /// fixed. Default 2.
    pub ppo_epochs: usize,
    /// `separate` or `shared`.
    pub critic: String,
    /// Policy learning rate; 0 (the default): by policy (1e-6 for pretrained
    /// ones, 5e-5 for `tiny`).
    pub lr: f64,
    /// Separate critic's learning rate; 0 (the default): by policy (1e-6 for
    /// pretrained ones, 5e-5 for `tiny`).
    pub critic_lr: f64,
    /// Value clipping around the values at collection time; 0 = off. Default 0.2.
    pub value_clip: f64,
    /// AdamW weight decay of policy and critic. Default 0.01.
    pub weight_decay: f64,
    /// Normalise each step's rewards to mean 0 / std 1 over the step's
    /// episodes (all-equal rewards become 0). Default on.
    pub normalize_reward: bool,
    /// Weight of a KL penalty to the policy PPO started from; 0 (the
    /// default, as the paper): none.
    #[serde(default)]
    pub kl_coef: f64,
}

/// `[images]`: how a task's `FROM` / `From:` becomes a base image (see
/// `crate::images::resolve_base`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImagesConfig {
    /// Pull a base image that is not in the local store.
    pub pull: PullPolicy,
    /// What a base that can be neither found nor pulled becomes.
    pub fallback: BaseFallback,
    /// Registry mirrors: registry host -> mirror host (`docker.io` =
    /// `mirror.example:5000`); pulls go to the mirror, images keep their names.
    #[serde(default)]
    pub mirrors: std::collections::BTreeMap<String, String>,
    /// References mapped to others (`"ubuntu:24.04" = "debian:bookworm"`, or
    /// `= "host"`); a task built on a substitute says so.
    #[serde(default)]
    pub aliases: std::collections::BTreeMap<String, String>,
    /// The most the sandbox cache (stored images, build steps, built task
    /// images) may take, in GB; past it, what was least recently used and
    /// no build holds is evicted after each build. Unset: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_store_gb: Option<f64>,
    /// The largest writable layer a session gets, in MiB, whatever its
    /// task's `[environment] storage_mb` (or `storage`) asks. Unset:
    /// [`DEFAULT_SESSION_STORAGE_CAP_MB`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_session_storage_mb: Option<u64>,
}

/// The default of `[images] max_session_storage_mb`: 10 GiB, Harbor's
/// default `storage_mb`.
pub const DEFAULT_SESSION_STORAGE_CAP_MB: u64 = 10 * 1024;

impl ImagesConfig {
    /// `max_session_storage_mb`, or its default.
    pub fn session_storage_cap_mb(&self) -> u64 {
        self.max_session_storage_mb
            .unwrap_or(DEFAULT_SESSION_STORAGE_CAP_MB)
    }
}

/// `[images] pull`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PullPolicy {
    /// Pull what the store lacks.
    #[default]
    Auto,
    /// Use only what is in the store (`endless images pull|load|build-base`).
    Never,
}

/// `[images] fallback`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BaseFallback {
    /// Build on the host's system directories, and say so.
    #[default]
    Host,
    /// Fail the build, naming the image, the registry and the settings.
    Error,
}

/// `[tui]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuiConfig {
    /// A theme name from `themes/*.toml` (`dark`, `light`) or one of the
    /// user's own. Default `dark`.
    pub theme: String,
    /// `[tui.keys]`: key overrides, action name = key (`quit = "q"`); `?` in
    /// the TUI lists the actions.
    #[serde(default)]
    pub keys: toml::Table,
    /// `[[tui.remote]]`: other machines' `endless serve` whose sessions
    /// the Live view watches next to local ones.
    #[serde(default)]
    pub remote: Vec<RemoteNode>,
}

/// `[[tui.remote]]`: one `endless serve` node the TUI's Live view
/// watches. Its token is not written here: `token_env` names the
/// environment variable holding it (or `token_file` a file whose first
/// line it is, as `serve --token-file` writes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteNode {
    /// The name its panes are marked with (`node-1`).
    pub name: String,
    /// Its base URL (`http://10.0.0.2:8765`).
    pub url: String,
    /// The environment variable holding its bearer token.
    #[serde(default)]
    pub token_env: Option<String>,
    /// A file whose first non-comment line is its bearer token.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
}

/// Where things live on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct Paths {
    /// The user's config file (may not exist).
    pub config_file: PathBuf,
    /// Default workspace when none is given.
    pub default_workspace: PathBuf,
    /// Caches: sandbox images, downloaded models.
    pub cache_dir: PathBuf,
    /// Logs.
    pub log_dir: PathBuf,
}

impl Paths {
    /// Platform paths from `directories` (XDG on Linux).
    pub fn detect() -> Paths {
        match directories::ProjectDirs::from("", "", "endless") {
            Some(d) => Paths {
                config_file: d.config_dir().join("config.toml"),
                default_workspace: d.data_dir().join("workspace"),
                cache_dir: d.cache_dir().to_path_buf(),
                log_dir: d.state_dir().unwrap_or(d.data_local_dir()).join("logs"),
            },
            None => {
                let base = std::env::temp_dir().join("endless");
                Paths {
                    config_file: base.join("config.toml"),
                    default_workspace: base.join("workspace"),
                    cache_dir: base.join("cache"),
                    log_dir: base.join("logs"),
                }
            }
        }
    }
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A config file layer could not be read or parsed.
    #[error(transparent)]
    File(#[from] BundleError),
    /// An `ENDLESS_*` environment variable's value does not fit its key.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable's name, e.g. `ENDLESS_LLM_MODEL`.
        var: String,
        /// Why its value was rejected.
        message: String,
    },
}

impl Config {
    /// Load the layers: defaults, `user_file`, `<workspace>/endless.toml`, environment.
    pub fn load(user_file: &Path, workspace: Option<&Path>) -> Result<Config, ConfigError> {
        let vars: Vec<(String, String)> = std::env::vars().collect();
        Self::load_with_env(user_file, workspace, &vars)
    }

    /// [`Config::load`] with explicit environment variables (for tests).
    pub fn load_with_env(
        user_file: &Path,
        workspace: Option<&Path>,
        vars: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let mut merged: toml::Table = parse_toml(Path::new("assets/config.toml"), DEFAULTS)?;
        let ws_file = workspace.map(|w| w.join("endless.toml"));
        for file in std::iter::once(user_file).chain(ws_file.as_deref()) {
            if file.is_file() {
                let text = crate::task::text::read_text(file)?;
                let layer: toml::Table = parse_toml(file, &text)?;
                merge(&mut merged, layer);
                // Check each file on its own so errors name the file that has them.
                let check = merged.clone();
                let text = toml::to_string(&check).unwrap_or_default();
                parse_toml::<Config>(file, &text)?;
            }
        }
        for (var, value) in vars {
            let Some(rest) = var.strip_prefix("ENDLESS_") else {
                continue;
            };
            let Some((section, key)) = rest
                .to_ascii_lowercase()
                .split_once('_')
                .map(|(s, k)| (s.to_string(), k.to_string()))
            else {
                continue;
            };
            let Some(toml::Value::Table(table)) = merged.get_mut(&section) else {
                continue;
            };
            let Some(old) = table.get(&key) else { continue };
            let new = coerce(old, value).map_err(|message| ConfigError::Env {
                var: var.clone(),
                message,
            })?;
            table.insert(key, new);
        }
        let text = toml::to_string(&merged).unwrap_or_default();
        Ok(parse_toml(Path::new("<effective config>"), &text)?)
    }
}

fn merge(into: &mut toml::Table, layer: toml::Table) {
    for (k, v) in layer {
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

fn coerce(old: &toml::Value, value: &str) -> Result<toml::Value, String> {
    Ok(match old {
        toml::Value::Integer(_) => toml::Value::Integer(
            value
                .trim()
                .parse()
                .map_err(|_| format!("expected an integer, got {value:?}"))?,
        ),
        toml::Value::Float(_) => toml::Value::Float(
            value
                .trim()
                .parse()
                .map_err(|_| format!("expected a number, got {value:?}"))?,
        ),
        toml::Value::Boolean(_) => toml::Value::Boolean(
            value
                .trim()
                .parse()
                .map_err(|_| format!("expected true or false, got {value:?}"))?,
        ),
        _ => toml::Value::String(value.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_load_and_layers_override() {
        let dir = tempfile::tempdir().unwrap();
        let none = dir.path().join("none.toml");
        let c = Config::load_with_env(&none, None, &[]).unwrap();
        assert_eq!(c.agent.max_turns, 64);
        assert_eq!(c.generate.solutions, 16);
        assert_eq!(c.train.critic, "separate");
        assert_eq!(c.train.ppo_epochs, 2);
        std::fs::write(dir.path().join("endless.toml"), "[llm]\nmodel = \"m1\"\n").unwrap();
        let vars = vec![("ENDLESS_LLM_TEMPERATURE".to_string(), "0.5".to_string())];
        let c = Config::load_with_env(&none, Some(dir.path()), &vars).unwrap();
        assert_eq!(c.llm.model, "m1");
        assert_eq!(c.llm.temperature, 0.5);
        // Two-word keys of [train] take ENDLESS_TRAIN_<KEY>.
        let vars = vec![
            ("ENDLESS_TRAIN_CRITIC_LR".to_string(), "3e-6".to_string()),
            (
                "ENDLESS_TRAIN_NORMALIZE_REWARD".to_string(),
                "false".to_string(),
            ),
        ];
        let c = Config::load_with_env(&none, None, &vars).unwrap();
        assert_eq!(c.train.critic_lr, 3e-6);
        assert!(!c.train.normalize_reward);
    }

    #[test]
    fn bad_values_name_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("config.toml");
        std::fs::write(&user, "[agent]\nmax_turns = \"many\"\n").unwrap();
        let err = Config::load_with_env(&user, None, &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("config.toml") && err.contains("agent.max_turns"),
            "{err}"
        );
        std::fs::write(&user, "[agnet]\nmax_turns = 3\n").unwrap();
        let err = Config::load_with_env(&user, None, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("agnet"), "{err}");
        let none = dir.path().join("none.toml");
        let vars = vec![("ENDLESS_AGENT_MAX_TURNS".to_string(), "x".to_string())];
        let err = Config::load_with_env(&none, None, &vars)
            .unwrap_err()
            .to_string();
        assert!(err.contains("ENDLESS_AGENT_MAX_TURNS"), "{err}");
    }
}
