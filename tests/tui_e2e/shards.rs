//! Issue 36, end to end: the Jobs view shows a Slurm submission's shards
//! in their different states — one done, one queued, one failed with its
//! log — read from the files the real `endless slurm submit` and the
//! array script wrote (this machine's Slurm is not asked: the job is
//! written with `--no-submit` and its array tasks run by hand, as
//! `sbatch` would run them).

use super::*;

/// `endless --workspace WS ARGS` with the sandboxed home; its output.
fn endless_in(home: &Path, ws: &Path, args: &[&str]) -> std::process::Output {
    let out = Command::new(endless_bin())
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .arg("--workspace")
        .arg(ws)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "endless {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Run array task `i` of the job in `job` as Slurm would: the kept
/// script, `SLURM_ARRAY_TASK_ID` set, its output in `logs/shard-I.out`.
fn run_array_task(home: &Path, job: &Path, i: u32) -> bool {
    let log = std::fs::File::create(job.join(format!("logs/shard-{i}.out"))).unwrap();
    Command::new("bash")
        .arg(job.join("array.sbatch"))
        .env("SLURM_ARRAY_TASK_ID", i.to_string())
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .status()
        .unwrap()
        .success()
}

#[test]
fn a_slurm_jobs_shards_show_done_queued_and_failed_with_a_log_in_tmux() {
    if !have_tmux() {
        eprintln!("skipping: tmux is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = sandbox_home();
    let (ws, h) = (dir.path().join("ws"), home.path());
    drop(Workspace::open(&ws).unwrap());
    let gen = ["generate", "--offline", "--count", "30", "--seed", "5"];
    // One task of shard 2, from the same generation run whole elsewhere.
    let scratch = dir.path().join("scratch");
    drop(Workspace::open(&scratch).unwrap());
    endless_in(h, &scratch, &gen);
    let victim = std::fs::read_dir(scratch.join("tasks"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .find(|id| endless::store::shard_of(id, 3) == 2)
        .expect("a task of shard 2");

    let mut submit = vec!["slurm", "submit", "--no-submit", "--shards", "3"];
    submit.extend(["--name", "gen", "--"]);
    submit.extend(gen);
    endless_in(h, &ws, &submit);
    let job = ws.join("slurm/gen");
    assert!(run_array_task(h, &job, 0), "shard 0 runs to its end");
    // Shard 2 cannot write one of its tasks: it fails after it started.
    std::fs::write(job.join("shard-2/tasks").join(&victim), "in the way\n").unwrap();
    assert!(!run_array_task(h, &job, 2), "shard 2 fails");
    // The CLI reads the same: 1 done, 1 queued, 1 failed.
    let out = Command::new(endless_bin())
        .env("XDG_CONFIG_HOME", h.join("config"))
        .args([
            "--workspace",
            ws.to_str().unwrap(),
            "slurm",
            "status",
            "gen",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a failed shard fails the status");
    assert!(text.contains("shard 0/3: done (COMPLETED)"), "{text}");
    assert!(text.contains("shard 1/3: queued (NOT SUBMITTED)"), "{text}");
    assert!(text.contains("shard 2/3: failed (FAILED)"), "{text}");

    let name = format!("endless-e2e-shards-{}", std::process::id());
    let session = start_tui(name, &ws, Some(h), 120, 40);
    let s = &session.0;
    wait_for(s, "Tasks");
    tmux(&["send-keys", "-t", s, "F4"]);
    let screen = wait_for(s, "└ shard 2/3");
    assert!(screen.contains("slurm/gen"), "{screen}");
    let row = |screen: &str, label: &str| {
        screen
            .lines()
            .find(|l| l.contains(label))
            .unwrap_or_default()
            .to_string()
    };
    assert!(row(&screen, "└ shard 0/3").contains("done"), "{screen}");
    assert!(row(&screen, "└ shard 1/3").contains("queued"), "{screen}");
    assert!(row(&screen, "└ shard 2/3").contains("failed"), "{screen}");
    assert!(
        row(&screen, "slurm/gen").contains("1 done · 1 failed · 1 queued"),
        "{screen}"
    );
    // The failed shard's log, opened like any job's.
    for _ in 0..3 {
        tmux(&["send-keys", "-t", s, "Down"]);
    }
    let screen = wait_for(s, "log: slurm/gen/shard-2");
    assert!(screen.contains("already exists"), "{screen}");
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_for(s, "full screen");
    assert!(screen.contains(&victim), "{screen}");
}
