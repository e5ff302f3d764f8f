//! Making a shard workspace from a main one cheaply: every task bundle is
//! hard-linked (copied where the filesystem cannot link), and indexed with
//! its curation. Safe because nothing writes into a bundle's files in
//! place: bundle, curation and verdict writes are atomic renames, which
//! give the writer's workspace a new file and leave the other's as it was.

use std::fs;
use std::path::Path;

use serde::Serialize;

use super::{StoreError, Workspace};
use crate::fsutil::AtomicDir;

/// What [`Workspace::link_tasks_from`] did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LinkReport {
    /// Bundles linked (or copied) in.
    pub linked: usize,
    /// Bundles already here (left as they are).
    pub present: usize,
    /// Files copied because they could not be hard-linked.
    pub copied_files: usize,
}

/// Link (or copy) every regular file below `src` into `dst`, mirroring
/// its directories; returns the files that had to be copied.
fn link_tree(src: &Path, dst: &Path) -> Result<usize, StoreError> {
    let mut copied = 0;
    // trusted: the operator's main workspace and our staging
    for entry in fs::read_dir(src).map_err(StoreError::io(src))? {
        let entry = entry.map_err(StoreError::io(src))?;
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let kind = entry.file_type().map_err(StoreError::io(&from))?;
        if kind.is_dir() {
            // trusted: the operator's main workspace and our staging
            fs::create_dir_all(&to).map_err(StoreError::io(&to))?;
            // trusted: the operator's main workspace and our staging
            let mode = fs::metadata(&from)
                .map_err(StoreError::io(&from))?
                .permissions();
            // trusted: the operator's main workspace and our staging
            fs::set_permissions(&to, mode).map_err(StoreError::io(&to))?;
            copied += link_tree(&from, &to)?;
        } else if kind.is_file() {
            // trusted: the operator's main workspace and our staging
            if fs::hard_link(&from, &to).is_err() {
                // trusted: the operator's main workspace and our staging
                fs::copy(&from, &to).map_err(StoreError::io(&from))?;
                copied += 1;
            }
        } else if kind.is_symlink() {
            // trusted: the operator's main workspace and our staging
            let target = fs::read_link(&from).map_err(StoreError::io(&from))?;
            // trusted: the operator's main workspace and our staging
            std::os::unix::fs::symlink(&target, &to).map_err(StoreError::io(&to))?;
        }
    }
    Ok(copied)
}

impl Workspace {
    /// Give this workspace every task bundle of workspace `from` that it
    /// lacks, hard-linked, each appearing whole or not at all, and index
    /// them with the curation their `curation.json` holds. Bundles already
    /// here are left alone, so running it again changes nothing.
    pub fn link_tasks_from(&self, from: &Workspace) -> Result<LinkReport, StoreError> {
        let mut report = LinkReport::default();
        // trusted: the workspace roots the operator named, compared
        let here = fs::canonicalize(self.root()).map_err(StoreError::io(self.root()))?;
        // trusted: the workspace roots the operator named, compared
        let there = fs::canonicalize(from.root()).map_err(StoreError::io(from.root()))?;
        if here == there {
            return Err(StoreError::Invalid(format!(
                "{}: a workspace cannot take its tasks from itself",
                from.root().display()
            )));
        }
        for id in from.task_ids()? {
            if self.has_task(&id) {
                report.present += 1;
                continue;
            }
            let src = from.task_dir(&id);
            let target = self.task_dir(&id);
            let staging = AtomicDir::new(&target).map_err(StoreError::io(&target))?;
            report.copied_files += link_tree(&src, staging.path())?;
            staging.commit().map_err(StoreError::io(&target))?;
            report.linked += 1;
        }
        // Bundles without a row get one, with their curation.
        self.reconcile()?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn bundles_are_hard_linked_with_their_curation_and_writes_stay_apart() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let main = Workspace::open(a.path()).unwrap();
        let shard = Workspace::open(b.path()).unwrap();
        let tasks: Vec<crate::task::Task> =
            ["a", "b", "c"].map(crate::task::Task::minimal).to_vec();
        for t in &tasks {
            main.add_task(t, super::super::TaskStatus::Accepted)
                .unwrap();
        }
        let report = shard.link_tasks_from(&main).unwrap();
        assert_eq!((report.linked, report.present), (3, 0));
        let id = tasks[0].id();
        let toml = |ws: &Workspace| fs::metadata(ws.task_dir(id).join("task.toml")).unwrap();
        assert_eq!(toml(&main).ino(), toml(&shard).ino(), "hard-linked");
        assert_eq!(
            shard.task_row(id).unwrap().status,
            super::super::TaskStatus::Accepted
        );
        // A write in the shard (atomic) leaves the main bundle as it was.
        let before = fs::read(main.task_dir(id).join("task.toml")).unwrap();
        crate::fsutil::write_atomic(&shard.task_dir(id).join("task.toml"), b"changed").unwrap();
        assert_eq!(
            fs::read(main.task_dir(id).join("task.toml")).unwrap(),
            before
        );
        let again = shard.link_tasks_from(&main).unwrap();
        assert_eq!((again.linked, again.present), (0, 3));
        assert!(shard.link_tasks_from(&shard).is_err());
    }
}
