//! `endless bench ...`: benchmarks that compare side by side in one run.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use super::print_json;
use crate::cli::{BenchArgs, BenchTarget};
use crate::store::{import_paths, OnConflict, Workspace};
use crate::task::formats::Format;
use crate::task::{FileTree, Task, TaskMeta};
use crate::workbench::Context;

/// `endless bench ...`: run the benchmark `args` names and print its table
/// (or JSON).
pub fn run(ctx: &Context, args: BenchArgs) -> Result<ExitCode> {
    if let Some(b) = &args.baseline {
        anyhow::bail!(
            "--baseline {}: only `bench tui` compares with another binary",
            b.display()
        );
    }
    match args.what {
        BenchTarget::Import => {
            let report = bench_import(args.n.unwrap_or(2000))?;
            if args.json {
                print_json(&report)?;
            } else {
                say!("{report}");
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchTarget::Sandbox => {
            let report =
                crate::sandbox::bench(args.n.unwrap_or(200), &ctx.paths.cache_dir.join("sandbox"));
            if args.json {
                print_json(&report)?;
            } else {
                say!("{report}");
            }
            Ok(ExitCode::SUCCESS)
        }
        // Measured by the TUI itself, which `src/main.rs` runs.
        BenchTarget::Tui => anyhow::bail!("`bench tui` is run by the endless binary (src/main.rs)"),
        BenchTarget::Ppo => {
            let report = super::bench_ppo::bench_ppo(
                args.size,
                args.warmup,
                args.n.unwrap_or(5),
                args.dump.as_deref(),
            )?;
            if args.json {
                print_json(&report)?;
            } else {
                say!("{report}");
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchTarget::Lora => {
            let report = super::bench_lora::bench_lora(args.size, args.rank, args.n.unwrap_or(3))?;
            if args.json {
                print_json(&report)?;
            } else {
                say!("{report}");
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchTarget::Serve => {
            let episodes = args.episodes.or(args.n).unwrap_or(args.clients * 2);
            let report = super::bench_serve::run(ctx, args.clients, episodes)?;
            if args.json {
                print_json(&report)?;
            } else {
                say!("{report}");
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchTarget::Sample => {
            let report = super::bench_sample::run(
                ctx,
                args.n.unwrap_or(128),
                args.model,
                args.check,
                args.dump.as_deref(),
            )?;
            if args.json {
                print_json(&report)?;
            } else {
                say!("{report}");
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchTarget::Images => {
            let report = super::bench_images::run(args.n.unwrap_or(5))?;
            if args.json {
                print_json(&report)?;
            } else {
                say!("{report}");
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchTarget::Shards => super::bench_shards::run(ctx, args.n, args.json),
        BenchTarget::Audit => super::bench_audit::run(ctx, args.n, args.json),
        BenchTarget::Verify => {
            let backend = ctx.backend()?;
            let (families, _missing) = crate::procgen::usable_families();
            let tasks =
                crate::procgen::generate_batch_from(&families, args.n.unwrap_or(50), 1, None);
            let report = crate::verify::bench_verify(backend.as_ref(), &tasks)?;
            if args.json {
                print_json(&report)?;
            } else {
                say!("{report}");
            }
            Ok(if report.mismatches.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        BenchTarget::Rollout => {
            let runs = rollout_backends(ctx)?;
            let work = tempfile::tempdir()?;
            let concurrency = std::thread::available_parallelism().map_or(2, |c| c.get()) * 2;
            let rt = tokio::runtime::Runtime::new()?;
            let mut reports = Vec::new();
            for (verifier, backend) in runs {
                let report = rt.block_on(crate::agent::bench_rollout_offline(
                    backend,
                    args.n.unwrap_or(50),
                    4,
                    concurrency,
                    1,
                    work.path(),
                ))?;
                reports.push(RolloutRun { verifier, report });
            }
            let speedup = match reports.as_slice() {
                [cold, warm] if cold.report.episodes_per_minute > 0.0 => {
                    Some(warm.report.episodes_per_minute / cold.report.episodes_per_minute)
                }
                _ => None,
            };
            if args.json {
                print_json(&serde_json::json!({ "runs": reports, "speedup": speedup }))?;
            } else {
                for run in &reports {
                    say!("verifier {}:\n{}", run.verifier, run.report.summary());
                }
                if let Some(x) = speedup {
                    say!("pre-warmed over cold: {x:.2}x episodes/min");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// One `bench rollout` run and the verifier it used.
#[derive(Debug, Serialize)]
struct RolloutRun {
    verifier: &'static str,
    #[serde(flatten)]
    report: crate::agent::RolloutBench,
}

/// The backends `bench rollout` compares: for `local`, one verifying cold
/// and one pre-warmed (in that order); else the configured backend alone.
fn rollout_backends(
    ctx: &Context,
) -> Result<Vec<(&'static str, std::sync::Arc<dyn crate::sandbox::Backend>)>> {
    use crate::sandbox::local::LocalBackend;
    if ctx.config.sandbox.backend != "local" {
        return Ok(vec![("of the backend", ctx.backend()?.into())]);
    }
    let cache = ctx.paths.cache_dir.join("sandbox");
    let local = || -> Result<LocalBackend> {
        Ok(LocalBackend::new(&cache)?.with_images(ctx.config.images.clone()))
    };
    Ok(vec![
        ("cold", std::sync::Arc::new(local()?.with_cold_verifier())),
        ("pre-warmed", std::sync::Arc::new(local()?)),
    ])
}

/// Import throughput: the same mixed-format corpus imported with all cores
/// and with one thread, each into a fresh workspace.
#[derive(Debug, Serialize)]
pub struct ImportBench {
    /// Tasks in the corpus.
    pub tasks: usize,
    /// Threads of the parallel import.
    pub threads: usize,
    /// Throughput with all cores.
    pub parallel_tasks_per_sec: f64,
    /// Throughput with one thread.
    pub sequential_tasks_per_sec: f64,
    /// Parallel over sequential.
    pub speedup: f64,
}

impl std::fmt::Display for ImportBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "import of {} small mixed-format tasks (native, reference, harbor, tb1)",
            self.tasks
        )?;
        writeln!(
            f,
            "  parallel ({} threads): {:>8.0} tasks/s",
            self.threads, self.parallel_tasks_per_sec
        )?;
        writeln!(
            f,
            "  sequential (1 thread): {:>8.0} tasks/s",
            self.sequential_tasks_per_sec
        )?;
        write!(f, "  speedup: {:.2}x", self.speedup)
    }
}

/// Build `n` small tasks in four formats under `dir`.
pub fn write_corpus(dir: &Path, n: usize) -> Result<()> {
    let formats = [
        Format::Native,
        Format::Reference,
        Format::Harbor,
        Format::Tb1,
    ];
    for i in 0..n {
        let task = sample_task(i);
        let target = dir.join(format!("task-{i:05}"));
        std::fs::create_dir_all(&target)?;
        formats[i % formats.len()].write(&task, &target)?;
    }
    Ok(())
}

/// A small but complete task, as a generator would write it.
pub fn sample_task(i: usize) -> Task {
    let mut meta = TaskMeta::default();
    meta.task.id = format!("bench-{i:05}");
    meta.task.name = format!("Count error lines {i}");
    meta.task.category = ["log analysis", "file management", "text processing"][i % 3].into();
    meta.task.complexity = Some((i % 6 + 1) as u8);
    let mut environment = FileTree::default();
    environment.insert("setup.sh", format!("mkdir -p /home/user/logs\nprintf 'ERROR a\\nINFO b\\n' > /home/user/logs/app{i}.log\nchown -R user:user /home/user\n").into_bytes(), true);
    let mut tests = FileTree::default();
    tests.insert_text("test_initial_state.py", format!("import os\n\ndef test_log_exists():\n    assert os.path.exists('/home/user/logs/app{i}.log')\n"));
    tests.insert_text(
        "test_final_state.py",
        "def test_count():\n    assert open('/home/user/count.txt').read().strip() == '1'\n",
    );
    let mut solution = FileTree::default();
    solution.insert(
        "solve.sh",
        format!("grep -c ERROR /home/user/logs/app{i}.log > /home/user/count.txt\n").into_bytes(),
        true,
    );
    Task {
        meta,
        instruction: format!("Count the ERROR lines in ~/logs/app{i}.log and write the number to ~/count.txt."),
        truth: format!("/home/user/logs/app{i}.log has exactly 1 ERROR line; expected /home/user/count.txt = 1"),
        environment,
        tests,
        solution,
    }
}

fn bench_import(n: usize) -> Result<ImportBench> {
    let corpus = tempfile::tempdir()?;
    write_corpus(corpus.path(), n)?;
    let measure = |threads: usize| -> Result<f64> {
        let ws_dir = tempfile::tempdir()?;
        let mut ws = Workspace::open(ws_dir.path())?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?;
        let start = Instant::now();
        let report = pool.install(|| {
            import_paths(
                &mut ws,
                &[corpus.path().to_path_buf()],
                None,
                OnConflict::Fail,
            )
        })?;
        let secs = start.elapsed().as_secs_f64();
        anyhow::ensure!(
            report.imported() == n,
            "imported {} of {n}: {:?}",
            report.imported(),
            report
                .outcomes
                .iter()
                .find(|o| matches!(o, crate::store::ImportOutcome::Failed { .. }))
        );
        Ok(n as f64 / secs)
    };
    let threads = rayon::current_num_threads();
    let sequential = measure(1)?;
    let parallel = measure(threads)?;
    Ok(ImportBench {
        tasks: n,
        threads,
        parallel_tasks_per_sec: parallel,
        sequential_tasks_per_sec: sequential,
        speedup: parallel / sequential,
    })
}
