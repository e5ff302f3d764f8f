//! One candidate as it moves through the stages: the task being built, the
//! spec it came from, its transcript, attempts, timings and token usage.

use std::collections::BTreeMap;

use super::funnel::Stage;
use super::initial_tests::TestRevision;
use super::record::Exchange;
use super::taxonomy::Spec;
use crate::llm::TokenUsage;
use crate::task::{FileTree, Task, TaskMeta};

/// A candidate task under construction.
pub struct Candidate {
    /// `cand-<seed>-<index>`; also the journal and reject directory name.
    pub id: String,
    /// Position among the run's candidates, from 0; the accepted task id is `gen-<seed>-<index>`.
    pub index: usize,
    /// The taxonomy sample (category, complexity level, scenario) it was built from.
    pub spec: Spec,
    /// The bundle so far; each stage fills in its part.
    pub task: Task,
    /// Every exchange with the generator model, in order.
    pub log: Vec<Exchange>,
    /// Attempts per stage, keyed by [`stage_key`]; recorded in provenance.
    pub attempts: BTreeMap<String, u32>,
    /// Wall time per stage in seconds, keyed by [`stage_key`].
    pub seconds: BTreeMap<String, f64>,
    /// Tokens spent on it: generator calls plus the solver's episodes.
    pub usage: TokenUsage,
    /// Hash of the prompt template used at each stage, keyed by [`stage_key`].
    pub prompt_hashes: BTreeMap<String, String>,
    /// Stage-2 replacements of the initial tests (the model said they were wrong).
    pub test_revisions: Vec<TestRevision>,
    /// The audit stage's report, when it ran (stored with the task or the reject).
    pub audit: Option<crate::audit::AuditReport>,
}

impl Candidate {
    /// A fresh candidate for `spec`.
    pub fn new(id: String, index: usize, spec: Spec) -> Candidate {
        let mut meta = TaskMeta::default();
        meta.task.id = id.clone();
        meta.task.name = id.clone();
        meta.task.category = spec.category.clone();
        meta.task.complexity = Some(spec.level.level);
        meta.task.scenario = spec.scenario.clone();
        Candidate {
            id,
            index,
            spec,
            task: Task {
                meta,
                instruction: String::new(),
                truth: String::new(),
                environment: FileTree::default(),
                tests: FileTree::default(),
                solution: FileTree::default(),
            },
            log: Vec::new(),
            attempts: BTreeMap::new(),
            seconds: BTreeMap::new(),
            usage: TokenUsage::default(),
            prompt_hashes: BTreeMap::new(),
            test_revisions: Vec::new(),
            audit: None,
        }
    }

    /// A candidate that revises the stored `task` (a repair): it starts as
    /// the task, its spec taken from the task's own category, complexity
    /// and scenario.
    pub fn revising(id: String, task: Task) -> Candidate {
        let t = &task.meta.task;
        let spec = Spec {
            category: t.category.clone(),
            level: super::taxonomy::Level {
                level: t.complexity.unwrap_or(0),
                name: String::new(),
                description: String::new(),
            },
            scenario: t.scenario.clone(),
        };
        let mut cand = Candidate::new(id, 0, spec);
        cand.task = task;
        cand
    }

    /// Count an attempt at `stage`.
    pub fn attempt(&mut self, stage: Stage) -> u32 {
        let n = self.attempts.entry(stage_key(stage).into()).or_default();
        *n += 1;
        *n
    }

    /// Add wall time spent in `stage`.
    pub fn add_time(&mut self, stage: Stage, secs: f64) {
        *self.seconds.entry(stage_key(stage).into()).or_default() += secs;
    }
}

/// The key used for a stage in provenance tables.
pub fn stage_key(stage: Stage) -> &'static str {
    match stage {
        Stage::Task => "task",
        Stage::Environment => "environment",
        Stage::CompletionTests => "completion_tests",
        Stage::Solvability => "solvability",
        Stage::Audit => "audit",
    }
}
