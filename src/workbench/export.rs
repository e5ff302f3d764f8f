//! Datasets for RL trainers: `endless tasks export --format skyrl|jsonl`.
//!
//! One row per task, in the shape SkyRL's text environments load:
//! `data_source` (`"endless"`), `prompt` (the chat messages a policy starts
//! from: the same system and user messages `endless eval` and `endless
//! serve` give it), `env_class` (`"endless"`, the env class that
//! `endless_env.skyrl` registers), `reward_spec` (`method` `"rule"`,
//! `ground_truth` the task id) and `extra_info` (`task_id`, `max_turns`,
//! `max_time` in seconds). The rows are split into `train` and `validation`
//! with a seeded shuffle, and written as `train.parquet` and
//! `validation.parquet` (or `.jsonl`), each atomically.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::Serialize;

use crate::agent::protocol::{initial_messages, Protocol};
use crate::fsutil::write_atomic;
use crate::procgen::{task_split, Split};
use crate::store::{TaskFilter, TaskStatus, Workspace};
use crate::task::Task;

/// The env class of exported rows (what `endless_env.skyrl` registers).
pub const ENV_CLASS: &str = "endless";

/// The parquet schema of an exported dataset (all columns required; the
/// prompt is a standard three-level LIST of `{role, content}` structs).
const SCHEMA: &str = "
message endless_dataset {
  REQUIRED BYTE_ARRAY data_source (UTF8);
  REQUIRED group prompt (LIST) {
    REPEATED group list {
      REQUIRED group element {
        REQUIRED BYTE_ARRAY role (UTF8);
        REQUIRED BYTE_ARRAY content (UTF8);
      }
    }
  }
  REQUIRED BYTE_ARRAY env_class (UTF8);
  REQUIRED group reward_spec {
    REQUIRED BYTE_ARRAY method (UTF8);
    REQUIRED BYTE_ARRAY ground_truth (UTF8);
  }
  REQUIRED group extra_info {
    REQUIRED BYTE_ARRAY task_id (UTF8);
    REQUIRED INT64 max_turns;
    REQUIRED DOUBLE max_time;
  }
}
";

/// Which file format a dataset is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatasetFormat {
    /// `train.parquet` and `validation.parquet` (what SkyRL loads).
    Parquet,
    /// `train.jsonl` and `validation.jsonl`: the same rows as JSON lines.
    Jsonl,
}

impl DatasetFormat {
    fn extension(self) -> &'static str {
        match self {
            DatasetFormat::Parquet => "parquet",
            DatasetFormat::Jsonl => "jsonl",
        }
    }
}

/// One chat message of a row's prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptMessage {
    /// `system` or `user`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// How a trainer scores a row: by rule, against the task id (the
/// environment runs the task's tests).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RewardSpec {
    /// Always `"rule"`.
    pub method: String,
    /// The task id.
    pub ground_truth: String,
}

/// What the environment needs to start an episode of the row's task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExtraInfo {
    /// The task to open a session on.
    pub task_id: String,
    /// The task's turn limit.
    pub max_turns: i64,
    /// The task's wall-clock limit of one episode, in seconds (0: none).
    pub max_time: f64,
}

/// One dataset row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DatasetRow {
    /// Always `"endless"`.
    pub data_source: String,
    /// The messages a policy starts from.
    pub prompt: Vec<PromptMessage>,
    /// Always [`ENV_CLASS`].
    pub env_class: String,
    /// How the row is rewarded.
    pub reward_spec: RewardSpec,
    /// Task id and limits for the environment.
    pub extra_info: ExtraInfo,
}

impl DatasetRow {
    /// The row of `task`, prompted under `protocol` (its system prompt).
    pub fn of(task: &Task, protocol: &Protocol) -> DatasetRow {
        let prompt = initial_messages(protocol, &task.instruction)
            .into_iter()
            .map(|m| PromptMessage {
                role: serde_json::to_value(m.role)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                content: m.content,
            })
            .collect();
        let secs = task.meta.agent.timeout_sec;
        DatasetRow {
            data_source: "endless".into(),
            prompt,
            env_class: ENV_CLASS.into(),
            reward_spec: RewardSpec {
                method: "rule".into(),
                ground_truth: task.id().to_string(),
            },
            extra_info: ExtraInfo {
                task_id: task.id().to_string(),
                max_turns: i64::from(task.meta.agent.max_turns),
                max_time: if secs.is_finite() && secs > 0.0 {
                    secs
                } else {
                    0.0
                },
            },
        }
    }
}

/// Which tasks an export covers.
#[derive(Debug, Clone)]
pub enum Selection {
    /// These ids.
    Ids(Vec<String>),
    /// Every task.
    All,
    /// The tasks with this status.
    Status(TaskStatus),
}

/// What an export wrote.
#[derive(Debug, Clone, Serialize)]
pub struct DatasetExport {
    /// Rows in the train file.
    pub train: usize,
    /// Rows in the validation file.
    pub validation: usize,
    /// The files written.
    pub files: Vec<PathBuf>,
}

/// The task ids of `selection`, in id order; unknown ids are an error.
pub fn select(ws: &Workspace, selection: &Selection) -> Result<Vec<String>> {
    let ids = match selection {
        Selection::All => ws.task_ids()?,
        Selection::Status(status) => ws
            .list_tasks(&TaskFilter {
                status: Some(*status),
                ..Default::default()
            })?
            .into_iter()
            .map(|r| r.id)
            .collect(),
        Selection::Ids(ids) => {
            if ids.is_empty() {
                bail!("name task ids, or pass --all or --status");
            }
            for id in ids {
                if !ws.has_task(id) {
                    bail!("no task with id {id:?} in {}", ws.root().display());
                }
            }
            ids.clone()
        }
    };
    let mut ids = ids;
    ids.sort();
    ids.dedup();
    Ok(ids)
}

/// Split `rows` into (train, validation): `dev_count` rows picked by a
/// shuffle seeded with `seed` go to validation; each part keeps id order.
pub fn split(
    rows: Vec<DatasetRow>,
    dev_count: usize,
    seed: u64,
) -> (Vec<DatasetRow>, Vec<DatasetRow>) {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
    let dev: std::collections::BTreeSet<usize> =
        order.into_iter().take(dev_count.min(rows.len())).collect();
    let (mut train, mut validation) = (Vec::new(), Vec::new());
    for (i, row) in rows.into_iter().enumerate() {
        if dev.contains(&i) {
            validation.push(row);
        } else {
            train.push(row);
        }
    }
    (train, validation)
}

/// Split `rows` by each task's own split (`splits`, one per row): held-out
/// tasks go to validation, training tasks to train, so that no held-out
/// task is ever trained on; rows whose task has no split of its own (not
/// made by the offline generator) are split as [`split`] splits, a tenth of
/// them to validation.
pub fn split_by_task(
    rows: Vec<DatasetRow>,
    splits: &[Option<Split>],
    seed: u64,
) -> (Vec<DatasetRow>, Vec<DatasetRow>) {
    let (mut train, mut validation, mut unsplit) = (Vec::new(), Vec::new(), Vec::new());
    for (row, split) in rows.into_iter().zip(splits) {
        match split {
            Some(Split::Dev) => validation.push(row),
            Some(Split::Train) => train.push(row),
            None => unsplit.push(row),
        }
    }
    let tenth = unsplit.len() / 10;
    let (more_train, more_validation) = split(unsplit, tenth, seed);
    train.extend(more_train);
    validation.extend(more_validation);
    let by_id = |a: &DatasetRow, b: &DatasetRow| a.extra_info.task_id.cmp(&b.extra_info.task_id);
    train.sort_by(by_id);
    validation.sort_by(by_id);
    (train, validation)
}

/// Export the tasks `ids` of `ws` to `out` as `train.*` and
/// `validation.*`: by the tasks' own train/dev split (see
/// [`split_by_task`]), or, with `dev_count`, re-split: that many rows picked
/// by a shuffle seeded with `seed` go to validation. Prompts are those
/// `protocol` gives a policy.
pub fn export_dataset(
    ws: &Workspace,
    protocol: &Protocol,
    ids: &[String],
    format: DatasetFormat,
    out: &Path,
    dev_count: Option<usize>,
    seed: u64,
) -> Result<DatasetExport> {
    if ids.is_empty() {
        bail!("no tasks to export");
    }
    let mut rows = Vec::with_capacity(ids.len());
    let mut splits = Vec::with_capacity(ids.len());
    for id in ids {
        let task = ws
            .load_task(id)
            .with_context(|| format!("task {id:?} in {}", ws.task_dir(id).display()))?;
        rows.push(DatasetRow::of(&task, protocol));
        splits.push(task_split(&task));
    }
    let (train, validation) = match dev_count {
        Some(n) if n > rows.len() => bail!(
            "--dev-count {n} is more than the {} exported",
            crate::plural::count(rows.len(), "task")
        ),
        Some(n) => split(rows, n, seed),
        None => split_by_task(rows, &splits, seed),
    };
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut files = Vec::new();
    for (name, part) in [("train", &train), ("validation", &validation)] {
        let path = out.join(format!("{name}.{}", format.extension()));
        let bytes = match format {
            DatasetFormat::Parquet => to_parquet(part)?,
            DatasetFormat::Jsonl => to_jsonl(part)?,
        };
        write_atomic(&path, &bytes).with_context(|| format!("writing {}", path.display()))?;
        // Readable by the group and others, as every other export (the
        // atomic write's staging file is private).
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
            .with_context(|| format!("making {} readable", path.display()))?;
        files.push(path);
    }
    Ok(DatasetExport {
        train: train.len(),
        validation: validation.len(),
        files,
    })
}

/// The rows as JSON lines.
pub fn to_jsonl(rows: &[DatasetRow]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for row in rows {
        serde_json::to_writer(&mut out, row)?;
        out.push(b'\n');
    }
    Ok(out)
}

/// The rows as one parquet file (one row group, uncompressed).
pub fn to_parquet(rows: &[DatasetRow]) -> Result<Vec<u8>> {
    let schema = Arc::new(parquet::schema::parser::parse_message_type(SCHEMA)?);
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::UNCOMPRESSED)
            .set_created_by(format!("endless {}", env!("CARGO_PKG_VERSION")))
            .build(),
    );
    let mut buf = Vec::new();
    let mut writer = SerializedFileWriter::new(&mut buf, schema, props)?;
    let text = |f: &dyn Fn(&DatasetRow) -> &str| -> Vec<ByteArray> {
        rows.iter().map(|r| ByteArray::from(f(r))).collect()
    };
    // The prompt's leaves: one value per message; repetition level 0 starts
    // a row, 1 continues its list; definition level 1 is a present message,
    // 0 an empty list.
    let mut roles = Vec::new();
    let mut contents = Vec::new();
    let mut def = Vec::new();
    let mut rep = Vec::new();
    for row in rows {
        if row.prompt.is_empty() {
            def.push(0);
            rep.push(0);
        }
        for (i, m) in row.prompt.iter().enumerate() {
            roles.push(ByteArray::from(m.role.as_str()));
            contents.push(ByteArray::from(m.content.as_str()));
            def.push(1);
            rep.push(i16::from(i > 0));
        }
    }
    let mut group = writer.next_row_group()?;
    let mut column = 0;
    while let Some(mut col) = group.next_column()? {
        match column {
            0 => write_text(&mut col, &text(&|r| &r.data_source), None)?,
            1 => write_text(&mut col, &roles, Some((&def, &rep)))?,
            2 => write_text(&mut col, &contents, Some((&def, &rep)))?,
            3 => write_text(&mut col, &text(&|r| &r.env_class), None)?,
            4 => write_text(&mut col, &text(&|r| &r.reward_spec.method), None)?,
            5 => write_text(&mut col, &text(&|r| &r.reward_spec.ground_truth), None)?,
            6 => write_text(&mut col, &text(&|r| &r.extra_info.task_id), None)?,
            7 => {
                let v: Vec<i64> = rows.iter().map(|r| r.extra_info.max_turns).collect();
                col.typed::<Int64Type>().write_batch(&v, None, None)?;
            }
            8 => {
                let v: Vec<f64> = rows.iter().map(|r| r.extra_info.max_time).collect();
                col.typed::<DoubleType>().write_batch(&v, None, None)?;
            }
            n => bail!("the dataset schema has an unexpected column {n}"),
        }
        col.close()?;
        column += 1;
    }
    group.close()?;
    writer.close()?;
    Ok(buf)
}

fn write_text(
    col: &mut parquet::file::writer::SerializedColumnWriter<'_>,
    values: &[ByteArray],
    levels: Option<(&[i16], &[i16])>,
) -> Result<()> {
    let typed = col.typed::<ByteArrayType>();
    match levels {
        Some((def, rep)) => typed.write_batch(values, Some(def), Some(rep))?,
        None => typed.write_batch(values, None, None)?,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str) -> DatasetRow {
        DatasetRow {
            data_source: "endless".into(),
            prompt: vec![
                PromptMessage {
                    role: "system".into(),
                    content: "sys".into(),
                },
                PromptMessage {
                    role: "user".into(),
                    content: format!("do {id}"),
                },
            ],
            env_class: ENV_CLASS.into(),
            reward_spec: RewardSpec {
                method: "rule".into(),
                ground_truth: id.into(),
            },
            extra_info: ExtraInfo {
                task_id: id.into(),
                max_turns: 30,
                max_time: 600.0,
            },
        }
    }

    #[test]
    fn split_is_seeded_and_keeps_every_row_once() {
        let rows: Vec<DatasetRow> = (0..20).map(|i| row(&format!("t{i:02}"))).collect();
        let (a_train, a_dev) = split(rows.clone(), 5, 7);
        let (b_train, b_dev) = split(rows.clone(), 5, 7);
        let (_, c_dev) = split(rows.clone(), 5, 8);
        assert_eq!((a_train.len(), a_dev.len()), (15, 5));
        assert_eq!(a_dev, b_dev);
        assert_eq!(a_train, b_train);
        assert_ne!(a_dev, c_dev);
        let mut all: Vec<String> = a_train
            .iter()
            .chain(&a_dev)
            .map(|r| r.extra_info.task_id.clone())
            .collect();
        all.sort();
        assert_eq!(all.len(), 20);
        all.dedup();
        assert_eq!(all.len(), 20);
    }

    #[test]
    fn held_out_tasks_never_reach_train_unless_re_split() {
        let rows: Vec<DatasetRow> = (0..30).map(|i| row(&format!("t{i:02}"))).collect();
        // t00..t05 held out, t06..t19 training, t20..t29 of no split.
        let splits: Vec<Option<Split>> = (0..30)
            .map(|i| match i {
                0..=5 => Some(Split::Dev),
                6..=19 => Some(Split::Train),
                _ => None,
            })
            .collect();
        let (train, dev) = split_by_task(rows, &splits, 3);
        let ids = |part: &[DatasetRow]| -> Vec<String> {
            part.iter().map(|r| r.extra_info.task_id.clone()).collect()
        };
        let (train, dev) = (ids(&train), ids(&dev));
        for i in 0..=5 {
            assert!(dev.contains(&format!("t{i:02}")), "{dev:?}");
        }
        for i in 6..=19 {
            assert!(train.contains(&format!("t{i:02}")), "{train:?}");
        }
        // A tenth of the ten without a split is held out.
        assert_eq!((train.len(), dev.len()), (23, 7));
        let mut sorted = train.clone();
        sorted.sort();
        assert_eq!(train, sorted, "each part keeps id order");
    }

    #[test]
    fn parquet_has_magic_and_the_rows() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let bytes = to_parquet(&[row("a"), row("b")]).unwrap();
        assert!(bytes.starts_with(b"PAR1") && bytes.ends_with(b"PAR1"));
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &bytes).unwrap();
        let reader = SerializedFileReader::new(file).unwrap();
        assert_eq!(reader.metadata().file_metadata().num_rows(), 2);
        assert_eq!(
            reader
                .metadata()
                .file_metadata()
                .schema_descr()
                .num_columns(),
            9
        );
    }

    #[test]
    fn jsonl_has_one_row_a_line() {
        let text = String::from_utf8(to_jsonl(&[row("a"), row("b")]).unwrap()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["extra_info"]["task_id"], "b");
        assert_eq!(lines[0]["prompt"][0]["role"], "system");
    }
}
