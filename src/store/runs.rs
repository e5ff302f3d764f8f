//! Runs (an evaluation, a generation, a training job) and their episodes.

use rusqlite::{params, Row};
use serde::Serialize;

use super::{now, StoreError, Workspace};

/// One run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    /// The run id, also its directory under `runs/` (e.g. `eval-<hash>`, `gen-<seed>`).
    pub id: String,
    /// `eval`, `run` (one task), `generate`, `serve` or `bench`.
    pub kind: String,
    /// The policy spec the run used (e.g. `oracle`, `openai:<model>@<url>`); `http` for served sessions.
    pub policy: String,
    /// Run parameters recorded at creation (samples, max turns, task count, ...).
    pub config: serde_json::Value,
    /// The final report (eval report, generation funnel), set when the run finishes; `{}` until then.
    pub summary: serde_json::Value,
    /// When the run was first created (RFC 3339); a resumed run keeps it.
    pub created_at: String,
    /// When the run finished (RFC 3339); `None` while running or if it never finished.
    pub finished_at: Option<String>,
}

/// One indexed episode (its files live under `runs/<run>/episodes/<task>/`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EpisodeRow {
    /// The run the episode belongs to.
    pub run_id: String,
    /// The task the episode ran.
    pub task_id: String,
    /// Sample index of the episode within the run, from 0.
    pub sample: u32,
    /// Whether every final test passed (never when the episode errored or its shell died).
    pub passed: bool,
    /// Fraction of final tests that passed, 0.0 to 1.0.
    pub reward: f64,
    /// Agent turns taken.
    pub turns: u32,
    /// Why the episode stopped (`done`, `max_turns`, `timeout`, `shell_died`, `resource_limit`, `error`).
    pub end_reason: String,
    /// Classified failure of a failed episode (`loop`, `premature_done`, ...); `None` when it passed.
    pub failure_mode: Option<String>,
    /// Path of the result JSON, relative to the workspace root.
    pub path: String,
    /// Reviewer's rating, 1-5, if given.
    pub rating: Option<u8>,
    /// Reviewer's free-form label, if given.
    pub label: Option<String>,
    /// Reviewer's notes.
    pub notes: String,
    /// A human took the session over during the episode (the result's
    /// `taken_over` is set): not the policy's own run.
    pub taken_over: bool,
    /// Every failure label that applies, as stored (`loop`,
    /// `turn_exhaustion`...; they overlap); empty when it passed.
    pub failure_labels: Vec<String>,
    /// The policy that played it (`oracle`, `openai:M@URL`...).
    pub policy: String,
    /// How long it took, sandbox start to verification, in seconds.
    pub duration_secs: f64,
    /// The episode it was forked from, `run/task/sample@step`.
    pub forked_from: Option<String>,
    /// When it was indexed (RFC 3339): when it finished, or when it was
    /// imported; a merge keeps the other workspace's.
    pub created_at: String,
}

/// The columns [`episode_from_row`] reads, in its order.
const EPISODE_COLUMNS: &str = "run_id, task_id, sample, passed, reward, turns, end_reason, failure_mode, path, rating, label, notes, taken_over, failure_labels, policy, duration_secs, forked_from, created_at";

fn run_from_row(r: &Row<'_>) -> rusqlite::Result<RunRow> {
    let config: String = r.get(3)?;
    let summary: String = r.get(4)?;
    Ok(RunRow {
        id: r.get(0)?,
        kind: r.get(1)?,
        policy: r.get(2)?,
        config: serde_json::from_str(&config).unwrap_or_default(),
        summary: serde_json::from_str(&summary).unwrap_or_default(),
        created_at: r.get(5)?,
        finished_at: r.get(6)?,
    })
}

fn episode_from_row(r: &Row<'_>) -> rusqlite::Result<EpisodeRow> {
    Ok(EpisodeRow {
        run_id: r.get(0)?,
        task_id: r.get(1)?,
        sample: r.get::<_, i64>(2)?.max(0) as u32,
        passed: r.get(3)?,
        reward: r.get(4)?,
        turns: r.get::<_, i64>(5)?.max(0) as u32,
        end_reason: r.get(6)?,
        failure_mode: r.get(7)?,
        path: r.get(8)?,
        rating: r.get::<_, Option<i64>>(9)?.map(|v| v.clamp(0, 5) as u8),
        label: r.get(10)?,
        notes: r.get(11)?,
        taken_over: r.get(12)?,
        failure_labels: serde_json::from_str(&r.get::<_, String>(13)?).unwrap_or_default(),
        policy: r.get(14)?,
        duration_secs: r.get(15)?,
        forked_from: r.get(16)?,
        created_at: r.get(17)?,
    })
}

/// What the index keeps of an episode's result file beyond its row's
/// first columns: whether a human took it over, and its failure labels
/// (for a result recorded before labels existed: its primary mode).
#[derive(Debug, Default, PartialEq)]
pub(super) struct ResultFacts {
    pub taken_over: bool,
    pub failure_labels: Vec<String>,
    pub policy: String,
    pub duration_secs: f64,
    pub forked_from: Option<String>,
}

/// [`ResultFacts`] of the result at `path`; the default for a file that
/// cannot be read as JSON.
pub(super) fn result_facts(path: &std::path::Path) -> ResultFacts {
    // trusted: this workspace's own episode results
    let Some(v) = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
    else {
        return ResultFacts::default();
    };
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|l| l.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut failure_labels = strings(&v["failure_labels"]);
    if failure_labels.is_empty() {
        failure_labels.extend(v["failure_mode"].as_str().map(String::from));
    }
    let fork = &v["forked_from"];
    ResultFacts {
        taken_over: v.get("taken_over").is_some_and(|t| !t.is_null()),
        failure_labels,
        policy: v["policy"].as_str().unwrap_or_default().to_string(),
        duration_secs: v["timings"]["total_secs"].as_f64().unwrap_or(0.0),
        forked_from: fork.is_object().then(|| {
            format!(
                "{}/{}/{}@{}",
                fork["run"].as_str().unwrap_or("?"),
                fork["task"].as_str().unwrap_or("?"),
                fork["sample"],
                fork["at_step"]
            )
        }),
    }
}

impl Workspace {
    /// Create a run row (or keep the existing one when resuming).
    pub fn upsert_run(
        &self,
        id: &str,
        kind: &str,
        policy: &str,
        config: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO runs (id, kind, policy, config, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (id) DO NOTHING",
            params![id, kind, policy, config.to_string(), now()],
        )?;
        Ok(())
    }

    /// Mark a run finished with its summary.
    pub fn finish_run(&self, id: &str, summary: &serde_json::Value) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE runs SET summary = ?1, finished_at = ?2 WHERE id = ?3",
            params![summary.to_string(), now(), id],
        )?;
        Ok(())
    }

    /// All runs, newest first.
    pub fn list_runs(&self) -> Result<Vec<RunRow>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, kind, policy, config, summary, created_at, finished_at FROM runs ORDER BY created_at DESC, id DESC",
        )?;
        let rows = stmt.query_map([], run_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Index one finished episode (replacing an earlier row for the same
    /// sample); an empty `created_at` is now.
    pub fn index_episode(&self, e: &EpisodeRow) -> Result<(), StoreError> {
        let created = if e.created_at.is_empty() {
            now()
        } else {
            e.created_at.clone()
        };
        self.conn.execute(
            "INSERT INTO episodes (run_id, task_id, sample, passed, reward, turns, end_reason, failure_mode, path, created_at, taken_over, failure_labels, policy, duration_secs, forked_from)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
             ON CONFLICT (run_id, task_id, sample) DO UPDATE SET passed = excluded.passed,
                 reward = excluded.reward, turns = excluded.turns, end_reason = excluded.end_reason,
                 failure_mode = excluded.failure_mode, path = excluded.path,
                 taken_over = excluded.taken_over, failure_labels = excluded.failure_labels,
                 policy = excluded.policy, duration_secs = excluded.duration_secs,
                 forked_from = excluded.forked_from",
            params![e.run_id, e.task_id, e.sample, e.passed, e.reward, e.turns, e.end_reason, e.failure_mode, e.path, created, e.taken_over, serde_json::to_string(&e.failure_labels).unwrap_or_else(|_| "[]".into()), e.policy, e.duration_secs, e.forked_from],
        )?;
        Ok(())
    }

    /// Fill the columns later schema versions added (`taken_over`,
    /// `failure_labels`, `policy`, `duration_secs`, `forked_from`) of
    /// indexed episodes from their result files, for a database made
    /// before the index had them. A result that cannot be
    /// read leaves its row as it is: `workspace rebuild` reports such
    /// files. Returns how many rows changed.
    pub(super) fn backfill_from_results(&self) -> Result<usize, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT run_id, task_id, sample, path FROM episodes WHERE policy = ''")?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let mut changed = 0;
        for (run, task, sample, path) in rows {
            if path.is_empty() {
                continue;
            }
            let facts = result_facts(&self.root().join(&path));
            if facts == ResultFacts::default() {
                continue;
            }
            changed += self.conn.execute(
                "UPDATE episodes SET taken_over = taken_over OR ?1, failure_labels = ?2,
                     policy = ?3, duration_secs = ?4, forked_from = ?5
                 WHERE run_id = ?6 AND task_id = ?7 AND sample = ?8",
                params![
                    facts.taken_over,
                    serde_json::to_string(&facts.failure_labels).unwrap_or_else(|_| "[]".into()),
                    facts.policy,
                    facts.duration_secs,
                    facts.forked_from,
                    run,
                    task,
                    sample
                ],
            )?;
        }
        Ok(changed)
    }

    /// Drop the index rows of every episode of run `run_id` (an import
    /// being replaced); how many there were.
    pub fn forget_episodes(&self, run_id: &str) -> Result<usize, StoreError> {
        Ok(self
            .conn
            .execute("DELETE FROM episodes WHERE run_id = ?1", params![run_id])?)
    }

    /// Episodes of a run (or of every run when `run_id` is `None`).
    pub fn list_episodes(&self, run_id: Option<&str>) -> Result<Vec<EpisodeRow>, StoreError> {
        let sql = format!(
            "SELECT {EPISODE_COLUMNS} FROM episodes WHERE (?1 IS NULL OR run_id = ?1) ORDER BY run_id, task_id, sample"
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map([run_id], episode_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Episodes of one task across all runs (uses the `episodes_task` index).
    pub fn task_episodes(&self, task_id: &str) -> Result<Vec<EpisodeRow>, StoreError> {
        let sql = format!(
            "SELECT {EPISODE_COLUMNS} FROM episodes WHERE task_id = ?1 ORDER BY run_id, task_id, sample"
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map([task_id], episode_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Rate an episode 1-5 with an optional label and notes.
    pub fn rate_episode(
        &self,
        run_id: &str,
        task_id: &str,
        sample: u32,
        rating: Option<u8>,
        label: Option<&str>,
        notes: &str,
    ) -> Result<(), StoreError> {
        if let Some(r) = rating {
            if !(1..=5).contains(&r) {
                return Err(StoreError::Invalid(format!("rating {r} is outside 1..=5")));
            }
        }
        let n = self.conn.execute(
            "UPDATE episodes SET rating = ?1, label = ?2, notes = ?3 WHERE run_id = ?4 AND task_id = ?5 AND sample = ?6",
            params![rating.map(i64::from), label, notes, run_id, task_id, sample],
        )?;
        if n == 0 {
            return Err(StoreError::Invalid(format!(
                "no episode {run_id}/{task_id}/{sample}"
            )));
        }
        let row = self.episode_row(run_id, task_id, sample)?;
        self.save_episode_review(&row)
    }

    /// One episode's row.
    pub fn episode_row(
        &self,
        run_id: &str,
        task_id: &str,
        sample: u32,
    ) -> Result<EpisodeRow, StoreError> {
        let sql = format!(
            "SELECT {EPISODE_COLUMNS} FROM episodes WHERE run_id = ?1 AND task_id = ?2 AND sample = ?3"
        );
        self.conn
            .query_row(&sql, params![run_id, task_id, sample], episode_from_row)
            .map_err(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => {
                    StoreError::Invalid(format!("no episode {run_id}/{task_id}/{sample}"))
                }
                e => StoreError::Sql(e),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{EpisodeRow, Workspace};

    #[test]
    fn task_episodes_agrees_with_list_episodes() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        ws.upsert_run("r", "eval", "oracle", &serde_json::json!({}))
            .unwrap();
        for (task, sample) in [("a", 0), ("b", 0), ("a", 1)] {
            ws.index_episode(&EpisodeRow {
                run_id: "r".into(),
                task_id: task.into(),
                sample,
                passed: sample == 0,
                reward: 0.0,
                turns: 1,
                end_reason: "done".into(),
                failure_mode: None,
                path: String::new(),
                rating: None,
                label: None,
                notes: String::new(),
                taken_over: false,
                failure_labels: Vec::new(),
                policy: "oracle".into(),
                duration_secs: 1.5,
                forked_from: None,
                created_at: String::new(),
            })
            .unwrap();
        }
        let all = ws.list_episodes(None).unwrap();
        let want: Vec<_> = all.into_iter().filter(|e| e.task_id == "a").collect();
        assert_eq!(ws.task_episodes("a").unwrap(), want);
    }

    #[test]
    fn an_older_index_learns_what_it_lacks_from_the_results() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        ws.upsert_run("r", "eval", "oracle", &serde_json::json!({}))
            .unwrap();
        let ep_dir = dir.path().join("runs/r/episodes/t");
        std::fs::create_dir_all(&ep_dir).unwrap();
        for (sample, taken) in [(0u32, true), (1, false)] {
            let path = format!("runs/r/episodes/t/{sample}.json");
            let takeover = if taken {
                serde_json::json!({"turn": 1, "step": 0, "human_steps": 1})
            } else {
                serde_json::Value::Null
            };
            // The taken-over one failed with two labels; the other, a
            // result from before labels, has only its primary mode.
            let result = if taken {
                serde_json::json!({"task": "t", "sample": sample, "taken_over": takeover,
                    "failure_mode": "loop", "failure_labels": ["loop", "turn_exhaustion"],
                    "policy": "oracle", "timings": {"total_secs": 2.5},
                    "forked_from": {"run": "r0", "task": "t", "sample": 3, "at_step": 1}})
            } else {
                serde_json::json!({"task": "t", "sample": sample, "taken_over": takeover,
                    "failure_mode": "premature_done"})
            };
            std::fs::write(dir.path().join(&path), result.to_string()).unwrap();
            ws.index_episode(&EpisodeRow {
                run_id: "r".into(),
                task_id: "t".into(),
                sample,
                passed: true,
                reward: 1.0,
                turns: 1,
                end_reason: "done".into(),
                failure_mode: None,
                path,
                rating: None,
                label: None,
                notes: String::new(),
                taken_over: false,
                failure_labels: Vec::new(),
                policy: "oracle".into(),
                duration_secs: 1.5,
                forked_from: None,
                created_at: String::new(),
            })
            .unwrap();
        }
        // Make it the database an older build wrote: no columns, schema 2.
        ws.conn
            .execute_batch(
                "ALTER TABLE episodes DROP COLUMN taken_over;
                 ALTER TABLE episodes DROP COLUMN failure_labels;
                 ALTER TABLE episodes DROP COLUMN policy;
                 ALTER TABLE episodes DROP COLUMN duration_secs;
                 ALTER TABLE episodes DROP COLUMN forked_from;
                 PRAGMA user_version = 2;",
            )
            .unwrap();
        drop(ws);
        let ws = Workspace::open(dir.path()).unwrap();
        let marks: Vec<bool> = ws
            .list_episodes(None)
            .unwrap()
            .iter()
            .map(|e| e.taken_over)
            .collect();
        assert_eq!(marks, [true, false]);
        let labels: Vec<Vec<String>> = ws
            .list_episodes(None)
            .unwrap()
            .into_iter()
            .map(|e| e.failure_labels)
            .collect();
        assert_eq!(
            labels,
            [vec!["loop", "turn_exhaustion"], vec!["premature_done"]]
        );
        let first = &ws.list_episodes(None).unwrap()[0];
        assert_eq!(
            (first.policy.as_str(), first.duration_secs),
            ("oracle", 2.5)
        );
        assert_eq!(first.forked_from.as_deref(), Some("r0/t/3@1"));
    }
}
