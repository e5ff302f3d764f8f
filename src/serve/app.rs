//! The server's shared state and its session operations. Operations that
//! touch a sandbox or the workspace block: handlers run them on tokio's
//! blocking pool.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use parking_lot::Mutex;
use serde::Serialize;

use super::auth::{Auth, Client};
use super::error::ApiError;
use super::idempotency::{self, Key, Remembered};
use super::journal::{Entry, Journal, Lost};
use super::metrics::Metrics;
use super::sessions::{NewSession, Registry, Slot, State};
use crate::agent::protocol::{Profile, Protocol};
use crate::agent::{
    BackendProvider, EndReason, EpisodeConfig, EpisodePaths, EpisodeResult, RecordedEpisode,
    Recording, Started, TestOutcome,
};
use crate::llm::{ChatMessage, TokenUsage};
use crate::rl::collect::episode_reward;
use crate::rl::RewardMode;
use crate::store::Workspace;
use crate::task::Task;

/// Settings of a server.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How final tests become the reward.
    pub reward: RewardMode,
    /// Sessions with no request for this long are ended and recorded.
    pub idle_timeout: Duration,
    /// Limit of one command.
    pub command_timeout: Duration,
    /// Run id of sessions that name no run.
    pub default_run: String,
    /// Limit for a client to send a request's headers, and its body.
    pub read_timeout: Duration,
    /// The agent protocol of sessions that name no profile (its system
    /// prompt applies to every session).
    pub protocol: Protocol,
    /// Write each finished session as an ATIF document beside its result
    /// (`[record] atif`).
    pub atif: bool,
    /// What a sandbox of `/v1/sandboxes` may ask for: CPUs, memory, and
    /// the internal registries its images may come from.
    pub sandbox: super::SandboxLimits,
}

/// Everything the handlers share.
pub struct App {
    /// The workspace: tasks, and the index of recorded episodes.
    pub ws: Mutex<Workspace>,
    /// Starts sandboxes and runs final tests.
    pub provider: BackendProvider,
    /// Open sessions and the session quotas.
    pub registry: Registry,
    /// Counters and latencies for `/metrics`.
    pub metrics: Metrics,
    /// Bearer tokens (or none).
    pub auth: Auth,
    /// The server's settings.
    pub settings: Settings,
    /// Set on SIGTERM: new requests get 503.
    pub draining: AtomicBool,
    /// Requests admitted and not yet answered (the drain waits for them).
    pub in_flight: AtomicUsize,
    /// Where open sessions are journaled (none: not journaled).
    pub journal: Option<Journal>,
    /// Sessions a server killed before this one left open, recorded as
    /// interrupted at start.
    pub lost: Vec<Lost>,
    /// The bare sandboxes of `/v1/sandboxes` (see [`super::sandboxes`]).
    pub sandboxes: super::sandboxes::Sandboxes,
}

/// What a client asks for when it opens a session.
#[derive(Debug, Clone)]
pub struct Open {
    /// The workspace task to run.
    pub task_id: String,
    /// Turn limit; default: the task's `[agent] max_turns`.
    pub max_turns: Option<u32>,
    /// Client's seed, echoed back in [`Opened`]; the episode does not use it.
    pub seed: Option<u64>,
    /// Run name (`serve-<run>` is the run id); default: the server's run.
    pub run: Option<String>,
    /// Label of the client's policy in the recorded episode.
    pub policy: String,
    /// The protocol profile (`None`: the server's).
    pub protocol: Option<Profile>,
}

/// The answer to opening a session.
#[derive(Debug, Serialize)]
pub struct Opened {
    /// The new session's id, for later requests.
    pub session_id: String,
    /// The task being run.
    pub task_id: String,
    /// The run the episode is recorded under.
    pub run_id: String,
    /// The episode's sample index within the run and task.
    pub sample: u32,
    /// The turn limit in force.
    pub max_turns: u32,
    /// The client's seed, as sent.
    pub seed: Option<u64>,
    /// The protocol profile the session follows (`endless`, `reference`).
    pub protocol: Profile,
    /// The prompt: system message and the task's instruction.
    pub messages: Vec<ChatMessage>,
    /// The functions the session offers, as the OpenAI `tools` array to
    /// pass to the model (the `tools` protocol; absent otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<serde_json::Value>,
}

/// Per-step details, as `info` in a step's answer.
#[derive(Debug, Serialize)]
pub struct Info {
    /// Turns taken so far.
    pub turn: u32,
    /// How the episode ended (once done).
    pub end_reason: Option<EndReason>,
    /// Why it failed (once done, when it did).
    pub failure_mode: Option<String>,
    /// The final tests (once done).
    pub tests: Vec<TestOutcome>,
    /// Every final test passed (once done).
    pub passed: Option<bool>,
    /// What failed, for episodes that errored.
    pub error: Option<String>,
}

/// The answer to a step (and, with `done`, to a delete).
#[derive(Debug, Serialize)]
pub struct Stepped {
    /// The episode's observation for this step (e.g. command output); empty on close.
    pub observation: String,
    /// Whether the episode is over.
    pub done: bool,
    /// 0 until done; then the reward under the server's reward mode.
    pub reward: f64,
    /// Turn count and, once done, the outcome.
    pub info: Info,
    /// The messages this step added after the reply, ready to append to
    /// the conversation: the observation as a user message, or under the
    /// `tools` protocol a `tool` message per call (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<ChatMessage>,
    /// Seconds the episode's step took inside the server (the command, and
    /// the final tests once done): sent as the `Server-Timing` header, so
    /// that a client can tell the server's own overhead from the sandbox's
    /// time; not part of the JSON.
    #[serde(skip)]
    pub step_secs: f64,
}

/// A session as `GET /v1/sessions/{id}` and `GET /v1/sessions` show it.
#[derive(Debug, Serialize)]
pub struct SessionView {
    /// The session's id.
    pub session_id: String,
    /// The task being run.
    pub task_id: String,
    /// The run the episode is recorded under.
    pub run_id: String,
    /// The episode's sample index (null while it is still being chosen).
    pub sample: Option<u32>,
    /// `starting`, `running` or `finished`.
    pub state: &'static str,
    /// Turns taken so far.
    pub turns: u32,
    /// The turn limit in force (null while starting).
    pub max_turns: Option<u32>,
    /// When the session was opened (RFC 3339, UTC).
    pub opened_at: String,
    /// Once finished: the final answer, as `DELETE` gives it.
    pub result: Option<Stepped>,
}

impl App {
    /// What session `slot` is at, without waiting for a request using it
    /// (a session busy with a step or a close shows as `running`). Blocking
    /// (a finished session's partial reward may measure its baseline).
    pub fn describe(&self, slot: &Slot) -> SessionView {
        let (state, finished) = match slot.state.try_lock().as_deref() {
            Some(State::Starting) => ("starting", None),
            Some(State::Finished(r)) => ("finished", Some((**r).clone())),
            Some(State::Running(_)) | None => ("running", None),
        };
        SessionView {
            session_id: slot.id.clone(),
            task_id: slot.task.id().to_string(),
            run_id: slot.run_id.clone(),
            sample: slot.sample.get().copied(),
            state,
            turns: slot.turns.load(Ordering::Relaxed),
            max_turns: slot.max_turns.get().copied(),
            opened_at: slot.opened_at.clone(),
            result: finished.map(|r| self.final_answer(String::new(), &slot.task, &r)),
        }
    }

    /// The run id for a client's run name (validated) or the server's own.
    pub fn run_id(&self, run: Option<&str>) -> Result<String, ApiError> {
        let Some(name) = run else {
            return Ok(self.settings.default_run.clone());
        };
        let ok = !name.is_empty()
            && name.len() <= 64
            && !name.starts_with('.')
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
        if ok {
            Ok(format!("serve-{name}"))
        } else {
            Err(ApiError::BadRequest(
                "invalid run name (1-64 of A-Z a-z 0-9 . _ -, not starting with a dot)".into(),
            ))
        }
    }

    fn run_dir(&self, run_id: &str) -> PathBuf {
        self.ws.lock().runs_dir().join(run_id)
    }

    /// What a create of `client` asks for, checked (the run's name, the
    /// task), with the run recorded: the session to reserve. Blocking.
    pub fn prepare(
        &self,
        client: Client,
        open: &Open,
        key: Option<(Key, u64)>,
    ) -> Result<NewSession, ApiError> {
        if self.draining.load(Ordering::Relaxed) {
            return Err(ApiError::Draining);
        }
        let run_id = self.run_id(open.run.as_deref())?;
        let ws = self.ws.lock();
        let task = ws
            .load_task(&open.task_id)
            .map_err(|_| ApiError::NotFound(format!("no task {:?}", open.task_id)))?;
        ws.upsert_run(
            &run_id,
            "serve",
            "http",
            &serde_json::json!({ "reward": self.settings.reward }),
        )
        .map_err(|e| ApiError::Internal(format!("cannot record the run: {e}")))?;
        Ok(NewSession {
            owner: client,
            task: Arc::new(task),
            run_id,
            key,
        })
    }

    /// Start the episode of session `slot` (reserved for `open`): its
    /// sample, journal entry and sandbox. The answer, as JSON, is kept in
    /// the session for a retried create. Blocking.
    pub fn start(&self, slot: &Slot, open: Open) -> Result<Bytes, ApiError> {
        let task = slot.task.clone();
        let run_id = slot.run_id.clone();
        let run_dir = self.run_dir(&run_id);
        let sample = self.registry.next_sample(&run_dir, &run_id, task.id());
        let _ = slot.sample.set(sample);
        if let Some(journal) = &self.journal {
            let entry = Entry {
                session_id: slot.id.clone(),
                run_id: run_id.clone(),
                task_id: task.id().to_string(),
                category: task.meta.task.category.clone(),
                complexity: task.meta.task.complexity,
                sample,
                policy: open.policy.clone(),
                pid: std::process::id(),
                opened_at: crate::store::now(),
            };
            if let Err(e) = journal.record(&entry) {
                self.registry.remove(&slot.id);
                return Err(ApiError::Internal(format!(
                    "cannot journal the session in {}: {e}",
                    journal.dir().display()
                )));
            }
        }
        let protocol = match open.protocol {
            Some(profile) => self.settings.protocol.with_profile(profile),
            None => self.settings.protocol.clone(),
        };
        let profile = protocol.profile;
        let tools = super::tool_messages::offered(&protocol);
        let config = EpisodeConfig::for_task(&task, open.max_turns, self.settings.command_timeout)
            .with_protocol(protocol);
        let _ = slot.max_turns.set(config.max_turns);
        let recording = Recording {
            paths: EpisodePaths::new(&run_dir, task.id(), sample).with_atif(self.settings.atif),
            record_cast: true,
            // Watchers of the session (GET /v1/sessions/{id}/stream).
            events: slot.watch.feed(),
        };
        let started = RecordedEpisode::start(
            &self.provider,
            &task,
            sample,
            &open.policy,
            &config,
            recording,
        );
        let episode = match started {
            Ok(Started::Running(e)) => e,
            Ok(Started::Failed(result)) => {
                self.registry.remove(&slot.id);
                self.recorded(&run_id, &result);
                self.unjournal(&slot.id);
                return Err(ApiError::Internal(
                    result
                        .error
                        .unwrap_or_else(|| "the sandbox failed to start".into()),
                ));
            }
            Err(e) => {
                self.registry.remove(&slot.id);
                self.unjournal(&slot.id);
                return Err(ApiError::Internal(e.to_string()));
            }
        };
        self.metrics
            .sessions_started
            .fetch_add(1, Ordering::Relaxed);
        let opened = Opened {
            session_id: slot.id.clone(),
            task_id: task.id().to_string(),
            run_id,
            sample,
            max_turns: config.max_turns,
            seed: open.seed,
            protocol: profile,
            messages: episode.messages().to_vec(),
            tools,
        };
        let body = Bytes::from(
            serde_json::to_vec(&opened)
                .map_err(|e| ApiError::Internal(format!("cannot encode the answer: {e}")))?,
        );
        let mut state = slot.state.lock();
        let _ = slot.opened_reply.set(body.clone());
        *state = State::Running(Box::new(episode));
        drop(state);
        slot.touch();
        Ok(body)
    }

    /// [`App::step`] for a request named by `key`: a retry of the step the
    /// session last answered with this key gets that answer again (the
    /// command does not run twice); while the first request still runs,
    /// the retry waits for it. Answers as JSON. Blocking.
    pub fn step_once(&self, slot: &Slot, reply: &ChatMessage, key: Key) -> Result<Bytes, ApiError> {
        // Longer than any step (a command, then final tests) may take.
        let patience = self.settings.command_timeout * 4 + Duration::from_secs(300);
        let mut state = slot
            .state
            .try_lock_for(patience)
            .ok_or_else(|| ApiError::Conflict("another request is using this session".into()))?;
        let fingerprint =
            idempotency::fingerprint(&[&super::tool_messages::fingerprint_bytes(reply)]);
        if let Some(remembered) = slot.last_reply.lock().as_ref() {
            if let Some(body) = remembered.replay(&key, fingerprint)? {
                slot.touch();
                return Ok(body);
            }
        }
        let stepped = self.step_locked(slot, &mut state, reply)?;
        let body = Bytes::from(
            serde_json::to_vec(&stepped)
                .map_err(|e| ApiError::Internal(format!("cannot encode the answer: {e}")))?,
        );
        *slot.last_reply.lock() = Some(Remembered {
            key,
            fingerprint,
            body: body.clone(),
        });
        Ok(body)
    }

    /// Apply the model's `reply` to session `slot`. Blocking.
    pub fn step(&self, slot: &Slot, reply: &ChatMessage) -> Result<Stepped, ApiError> {
        let mut state = slot
            .state
            .try_lock()
            .ok_or_else(|| ApiError::Conflict("another request is using this session".into()))?;
        self.step_locked(slot, &mut state, reply)
    }

    /// [`App::step`] with the session's state locked by the caller.
    fn step_locked(
        &self,
        slot: &Slot,
        state: &mut State,
        reply: &ChatMessage,
    ) -> Result<Stepped, ApiError> {
        let policy_secs = slot.touch();
        let episode = match state {
            State::Starting => {
                return Err(ApiError::Conflict("the session is still starting".into()))
            }
            State::Finished(_) => {
                return Err(ApiError::Conflict(
                    "the episode is over; DELETE the session for its result".into(),
                ))
            }
            State::Running(e) => e,
        };
        let t0 = Instant::now();
        let outcome = episode.step_message(reply.clone(), TokenUsage::default(), policy_secs);
        self.metrics.step_latency.observe(t0.elapsed());
        self.metrics.steps.fetch_add(1, Ordering::Relaxed);
        let turn = episode.turns();
        slot.turns.store(turn, Ordering::Relaxed);
        if !outcome.done {
            slot.touch();
            return Ok(Stepped {
                step_secs: t0.elapsed().as_secs_f64(),
                observation: outcome.observation,
                messages: outcome.messages,
                done: false,
                reward: 0.0,
                info: Info {
                    turn,
                    end_reason: None,
                    failure_mode: None,
                    tests: Vec::new(),
                    passed: None,
                    error: None,
                },
            });
        }
        let result = self.conclude(slot, state, None)?;
        slot.touch();
        let mut answer = self.final_answer(outcome.observation, &slot.task, &result);
        answer.messages = outcome.messages;
        answer.step_secs = t0.elapsed().as_secs_f64();
        Ok(answer)
    }

    /// End session `slot` and forget it: its final result (an episode
    /// still running is recorded as interrupted by `why`). Blocking.
    pub fn close(&self, slot: &Slot, why: &str) -> Result<Stepped, ApiError> {
        let mut state = slot
            .state
            .try_lock()
            .ok_or_else(|| ApiError::Conflict("another request is using this session".into()))?;
        self.registry.remove(&slot.id);
        let result = match &*state {
            State::Finished(r) => (**r).clone(),
            _ => self.conclude(slot, &mut state, Some(why))?,
        };
        Ok(self.final_answer(String::new(), &slot.task, &result))
    }

    /// End a session the server drops (idle, shutting down): recorded as
    /// interrupted unless it had finished. Blocking; never fails.
    pub fn abandon(&self, slot: &Slot, why: &str) {
        let mut state = slot.state.lock();
        if matches!(&*state, State::Running(_)) {
            if let Err(e) = self.conclude(slot, &mut state, Some(why)) {
                tracing::warn!(session = slot.id, %e, "cannot record an abandoned session");
            }
        }
    }

    /// Finish the running episode in `state` (interrupting it first when
    /// `why` says so), record it, and keep its result in the session.
    fn conclude(
        &self,
        slot: &Slot,
        state: &mut State,
        why: Option<&str>,
    ) -> Result<EpisodeResult, ApiError> {
        let State::Running(mut episode) = std::mem::replace(state, State::Starting) else {
            return Err(ApiError::Conflict("the session is not running".into()));
        };
        self.registry.finish(slot);
        if let Some(why) = why {
            episode.interrupt(why);
        }
        let result = episode
            .finish(&self.provider, &slot.task)
            .map_err(|e| ApiError::Internal(format!("cannot record the episode: {e}")))?;
        self.recorded(&slot.run_id, &result);
        self.unjournal(&slot.id);
        slot.turns.store(result.turns, Ordering::Relaxed);
        *state = State::Finished(Box::new(result.clone()));
        Ok(result)
    }

    /// Forget the journal entry of a session whose episode is recorded.
    fn unjournal(&self, session_id: &str) {
        if let Some(journal) = &self.journal {
            journal.remove(session_id);
        }
    }

    /// Count and index a recorded episode.
    fn recorded(&self, run_id: &str, result: &EpisodeResult) {
        if result.timings.verify_secs > 0.0 {
            self.metrics
                .verify_latency
                .observe(Duration::from_secs_f64(result.timings.verify_secs));
        }
        self.metrics.episode(if result.passed {
            "passed"
        } else if result.end_reason.is_scored() {
            "failed"
        } else {
            "error"
        });
        if let Err(e) = crate::agent::index_episode(&self.ws.lock(), run_id, result) {
            tracing::warn!(run_id, task = result.task, %e, "cannot index a served episode");
        }
    }

    /// The last reply of an episode. The partial reward's baseline is the
    /// task's recorded one, or measured once per task on first use.
    fn final_answer(&self, observation: String, task: &Task, result: &EpisodeResult) -> Stepped {
        let baseline = match self.settings.reward {
            RewardMode::Partial => match crate::rl::baseline_for(&self.provider, task) {
                Ok(b) => Some(b),
                Err(e) => {
                    tracing::warn!(task = task.id(), %e, "cannot measure the partial reward's baseline");
                    None
                }
            },
            _ => None,
        };
        Stepped {
            observation,
            step_secs: 0.0,
            messages: Vec::new(),
            done: true,
            reward: f64::from(episode_reward(
                result,
                self.settings.reward,
                baseline.as_deref(),
            )),
            info: Info {
                turn: result.turns,
                end_reason: Some(result.end_reason),
                failure_mode: result.failure_mode.map(|m| m.as_str().to_string()),
                tests: result.tests.clone(),
                passed: Some(result.passed),
                error: result.error.clone(),
            },
        }
    }
}
