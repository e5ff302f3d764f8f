//! Every running episode of the workspace in the Live view, whichever
//! process runs it (`endless run`, `endless eval`, `endless serve`, or a job
//! of this TUI): a watcher thread looks for episodes that have a trajectory
//! but no result yet (`runs/<run>/episodes/<task>/<n>.jsonl` without
//! `<n>.json`), tails their trajectory (one step per line) and their
//! asciicast (terminal bytes, flushed per event), and marks them finished
//! when the result appears, or interrupted when the process that records
//! them (the trajectory's `start` line names it) is gone without writing
//! one; such an episode is then recorded as interrupted (a result of its
//! own, see [`crate::workbench::record_interrupted_episode`]). Watching
//! never disturbs a running session.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime};

use crate::agent::{EndReason, EpisodeOwner, StepKind};
use crate::tui::action::{pane_command, Action, LiveEvent, Msg};

/// Episodes whose files have not changed for this long are not shown as
/// running (their process probably died without writing a result).
const STALE: Duration = Duration::from_secs(30 * 60);

/// An episode whose trajectory names no owner (recorded before owners
/// were) counts as running only while its files changed this recently.
const QUIET: Duration = Duration::from_secs(60);

/// Terminal size assumed until the recording's header says otherwise.
const DEFAULT_SIZE: (u16, u16) = (48, 160);

/// Followed episodes are read every poll; the run directories are listed
/// for new ones every this many polls (a second at the TUI's 250 ms).
const DISCOVER_EVERY: u64 = 4;

/// Most bytes read from one file per poll (a watcher that falls behind
/// catches up over a few polls instead of stalling).
const MAX_READ: u64 = 1 << 20;

/// A file read incrementally, line by line.
#[derive(Debug, Default)]
struct Tail {
    offset: u64,
    partial: Vec<u8>,
}

impl Tail {
    /// The complete lines added to `path` since the last call.
    fn lines(&mut self, path: &Path) -> Vec<String> {
        let Ok(mut f) = File::open(path) else {
            return Vec::new();
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.offset {
            // Rewritten from scratch (a retried episode): start over.
            self.offset = 0;
            self.partial.clear();
        }
        if len == self.offset || f.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        let n = (&mut f)
            .take((len - self.offset).min(MAX_READ))
            .read_to_end(&mut buf)
            .unwrap_or(0);
        self.offset += n as u64;
        self.partial.extend_from_slice(&buf[..n]);
        let Some(last) = self.partial.iter().rposition(|b| *b == b'\n') else {
            return Vec::new();
        };
        let rest = self.partial.split_off(last + 1);
        let done = std::mem::replace(&mut self.partial, rest);
        String::from_utf8_lossy(&done)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect()
    }
}

/// One running episode being followed.
#[derive(Debug)]
struct Followed {
    key: String,
    trajectory: PathBuf,
    cast: PathBuf,
    result: PathBuf,
    steps: Tail,
    bytes: Tail,
    /// The asciicast header was read.
    header: bool,
    /// The process recording it, once its `start` line is read.
    owner: Option<EpisodeOwner>,
}

/// The running episodes under a `runs/` directory, found and followed
/// incrementally; [`poll`](Self::poll) returns the live events since the
/// last call.
#[derive(Debug, Default)]
pub struct SessionScan {
    /// Task directories by path: the modification time they were last
    /// listed at.
    listed: HashMap<PathBuf, SystemTime>,
    /// Followed episodes by key (`run/task/sample`).
    followed: BTreeMap<String, Followed>,
    /// Episodes already finished or stale (never reopened).
    done: std::collections::HashSet<String>,
    /// Polls so far.
    polls: u64,
    /// When the first poll ran: episodes that finished since are shown
    /// even when they ran too fast to be seen running.
    since: Option<SystemTime>,
    /// Episodes found with their process gone and no result, not yet
    /// taken by [`take_gone`](Self::take_gone).
    gone: Vec<String>,
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn dirs(path: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(path)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

fn name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl SessionScan {
    /// Look at `runs` (`<workspace>/runs`): new steps and terminal bytes,
    /// finished episodes, and (every few polls, first on the first) new
    /// running episodes.
    pub fn poll(&mut self, runs: &Path) -> Vec<LiveEvent> {
        let mut events = Vec::new();
        // A second of slack: file times lag the clock a little.
        self.since
            .get_or_insert_with(|| SystemTime::now() - Duration::from_secs(1));
        let discovering = self.polls.is_multiple_of(DISCOVER_EVERY);
        if discovering {
            self.discover(runs, &mut events);
        }
        self.polls += 1;
        let keys: Vec<String> = self.followed.keys().cloned().collect();
        for key in keys {
            let Some(f) = self.followed.get_mut(&key) else {
                continue;
            };
            follow(f, &mut events);
            let mut finished = f.result.is_file();
            // Whether the owner is alive is asked about once a second.
            let gone = !finished && discovering && gone(f);
            // Its process may have written the result just before exiting.
            finished = finished || f.result.is_file();
            if finished || gone {
                if finished {
                    follow(f, &mut events);
                    events.push(result_event(&key, &f.result));
                } else {
                    events.push(LiveEvent::Interrupted { key: key.clone() });
                    self.gone.push(key.clone());
                }
                self.followed.remove(&key);
                self.done.insert(key);
            }
        }
        events
    }

    /// The episodes (`run/task/sample`) found since the last call whose
    /// process is gone without a result: the watcher records them as
    /// interrupted.
    pub fn take_gone(&mut self) -> Vec<String> {
        std::mem::take(&mut self.gone)
    }

    fn discover(&mut self, runs: &Path, events: &mut Vec<LiveEvent>) {
        for run_dir in dirs(runs) {
            let run = name(&run_dir);
            for task_dir in dirs(&run_dir.join("episodes")) {
                let Some(mtime) = modified(&task_dir) else {
                    continue;
                };
                if self.listed.get(&task_dir) == Some(&mtime) {
                    continue;
                }
                self.listed.insert(task_dir.clone(), mtime);
                if mtime.elapsed().is_ok_and(|age| age > STALE) {
                    continue;
                }
                let task = name(&task_dir);
                let Ok(rd) = std::fs::read_dir(&task_dir) else {
                    continue;
                };
                for entry in rd.flatten() {
                    let file = name(&entry.path());
                    let Some(sample) = file
                        .strip_suffix(".jsonl")
                        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    else {
                        continue;
                    };
                    let key = format!("{run}/{task}/{sample}");
                    let result = task_dir.join(format!("{sample}.json"));
                    if self.followed.contains_key(&key) || self.done.contains(&key) {
                        continue;
                    }
                    // One that finished between two looks (a short episode
                    // of another process) is shown finished; one that
                    // finished before this TUI watched is not.
                    let finished_at = modified(&result);
                    if finished_at.is_some_and(|t| self.since.is_none_or(|s| t < s)) {
                        continue;
                    }
                    let finished = finished_at.is_some();
                    let trajectory = entry.path();
                    if modified(&trajectory)
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > STALE)
                    {
                        continue;
                    }
                    let cast = task_dir.join(format!("{sample}.cast"));
                    let mut followed = Followed {
                        key: key.clone(),
                        trajectory,
                        cast,
                        result,
                        steps: Tail::default(),
                        bytes: Tail::default(),
                        header: false,
                        owner: None,
                    };
                    followed.owner = start_owner(&followed.trajectory);
                    if !finished && gone(&followed) {
                        // Its process died earlier: nothing to watch.
                        self.gone.push(key.clone());
                        self.done.insert(key);
                        continue;
                    }
                    let (rows, cols) = cast_size(&followed.cast).unwrap_or(DEFAULT_SIZE);
                    events.push(LiveEvent::Open {
                        key: key.clone(),
                        title: format!("{task}#{sample}"),
                        policy: run.clone(),
                        rows,
                        cols,
                        input: None,
                    });
                    if finished {
                        follow(&mut followed, events);
                        events.push(result_event(&key, &followed.result));
                        self.done.insert(key);
                        continue;
                    }
                    self.followed.insert(key, followed);
                }
            }
        }
    }
}

/// How long ago `path` last changed (`None`: it cannot be read).
fn age(path: &Path) -> Option<Duration> {
    modified(path).and_then(|t| t.elapsed().ok())
}

/// Whether the process recording `f` is gone: its owner is not running
/// any more; without an owner this machine can check (one recorded before
/// owners were, or elsewhere), its files have been still for long.
fn gone(f: &Followed) -> bool {
    let still_for = |limit: Duration| {
        age(&f.trajectory).is_some_and(|a| a > limit) && age(&f.cast).is_none_or(|a| a > limit)
    };
    match &f.owner {
        Some(owner) => match owner.is_alive() {
            Some(alive) => !alive,
            None => still_for(STALE),
        },
        None => still_for(QUIET),
    }
}

/// The owner named by a trajectory's `start` line (its first).
fn start_owner(path: &Path) -> Option<EpisodeOwner> {
    let f = File::open(path).ok()?;
    let mut buf = Vec::new();
    f.take(64 * 1024).read_to_end(&mut buf).ok()?;
    let line = buf.split(|b| *b == b'\n').next()?;
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    owner_of(&v)
}

/// The owner in a `start` line.
fn owner_of(v: &serde_json::Value) -> Option<EpisodeOwner> {
    if v.get("type").and_then(|t| t.as_str()) != Some("start") {
        return None;
    }
    serde_json::from_value(v.get("owner")?.clone()).ok()
}

/// `(rows, cols)` from an asciicast's header line.
fn cast_size(path: &Path) -> Option<(u16, u16)> {
    let mut f = File::open(path).ok()?;
    let mut buf = vec![0u8; 4096];
    let n = f.read(&mut buf).ok()?;
    let line = buf[..n].split(|b| *b == b'\n').next()?;
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    let dim = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_u64())
            .map(|x| x.clamp(1, 1000) as u16)
    };
    Some((dim("height")?, dim("width")?))
}

/// New steps and terminal bytes of one episode.
fn follow(f: &mut Followed, events: &mut Vec<LiveEvent>) {
    for line in f.bytes.lines(&f.cast) {
        if !f.header {
            // The first line is the header.
            f.header = true;
            if line.trim_start().starts_with('{') {
                continue;
            }
        }
        let Ok(serde_json::Value::Array(ev)) = serde_json::from_str(&line) else {
            continue;
        };
        if ev.get(1).and_then(|k| k.as_str()) == Some("o") {
            if let Some(data) = ev.get(2).and_then(|d| d.as_str()) {
                events.push(LiveEvent::Feed {
                    key: f.key.clone(),
                    bytes: data.as_bytes().to_vec(),
                });
            }
        }
    }
    for line in f.steps.lines(&f.trajectory) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if let Some(owner) = owner_of(&v) {
            // Read late (the file was empty when found) or a retry's.
            f.owner = Some(owner);
        }
        if v.get("type").and_then(|t| t.as_str()) != Some("step") {
            continue;
        }
        let step = &v["step"];
        let kind = serde_json::from_value(step["kind"].clone()).unwrap_or(StepKind::Command);
        events.push(LiveEvent::Step {
            key: f.key.clone(),
            turn: step.get("turn").and_then(|t| t.as_u64()).unwrap_or(0) as u32,
            command: pane_command(kind, step.get("command").and_then(|c| c.as_str())),
        });
    }
}

/// What the result file at `path` of episode `key` says: it finished,
/// passed or with its failure mode, or it was interrupted (its process
/// died; the result was recorded for it).
fn result_event(key: &str, path: &Path) -> LiveEvent {
    let v: serde_json::Value = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let key = key.to_string();
    if v.get("end_reason").and_then(|e| e.as_str()) == Some(EndReason::Interrupted.as_str()) {
        return LiveEvent::Interrupted { key };
    }
    LiveEvent::Finished {
        key,
        passed: v.get("passed").and_then(|p| p.as_bool()).unwrap_or(false),
        failure: v
            .get("failure_mode")
            .and_then(|m| m.as_str())
            .map(str::to_string),
    }
}

/// Record the episode `key` (`run/task/sample`) under `runs`, whose
/// process is gone, as interrupted in the workspace (`ws`: opened on
/// first use), so that it is a result in Episodes and survives `x` and
/// restarts. Failures are logged: the watcher goes on.
pub fn record_gone(runs: &Path, ws: &mut Option<crate::store::Workspace>, key: &str) {
    let parsed = key.split_once('/').and_then(|(run, rest)| {
        let (task, sample) = rest.rsplit_once('/')?;
        Some((run, task, sample.parse::<u32>().ok()?))
    });
    let (Some((run, task, sample)), Some(root)) = (parsed, runs.parent()) else {
        return;
    };
    if ws.is_none() {
        match crate::store::Workspace::open(root) {
            Ok(opened) => *ws = Some(opened),
            Err(e) => {
                tracing::warn!(
                    "{}: cannot record {key} as interrupted: {e}",
                    root.display()
                );
                return;
            }
        }
    }
    if let Some(ws) = ws.as_ref() {
        if let Err(e) = crate::workbench::record_interrupted_episode(ws, run, task, sample) {
            tracing::warn!("cannot record {key} as interrupted: {e:#}");
        }
    }
}

/// The watcher thread; it stops when dropped.
pub struct SessionWatcher {
    stop: Arc<AtomicBool>,
}

impl SessionWatcher {
    /// Watch `runs` every `every`, sending each event as
    /// `Action::Live(LiveEvent::Watched(..))`.
    pub fn spawn(runs: PathBuf, tx: Sender<Msg>, every: Duration) -> SessionWatcher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let _ = thread::Builder::new()
            .name("live sessions".into())
            .spawn(move || {
                let mut scan = SessionScan::default();
                let mut ws = None;
                while !flag.load(Ordering::Relaxed) {
                    for ev in scan.poll(&runs) {
                        let msg = Msg::Action(Action::Live(LiveEvent::Watched(Box::new(ev))));
                        if tx.send(msg).is_err() {
                            return;
                        }
                    }
                    for key in scan.take_gone() {
                        record_gone(&runs, &mut ws, &key);
                    }
                    thread::sleep(every);
                }
            });
        SessionWatcher { stop }
    }
}

impl Drop for SessionWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A trajectory whose `start` line names `owner`.
    fn started(path: &Path, owner: Option<&EpisodeOwner>) {
        let line = serde_json::json!({"type": "start", "task": "count", "owner": owner});
        std::fs::write(path, format!("{line}\n")).unwrap();
    }

    #[test]
    fn an_episode_whose_owner_dies_is_interrupted_and_dead_ones_are_not_opened() {
        let Some(me) = EpisodeOwner::current() else {
            return; // no /proc
        };
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        let ep = runs.join("eval-abc").join("episodes").join("count");
        std::fs::create_dir_all(&ep).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        started(&ep.join("0.jsonl"), EpisodeOwner::of(child.id()).as_ref());
        // A reused pid: not its owner, so not opened.
        let before_me = EpisodeOwner {
            start: me.start + 1,
            ..me.clone()
        };
        started(&ep.join("1.jsonl"), Some(&before_me));
        // Recorded before owners were and still for long: not opened.
        started(&ep.join("2.jsonl"), None);
        let old = SystemTime::now() - Duration::from_secs(120);
        File::options()
            .write(true)
            .open(ep.join("2.jsonl"))
            .unwrap()
            .set_modified(old)
            .unwrap();
        // Recorded before owners were, and changing: running.
        started(&ep.join("3.jsonl"), None);
        let mut scan = SessionScan::default();
        let mut opened: Vec<String> = scan
            .poll(&runs)
            .into_iter()
            .filter_map(|e| match e {
                LiveEvent::Open { key, .. } => Some(key),
                _ => None,
            })
            .collect();
        opened.sort();
        assert_eq!(opened, ["eval-abc/count/0", "eval-abc/count/3"]);
        child.kill().unwrap();
        child.wait().unwrap();
        // Within a second (a discovery's round of polls).
        let evs: Vec<LiveEvent> = (0..DISCOVER_EVERY).flat_map(|_| scan.poll(&runs)).collect();
        assert_eq!(
            evs,
            [LiveEvent::Interrupted {
                key: "eval-abc/count/0".into()
            }]
        );
        assert!((0..DISCOVER_EVERY).all(|_| scan.poll(&runs).is_empty()));
        // A new scan (the TUI restarted) does not open it again.
        let mut scan = SessionScan::default();
        let evs = scan.poll(&runs);
        assert!(
            matches!(&evs[..], [LiveEvent::Open { key, .. }] if key == "eval-abc/count/3"),
            "{evs:?}"
        );
    }

    #[test]
    fn finds_follows_and_finishes_an_episode_of_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        let ep = runs.join("eval-abc").join("episodes").join("count");
        std::fs::create_dir_all(&ep).unwrap();
        // An episode that finished before the watch is not opened.
        std::fs::write(ep.join("0.jsonl"), "").unwrap();
        std::fs::write(ep.join("0.json"), "{}").unwrap();
        File::options()
            .write(true)
            .open(ep.join("0.json"))
            .unwrap()
            .set_modified(SystemTime::now() - Duration::from_secs(120))
            .unwrap();
        let mut traj = File::create(ep.join("1.jsonl")).unwrap();
        let mut cast = File::create(ep.join("1.cast")).unwrap();
        writeln!(cast, "{{\"version\":2,\"width\":100,\"height\":30}}").unwrap();
        writeln!(cast, "[0.1,\"o\",\"hello\\r\\n\"]").unwrap();
        write!(cast, "[0.2,\"o\",\"par").unwrap();
        let mut scan = SessionScan::default();
        let evs = scan.poll(&runs);
        assert_eq!(evs.len(), 2, "{evs:?}");
        assert!(
            matches!(&evs[0], LiveEvent::Open { key, rows: 30, cols: 100, .. } if key == "eval-abc/count/1")
        );
        assert!(matches!(&evs[1], LiveEvent::Feed { bytes, .. } if bytes == b"hello\r\n"));
        writeln!(cast, "tial\"]").unwrap();
        writeln!(
            traj,
            "{{\"type\":\"step\",\"step\":{{\"turn\":1,\"command\":\"seq 1 60\"}}}}"
        )
        .unwrap();
        let evs = scan.poll(&runs);
        assert!(matches!(&evs[0], LiveEvent::Feed { bytes, .. } if bytes == b"partial"));
        assert!(
            matches!(&evs[1], LiveEvent::Step { turn: 1, command, .. } if command == "seq 1 60")
        );
        assert!(scan.poll(&runs).is_empty());
        std::fs::write(
            ep.join("1.json"),
            "{\"passed\":false,\"failure_mode\":\"wrong_output\"}",
        )
        .unwrap();
        let evs = scan.poll(&runs);
        assert_eq!(
            evs,
            [LiveEvent::Finished {
                key: "eval-abc/count/1".into(),
                passed: false,
                failure: Some("wrong_output".into())
            }]
        );
        assert!(scan.poll(&runs).is_empty());
    }
}
