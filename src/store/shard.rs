//! Shards: `--shard I/N` splits the work of `generate`, `tasks validate`
//! and `eval` between N processes (a Slurm job array, say), each writing
//! into its own workspace, and `endless workspace merge` brings them
//! together.
//!
//! The split is by a stable hash of each item's id (a task id, or an
//! offline task's id before it is written): item `x` belongs to shard
//! `fnv1a64(x) mod N`, where `fnv1a64` is 64-bit FNV-1a over the UTF-8
//! bytes (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`). It
//! depends on the id alone, so it is the same on every platform and
//! version, and adding tasks never moves a task to another shard.
//!
//! Each shard records what it is in its workspace's `shard.json`
//! ([`ShardRecord`]): its index and count, the command, a digest of the
//! whole selection (the same in every shard of one job), and whether it is
//! done, so that a merge can tell which shards are missing.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::StoreError;

/// The file in a shard's workspace that says what the shard is.
pub const SHARD_FILE: &str = "shard.json";

/// The most shards one job may have.
pub const MAX_SHARDS: u32 = 10_000;

/// Shard `index` of `count` (0-based, as `SLURM_ARRAY_TASK_ID` is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: u32,
    /// How many shards the work is split into.
    pub count: u32,
}

/// 64-bit FNV-1a of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The shard (of `count`) that item `id` belongs to.
pub fn shard_of(id: &str, count: u32) -> u32 {
    (fnv1a64(id.as_bytes()) % u64::from(count.max(1))) as u32
}

impl Shard {
    /// Whether item `id` belongs to this shard.
    pub fn contains(&self, id: &str) -> bool {
        shard_of(id, self.count) == self.index
    }

    /// The items of `ids` (by `id_of`) that belong to this shard, in order.
    pub fn select<T>(&self, items: Vec<T>, id_of: impl Fn(&T) -> &str) -> Vec<T> {
        items
            .into_iter()
            .filter(|t| self.contains(id_of(t)))
            .collect()
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    /// `I/N`, with `0 <= I < N <= 10000`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let Some((i, n)) = s.trim().split_once('/') else {
            return Err(format!(
                "{s:?} is not I/N (shard I of N, counted from 0, e.g. 0/4)"
            ));
        };
        let num = |what: &str, v: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| format!("{s:?}: {what} {v:?} is not a whole number"))
        };
        let (index, count) = (num("I", i)?, num("N", n)?);
        if count == 0 || count > MAX_SHARDS {
            return Err(format!("{s:?}: N must be 1 to {MAX_SHARDS}"));
        }
        if index >= count {
            return Err(format!(
                "{s:?}: I must be below N (shards are counted from 0: 0/{count} to {}/{count})",
                count - 1
            ));
        }
        Ok(Shard { index, count })
    }
}

/// What a shard is, in its workspace's `shard.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardRecord {
    /// This shard's index, `0..of`.
    pub shard: u32,
    /// How many shards the job has.
    pub of: u32,
    /// What the shards do: `generate`, `validate` or `eval`.
    pub kind: String,
    /// A digest of the whole job's selection and settings: every shard of
    /// one job has the same (an eval's run id, say).
    pub key: String,
    /// The command line, for people.
    #[serde(default)]
    pub command: Vec<String>,
    /// The request, as the command's use case reads it (an eval's
    /// settings, so a merge can finish the run).
    #[serde(default)]
    pub request: serde_json::Value,
    /// Items (tasks) in this shard.
    #[serde(default)]
    pub items: usize,
    /// Items in the whole job.
    #[serde(default)]
    pub total: usize,
    /// Whether the shard finished its work.
    pub done: bool,
    /// When it started (RFC 3339).
    #[serde(default)]
    pub started_at: String,
    /// When it finished, if it did.
    #[serde(default)]
    pub finished_at: Option<String>,
}

impl ShardRecord {
    /// This record's shard.
    pub fn shard(&self) -> Shard {
        Shard {
            index: self.shard,
            count: self.of,
        }
    }
}

/// Read `shard.json` of the workspace at `root` (`Ok(None)`: there is none,
/// the workspace is not a shard). A bad file is an error naming it and the
/// field at fault.
pub fn read_shard_record(root: &Path) -> Result<Option<ShardRecord>, StoreError> {
    let path = root.join(SHARD_FILE);
    // trusted: a shard record in the operator's own job directory
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(&path)(e)),
    };
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    let record: ShardRecord = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let at = if field == "." || field.is_empty() {
            String::new()
        } else {
            format!(" (field {field})")
        };
        StoreError::Invalid(format!("{}{at}: {}", path.display(), e.inner()))
    })?;
    if record.of == 0 || record.shard >= record.of {
        return Err(StoreError::Invalid(format!(
            "{}: shard {} of {} is not a shard (0 <= shard < of)",
            path.display(),
            record.shard,
            record.of
        )));
    }
    Ok(Some(record))
}

/// Write `record` as `shard.json` of the workspace at `root`, atomically.
pub fn write_shard_record(root: &Path, record: &ShardRecord) -> Result<(), StoreError> {
    let path = root.join(SHARD_FILE);
    let mut json = serde_json::to_vec_pretty(record)
        .map_err(|e| StoreError::Invalid(format!("{}: {e}", path.display())))?;
    json.push(b'\n');
    crate::fsutil::write_atomic(&path, &json).map_err(StoreError::io(&path))
}

/// Shard workspaces about to be merged, checked: all of one job, and
/// complete unless partial merges are allowed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardSet {
    /// The job's kind (`generate`, `validate`, `eval`).
    pub kind: String,
    /// The job's key (the same in every shard).
    pub key: String,
    /// How many shards the job has.
    pub of: u32,
    /// The shards that are here and done.
    pub done: Vec<u32>,
    /// The shards that are not here, or not done.
    pub missing: Vec<u32>,
    /// The request of the job (from any of its shards).
    pub request: serde_json::Value,
}

impl ShardSet {
    /// Check the records of the shard workspaces `records` (path, record):
    /// they must all be shards of one job (same kind, key and count). A
    /// shard that is absent or not done is listed in `missing`.
    pub fn check(records: &[(std::path::PathBuf, ShardRecord)]) -> Result<ShardSet, StoreError> {
        let Some((first_path, first)) = records.first() else {
            return Err(StoreError::Invalid("no shard workspaces to merge".into()));
        };
        let mut done = std::collections::BTreeSet::new();
        let mut seen = std::collections::BTreeMap::new();
        for (path, r) in records {
            if (r.kind.as_str(), r.key.as_str(), r.of)
                != (first.kind.as_str(), first.key.as_str(), first.of)
            {
                return Err(StoreError::Invalid(format!(
                    "{} is shard {}/{} of another job ({} {}) than {} ({}/{} of {} {}); merge one job's shards at a time",
                    path.display(),
                    r.shard,
                    r.of,
                    r.kind,
                    r.key,
                    first_path.display(),
                    first.shard,
                    first.of,
                    first.kind,
                    first.key
                )));
            }
            if let Some(other) = seen.insert(r.shard, path.clone()) {
                return Err(StoreError::Invalid(format!(
                    "{} and {} are both shard {}/{}",
                    other.display(),
                    path.display(),
                    r.shard,
                    r.of
                )));
            }
            if r.done {
                done.insert(r.shard);
            }
        }
        Ok(ShardSet {
            kind: first.kind.clone(),
            key: first.key.clone(),
            of: first.of,
            missing: (0..first.of).filter(|i| !done.contains(i)).collect(),
            done: done.into_iter().collect(),
            request: first.request.clone(),
        })
    }

    /// `shards 1, 3 of 4 are missing or not done`, for errors.
    pub fn missing_line(&self) -> String {
        let list: Vec<String> = self.missing.iter().map(u32::to_string).collect();
        format!(
            "shard{} {} of {} (0-based) {} missing or not done",
            if self.missing.len() == 1 { "" } else { "s" },
            list.join(", "),
            self.of,
            if self.missing.len() == 1 { "is" } else { "are" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_published_vectors() {
        // From the FNV reference test suite.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn shards_parse_and_bad_ones_say_why() {
        assert_eq!(
            "0/4".parse::<Shard>().unwrap(),
            Shard { index: 0, count: 4 }
        );
        assert_eq!("3/4".parse::<Shard>().unwrap().to_string(), "3/4");
        for (bad, why) in [
            ("4/4", "I must be below N"),
            ("1/0", "N must be 1 to"),
            ("x/4", "is not a whole number"),
            ("-1/4", "is not a whole number"),
            ("2", "is not I/N"),
            ("1/99999", "N must be 1 to"),
        ] {
            let err = bad.parse::<Shard>().unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn every_id_is_in_exactly_one_shard_and_adding_ids_moves_none() {
        let ids: Vec<String> = (0..200).map(|i| format!("task-{i}")).collect();
        let shards: Vec<Shard> = (0..4).map(|index| Shard { index, count: 4 }).collect();
        for id in &ids {
            assert_eq!(shards.iter().filter(|s| s.contains(id)).count(), 1);
        }
        let sizes: Vec<usize> = shards
            .iter()
            .map(|s| s.select(ids.clone(), |x| x).len())
            .collect();
        assert!(sizes.iter().all(|n| *n > 25), "{sizes:?}");
        // A task's shard depends on its id alone.
        assert_eq!(shard_of("task-7", 4), shard_of("task-7", 4));
    }

    fn record(shard: u32, done: bool) -> (std::path::PathBuf, ShardRecord) {
        (
            format!("shard-{shard}").into(),
            ShardRecord {
                shard,
                of: 4,
                kind: "validate".into(),
                key: "k".into(),
                command: vec![],
                request: serde_json::Value::Null,
                items: 1,
                total: 4,
                done,
                started_at: String::new(),
                finished_at: None,
            },
        )
    }

    #[test]
    fn a_set_names_missing_and_unfinished_shards_and_refuses_mixed_jobs() {
        let set = ShardSet::check(&[record(0, true), record(2, false), record(3, true)]).unwrap();
        assert_eq!(set.missing, vec![1, 2]);
        assert_eq!(
            set.missing_line(),
            "shards 1, 2 of 4 (0-based) are missing or not done"
        );
        let mut other = record(1, true);
        other.1.key = "other".into();
        let err = ShardSet::check(&[record(0, true), other]).unwrap_err();
        assert!(err.to_string().contains("another job"), "{err}");
        let err = ShardSet::check(&[record(0, true), record(0, true)]).unwrap_err();
        assert!(err.to_string().contains("both shard 0/4"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        assert!(read_shard_record(dir.path()).unwrap().is_none());
        write_shard_record(dir.path(), &record(1, true).1).unwrap();
        assert_eq!(read_shard_record(dir.path()).unwrap().unwrap().shard, 1);
        std::fs::write(dir.path().join(SHARD_FILE), r#"{"shard": 1}"#).unwrap();
        let err = read_shard_record(dir.path()).unwrap_err().to_string();
        assert!(err.contains("shard.json"), "{err}");
    }
}
