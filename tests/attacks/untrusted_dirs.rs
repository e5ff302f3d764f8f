//! Attacks through directories that another user (or an agent whose log
//! directory is bound to one) shapes and the operator then reads: a
//! Harbor job directory brought in by `episodes import`, and another
//! workspace brought in by `workspace merge`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Instant;

use endless::store::Workspace;
use endless::workbench::import_runs::import_harbor;

use super::*;

/// What a file outside the directory read holds: it must never reach the workspace.
const CANARY: &str = "CANARY-OUTSIDE-THE-JOB-DIRECTORY-51e7";

/// How long one hostile import may take before it counts as hung.
const BOUND: Duration = Duration::from_secs(30);

/// A private directory holding a 0600 canary file: root-only in the run
/// as root, uid 65534's own in the other (readable to the importer both
/// times, so only the import's own care keeps it out).
fn private_canary(dir: &Path) -> (PathBuf, PathBuf) {
    let secret = dir.join("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let canary = secret.join("canary");
    std::fs::write(&canary, CANARY).unwrap();
    std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o600)).unwrap();
    (secret, canary)
}

/// Every file below `dir` that holds the canary.
fn files_with_canary(dir: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter(|e| {
            std::fs::read(e.path())
                .is_ok_and(|b| b.windows(CANARY.len()).any(|w| w == CANARY.as_bytes()))
        })
        .map(|e| e.path().to_path_buf())
        .collect()
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// A job directory `job` with one failed trial `t__1` (its reward in
/// `result.json`, `step_results` as given), with `agent/` and `verifier/`
/// unless `steps` moves them.
fn job_dir(job: &Path, steps: Option<serde_json::Value>) -> PathBuf {
    let trial = job.join("t__1");
    std::fs::create_dir_all(&trial).unwrap();
    std::fs::write(job.join("config.json"), r#"{"job_name": "hostile"}"#).unwrap();
    let mut result = serde_json::json!({
        "task_name": "t", "trial_name": "t__1",
        "agent_info": {"name": "nop", "version": "1"},
        "verifier_result": {"rewards": {"reward": 0.0}},
    });
    if let Some(steps) = steps {
        result["step_results"] = steps;
    } else {
        std::fs::create_dir_all(trial.join("agent")).unwrap();
        std::fs::create_dir_all(trial.join("verifier")).unwrap();
        std::fs::write(trial.join("verifier/test-stdout.txt"), "1 failed\n").unwrap();
    }
    std::fs::write(trial.join("result.json"), result.to_string()).unwrap();
    trial
}

/// Import `job` into `ws` in a thread; `None` when it did not end within
/// [`BOUND`] (a FIFO it blocks on is then opened and closed to let it go).
fn import_bounded(ws: &Path, job: &Path, fifo: Option<&Path>) -> Option<Result<(), String>> {
    let (tx, rx) = mpsc::channel();
    let (ws, job) = (ws.to_path_buf(), job.to_path_buf());
    std::thread::spawn(move || {
        let ws = Workspace::open(&ws).unwrap();
        let r = import_harbor(&ws, &job, Some("hostile")).map(|_| ());
        let _ = tx.send(r.map_err(|e| format!("{e:#}")));
    });
    match rx.recv_timeout(BOUND) {
        Ok(r) => Some(r),
        Err(_) => {
            if let Some(f) = fifo {
                drop(std::fs::OpenOptions::new().write(true).open(f));
            }
            None
        }
    }
}

/// Breach 3: `episodes import` read a job directory's files by path. Links
/// to a private file (absolute, and climbing with `..`), a link to
/// `/dev/zero`, a FIFO and a `step_name` that leaves the trial must each be
/// refused with an error naming the trial's file, promptly, with nothing
/// from outside in the workspace and no run left behind; the same job,
/// honest, imports.
#[test]
fn a_hostile_harbor_job_directory_brings_in_no_outside_file() {
    both(
        "untrusted_dirs::a_hostile_harbor_job_directory_brings_in_no_outside_file",
        |_| {
            let dir = tempfile::tempdir().unwrap();
            let (secret, canary) = private_canary(dir.path());
            std::fs::create_dir(secret.join("verifier")).unwrap();
            std::fs::write(secret.join("verifier/test-stdout.txt"), CANARY).unwrap();
            let climb = format!("../../../../../../../..{}", canary.display());
            // (what, how it is planted, the name the error must hold, and why)
            type Plant<'a> = Box<dyn Fn(&Path) -> PathBuf + 'a>;
            let link = |rel: &'static str, to: String| -> Plant {
                Box::new(move |trial: &Path| {
                    let _ = std::fs::remove_file(trial.join(rel));
                    symlink(&to, trial.join(rel)).unwrap();
                    trial.join(rel)
                })
            };
            let cases: Vec<(&str, Plant, &str, &str)> = vec![
                (
                    "trajectory -> private file",
                    link("agent/trajectory.json", canary.display().to_string()),
                    "trajectory.json",
                    "outside the Harbor job directory",
                ),
                (
                    "test-stdout -> ../ private file",
                    link("verifier/test-stdout.txt", climb.clone()),
                    "test-stdout.txt",
                    "outside the Harbor job directory",
                ),
                (
                    "recording -> private file",
                    link("agent/recording.cast", canary.display().to_string()),
                    "recording.cast",
                    "outside the Harbor job directory",
                ),
                (
                    "test-stdout -> /dev/zero",
                    link("verifier/test-stdout.txt", "/dev/zero".into()),
                    "test-stdout.txt",
                    "outside the Harbor job directory",
                ),
                (
                    "verifier -> private directory",
                    Box::new(|trial: &Path| {
                        // Replaced by a link to a directory holding the canary.
                        std::fs::remove_dir_all(trial.join("verifier")).unwrap();
                        symlink(secret.join("verifier"), trial.join("verifier")).unwrap();
                        trial.join("verifier")
                    }),
                    "verifier",
                    "outside the Harbor job directory",
                ),
                (
                    "oracle log is a FIFO",
                    Box::new(|trial: &Path| {
                        mkfifo(&trial.join("agent/oracle.txt"));
                        trial.join("agent/oracle.txt")
                    }),
                    "oracle.txt",
                    "not a regular file",
                ),
            ];
            let ws_dir = dir.path().join("ws");
            let runs = ws_dir.join("runs");
            for (i, (what, plant, named, why)) in cases.iter().enumerate() {
                let job = dir.path().join(format!("job-{i}"));
                let trial = job_dir(&job, None);
                let planted = plant(&trial);
                let fifo = what.contains("FIFO").then_some(planted.as_path());
                let started = Instant::now();
                let outcome = import_bounded(&ws_dir, &job, fifo);
                let Some(outcome) = outcome else {
                    panic!("{what}: the import hung (over {BOUND:?})");
                };
                let err = outcome.expect_err(what);
                assert!(
                    err.contains("t__1") && err.contains(named) && err.contains(why),
                    "{what}: not refused by name as {why:?}: {err}"
                );
                assert!(!err.contains(CANARY), "{what}: {err}");
                assert!(
                    started.elapsed() < BOUND,
                    "{what}: took {:?}",
                    started.elapsed()
                );
                let leaked = files_with_canary(&ws_dir);
                assert!(leaked.is_empty(), "{what}: {leaked:?}");
                assert!(
                    !runs.join("hostile").exists(),
                    "{what}: a run was left behind"
                );
            }
            // A step name that leaves the trial: absolute, or through `..`.
            let steps = [
                secret.display().to_string(),
                "../../secret".into(),
                "..".into(),
            ];
            for (i, step) in steps.iter().enumerate() {
                let job = dir.path().join(format!("job-step-{i}"));
                job_dir(&job, Some(serde_json::json!([{ "step_name": step }])));
                let err = import_bounded(&ws_dir, &job, None)
                    .expect("the import hung")
                    .expect_err(step);
                assert!(
                    err.contains("t__1") && err.contains("step_results[0].step_name"),
                    "{step}: {err}"
                );
                assert!(files_with_canary(&ws_dir).is_empty(), "{step}");
            }
            // The honest job (links that stay inside it included) imports.
            let job = dir.path().join("honest");
            let trial = job_dir(&job, None);
            std::fs::write(trial.join("agent/cast"), "{\"version\": 2}\n").unwrap();
            symlink("cast", trial.join("agent/recording.cast")).unwrap();
            import_bounded(&ws_dir, &job, None)
                .expect("the import hung")
                .unwrap();
            assert!(files_with_canary(&ws_dir).is_empty());
        },
    );
}

/// `workspace merge OTHER` followed a run directory of OTHER that is a
/// link to a directory elsewhere, and copied what it found there. The
/// merge must be refused with an error naming that run, and nothing from
/// outside OTHER may reach this workspace.
#[test]
fn a_merged_workspace_cannot_link_its_runs_out_of_itself() {
    both(
        "untrusted_dirs::a_merged_workspace_cannot_link_its_runs_out_of_itself",
        |_| {
            let dir = tempfile::tempdir().unwrap();
            let (secret, _) = private_canary(dir.path());
            let other = dir.path().join("other");
            let job = dir.path().join("job");
            job_dir(&job, None);
            import_harbor(&Workspace::open(&other).unwrap(), &job, Some("r1")).unwrap();
            // The run's files, moved out of OTHER beside the private file,
            // one of them now the canary; the run directory links there.
            let run = other.join("runs/r1");
            let moved = secret.join("r1");
            std::fs::rename(&run, &moved).unwrap();
            std::fs::write(moved.join("episodes/t/0.cast"), CANARY).unwrap();
            std::fs::write(moved.join("notes.md"), CANARY).unwrap();
            symlink(&moved, &run).unwrap();

            let main = dir.path().join("main");
            let mut ws = Workspace::open(&main).unwrap();
            let err = ws.merge_from(&other).unwrap_err().to_string();
            assert!(
                err.contains("runs/r1") && err.contains("outside"),
                "the error names no run of OTHER: {err}"
            );
            assert!(!err.contains(CANARY), "{err}");
            let leaked = files_with_canary(&main);
            assert!(leaked.is_empty(), "{leaked:?}");
            assert!(ws.list_episodes(Some("r1")).unwrap().is_empty());

            // Put back as a real directory (its files OTHER's own), it merges.
            std::fs::remove_file(&run).unwrap();
            std::fs::rename(&moved, &run).unwrap();
            std::fs::write(run.join("episodes/t/0.cast"), "{\"version\": 2}\n").unwrap();
            std::fs::write(run.join("notes.md"), "notes\n").unwrap();
            let report = ws.merge_from(&other).unwrap();
            assert_eq!(report.episodes_added, 1, "{report:?}");
            assert!(files_with_canary(&main).is_empty());
        },
    );
}
