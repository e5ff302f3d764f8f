//! `endless slurm submit|status` on a real single-node Slurm cluster that
//! the test starts: `munged`, `slurmctld` and `slurmd` (Debian's `munge`
//! and `slurm-wlm`), on loopback ports, with their key, state, spool and
//! logs in a temporary directory, stopped at the end even when the test
//! fails. A 4-shard validation and a 4-shard oracle evaluation of offline
//! tasks, submitted as job arrays with their merge jobs, give the same
//! verdicts, report and pass@k as one unsharded run; a failed shard is
//! reported with its log, re-run alone from the kept batch script, and
//! merged. The chain of generate, validate, audit and eval is submitted by
//! a user who is not root, with a subordinate id range (issue 48), and
//! merges to what root gets unsharded.
//!
//! Needs root (the daemons run as root) and the packages: the test fails,
//! saying so, without them.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;
use support::range_user::RangeUser;

/// A single-node Slurm cluster, stopped on drop.
struct Cluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
}

fn need(tool: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
        || Path::new("/usr/sbin").join(tool).is_file();
    assert!(
        found,
        "`{tool}` is not installed: this test starts a real Slurm cluster and needs Debian's \
         slurm-wlm and munge (`apt-get install -y slurm-wlm munge`)"
    );
}

fn sbin(tool: &str) -> PathBuf {
    let p = Path::new("/usr/sbin").join(tool);
    if p.is_file() {
        p
    } else {
        PathBuf::from(tool)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

impl Cluster {
    fn start() -> Cluster {
        for tool in [
            "munged",
            "slurmctld",
            "slurmd",
            "sbatch",
            "squeue",
            "sinfo",
            "scancel",
        ] {
            need(tool);
        }
        let user = String::from_utf8(run_ok(Command::new("id").arg("-un"), "id").stdout).unwrap();
        assert_eq!(
            user.trim(),
            "root",
            "the Slurm test starts slurmd, which runs as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Other users read slurm.conf and reach munge's socket.
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let munge = d.join("munge");
        for sub in ["munge", "state", "spool", "log"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&munge, std::fs::Permissions::from_mode(0o711)).unwrap();
        // A fresh munge key: 1 KiB of randomness, readable by its owner only.
        let key = munge.join("munge.key");
        let mut bytes = vec![0u8; 1024];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
            .unwrap();
        std::fs::write(&key, &bytes).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        let host = String::from_utf8(run_ok(Command::new("hostname").arg("-s"), "hostname").stdout)
            .unwrap()
            .trim()
            .to_string();
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let p = |s: &str| d.join(s).display().to_string();
        let conf = format!(
            "ClusterName=endlesstest\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctld}\n\
             SlurmdPort={slurmd}\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={sock}\n\
             CredType=cred/munge\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             StateSaveLocation={state}\n\
             SlurmdSpoolDir={spool}\n\
             SlurmctldPidFile={ctldpid}\n\
             SlurmdPidFile={slurmdpid}\n\
             SlurmctldLogFile={ctldlog}\n\
             SlurmdLogFile={slurmdlog}\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_CPU\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             MinJobAge=600\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
             PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4\n",
            ctld = free_port(),
            slurmd = free_port(),
            sock = munge.join("munge.sock").display(),
            state = p("state"),
            spool = p("spool"),
            ctldpid = p("slurmctld.pid"),
            slurmdpid = p("slurmd.pid"),
            ctldlog = p("log/slurmctld.log"),
            slurmdlog = p("log/slurmd.log"),
        );
        let conf_path = d.join("slurm.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let cluster = Cluster {
            dir,
            conf: conf_path,
        };
        run_ok(
            Command::new(sbin("munged"))
                .arg("--force")
                .arg(format!("--key-file={}", key.display()))
                .arg(format!("--socket={}", munge.join("munge.sock").display()))
                .arg(format!("--pid-file={}", munge.join("munged.pid").display()))
                .arg(format!("--log-file={}", munge.join("munged.log").display()))
                .arg(format!("--seed-file={}", munge.join("seed").display())),
            "starting munged",
        );
        run_ok(
            Command::new(sbin("slurmctld"))
                .args(["-i", "-f"])
                .arg(&cluster.conf),
            "starting slurmctld",
        );
        run_ok(
            Command::new(sbin("slurmd"))
                .args(["-N", &host, "-f"])
                .arg(&cluster.conf),
            "starting slurmd",
        );
        let start = Instant::now();
        loop {
            let out = cluster
                .cmd("sinfo")
                .args(["-h", "-o", "%T"])
                .output()
                .unwrap();
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if state == "idle" {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the Slurm node did not come up (state {state:?}): {}",
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        cluster
    }

    /// A Slurm client command against this cluster.
    fn cmd(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    fn logs(&self) -> String {
        ["log/slurmctld.log", "log/slurmd.log", "munge/munged.log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                format!(
                    "--- {f}\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Stop a daemon by its pid file, waiting for it to go.
    fn stop(&self, pid_file: &str) {
        let Ok(pid) = std::fs::read_to_string(self.dir.path().join(pid_file)) else {
            return;
        };
        let pid = pid.trim();
        if pid.is_empty() {
            return;
        }
        let _ = Command::new("kill").args(["-TERM", pid]).status();
        let proc_dir = Path::new("/proc").join(pid);
        let start = Instant::now();
        while proc_dir.exists() && start.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if proc_dir.exists() {
            let _ = Command::new("kill").args(["-KILL", pid]).status();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Jobs of this private cluster first, then the daemons.
        let _ = self
            .cmd("scancel")
            .args(["--quiet", "--partition", "debug"])
            .status();
        std::thread::sleep(Duration::from_millis(500));
        self.stop("slurmd.pid");
        self.stop("slurmctld.pid");
        self.stop("munge/munged.pid");
    }
}

/// `endless --workspace WS ARGS...` against `cluster`, with cache, state
/// and config shared below `home`.
fn endless(cluster: &Cluster, home: &Path, ws: &Path, args: &[&str]) -> Output {
    endless_as(None, cluster, home, ws, args)
}

/// [`endless`] as `user` (root when `None`).
fn endless_as(
    user: Option<&RangeUser>,
    cluster: &Cluster,
    home: &Path,
    ws: &Path,
    args: &[&str],
) -> Output {
    let exe = Path::new(env!("CARGO_BIN_EXE_endless"));
    let mut cmd = match user {
        Some(u) => u.command(&u.readable_copy(exe)),
        None => Command::new(exe),
    };
    cmd.arg("--workspace")
        .arg(ws)
        .arg("--create")
        .args(args)
        .env("SLURM_CONF", &cluster.conf)
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_STATE_HOME", home.join(".state"))
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .output()
        .unwrap()
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

fn json(out: Output) -> Value {
    let out = ok(out);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Poll `endless slurm status NAME --json` until `done` says so.
fn wait_for(
    cluster: &Cluster,
    home: &Path,
    main: &Path,
    name: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    wait_for_as(None, cluster, home, main, name, done)
}

/// [`wait_for`] as `user` (root when `None`).
fn wait_for_as(
    user: Option<&RangeUser>,
    cluster: &Cluster,
    home: &Path,
    main: &Path,
    name: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let args = ["slurm", "status", name, "--json"];
        let out = endless_as(user, cluster, home, main, &args);
        let status: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        if done(&status[0]) {
            return status[0].clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "job {name} did not finish: {status:#}\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn merged(s: &Value) -> bool {
    s["merge"] == "COMPLETED"
}

fn log(path: &Value) -> String {
    std::fs::read_to_string(path.as_str().unwrap()).unwrap_or_default()
}

fn with_tasks(cluster: &Cluster, home: &Path, name: &str) -> PathBuf {
    let ws = home.join(name);
    ok(endless(
        cluster,
        home,
        &ws,
        &["generate", "--offline", "--count", "8", "--seed", "4"],
    ));
    ws
}

fn stored_verdicts(cluster: &Cluster, home: &Path, ws: &Path) -> Vec<(Value, Value, Value)> {
    let v = json(endless(
        cluster,
        home,
        ws,
        &["tasks", "validate", "--all", "--stored", "--json"],
    ));
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| (x["id"].clone(), x["ok"].clone(), x["problems"].clone()))
        .collect()
}

fn pass_at_k(cluster: &Cluster, home: &Path, ws: &Path) -> Vec<(Value, Value)> {
    json(endless(cluster, home, ws, &["tasks", "list", "--json"]))
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["id"].clone(), t["pass_at_k"].clone()))
        .collect()
}

#[test]
fn sharded_validation_and_eval_as_slurm_arrays_merge_to_one_unsharded_run() {
    let cluster = Cluster::start();
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let whole = with_tasks(&cluster, home, "whole");
    let main = with_tasks(&cluster, home, "main");
    ok(endless(
        &cluster,
        home,
        &whole,
        &["tasks", "validate", "--all"],
    ));
    let eval = ["eval", "--policy", "oracle", "--samples", "2"];
    let mut eval_json = eval.to_vec();
    eval_json.push("--json");
    let one = json(endless(&cluster, home, &whole, &eval_json));
    let run = one["run"].as_str().unwrap().to_string();

    // Validation: 4 array tasks and the merge job.
    let mut submit = vec![
        "slurm", "submit", "--shards", "4", "--name", "val", "--json", "--",
    ];
    submit.extend(["tasks", "validate", "--all"]);
    let job = json(endless(&cluster, home, &main, &submit));
    assert!(
        job["array_job"].is_string() && job["merge_job"].is_string(),
        "{job}"
    );
    let dir = PathBuf::from(job["dir"].as_str().unwrap());
    assert!(dir.join("array.sbatch").is_file() && dir.join("merge.sbatch").is_file());
    let status = wait_for(&cluster, home, &main, "val", |s| {
        merged(s) || s["merge"] == "CANCELLED" || s["merge"] == "FAILED"
    });
    assert!(merged(&status), "{status:#}\n{}", cluster.logs());
    for shard in status["shards"].as_array().unwrap() {
        assert_eq!(shard["done"], true, "{status:#}");
        assert_eq!(shard["state"], "COMPLETED", "{status:#}");
    }
    assert!(
        log(&Value::String(
            dir.join("logs/merge.out").display().to_string()
        ))
        .contains("merged"),
        "the merge job's log says what it merged"
    );
    assert_eq!(
        stored_verdicts(&cluster, home, &main),
        stored_verdicts(&cluster, home, &whole)
    );
    ok(endless(&cluster, home, &main, &["slurm", "status", "val"]));

    // Evaluation, written first and submitted by the same command; shard 2
    // is broken before it runs, fails, and is re-run alone.
    let mut write = vec![
        "slurm",
        "submit",
        "--shards",
        "4",
        "--name",
        "ev",
        "--no-submit",
        "--json",
        "--",
    ];
    write.extend(eval);
    let job = json(endless(&cluster, home, &main, &write));
    assert!(job["array_job"].is_null(), "{job}");
    let dir = PathBuf::from(job["dir"].as_str().unwrap());
    let broken = dir.join("shard-2").join("endless.toml");
    std::fs::write(&broken, "[sandbox\nnot toml").unwrap();
    let mut submit = vec![
        "slurm", "submit", "--shards", "4", "--name", "ev", "--json", "--",
    ];
    submit.extend(eval);
    let job = json(endless(&cluster, home, &main, &submit));
    assert!(job["array_job"].is_string(), "{job}");
    let status = wait_for(&cluster, home, &main, "ev", |s| {
        s["shards"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["done"] == true || x["state"] == "FAILED")
            && s["merge"] != "PENDING"
    });
    let shards = status["shards"].as_array().unwrap();
    assert_eq!(shards[2]["state"], "FAILED", "{status:#}");
    assert!(
        log(&shards[2]["log"]).contains("endless.toml"),
        "{}",
        log(&shards[2]["log"])
    );
    assert_ne!(status["merge"], "COMPLETED", "{status:#}");
    let text = endless(&cluster, home, &main, &["slurm", "status", "ev"]);
    assert!(!text.status.success(), "a failed shard fails the status");
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(
        out.contains("shard 2 failed: log") && out.contains("sbatch --array=2"),
        "{out}"
    );
    // Issue 48: `slurm rerun` submits the failed shard again with a merge
    // job; while it is queued or runs, status says so (not "failed"), and
    // its merge job's state is the merge's.
    std::fs::remove_file(&broken).unwrap();
    let again = json(endless(
        &cluster,
        home,
        &main,
        &["slurm", "rerun", "ev", "--json"],
    ));
    assert_eq!(again["shards"], serde_json::json!([2]), "{again}");
    let status = json(endless(
        &cluster,
        home,
        &main,
        &["slurm", "status", "ev", "--json"],
    ));
    let state = status[0]["shards"][2]["state"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        [
            "PENDING",
            "RUNNING",
            "CONFIGURING",
            "COMPLETING",
            "COMPLETED"
        ]
        .contains(&state.as_str()),
        "a shard being re-run is not {state}: {status:#}"
    );
    assert_ne!(status[0]["merge"], "CANCELLED", "{status:#}");
    let status = wait_for(&cluster, home, &main, "ev", |s| {
        merged(s) || s["merge"] == "CANCELLED" || s["merge"] == "FAILED"
    });
    assert!(merged(&status), "{status:#}\n{}", cluster.logs());
    assert_eq!(status["shards"][2]["state"], "COMPLETED", "{status:#}");
    // Each attempt has its own log; Slurm's log of the task has a line for each.
    assert!(
        status["shards"][2]["log"]
            .as_str()
            .unwrap()
            .ends_with("logs/shard-2.1.out"),
        "{status:#}"
    );
    assert!(dir.join("logs/shard-2.0.out").is_file());
    let slurm_log = std::fs::read_to_string(dir.join("logs/shard-2.out")).unwrap();
    assert!(
        slurm_log.contains("shard 2/4, attempt 0") && slurm_log.contains("shard 2/4, attempt 1"),
        "{slurm_log}"
    );
    ok(endless(&cluster, home, &main, &["slurm", "status", "ev"]));
    let merged_out = json(endless(
        &cluster,
        home,
        &main,
        &["workspace", "merge", dir.to_str().unwrap(), "--json"],
    ));
    assert_eq!(merged_out["finished"], run.as_str(), "{merged_out}");
    let report =
        |ws: &Path| std::fs::read_to_string(ws.join("runs").join(&run).join("report.md")).unwrap();
    assert_eq!(report(&main), report(&whole));
    assert_eq!(
        pass_at_k(&cluster, home, &main),
        pass_at_k(&cluster, home, &whole)
    );
}

/// Issue 46: a newline in `--partition`, `--time` or `--mem` became a line
/// of the batch script (an `#SBATCH` directive or a command of the
/// caller's choosing). Each is refused by option, before anything is
/// written. A workspace whose path holds spaces, quotes, `#` and `%` still
/// runs: sbatch reads its quoted `#SBATCH --output` as one path, the logs
/// land where `slurm status` says, and the merge job merges.
#[test]
fn script_breaking_values_are_refused_and_odd_workspace_paths_run() {
    let cluster = Cluster::start();
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let main = with_tasks(&cluster, home, "my \"ws\" #1 100%");
    let pwned = home.join("pwned");
    let hostile = format!("1\n#SBATCH --chdir=/\ntouch {}", pwned.display());
    for flag in ["--partition", "--time", "--mem"] {
        let out = endless(
            &cluster,
            home,
            &main,
            &[
                "slurm",
                "submit",
                "--shards",
                "2",
                "--name",
                "bad",
                flag,
                &hostile,
                "--no-submit",
                "--",
                "tasks",
                "validate",
                "--all",
            ],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(flag), "{flag}: {err}");
        assert!(!main.join("slurm/bad").exists(), "{flag}: written anyway");
    }
    let submit = [
        "slurm",
        "submit",
        "--shards",
        "2",
        "--name",
        "odd",
        "--partition",
        "debug",
        "--time",
        "30:00",
        "--json",
        "--",
        "tasks",
        "validate",
        "--all",
    ];
    let job = json(endless(&cluster, home, &main, &submit));
    let dir = PathBuf::from(job["dir"].as_str().unwrap());
    let status = wait_for(&cluster, home, &main, "odd", |s| {
        merged(s) || s["merge"] == "CANCELLED" || s["merge"] == "FAILED"
    });
    assert!(merged(&status), "{status:#}\n{}", cluster.logs());
    for i in 0..2 {
        assert!(
            dir.join(format!("logs/shard-{i}.out")).is_file(),
            "no log of shard {i} in {}",
            dir.display()
        );
    }
    assert!(log(&Value::String(
        dir.join("logs/merge.out").display().to_string()
    ))
    .contains("merged"));
    assert!(!pwned.exists());
}

/// The stored audit reports of `ws`, by task, without their timings.
fn audit_reports(ws: &Path) -> Vec<(String, Value)> {
    fn untimed(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|k, _| k != "seconds" && !k.ends_with("_at"));
                m.values_mut().for_each(untimed);
            }
            Value::Array(a) => a.iter_mut().for_each(untimed),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(ws.join("tasks")).unwrap().flatten() {
        let path = entry.path().join("audit.json");
        let mut v: Value = serde_json::from_str(
            &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .unwrap();
        untimed(&mut v);
        out.push((entry.file_name().to_string_lossy().to_string(), v));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Issue 48: generate -> validate -> audit -> eval as one chained
/// submission of job arrays, each stage after the merge of the one before
/// (its shard workspaces made then), merges to what the same work gives
/// unsharded: the same tasks, verdicts, audit reports, eval report and
/// pass@k. The site's options (`--account`-like `[slurm] extra`,
/// `--sbatch-arg`, `--max-parallel`, `--cpus`) go into every script.
#[test]
fn a_chain_of_generate_validate_audit_eval_merges_to_the_same_work_unsharded() {
    let cluster = Cluster::start();
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    // The sharded chain is a non-root user's, with a subordinate range (on
    // a machine where none can be made, root's, after a SKIP line).
    let user = RangeUser::create(true);
    let user = user.as_ref();
    let user_home = user.map_or(home.to_path_buf(), |u| u.home.clone());
    let generate = ["generate", "--offline", "--count", "6", "--seed", "21"];
    let validate = ["tasks", "validate", "--all"];
    let audit = ["tasks", "audit", "--all", "--checks", "passes-without-work"];
    let eval = ["eval", "--policy", "oracle", "--samples", "2"];
    let whole = home.join("whole");
    ok(endless(&cluster, home, &whole, &generate));
    ok(endless(&cluster, home, &whole, &validate));
    // Findings make the audit exit 1; its reports are stored all the same.
    endless(&cluster, home, &whole, &audit);
    let mut eval_json = eval.to_vec();
    eval_json.push("--json");
    let one = json(endless(&cluster, home, &whole, &eval_json));
    let run = one["run"].as_str().unwrap().to_string();

    let main = user_home.join("main");
    std::fs::create_dir_all(&main).unwrap();
    std::fs::write(
        main.join("endless.toml"),
        "[slurm]\nextra = [\"--comment=endless chain\"]\n",
    )
    .unwrap();
    if let Some(u) = user {
        for p in [&main, &main.join("endless.toml")] {
            std::os::unix::fs::chown(p, Some(u.ids.0), Some(u.ids.1)).unwrap();
        }
    }
    let mut submit = vec![
        "slurm",
        "submit",
        "--shards",
        "2",
        "--name",
        "ch",
        "--cpus",
        "1",
        "--max-parallel",
        "1",
        "--sbatch-arg=--nice=10",
        "--json",
        "--",
    ];
    for (k, stage) in [&generate[..], &validate[..], &audit[..], &eval[..]]
        .iter()
        .enumerate()
    {
        if k > 0 {
            submit.push("--then");
        }
        submit.extend(stage.iter());
    }
    let jobs = json(endless_as(user, &cluster, &user_home, &main, &submit));
    let names: Vec<&str> = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["ch-1-generate", "ch-2-validate", "ch-3-audit", "ch-4-eval"]
    );
    for (k, job) in jobs.as_array().unwrap().iter().enumerate() {
        let dir = PathBuf::from(job["dir"].as_str().unwrap());
        let array = std::fs::read_to_string(dir.join("array.sbatch")).unwrap();
        assert!(
            array.contains("#SBATCH --comment=\"endless chain\"\n#SBATCH --nice=\"10\"\n")
                && array.contains("#SBATCH --cpus-per-task=1\n"),
            "{array}"
        );
        if k > 0 {
            assert_eq!(job["after"], names[k - 1], "{job}");
            assert!(job["prepare_job"].is_string(), "{job}");
            assert!(
                !dir.join("shard-0").exists(),
                "a later stage's shards are made after the merge before it"
            );
        }
    }
    for name in &names {
        let status = wait_for_as(user, &cluster, &user_home, &main, name, |s| {
            merged(s) || ["CANCELLED", "FAILED"].contains(&s["merge"].as_str().unwrap_or(""))
        });
        assert!(
            merged(&status),
            "{name}: {status:#}\n{}\n{}",
            log(&Value::String(
                main.join(format!("slurm/{name}/logs/merge.out"))
                    .display()
                    .to_string()
            )),
            cluster.logs()
        );
    }
    let ids = |ws: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(ws.join("tasks"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        v.sort();
        v
    };
    if let Some(u) = user {
        // Its jobs' sandboxes mapped the range: the offline tasks' homes,
        // chowned to the task user (inside 1000), are that id of the range.
        use std::os::unix::fs::MetadataExt;
        let through_range = walkdir::WalkDir::new(user_home.join(".cache"))
            .into_iter()
            .flatten()
            .any(|e| e.metadata().is_ok_and(|m| m.uid() == u.host_uid(1000)));
        assert!(
            through_range,
            "no file of the user's cache is owned through the range"
        );
    }
    assert_eq!(ids(&main), ids(&whole));
    assert_eq!(
        stored_verdicts(&cluster, home, &main),
        stored_verdicts(&cluster, home, &whole)
    );
    assert_eq!(audit_reports(&main), audit_reports(&whole));
    let report =
        |ws: &Path| std::fs::read_to_string(ws.join("runs").join(&run).join("report.md")).unwrap();
    assert_eq!(report(&main), report(&whole));
    assert_eq!(
        pass_at_k(&cluster, home, &main),
        pass_at_k(&cluster, home, &whole)
    );
}

/// Issue 48: an array task told to stop (USR1, what `--requeue-before`
/// asks Slurm to send before the time limit) stops its command and
/// requeues itself; the next attempt resumes, each attempt keeps its own
/// log, and the merge equals one unsharded evaluation.
#[test]
fn a_signalled_shard_stops_requeues_and_resumes_with_a_log_per_attempt() {
    let cluster = Cluster::start();
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let whole = with_tasks(&cluster, home, "whole");
    let main = with_tasks(&cluster, home, "main");
    let eval = [
        "eval",
        "--policy",
        "oracle",
        "--samples",
        "3",
        "--concurrency",
        "1",
    ];
    let mut eval_json = eval.to_vec();
    eval_json.push("--json");
    let one = json(endless(&cluster, home, &whole, &eval_json));
    let run = one["run"].as_str().unwrap().to_string();
    let mut submit = vec![
        "slurm",
        "submit",
        "--shards",
        "2",
        "--name",
        "pre",
        "--requeue-before",
        "60",
        "--json",
        "--",
    ];
    submit.extend(eval);
    let job = json(endless(&cluster, home, &main, &submit));
    let dir = PathBuf::from(job["dir"].as_str().unwrap());
    let array = job["array_job"].as_str().unwrap().to_string();
    let script = std::fs::read_to_string(dir.join("array.sbatch")).unwrap();
    assert!(
        script.contains("#SBATCH --signal=B:USR1@60\n#SBATCH --requeue\n"),
        "{script}"
    );
    // Once shard 0's first attempt runs its command, signal its batch shell.
    let attempt = dir.join("logs/shard-0.0.out");
    let start = Instant::now();
    while !attempt.is_file() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "shard 0 did not start: {}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    run_ok(
        cluster
            .cmd("scancel")
            .args(["--signal=USR1", "--batch"])
            .arg(format!("{array}_0")),
        "signalling shard 0",
    );
    let status = wait_for(&cluster, home, &main, "pre", |s| {
        merged(s) || ["CANCELLED", "FAILED"].contains(&s["merge"].as_str().unwrap_or(""))
    });
    assert!(merged(&status), "{status:#}\n{}", cluster.logs());
    let first = std::fs::read_to_string(&attempt).unwrap();
    assert!(first.contains("told to stop (USR1)"), "{first}");
    assert!(
        dir.join("logs/shard-0.1.out").is_file(),
        "the requeued attempt has its own log"
    );
    assert!(
        status["shards"][0]["log"]
            .as_str()
            .unwrap()
            .ends_with("logs/shard-0.1.out"),
        "{status:#}"
    );
    let slurm_log = std::fs::read_to_string(dir.join("logs/shard-0.out")).unwrap();
    assert!(
        slurm_log.contains("shard 0/2, attempt 0 (job")
            && slurm_log.contains("shard 0/2, attempt 1 (job"),
        "{slurm_log}"
    );
    let report =
        |ws: &Path| std::fs::read_to_string(ws.join("runs").join(&run).join("report.md")).unwrap();
    assert_eq!(report(&main), report(&whole));
    assert_eq!(
        pass_at_k(&cluster, home, &main),
        pass_at_k(&cluster, home, &whole)
    );
}
