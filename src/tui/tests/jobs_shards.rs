//! Sharded runs in the Jobs view (issue 36): a Slurm submission and a Ray
//! run, read from their files by the same function `endless slurm status`
//! uses, each with its shards under it (queued, running, done, failed) and
//! a shard's log opened like any job's.

use super::*;
use crate::workbench::sharded_runs::sharded_runs;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A Ray run of 4 shards as `run_sharded` leaves it mid-way: shard 0
/// done, 1 running, 2 failed with a log, 3 queued.
fn ray_run(root: &Path) {
    let dir = root.join("ray/val-ray");
    write(
        &dir.join("run.json"),
        r#"{"engine": "ray", "name": "val-ray", "kind": "validate", "command": ["tasks", "validate", "--all"], "shards": 4, "created_at": "2026-12-01T08:00:00Z", "merged": null}"#,
    );
    let record = |i: u32, done: bool| {
        write(
            &dir.join(format!("shard-{i}/shard.json")),
            &format!(
                r#"{{"shard": {i}, "of": 4, "kind": "validate", "key": "k", "items": 3, "done": {done}}}"#
            ),
        );
    };
    record(0, true);
    write(
        &dir.join("logs/shard-0.state.json"),
        r#"{"state": "exited", "node": "node-a", "returncode": 0}"#,
    );
    record(1, false);
    write(
        &dir.join("logs/shard-1.state.json"),
        r#"{"state": "running", "node": "node-b"}"#,
    );
    write(&dir.join("logs/shard-1.log"), "validating 3 tasks\n");
    record(2, false);
    write(
        &dir.join("logs/shard-2.state.json"),
        r#"{"state": "exited", "node": "node-a", "returncode": 2}"#,
    );
    write(
        &dir.join("logs/shard-2.log"),
        "$ endless tasks validate --all --shard 2/4\nvalidating 3 tasks\nerror: the sandbox could not start: no space left on device\n",
    );
}

#[test]
fn a_sharded_runs_shards_show_under_it_with_their_logs() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    ray_run(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    app.update(Action::ShardRunsLoaded(sharded_runs(dir.path()).unwrap()));
    pump(&mut app, &ws);
    let shown: Vec<(&str, &str)> = app
        .jobs
        .items
        .iter()
        .map(|j| (j.shown_id(), j.status.as_str()))
        .collect();
    assert_eq!(
        shown,
        [
            ("ray/val-ray", "running"),
            ("└ shard 0/4", "done"),
            ("└ shard 1/4", "running"),
            ("└ shard 2/4", "failed"),
            ("└ shard 3/4", "queued"),
        ]
    );
    // The run's own row says where each shard is and how to re-run one.
    let screen = render(&mut app, 120, 40);
    assert!(
        screen.contains("1 done · 1 running · 1 failed · 1 queued; merge: not merged"),
        "{screen}"
    );
    assert!(
        screen.contains("shard 2/4: failed (exit status 2 on node-a)"),
        "{screen}"
    );
    // The failed shard's log, read from its file.
    for _ in 0..3 {
        cmd(&mut app, &ws, Command::Down);
    }
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("log: ray/val-ray/shard-2"), "{screen}");
    assert!(
        screen.contains("error: the sandbox could not start: no space left on device"),
        "{screen}"
    );
    snap!("jobs_shards_failed_80x24", &mut app, 80, 24);
    snap!("jobs_shards_failed_120x40", &mut app, 120, 40);
    // A shard runs on the cluster: R says how to re-run it there.
    app.update(Action::Command(Command::JobRetry));
    assert!(app.outbox.is_empty(), "{:?}", app.outbox);
    let status = app.status.clone().unwrap();
    assert!(status.text.contains("run_sharded"), "{}", status.text);

    // The running shard's log is read again as it grows.
    cmd(&mut app, &ws, Command::Up);
    assert!(render(&mut app, 120, 40).contains("validating 3 tasks"));
    std::fs::write(
        dir.path().join("ray/val-ray/logs/shard-1.log"),
        "validating 3 tasks\ntask 2 of 3 valid\n",
    )
    .unwrap();
    app.update(Action::ShardRunsLoaded(sharded_runs(dir.path()).unwrap()));
    pump(&mut app, &ws);
    assert!(render(&mut app, 120, 40).contains("task 2 of 3 valid"));

    // The shard finishes: the next reading says so, the selection stays.
    write(
        &dir.path().join("ray/val-ray/shard-1/shard.json"),
        r#"{"shard": 1, "of": 4, "kind": "validate", "key": "k", "items": 3, "done": true}"#,
    );
    app.update(Action::ShardRunsLoaded(sharded_runs(dir.path()).unwrap()));
    pump(&mut app, &ws);
    let j = app.jobs.selected_item().unwrap();
    assert_eq!((j.shown_id(), j.status.as_str()), ("└ shard 1/4", "done"));
    assert_eq!(app.jobs.items[0].status, "failed", "none runs, one failed");
}

/// A Slurm submission written with `--no-submit` and one shard run by
/// hand: the not-submitted shards are queued, the run one done.
#[test]
fn a_slurm_submission_shows_its_shards() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let ctx = crate::workbench::Context::new(Some(dir.path().to_path_buf())).unwrap();
    let job = crate::workbench::slurm::submit(
        &ctx,
        &crate::workbench::slurm::SubmitRequest {
            shards: 2,
            name: Some("val".into()),
            submit: false,
            command: ["tasks", "validate", "--all"].map(String::from).to_vec(),
            ..Default::default()
        },
    )
    .unwrap()
    .remove(0);
    write(
        &job.dir.join("shard-1/shard.json"),
        r#"{"shard": 1, "of": 2, "kind": "validate", "key": "k", "items": 2, "done": true}"#,
    );
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    app.update(Action::ShardRunsLoaded(sharded_runs(dir.path()).unwrap()));
    pump(&mut app, &ws);
    let shown: Vec<(&str, &str, &str)> = app
        .jobs
        .items
        .iter()
        .map(|j| (j.shown_id(), j.status.as_str(), j.message.as_str()))
        .collect();
    assert_eq!(
        shown,
        [
            (
                "slurm/val",
                "queued",
                "1 done · 1 queued; merge: NOT SUBMITTED"
            ),
            ("└ shard 0/2", "queued", "NOT SUBMITTED"),
            ("└ shard 1/2", "done", "COMPLETED · 2 tasks"),
        ]
    );
}
