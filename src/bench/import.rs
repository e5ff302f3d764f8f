//! `endless bench import`: the same mixed-format corpus imported with all
//! cores and with one thread, each into a fresh workspace.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use crate::store::{import_paths, OnConflict, Workspace};
use crate::task::formats::Format;
use crate::task::{FileTree, Task, TaskMeta};

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

/// Import `n` generated tasks with all cores, then with one thread.
pub fn bench_import(n: usize) -> Result<ImportBench> {
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
