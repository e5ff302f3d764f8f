//! A full disk during a build or merge is the run's infrastructure error
//! ([`SandboxError::DiskFull`]), never the task's failure: errors whose
//! cause is `ENOSPC`/`EDQUOT`, and failed setup steps that report a full
//! disk while the cache's filesystem is in fact (nearly) full, are named so.

use std::path::Path;

use crate::images::ImageError;
use crate::sandbox::SandboxError;

/// Below this many free bytes (or 1% of the filesystem) a step's "No
/// space left on device" is the machine's, not the task's.
const NEARLY_FULL_BYTES: u64 = 256 << 20;

/// Whether `e` is the disk (or the user's quota) running out.
fn is_no_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// Free bytes (for unprivileged users) and total bytes of the filesystem
/// holding `dir`.
pub fn space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid C string; `st` is written by statvfs.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    Some((st.f_bavail as u64 * frsize, st.f_blocks as u64 * frsize))
}

/// Whether the filesystem holding `dir` is (nearly) full.
fn nearly_full(dir: &Path) -> bool {
    space(dir).is_some_and(|(free, total)| free < NEARLY_FULL_BYTES.min(total / 100).max(1 << 20))
}

/// `e` as [`SandboxError::DiskFull`] where a full disk caused it (`cache`:
/// the directory builds write under); otherwise `e` unchanged.
pub fn classify(e: SandboxError, cache: &Path) -> SandboxError {
    match e {
        SandboxError::Io { what, path, source } if is_no_space(&source) => {
            SandboxError::DiskFull { what, path }
        }
        SandboxError::Image(ImageError::Io { what, path, source }) if is_no_space(&source) => {
            SandboxError::DiskFull { what, path }
        }
        SandboxError::SetupStep {
            index,
            step,
            code,
            output,
            ..
        } if mentions_full_disk(&output) && nearly_full(cache) => SandboxError::DiskFull {
            what: format!("setup step {index} ({step}, exit code {code:?})"),
            path: cache.to_path_buf(),
        },
        SandboxError::Start(msg) if mentions_full_disk(&msg) && nearly_full(cache) => {
            SandboxError::DiskFull {
                what: msg,
                path: cache.to_path_buf(),
            }
        }
        other => other,
    }
}

fn mentions_full_disk(text: &str) -> bool {
    text.contains("No space left on device") || text.contains("Disk quota exceeded")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_space_errors_become_disk_full_and_others_stay() {
        let d = tempfile::tempdir().unwrap();
        let io = SandboxError::io("merge step layer", "/x")(std::io::Error::from_raw_os_error(
            libc::ENOSPC,
        ));
        let e = classify(io, d.path());
        assert!(matches!(e, SandboxError::DiskFull { ref what, .. } if what == "merge step layer"));
        assert!(e.to_string().contains("not the task's failure"), "{e}");
        let other = SandboxError::io("x", "/x")(std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(matches!(classify(other, d.path()), SandboxError::Io { .. }));
        // A step that says "No space left" on a disk with room is the task's.
        let step = SandboxError::SetupStep {
            index: 2,
            step: "RUN fill".into(),
            code: Some(1),
            output: "write: No space left on device".into(),
            base_note: None,
        };
        if space(d.path()).is_some_and(|(free, _)| free > NEARLY_FULL_BYTES) {
            assert!(matches!(
                classify(step, d.path()),
                SandboxError::SetupStep { .. }
            ));
        }
    }
}
