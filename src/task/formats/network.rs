//! The network rules of the foreign formats, mapped to the one flag endless
//! has (`[environment] network`: whether the agent's and the oracle's
//! sessions reach the network).
//!
//! - Harbor: `[environment] network_mode` = `"public"` (Harbor's default),
//!   `"no-network"` or `"allowlist"` (with `allowed_hosts`); the deprecated
//!   `[environment] allow_internet = true|false` counts only when
//!   `network_mode` is not set, as in Harbor. `[agent] network_mode`, Harbor's
//!   policy for the agent phase, overrides the environment's. An allowlist
//!   gives the network: endless does not restrict hosts (documented in
//!   docs/formats.md); `allowed_hosts` is kept for the export.
//! - Terminal-Bench 1: the task's container joins docker-compose's default
//!   network, so the network is on unless a service of `docker-compose.yaml`
//!   says `network_mode: none`.

use std::path::Path;

use crate::task::BundleError;
use crate::task::FileTree;

/// Harbor's `network_mode` key.
pub const NETWORK_MODE: &str = "network_mode";
/// Harbor's deprecated boolean.
pub const ALLOW_INTERNET: &str = "allow_internet";
/// Harbor's hosts for `network_mode = "allowlist"`.
pub const ALLOWED_HOSTS: &str = "allowed_hosts";

/// One of Harbor's network modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HarborMode {
    /// `"public"`: the network, unrestricted (Harbor's default).
    Public,
    /// `"no-network"`.
    NoNetwork,
    /// `"allowlist"`: only `allowed_hosts` (endless gives the whole network).
    Allowlist,
}

impl HarborMode {
    fn parse(file: &Path, field: &str, value: &toml::Value) -> Result<HarborMode, BundleError> {
        match value.as_str() {
            Some("public") => Ok(HarborMode::Public),
            Some("no-network") => Ok(HarborMode::NoNetwork),
            Some("allowlist") => Ok(HarborMode::Allowlist),
            _ => Err(BundleError::invalid(
                file,
                Some(field),
                format!("expected \"public\", \"no-network\" or \"allowlist\", got {value}"),
            )),
        }
    }

    /// The key's value in task.toml.
    pub fn key(self) -> &'static str {
        match self {
            HarborMode::Public => "public",
            HarborMode::NoNetwork => "no-network",
            HarborMode::Allowlist => "allowlist",
        }
    }
}

/// Take Harbor's network keys out of the `[environment]` and `[agent]`
/// tables (`allowed_hosts` stays, for the export) and say whether sessions
/// get the network: `None` when the task says nothing (the caller applies
/// the default). Bad values are errors naming `file` and the key.
pub fn take_harbor(
    file: &Path,
    environment: &mut toml::Table,
    agent: &mut toml::Table,
) -> Result<Option<bool>, BundleError> {
    let mode = environment
        .remove(NETWORK_MODE)
        .map(|v| HarborMode::parse(file, "environment.network_mode", &v))
        .transpose()?;
    let allow = match environment.remove(ALLOW_INTERNET) {
        None => None,
        Some(toml::Value::Boolean(b)) => Some(b),
        Some(other) => {
            return Err(BundleError::invalid(
                file,
                Some("environment.allow_internet"),
                format!("expected true or false, got {other}"),
            ))
        }
    };
    if let Some(hosts) = environment.get(ALLOWED_HOSTS) {
        let list = hosts.as_array().filter(|a| a.iter().all(|h| h.is_str()));
        if list.is_none() {
            return Err(BundleError::invalid(
                file,
                Some("environment.allowed_hosts"),
                format!("expected a list of host names, got {hosts}"),
            ));
        }
        if mode != Some(HarborMode::Allowlist) {
            return Err(BundleError::invalid(
                file,
                Some("environment.allowed_hosts"),
                "is only valid with network_mode = \"allowlist\"",
            ));
        }
    }
    let agent_mode = agent
        .remove(NETWORK_MODE)
        .map(|v| HarborMode::parse(file, "agent.network_mode", &v))
        .transpose()?;
    let environment = mode.map(|m| m != HarborMode::NoNetwork).or(allow);
    Ok(agent_mode
        .map(|m| m != HarborMode::NoNetwork)
        .or(environment))
}

/// Write `network` into Harbor's `[environment]` table: `network_mode`
/// (`"allowlist"` when the table keeps `allowed_hosts`), never the
/// deprecated `allow_internet`.
pub fn put_harbor(environment: &mut toml::Table, network: bool) {
    environment.remove(ALLOW_INTERNET);
    let mode = match (network, environment.contains_key(ALLOWED_HOSTS)) {
        (true, true) => HarborMode::Allowlist,
        (true, false) => HarborMode::Public,
        (false, _) => {
            environment.remove(ALLOWED_HOSTS);
            HarborMode::NoNetwork
        }
    };
    environment.insert(NETWORK_MODE.into(), mode.key().into());
}

/// Terminal-Bench 1: whether the task's docker-compose file (if any) keeps
/// the default network: `Some(false)` when a service says `network_mode:
/// none`, `Some(true)` when the file exists and none does, `None` without
/// a file. An unreadable file is an error naming it.
pub fn tb1_compose(dir: &Path, environment: &FileTree) -> Result<Option<bool>, BundleError> {
    for name in ["docker-compose.yaml", "docker-compose.yml"] {
        let Some(text) = environment.text(name) else {
            continue;
        };
        let doc: serde_yaml::Value = crate::task::text::parse_yaml(&dir.join(name), text)?;
        let services = doc.get("services").and_then(|s| s.as_mapping());
        let none = services.is_some_and(|m| {
            m.values().any(|svc| {
                svc.get("network_mode").and_then(|v| v.as_str()) == Some("none")
                    || svc.get("network_disabled").and_then(|v| v.as_bool()) == Some(true)
            })
        });
        return Ok(Some(!none));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    fn take(env: &str, agent: &str) -> Result<Option<bool>, BundleError> {
        take_harbor(Path::new("t/task.toml"), &mut table(env), &mut table(agent))
    }

    #[test]
    fn harbor_modes_and_the_deprecated_boolean() {
        assert_eq!(take("", "").unwrap(), None);
        assert_eq!(take("network_mode = \"public\"", "").unwrap(), Some(true));
        assert_eq!(
            take("network_mode = \"no-network\"", "").unwrap(),
            Some(false)
        );
        let allow = "network_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]";
        assert_eq!(take(allow, "").unwrap(), Some(true));
        assert_eq!(take("allow_internet = false", "").unwrap(), Some(false));
        assert_eq!(take("allow_internet = true", "").unwrap(), Some(true));
        // network_mode wins over allow_internet, as in Harbor.
        let both = "network_mode = \"public\"\nallow_internet = false";
        assert_eq!(take(both, "").unwrap(), Some(true));
        // The agent's own policy wins over the environment's.
        let agent = "network_mode = \"no-network\"";
        assert_eq!(take("allow_internet = true", agent).unwrap(), Some(false));
    }

    #[test]
    fn the_keys_are_taken_and_allowed_hosts_kept() {
        let mut env = table("network_mode = \"allowlist\"\nallowed_hosts = [\"a.b\"]\ncpus = 1");
        let mut agent = table("network_mode = \"public\"\ntimeout_sec = 1");
        take_harbor(Path::new("task.toml"), &mut env, &mut agent).unwrap();
        assert!(!env.contains_key(NETWORK_MODE) && env.contains_key(ALLOWED_HOSTS));
        assert!(!agent.contains_key(NETWORK_MODE) && agent.contains_key("timeout_sec"));
        put_harbor(&mut env, true);
        assert_eq!(env[NETWORK_MODE].as_str(), Some("allowlist"));
        put_harbor(&mut env, false);
        assert_eq!(env[NETWORK_MODE].as_str(), Some("no-network"));
        assert!(!env.contains_key(ALLOWED_HOSTS));
        let mut env = table("allow_internet = false");
        put_harbor(&mut env, true);
        assert_eq!(env[NETWORK_MODE].as_str(), Some("public"));
        assert!(!env.contains_key(ALLOW_INTERNET));
    }

    #[test]
    fn bad_values_name_the_file_and_key() {
        for (env, agent, field) in [
            ("network_mode = \"open\"", "", "environment.network_mode"),
            ("network_mode = 1", "", "environment.network_mode"),
            ("allow_internet = \"yes\"", "", "environment.allow_internet"),
            ("allowed_hosts = [\"a\"]", "", "environment.allowed_hosts"),
            (
                "network_mode = \"allowlist\"\nallowed_hosts = \"a\"",
                "",
                "environment.allowed_hosts",
            ),
            ("", "network_mode = \"none\"", "agent.network_mode"),
        ] {
            let e = take(env, agent).unwrap_err().to_string();
            assert!(
                e.contains("t/task.toml") && e.contains(field),
                "{env:?}: {e}"
            );
        }
    }

    #[test]
    fn tb1_compose_network() {
        let dir = Path::new("t");
        let mut env = FileTree::default();
        assert_eq!(tb1_compose(dir, &env).unwrap(), None);
        env.insert_text(
            "docker-compose.yaml",
            "services:\n  client:\n    build: .\n    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}\n",
        );
        assert_eq!(tb1_compose(dir, &env).unwrap(), Some(true));
        env.insert_text(
            "docker-compose.yaml",
            "services:\n  client:\n    build: .\n    network_mode: none\n",
        );
        assert_eq!(tb1_compose(dir, &env).unwrap(), Some(false));
        env.insert_text("docker-compose.yaml", "services: [\n");
        let e = tb1_compose(dir, &env).unwrap_err().to_string();
        assert!(e.contains("docker-compose.yaml"), "{e}");
    }
}
