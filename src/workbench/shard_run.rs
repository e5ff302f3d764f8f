//! A shard at work (`--shard I/N`): what it records in its workspace's
//! `shard.json` when it starts and when it is done, and the digest that
//! tells the shards of one job from those of another.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use sha2::{Digest, Sha256};

use crate::store::{read_shard_record, write_shard_record, Shard, ShardRecord};

/// A digest of a job's whole selection and settings, the same in every
/// shard of the job: `kind` and each part, hashed (SHA-256, 16 hex digits).
pub fn selection_key(kind: &str, parts: &[&str]) -> String {
    let mut h = Sha256::new();
    h.update(kind.as_bytes());
    for p in parts {
        h.update([0]);
        h.update(p.as_bytes());
    }
    hex::encode(h.finalize())[..16].to_string()
}

/// A shard at work: its record is written (not done) when it starts and
/// marked done by [`ShardRun::finish`]. A shard that dies stays not done,
/// so a merge reports it missing; running it again resumes.
pub struct ShardRun {
    root: PathBuf,
    record: ShardRecord,
    resumed: bool,
}

/// What a sharded command is.
pub struct ShardJob<'a> {
    /// `generate`, `validate` or `eval`.
    pub kind: &'a str,
    /// [`selection_key`] of the whole job.
    pub key: String,
    /// The request, for the merge to finish the job with.
    pub request: serde_json::Value,
    /// Items in this shard.
    pub items: usize,
    /// Items in the whole job.
    pub total: usize,
}

impl ShardRun {
    /// Record in the workspace at `root` that shard `shard` of `job` has
    /// started. Refused when the workspace holds an unfinished shard of
    /// another job (give each sharded job its own workspaces). When it
    /// holds this very shard (run before, finished or not), this run
    /// resumes it: the first run's start is kept ([`Self::resumed_since`]).
    pub fn begin(root: &Path, shard: Shard, job: ShardJob<'_>) -> Result<ShardRun> {
        let mut started_at = crate::store::now();
        let mut resumed = false;
        if let Some(old) = read_shard_record(root)? {
            let same = old.kind == job.kind && old.key == job.key && old.shard() == shard;
            if same {
                started_at = old.started_at.clone();
                resumed = true;
            }
            if !old.done && !same {
                bail!(
                    "{} holds shard {}/{} of another {} job that has not finished (key {}); give each sharded job its own workspaces, or delete its shard.json",
                    root.display(),
                    old.shard,
                    old.of,
                    old.kind,
                    old.key
                );
            }
        }
        let record = ShardRecord {
            shard: shard.index,
            of: shard.count,
            kind: job.kind.to_string(),
            key: job.key,
            command: std::env::args().collect(),
            request: job.request,
            items: job.items,
            total: job.total,
            done: false,
            started_at,
            finished_at: None,
        };
        write_shard_record(root, &record)?;
        Ok(ShardRun {
            root: root.to_path_buf(),
            record,
            resumed,
        })
    }

    /// When this shard first started, if this run resumes it: work
    /// recorded since then need not be done again.
    pub fn resumed_since(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        if !self.resumed {
            return None;
        }
        chrono::DateTime::parse_from_rfc3339(&self.record.started_at)
            .ok()
            .map(|t| t.with_timezone(&chrono::Utc))
    }

    /// Mark the shard done.
    pub fn finish(mut self) -> Result<()> {
        self.record.done = true;
        self.record.finished_at = Some(crate::store::now());
        write_shard_record(&self.root, &self.record)?;
        Ok(())
    }
}
