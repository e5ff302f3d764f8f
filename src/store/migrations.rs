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
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

/// Bring `conn` up to [`SCHEMA_VERSION`], each step in its own transaction.
pub fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let current: usize =
        conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))? as usize;
    if current > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}
