//! One episode in a fresh sandbox, driven one reply at a time and written
//! to its files as it happens: what `endless eval` runs for each episode
//! (with a policy supplying the replies) and what `endless serve` runs for
//! each session (with replies arriving over HTTP).

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use super::episode::{EpisodeConfig, EpisodeObserver, EpisodeStepper, Step, StepOutcome};
use super::episode_io::{EpisodePaths, RolloutError, RolloutEvent, SandboxProvider, StartOptions};
use super::result::{EpisodeId, EpisodeResult, Timings};
use crate::llm::{ChatMessage, TokenUsage};
use crate::task::Task;

/// Where and how an episode is recorded.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The episode's files.
    pub paths: EpisodePaths,
    /// Ask the sandbox for an asciicast.
    pub record_cast: bool,
    /// Progress events (steps, start, finish), for progress bars and the TUI.
    pub events: Option<UnboundedSender<RolloutEvent>>,
}

impl Recording {
    /// Remove an earlier attempt's files and create the directory.
    fn prepare(&self) -> Result<(), RolloutError> {
        let p = &self.paths;
        for f in [&p.trajectory, &p.cast, &p.junit, &p.result]
            .into_iter()
            .chain(&p.atif)
        {
            let _ = std::fs::remove_file(f);
        }
        let dir = p.result.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|source| RolloutError::Io {
            path: dir.to_path_buf(),
            source,
        })
    }

    /// Write the result file (atomically, last: its presence means the
    /// episode is finished) and announce it.
    fn save(&self, result: EpisodeResult) -> Result<EpisodeResult, RolloutError> {
        let path = &self.paths.result;
        let json = serde_json::to_vec_pretty(&result).map_err(|e| RolloutError::Io {
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        crate::fsutil::write_atomic(path, &json).map_err(|source| RolloutError::Io {
            path: path.clone(),
            source,
        })?;
        if let Some(atif) = &self.paths.atif {
            // Beside the result, after it: a failure here loses no episode.
            let doc = super::atif::episode_document(&run_of(path), &self.paths, &result);
            if let Err(e) = doc.and_then(|doc| super::atif::write_atif(atif, &doc)) {
                tracing::warn!(%e, "cannot write the ATIF trajectory");
            }
        }
        if let Some(tx) = &self.events {
            let _ = tx.send(RolloutEvent::Finished {
                result: Box::new(result.clone()),
            });
        }
        Ok(result)
    }

    /// Record an episode that could not start (its policy failed to start).
    pub fn failed_to_start(
        &self,
        id: EpisodeId,
        error: String,
    ) -> Result<EpisodeResult, RolloutError> {
        self.prepare()?;
        self.save(EpisodeResult::failed_to_start(
            id,
            error,
            Timings::default(),
        ))
    }
}

/// The run of an episode result at `runs/<run>/episodes/<task>/<n>.json`.
pub fn run_of(result: &Path) -> String {
    result
        .ancestors()
        .nth(3)
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The process recording an episode, named in its trajectory's `start` line
/// so that a watcher can tell a running episode from one whose process died
/// without writing a result (killed, or quit mid-episode).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EpisodeOwner {
    /// Its process id.
    pub pid: u32,
    /// Its start time (`/proc/PID/stat` field 22, clock ticks since boot):
    /// a later process given the same pid is not mistaken for it.
    pub start: u64,
    /// The boot and pid namespace it ran in: a pid means nothing elsewhere.
    pub host: String,
}

impl EpisodeOwner {
    /// This process; `None` without `/proc`.
    pub fn current() -> Option<EpisodeOwner> {
        EpisodeOwner::of(std::process::id())
    }

    /// The running process `pid`; `None` when it is not running (or
    /// without `/proc`).
    pub fn of(pid: u32) -> Option<EpisodeOwner> {
        Some(EpisodeOwner {
            pid,
            start: proc_start(pid)?,
            host: proc_host()?,
        })
    }

    /// `Some(running)` when this machine and namespace can tell (it is the
    /// one the owner ran in), `None` when it cannot.
    pub fn is_alive(&self) -> Option<bool> {
        if proc_host()? != self.host {
            return None;
        }
        Some(proc_start(self.pid) == Some(self.start))
    }
}

/// The start time of a running (not zombie) `pid`, from `/proc/PID/stat`.
fn proc_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces and parentheses):
    // the state is field 3, the start time field 22.
    let mut rest = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    if matches!(rest.next()?, "Z" | "X" | "x") {
        return None;
    }
    rest.nth(18)?.parse().ok()
}

/// This boot and pid namespace.
fn proc_host() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let ns = std::fs::read_link("/proc/self/ns/pid").ok()?;
    Some(format!("{}/{}", boot.trim(), ns.display()))
}

/// The time now, RFC 3339 UTC to the microsecond: when a trajectory line
/// was written (ATIF's step `timestamp`).
fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Writes the trajectory as JSON lines, each with the time it was
/// written, and forwards steps as events.
struct JsonlObserver {
    file: Option<std::io::BufWriter<std::fs::File>>,
    task: String,
    sample: u32,
    events: Option<UnboundedSender<RolloutEvent>>,
}

impl JsonlObserver {
    fn line(&mut self, value: serde_json::Value) {
        if let Some(f) = &mut self.file {
            let ok = serde_json::to_writer(&mut *f, &value).is_ok()
                && f.write_all(b"\n").is_ok()
                && f.flush().is_ok();
            if !ok {
                tracing::warn!(
                    task = self.task,
                    sample = self.sample,
                    "cannot write trajectory line"
                );
            }
        }
    }
}

impl EpisodeObserver for JsonlObserver {
    fn on_message(&mut self, message: &ChatMessage) {
        self.line(serde_json::json!({"type": "message", "at": now(), "message": message}));
    }
    fn on_step(&mut self, step: &Step) {
        self.line(serde_json::json!({"type": "step", "at": now(), "step": step}));
        if let Some(tx) = &self.events {
            let _ = tx.send(RolloutEvent::Step {
                task: self.task.clone(),
                sample: self.sample,
                step: Box::new(step.clone()),
            });
        }
    }
}

/// How starting an episode went.
#[allow(clippy::large_enum_variant)] // one per episode, moved once
pub enum Started<T> {
    /// The sandbox is up and the prompt is ready.
    Running(RecordedEpisode<T>),
    /// The sandbox could not start: an infrastructure error, already recorded.
    Failed(Box<EpisodeResult>),
}

/// An episode in progress in its own sandbox session, recorded as it goes.
/// Dropping it closes the session; [`finish`](Self::finish) verifies and
/// writes the result.
pub struct RecordedEpisode<T> {
    id: EpisodeId,
    term: T,
    stepper: EpisodeStepper,
    observer: JsonlObserver,
    recording: Recording,
    timings: Timings,
    t0: Instant,
}

impl<T: super::terminal::Terminal> RecordedEpisode<T> {
    /// Start sample `sample` of `task` for the policy named `policy` in a
    /// fresh sandbox from `provider`. Blocks (the sandbox starts); fails
    /// only when the files cannot be written.
    pub fn start<P: SandboxProvider<Term = T>>(
        provider: &P,
        task: &Task,
        sample: u32,
        policy: &str,
        config: &EpisodeConfig,
        recording: Recording,
    ) -> Result<Started<T>, RolloutError> {
        let t0 = Instant::now();
        let id = EpisodeId::new(task, sample, policy);
        recording.prepare()?;
        let mut timings = Timings::default();
        let options = StartOptions {
            record: recording.record_cast.then(|| recording.paths.cast.clone()),
        };
        let term = match provider.start(task, &options) {
            Ok(t) => t,
            Err(e) => {
                timings.sandbox_start_secs = t0.elapsed().as_secs_f64();
                let mut result = EpisodeResult::failed_to_start(
                    id,
                    format!("sandbox failed to start: {e}"),
                    timings,
                );
                result.timings.total_secs = t0.elapsed().as_secs_f64();
                return Ok(Started::Failed(Box::new(recording.save(result)?)));
            }
        };
        timings.sandbox_start_secs = t0.elapsed().as_secs_f64();
        if let Some(tx) = &recording.events {
            let _ = tx.send(RolloutEvent::Started {
                task: id.task.clone(),
                sample,
                stream: provider.stream(&term),
            });
        }
        let path = &recording.paths.trajectory;
        let file = std::fs::File::create(path).map_err(|source| RolloutError::Io {
            path: path.clone(),
            source,
        })?;
        let mut observer = JsonlObserver {
            file: Some(std::io::BufWriter::new(file)),
            task: id.task.clone(),
            sample,
            events: recording.events.clone(),
        };
        let tools: Vec<serde_json::Value> = config
            .protocol
            .offered_tools()
            .iter()
            .map(crate::llm::ToolSpec::openai)
            .collect();
        observer.line(serde_json::json!({
            "type": "start", "at": now(), "task": id.task, "sample": sample, "policy": id.policy,
            "owner": EpisodeOwner::current(), "tools": tools,
        }));
        let stepper = EpisodeStepper::start(&task.instruction, config, &mut observer);
        Ok(Started::Running(Self {
            id,
            term,
            stepper,
            observer,
            recording,
            timings,
            t0,
        }))
    }

    /// The conversation so far: the prompt the policy answers next.
    pub fn messages(&self) -> &[ChatMessage] {
        self.stepper.messages()
    }

    /// Whether the agent's side of the episode is over.
    pub fn is_done(&self) -> bool {
        self.stepper.is_done()
    }

    /// Turns taken so far.
    pub fn turns(&self) -> u32 {
        self.stepper.turns()
    }

    /// The functions the protocol offers the policy (`tools` profile).
    pub fn offered_tools(&self) -> Vec<crate::llm::ToolSpec> {
        self.stepper.offered_tools()
    }

    /// Apply one whole assistant message (see [`EpisodeStepper::step_message`]).
    pub fn step_message(
        &mut self,
        reply: ChatMessage,
        usage: TokenUsage,
        policy_secs: f64,
    ) -> StepOutcome {
        self.stepper.step_message(
            reply,
            usage,
            policy_secs,
            &mut self.term,
            &mut self.observer,
        )
    }

    /// Apply one reply of the policy (see [`EpisodeStepper::step`]).
    pub fn step(&mut self, text: &str, usage: TokenUsage, policy_secs: f64) -> StepOutcome {
        self.stepper
            .step(text, usage, policy_secs, &mut self.term, &mut self.observer)
    }

    /// The policy failed to answer: the episode ends as an infrastructure
    /// error, or as `context_exhausted` when the conversation outgrew the
    /// model's context.
    pub fn policy_failed(&mut self, error: &super::policy::PolicyError, policy_secs: f64) {
        self.stepper.policy_failed(error, policy_secs);
    }

    /// End the episode early (see [`EpisodeStepper::interrupt`]).
    pub fn interrupt(&mut self, why: &str) {
        self.stepper.interrupt(why);
    }

    /// Run the final tests (when the way it ended allows), close the
    /// sandbox, and write the result. An episode not yet done ends as
    /// having reached its turn limit.
    pub fn finish<P: SandboxProvider<Term = T>>(
        self,
        provider: &P,
        task: &Task,
    ) -> Result<EpisodeResult, RolloutError> {
        let Self {
            id,
            mut term,
            stepper,
            mut observer,
            recording,
            mut timings,
            t0,
        } = self;
        let trajectory = stepper.finish();
        let (mut verifier, mut limits) = (None, None);
        let verification = if !trajectory.end_reason.can_verify() {
            Ok(Vec::new())
        } else {
            let v0 = Instant::now();
            let v = provider.verify(&mut term, task);
            timings.verify_secs = v0.elapsed().as_secs_f64();
            v.map(|v| {
                verifier = v.verifier.clone();
                limits = v.limits.clone();
                let junit = &recording.paths.junit;
                if let Some(xml) = &v.junit_xml {
                    if let Err(e) = crate::fsutil::write_atomic(junit, xml.as_bytes()) {
                        tracing::warn!(path = %junit.display(), %e, "cannot write junit report");
                    }
                }
                v.tests
            })
        };
        drop(term);
        timings.total_secs = t0.elapsed().as_secs_f64();
        let mut result = EpisodeResult::new(id, &trajectory, verification, timings);
        result.verifier = verifier;
        result.limits = limits;
        observer.line(serde_json::json!({
            "type": "end", "at": now(), "end_reason": result.end_reason, "passed": result.passed,
            "failure_mode": result.failure_mode,
            "failure_labels": result.failure_labels, "error": result.error,
        }));
        recording.save(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_alive_until_its_process_exits_and_a_reused_pid_is_not_it() {
        let Some(me) = EpisodeOwner::current() else {
            return; // no /proc
        };
        assert_eq!(me.is_alive(), Some(true));
        // The same pid started at another time is another process.
        let other = EpisodeOwner {
            start: me.start + 1,
            ..me.clone()
        };
        assert_eq!(other.is_alive(), Some(false));
        // Elsewhere (another boot or pid namespace) it cannot tell.
        let elsewhere = EpisodeOwner {
            host: "other".into(),
            ..me.clone()
        };
        assert_eq!(elsewhere.is_alive(), None);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let owner = EpisodeOwner::of(child.id()).unwrap();
        assert_eq!(owner.is_alive(), Some(true));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(owner.is_alive(), Some(false));
        assert_eq!(EpisodeOwner::of(owner.pid), None);
    }
}
