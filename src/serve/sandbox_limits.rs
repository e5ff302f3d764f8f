//! The operator's maximums for what a client's sandbox may ask for (`cpus`,
//! `memory_mb`, the registries its images come from), and how they apply
//! to the task a sandbox is started from; and the [`Shape`] a client asks
//! for (working directory, cpus, memory, storage, lifetime, network).

use std::time::Duration;

use crate::task::Task;

/// How the sandbox is shaped, beyond its environment.
#[derive(Debug, Clone, Default)]
pub struct Shape {
    /// Working directory of commands (default: the environment's WORKDIR).
    pub workdir: Option<String>,
    /// CPUs (Harbor's `[environment] cpus`).
    pub cpus: Option<f64>,
    /// Memory in MB (Harbor's `[environment] memory_mb`).
    pub memory_mb: Option<u64>,
    /// Writable storage in MiB (Harbor's `[environment] storage_mb`), cut
    /// by the backend to `[images] max_session_storage_mb`.
    pub storage_mb: Option<u64>,
    /// How long the sandbox may live (its wall-clock limit).
    pub lifetime: Option<Duration>,
    /// Network access (pasta's user-mode network, host loopback
    /// unreachable), as Harbor's `network_mode = "public"` asks.
    pub network: bool,
}

/// What the operator lets a served sandbox have (`endless serve
/// --max-cpus`, `--max-memory-mb`, `--allow-registry`; `[serve]`).
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxLimits {
    /// Most CPUs one sandbox may ask for (default: the host's cores).
    pub max_cpus: f64,
    /// Most memory one sandbox may ask for, MiB (default and at most: a
    /// session's own memory limit).
    pub max_memory_mb: u64,
    /// Registries on loopback, link-local or private addresses that
    /// clients may still name (`host:port`, or `host` for any port).
    pub allow_registries: Vec<String>,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            max_cpus: host_cores(),
            max_memory_mb: session_memory_mb(),
            allow_registries: Vec::new(),
        }
    }
}

/// The host's cores (the default of `--max-cpus`).
fn host_cores() -> f64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
}

/// A session's memory limit in MiB: what `memory_mb` can lower, never raise.
fn session_memory_mb() -> u64 {
    crate::sandbox::local::Limits::default().memory_bytes >> 20
}

impl SandboxLimits {
    /// Refuse a client's `cpus` or `memory_mb` above the maximums (naming
    /// the field and the maximum), and a `storage_mb` of 0.
    pub fn check(&self, shape: &Shape) -> Result<(), String> {
        if shape.storage_mb == Some(0) {
            return Err("storage_mb: a number of MiB above 0".into());
        }
        if let Some(c) = shape.cpus {
            if !(c.is_finite() && c > 0.0) {
                return Err("cpus: a number above 0".into());
            }
            if c > self.max_cpus {
                return Err(format!(
                    "cpus: {c} is above this server's maximum of {} (--max-cpus)",
                    self.max_cpus
                ));
            }
        }
        match shape.memory_mb {
            Some(0) => Err("memory_mb: a number of MiB above 0".into()),
            Some(m) if m > self.max_memory_mb => Err(format!(
                "memory_mb: {m} is above this server's maximum of {} (--max-memory-mb)",
                self.max_memory_mb
            )),
            _ => Ok(()),
        }
    }

    /// Give `task` the client's `cpus` and `memory_mb` (already checked),
    /// or its own cut to the maximums: `[environment] cpus` and
    /// `memory_mb` become the session's limits (neither asked: the
    /// backend's defaults); and the client's `storage_mb` over its own.
    pub fn apply(&self, task: &mut Task, shape: &Shape) {
        let extra = &mut task.meta.environment.extra;
        if let Some(s) = shape.storage_mb {
            let s = toml::Value::Integer(i64::try_from(s).unwrap_or(i64::MAX));
            extra.insert("storage_mb".into(), s);
        }
        let number = |v: Option<&toml::Value>| {
            v.and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)))
        };
        let cpus = shape
            .cpus
            .or_else(|| number(extra.get("cpus")))
            .filter(|c| c.is_finite() && *c > 0.0);
        if let Some(c) = cpus {
            extra.insert("cpus".into(), toml::Value::Float(c.min(self.max_cpus)));
        }
        let memory = shape
            .memory_mb
            .or_else(|| number(extra.get("memory_mb")).map(|m| m.max(0.0) as u64))
            .filter(|m| *m > 0);
        if let Some(m) = memory {
            let m = m.min(self.max_memory_mb);
            let m = toml::Value::Integer(i64::try_from(m).unwrap_or(i64::MAX));
            extra.insert("memory_mb".into(), m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{FileTree, TaskMeta};

    fn limits() -> SandboxLimits {
        SandboxLimits {
            max_cpus: 2.0,
            max_memory_mb: 2048,
            allow_registries: Vec::new(),
        }
    }

    fn shape(cpus: Option<f64>, memory_mb: Option<u64>) -> Shape {
        Shape {
            cpus,
            memory_mb,
            ..Shape::default()
        }
    }

    #[test]
    fn asks_above_the_maximums_are_refused_by_field() {
        let l = limits();
        l.check(&shape(Some(2.0), Some(2048))).unwrap();
        let e = l.check(&shape(Some(1024.0), None)).unwrap_err();
        assert!(e.starts_with("cpus:") && e.contains("maximum of 2"), "{e}");
        let e = l.check(&shape(None, Some(4096))).unwrap_err();
        assert!(e.starts_with("memory_mb:") && e.contains("2048"), "{e}");
        assert!(l.check(&shape(Some(f64::NAN), None)).is_err());
        assert!(l.check(&shape(None, Some(0))).is_err());
        let none = Shape {
            storage_mb: Some(0),
            ..Shape::default()
        };
        let e = l.check(&none).unwrap_err();
        assert!(e.starts_with("storage_mb:"), "{e}");
    }

    #[test]
    fn a_tasks_own_limits_are_cut_to_the_maximums_and_a_clients_win() {
        let mut task = Task {
            meta: TaskMeta::default(),
            instruction: String::new(),
            truth: String::new(),
            environment: FileTree::default(),
            tests: FileTree::default(),
            solution: FileTree::default(),
        };
        let extra = &mut task.meta.environment.extra;
        extra.insert("cpus".into(), toml::Value::Integer(1024));
        extra.insert("memory_mb".into(), toml::Value::Integer(1 << 20));
        let l = limits();
        l.apply(&mut task, &Shape::default());
        let got = |t: &Task, k: &str| t.meta.environment.extra[k].clone();
        assert_eq!(got(&task, "cpus"), toml::Value::Float(2.0));
        assert_eq!(got(&task, "memory_mb"), toml::Value::Integer(2048));
        l.apply(&mut task, &shape(Some(0.5), Some(256)));
        assert_eq!(got(&task, "cpus"), toml::Value::Float(0.5));
        assert_eq!(got(&task, "memory_mb"), toml::Value::Integer(256));
        // Storage: the client's over the task's (the backend cuts it).
        assert!(!task.meta.environment.extra.contains_key("storage_mb"));
        let storage = Shape {
            storage_mb: Some(1536),
            ..Shape::default()
        };
        l.apply(&mut task, &storage);
        assert_eq!(got(&task, "storage_mb"), toml::Value::Integer(1536));
    }
}
