//! Atomic file and directory writes: write beside the target, then rename.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Write `bytes` to `path` atomically: a temporary file in the same directory
/// is written, flushed to disk and renamed over the target.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A directory being built next to its final place; [`AtomicDir::commit`]
/// renames it into place, dropping it without commit removes it.
pub struct AtomicDir {
    tmp: Option<tempfile::TempDir>,
    target: PathBuf,
}

impl AtomicDir {
    /// Start building `target` (which must not exist yet when committed).
    pub fn new(target: &Path) -> io::Result<Self> {
        let parent = target.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(parent)?;
        let tmp = tempfile::Builder::new()
            .prefix(".tmp-")
            .tempdir_in(parent)?;
        Ok(Self {
            tmp: Some(tmp),
            target: target.to_path_buf(),
        })
    }

    /// Where to write the contents.
    pub fn path(&self) -> &Path {
        self.tmp.as_ref().map(|t| t.path()).unwrap_or(&self.target)
    }

    /// Rename into place. Fails with `AlreadyExists` if the target exists.
    pub fn commit(mut self) -> io::Result<PathBuf> {
        let tmp = self.tmp.take().expect("committed once");
        if self.target.exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} already exists", self.target.display()),
            ));
        }
        let path = tmp.keep();
        if let Err(e) = fs::rename(&path, &self.target) {
            let _ = fs::remove_dir_all(&path);
            return Err(e);
        }
        Ok(self.target.clone())
    }
}

/// Replace directory `target` with the fully written directory `new_dir`
/// (a sibling), so that readers see either the old or the new contents.
pub fn replace_dir_atomic(new_dir: &Path, target: &Path) -> io::Result<()> {
    if target.exists() {
        let parent = target.parent().unwrap_or(Path::new("."));
        let trash = tempfile::Builder::new()
            .prefix(".old-")
            .tempdir_in(parent)?
            .keep();
        fs::remove_dir(&trash)?;
        fs::rename(target, &trash)?;
        if let Err(e) = fs::rename(new_dir, target) {
            let _ = fs::rename(&trash, target);
            return Err(e);
        }
        fs::remove_dir_all(&trash)?;
        Ok(())
    } else {
        fs::rename(new_dir, target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let leftovers: Vec<_> = fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1);
    }

    #[test]
    fn uncommitted_dir_vanishes() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        {
            let d = AtomicDir::new(&target).unwrap();
            fs::write(d.path().join("x"), "1").unwrap();
        }
        assert!(!target.exists());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        let d = AtomicDir::new(&target).unwrap();
        fs::write(d.path().join("x"), "1").unwrap();
        d.commit().unwrap();
        assert_eq!(fs::read_to_string(target.join("x")).unwrap(), "1");
        let d = AtomicDir::new(&target).unwrap();
        assert_eq!(d.commit().unwrap_err().kind(), io::ErrorKind::AlreadyExists);
    }

    #[test]
    fn replace_dir_swaps() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("old"), "").unwrap();
        let new = dir.path().join("n");
        fs::create_dir(&new).unwrap();
        fs::write(new.join("new"), "").unwrap();
        replace_dir_atomic(&new, &target).unwrap();
        assert!(target.join("new").exists());
        assert!(!target.join("old").exists());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
