//! [`Context`]: where the workspace is, the configuration, and what they
//! give every use case (the sandbox backend, the opened workspace, policy
//! options). Both front ends build one the same way.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::agent::protocol::{CommandTag, Protocol};
use crate::agent::PolicyOptions;
use crate::config::{Config, Paths};
use crate::llm::{RetryPolicy, SamplingParams};
use crate::store::Workspace;

/// What every use case needs: paths, the workspace location, the config.
pub struct Context {
    /// The platform directories (config file, cache, logs).
    pub paths: Paths,
    /// The workspace (`--workspace`, `ENDLESS_WORKSPACE`, or the default).
    pub workspace_root: PathBuf,
    /// The settings: defaults, then the user config file, the workspace's
    /// `endless.toml` and the environment.
    pub config: Config,
}

impl Context {
    /// Resolve paths and load the configuration layers.
    pub fn new(workspace: Option<PathBuf>) -> Result<Context> {
        let paths = Paths::detect();
        let workspace_root = workspace.unwrap_or_else(|| paths.default_workspace.clone());
        let config = Config::load(&paths.config_file, Some(&workspace_root))?;
        Ok(Context {
            paths,
            workspace_root,
            config,
        })
    }

    /// The configured sandbox backend, caching images under the cache dir.
    pub fn backend(&self) -> Result<Box<dyn crate::sandbox::Backend>> {
        crate::sandbox::configured_backend(
            &self.config.sandbox.backend,
            &self.paths.cache_dir.join("sandbox"),
            &self.config.images,
            crate::sandbox::pool::PoolSettings::of(&self.config.sandbox),
        )
        .with_context(|| {
            format!(
                "starting the `{}` sandbox backend (see `endless sandbox doctor`)",
                self.config.sandbox.backend
            )
        })
    }

    /// Open (creating if needed) the workspace; a missing or corrupt
    /// `endless.db` is rebuilt from the files (see [`super::open_rebuilding`]).
    pub fn workspace(&self) -> Result<Workspace> {
        super::open_rebuilding(&self.workspace_root).map(|(ws, _)| ws)
    }

    /// The agent protocol: the profile `flag` names (`--protocol`), else
    /// `[agent] protocol`, with `[agent] command_tag` and
    /// `[agent] system_prompt_file` applied. Errors name the flag, key or
    /// file at fault.
    pub fn protocol(&self, flag: Option<&str>) -> Result<Protocol> {
        let agent = &self.config.agent;
        let mut protocol = match flag {
            Some(name) => Protocol::named(name).with_context(|| format!("--protocol {name:?}"))?,
            None => Protocol::named(&agent.protocol)
                .with_context(|| format!("[agent] protocol = {:?}", agent.protocol))?,
        };
        if !agent.command_tag.trim().is_empty() {
            let tag = CommandTag::parse(&agent.command_tag)
                .with_context(|| format!("[agent] command_tag = {:?}", agent.command_tag))?;
            protocol = protocol.with_command_tag(tag);
        }
        if !agent.system_prompt_file.trim().is_empty() {
            let path = PathBuf::from(agent.system_prompt_file.trim());
            protocol = protocol
                .with_system_prompt_file(&path)
                .context("[agent] system_prompt_file")?;
        }
        Ok(protocol)
    }

    /// Policy options from the `[llm]` config.
    pub fn policy_options(&self) -> PolicyOptions {
        let llm = &self.config.llm;
        PolicyOptions {
            sampling: SamplingParams {
                temperature: llm.temperature as f32,
                top_p: llm.top_p as f32,
                max_tokens: Some(llm.max_tokens),
            },
            max_concurrency: llm.concurrency.max(1),
            retry: RetryPolicy {
                max_retries: llm.retries,
                ..RetryPolicy::default()
            },
            request_timeout: Duration::from_secs_f64(llm.timeout_sec.max(1.0)),
            model_cache: self.paths.cache_dir.join("models"),
        }
    }
}
