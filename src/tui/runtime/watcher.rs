//! Keeps the Training view fed: a watcher thread looks at
//! `<workspace>/checkpoints/` about once a second and re-reads only the run
//! files whose size or modification time changed (see [`RunCache`]). Runs
//! written by another process (`endless train`) show up the same way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime};

use crate::rl::run_files::{self, RunView};
use crate::tui::action::{Action, Msg};

/// Size and modification time of one file (`None`: missing).
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// The stamps of one run: its directory (checkpoints come and go), then
/// `train.json`, `sft.jsonl`, `metrics.jsonl`, `eval.jsonl`.
#[derive(Debug, Clone, PartialEq)]
struct Stamps([Stamp; 5]);

impl Stamps {
    fn of(dir: &Path) -> Stamps {
        Stamps([
            stamp(dir),
            stamp(&dir.join(run_files::RUN_INFO)),
            stamp(&dir.join(run_files::SFT_METRICS)),
            stamp(&dir.join(run_files::PPO_METRICS)),
            stamp(&dir.join(run_files::EVALS)),
        ])
    }
}

/// The runs under a checkpoints directory, re-read incrementally.
#[derive(Debug, Default)]
pub struct RunCache {
    runs: BTreeMap<PathBuf, (Stamps, RunView)>,
    loaded: bool,
}

impl RunCache {
    /// Look at `root` (`<workspace>/checkpoints`); re-read what changed.
    /// Returns every run, newest first, when anything changed (and on the
    /// first call), `None` otherwise.
    pub fn refresh(&mut self, root: &Path) -> Option<Vec<RunView>> {
        let dirs: Vec<PathBuf> = std::fs::read_dir(root)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.join(run_files::RUN_INFO).is_file())
                    .collect()
            })
            .unwrap_or_default();
        let mut changed = !self.loaded;
        self.loaded = true;
        let before = self.runs.len();
        self.runs.retain(|d, _| dirs.contains(d));
        changed |= self.runs.len() != before;
        for dir in dirs {
            let now = Stamps::of(&dir);
            match self.runs.get_mut(&dir) {
                Some((old, _)) if *old == now => {}
                Some((old, view)) => {
                    let [d, info, sft, ppo, evals] = &old.0;
                    if *d != now.0[0] {
                        view.checkpoints = run_files::checkpoint_names(&dir);
                    }
                    if *info != now.0[1] {
                        view.info = run_files::read_info(&dir).ok().flatten();
                    }
                    if *sft != now.0[2] {
                        view.sft = run_files::read_lines(&dir, run_files::SFT_METRICS);
                    }
                    if *ppo != now.0[3] {
                        view.ppo = run_files::read_lines(&dir, run_files::PPO_METRICS);
                    }
                    if *evals != now.0[4] {
                        view.evals = run_files::read_lines(&dir, run_files::EVALS);
                    }
                    *old = now;
                    changed = true;
                }
                None => {
                    let view = run_files::load_run(&dir);
                    self.runs.insert(dir, (now, view));
                    changed = true;
                }
            }
        }
        changed.then(|| self.runs.values().rev().map(|(_, v)| v.clone()).collect())
    }
}

/// The watcher thread; it stops when dropped.
pub struct Watcher {
    stop: Arc<AtomicBool>,
}

impl Watcher {
    /// Watch `root` every `every`, sending [`Action::TrainingLoaded`] on change.
    pub fn spawn(root: PathBuf, tx: Sender<Msg>, every: Duration) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let _ = thread::Builder::new()
            .name("training runs".into())
            .spawn(move || {
                let mut cache = RunCache::default();
                while !flag.load(Ordering::Relaxed) {
                    if let Some(runs) = cache.refresh(&root) {
                        if tx.send(Msg::Action(Action::TrainingLoaded(runs))).is_err() {
                            return;
                        }
                    }
                    thread::sleep(every);
                }
            });
        Watcher { stop }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
