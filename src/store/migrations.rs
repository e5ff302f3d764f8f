//! Versioned schema migrations, applied in order; `PRAGMA user_version`
//! records how many have run. Never edit a shipped migration: append one.

use rusqlite::Connection;

use super::StoreError;

const MIGRATIONS: &[&str] = &[
    // 1: tasks, runs, episodes, jobs.
    r#"
    CREATE TABLE tasks (
        id            TEXT PRIMARY KEY,
        name          TEXT NOT NULL DEFAULT '',
        category      TEXT NOT NULL DEFAULT '',
        complexity    INTEGER,
        scenario      TEXT NOT NULL DEFAULT '',
        tags          TEXT NOT NULL DEFAULT '[]',
        status        TEXT NOT NULL DEFAULT 'candidate'
                      CHECK (status IN ('candidate', 'accepted', 'rejected', 'archived')),
        source_format TEXT NOT NULL DEFAULT 'native',
        instruction   TEXT NOT NULL DEFAULT '',
        pass_at_k     TEXT NOT NULL DEFAULT '{}',
        rating        INTEGER,
        notes         TEXT NOT NULL DEFAULT '',
        created_at    TEXT NOT NULL,
        updated_at    TEXT NOT NULL
    );
    CREATE INDEX tasks_category ON tasks (category);
    CREATE INDEX tasks_status ON tasks (status);
    CREATE TABLE runs (
        id          TEXT PRIMARY KEY,
        kind        TEXT NOT NULL,
        policy      TEXT NOT NULL DEFAULT '',
        config      TEXT NOT NULL DEFAULT '{}',
        summary     TEXT NOT NULL DEFAULT '{}',
        created_at  TEXT NOT NULL,
        finished_at TEXT
    );
    CREATE TABLE episodes (
        run_id       TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        task_id      TEXT NOT NULL,
        sample       INTEGER NOT NULL,
        passed       INTEGER NOT NULL,
        reward       REAL NOT NULL DEFAULT 0,
        turns        INTEGER NOT NULL DEFAULT 0,
        end_reason   TEXT NOT NULL DEFAULT '',
        failure_mode TEXT,
        path         TEXT NOT NULL DEFAULT '',
        rating       INTEGER,
        label        TEXT,
        notes        TEXT NOT NULL DEFAULT '',
        created_at   TEXT NOT NULL,
        PRIMARY KEY (run_id, task_id, sample)
    );
    CREATE INDEX episodes_task ON episodes (task_id);
    CREATE TABLE jobs (
        id          TEXT PRIMARY KEY,
        kind        TEXT NOT NULL,
        params      TEXT NOT NULL DEFAULT '{}',
        status      TEXT NOT NULL,
        progress    REAL NOT NULL DEFAULT 0,
        message     TEXT NOT NULL DEFAULT '',
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL
    );
    "#,
    // 2: which process runs a job, so that another process opening the
    // workspace only marks the jobs of dead processes as interrupted.
    r#"
    ALTER TABLE jobs ADD COLUMN owner_pid INTEGER;
    "#,
    // 3: whether a human took the episode's session over (the result's
    // `taken_over`); rows of older databases are filled from their result
    // files when the workspace is opened (see `Workspace::open`).
    r#"
    ALTER TABLE episodes ADD COLUMN taken_over INTEGER NOT NULL DEFAULT 0;
    "#,
    // 4: every failure label of an episode (a JSON list: a loop can also
    // exhaust its turns), so that the Episodes view filters and searches by
    // each; rows of older databases are filled from their result files when
    // the workspace is opened.
    r#"
    ALTER TABLE episodes ADD COLUMN failure_labels TEXT NOT NULL DEFAULT '[]';
    "#,
    // 5: what the Episodes view shows of each episode besides its verdict:
    // the policy that played it, how long it took, and the episode it was
    // forked from (`run/task/sample@step`); filled from the result files
    // of older databases when the workspace is opened.
    r#"
    ALTER TABLE episodes ADD COLUMN policy TEXT NOT NULL DEFAULT '';
    ALTER TABLE episodes ADD COLUMN duration_secs REAL NOT NULL DEFAULT 0;
    ALTER TABLE episodes ADD COLUMN forked_from TEXT;
    "#,
    // 6: each task's latest audit (`tasks/<id>/audit.json`, see
    // `crate::audit`): its finding labels (a JSON list), how many findings,
    // the mutation score, whether every check finished, each check's
    // status (a JSON object); dropped with its task. Indexed by `tasks
    // audit` and rebuilt from the files by `workspace rebuild`. (`IF NOT
    // EXISTS`: a database rolled back to an older version keeps the table.)
    r#"
    CREATE TABLE IF NOT EXISTS task_audits (
        task_id         TEXT PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
        labels          TEXT NOT NULL DEFAULT '[]',
        findings        INTEGER NOT NULL DEFAULT 0,
        mutation_killed INTEGER,
        mutation_total  INTEGER,
        complete        INTEGER NOT NULL DEFAULT 1,
        checks          TEXT NOT NULL DEFAULT '{}',
        audited_at      TEXT NOT NULL
    );
    "#,
];

/// The last schema version whose episode columns an older index learns
/// from the result files (`taken_over` from 3, `failure_labels` from 4,
/// `policy`, `duration_secs` and `forked_from` from 5).
pub const EPISODES_CONTEXT: usize = 5;

/// The schema version this build writes.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

/// Bring `conn` up to [`SCHEMA_VERSION`], each step in its own immediate
/// transaction that re-reads the version, so that processes or threads
/// opening a new workspace at once never apply a step twice.
pub fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    loop {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let current = tx.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))? as usize;
        if current > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                found: current,
                supported: SCHEMA_VERSION,
            });
        }
        if current == SCHEMA_VERSION {
            return Ok(());
        }
        tx.execute_batch(MIGRATIONS[current])?;
        tx.pragma_update(None, "user_version", (current + 1) as i64)?;
        tx.commit()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_first_opens_migrate_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("endless.db");
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let db = db.clone();
                std::thread::spawn(move || {
                    let mut conn = Connection::open(&db).unwrap();
                    conn.busy_timeout(std::time::Duration::from_secs(10))
                        .unwrap();
                    migrate(&mut conn)
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
    }
}
