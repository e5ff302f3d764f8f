//! A repair of a stored task through the generation stages: the task, its
//! bundle and the reasons it needs repair (curator's note and rating, audit
//! findings with their evidence, validation problems, failure labels of its
//! episodes) go to the generator model with the repair prompt
//! (`repair_task.md`); the revised bundle it sends back goes through the
//! stages a new task does (environment build with its repair rounds,
//! completion tests that fail initially, solvability with the solver) and
//! then the audit checks that triggered the repair, each of which must now
//! pass. Storing the result as a new version is the caller's part.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::candidate::Candidate;
use super::config::{AuditMode, AuditStage, Shared};
use super::funnel::Stage;
use super::prompts::PromptName;
use super::record::Exchange;
use super::reply::section;
use super::stages::{self, Stop};
use crate::audit::{AuditOptions, AuditReport, CheckStatus};
use crate::llm::ChatMessage;
use crate::task::{Task, FINAL_TESTS, INITIAL_TESTS};

/// One reason a task needs repair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reason {
    /// Where it comes from: `curator`, `audit`, `validation` or `episode`.
    pub source: String,
    /// One line, e.g. `[weak-tests] 2 of 3 mutants survive`.
    pub summary: String,
    /// What shows it (a mutant's diff, an episode's excerpt), shortened.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evidence: String,
}

impl Reason {
    /// The reason as the repair prompt lists it.
    pub fn prompt_text(&self) -> String {
        let mut out = format!("- ({}) {}", self.source, self.summary);
        if !self.evidence.trim().is_empty() {
            out.push_str("\n  Evidence:\n");
            for line in self.evidence.lines() {
                out.push_str("    ");
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

/// A revised task that passed every stage and the re-run checks.
pub struct Repaired {
    /// The revised bundle (id and provenance as the stored task's, plus the
    /// stages' records: solvability, baseline, attempts).
    pub task: Task,
    /// The re-run audit, when checks triggered the repair.
    pub audit: Option<AuditReport>,
    /// Every exchange with the generator model.
    pub log: Vec<Exchange>,
}

/// A repair that failed: the stage, why, the revision as far as it got,
/// and the exchanges so far.
pub struct Failed {
    /// The revised bundle as far as it got.
    pub task: Task,
    /// The stage it failed at.
    pub stage: Stage,
    /// Why.
    pub reason: String,
    /// Every exchange with the generator model.
    pub log: Vec<Exchange>,
}

/// Repair `task` for `reasons` as candidate `name` (its solution episodes
/// go to `<run_dir>/solutions/<name>`); `recheck` holds the audit checks
/// to re-run (none: no audit stage). The stored task is not touched.
pub async fn repair(
    shared: &Shared,
    name: &str,
    task: &Task,
    reasons: &[Reason],
    recheck: &AuditOptions,
) -> Result<Repaired, Failed> {
    let mut cand = Candidate::revising(name.to_string(), task.clone());
    let result = run(shared, &mut cand, reasons, recheck).await;
    match result {
        Ok(()) => Ok(Repaired {
            task: cand.task,
            audit: cand.audit,
            log: cand.log,
        }),
        Err(Stop::Reject(stage, reason)) => Err(Failed {
            task: cand.task,
            stage,
            reason,
            log: cand.log,
        }),
        // The model server or the sandbox failed, not the revision: said
        // as such, the task stays as it was.
        Err(Stop::Infra(stage, reason)) => Err(Failed {
            task: cand.task,
            stage,
            reason: format!("infrastructure error (not a judgement of the revision): {reason}"),
            log: cand.log,
        }),
    }
}

async fn run(
    shared: &Shared,
    cand: &mut Candidate,
    reasons: &[Reason],
    recheck: &AuditOptions,
) -> Result<(), Stop> {
    let stage = Stage::Task;
    let attempt = cand.attempt(stage);
    let kind = shared.config.definition;
    let (tag, _) = stages::definition_instructions(kind);
    let reasons_text = reasons
        .iter()
        .map(Reason::prompt_text)
        .collect::<Vec<_>>()
        .join("\n");
    let t = &cand.task;
    let text = |tree: &crate::task::FileTree, path: &str| tree.text(path).unwrap_or("").to_string();
    let (definition, initial, final_tests, solution) = (
        text(&t.environment, kind.file_name()),
        text(&t.tests, INITIAL_TESTS),
        text(&t.tests, FINAL_TESTS),
        text(&t.solution, "solve.sh"),
    );
    let facts = stages::sandbox_facts(shared);
    let prompt = shared
        .prompts
        .render(
            PromptName::Repair,
            &[
                ("reasons", &reasons_text),
                ("task", &t.instruction),
                ("truth", &t.truth),
                ("sandbox_facts", &facts),
                ("definition_file", kind.file_name()),
                ("definition_tag", tag),
                ("definition", &definition),
                ("initial_tests", &initial),
                ("final_tests", &final_tests),
                ("solution", &solution),
            ],
        )
        .map_err(|e| (stage, e.to_string()))?;
    cand.prompt_hashes
        .insert("repair".into(), prompt.template_hash.clone());
    let messages = vec![ChatMessage::user(prompt.text)];
    let reply = stages::ask(
        shared,
        cand,
        stage,
        attempt,
        &messages,
        &shared.config.test_sampling,
    )
    .await?;
    cand.task.instruction = section(&reply, "task").map_err(|e| (stage, e.to_string()))?;
    if let Ok(truth) = section(&reply, "truth") {
        cand.task.truth = truth;
    }
    if let Ok(solve) = section(&reply, "solution") {
        cand.task
            .solution
            .insert("solve.sh", solve.into_bytes(), true);
    }
    let final_tests = section(&reply, "test_final_state");
    stages::environment_rounds(shared, cand, messages, Some(reply)).await?;
    let t0 = Instant::now();
    let final_tests = final_tests.map_err(|e| (Stage::CompletionTests, e.to_string()))?;
    stages::check_completion_tests(shared, cand, final_tests, t0).await?;
    cand.task.meta.provenance.solvability = Some(stages::solvability(shared, cand).await?);
    if recheck.checks.is_empty() {
        return Ok(());
    }
    let audit = AuditStage {
        mode: AuditMode::Reject,
        options: recheck.clone(),
    };
    let id = cand.task.id().to_string();
    stages::audit(shared, cand, &audit, &id).await?;
    let not_passed: Vec<String> = cand
        .audit
        .iter()
        .flat_map(|r| r.checks.iter())
        .filter_map(|c| match &c.status {
            CheckStatus::Ok => None,
            CheckStatus::Finding => Some(format!("{} found something", c.check)),
            CheckStatus::Skipped { why } => Some(format!("{} was skipped: {why}", c.check)),
            CheckStatus::OutOfTime { done } => {
                Some(format!("{} ran out of time ({done})", c.check))
            }
            CheckStatus::Error { message } => Some(format!("{} failed: {message}", c.check)),
        })
        .collect();
    if !not_passed.is_empty() {
        return Err(Stop::Reject(
            Stage::Audit,
            format!("the re-run checks did not pass: {}", not_passed.join("; ")),
        ));
    }
    Ok(())
}
