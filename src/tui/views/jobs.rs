//! The Jobs view: current and past jobs (the journal plus live events) with
//! progress bars and status, the selected job's log lines, and forms that
//! launch new jobs.

use crate::tui::action::Action;
use crate::tui::component::{Component, DrawContext};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;

use crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, HighlightSpacing, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use crate::jobs::{JobEvent, JobOutcome};
use crate::store::JobRow;
use crate::tui::keymap::{Command, Keymap};
use crate::tui::theme::Theme;
use crate::tui::widgets::columns::{constraints, cut_end, cut_middle, fit, shown, widest, Column};
use crate::tui::widgets::text::{bar, once_per_url};
use crate::workbench::sharded_runs::{ShardState, ShardedRun};

/// Log lines kept per job.
const LOG_LINES: usize = 500;

/// The status of a job whose cancellation was asked for.
pub const CANCELLING: &str = "cancelling…";

/// `line` cut into rows of at most `width` characters (an empty line is one
/// empty row).
fn wrap(line: &str, width: usize) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    chars
        .chunks(width.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

/// One job as the view shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobItem {
    /// The job id.
    pub id: String,
    /// What it does (`eval`, `validate`, `train`...).
    pub kind: String,
    /// queued | running | cancelling… | succeeded | empty | failed |
    /// cancelled | interrupted
    pub status: String,
    /// Units done.
    pub done: u64,
    /// Units in all.
    pub total: u64,
    /// Stage, result or error.
    pub message: String,
    /// When it was started.
    pub created_at: String,
    /// The run it works on (an evaluation's run id), once known: the id it
    /// is shown by.
    pub run: Option<String>,
    /// Its parameters as journalled (what a retry runs again).
    pub params: serde_json::Value,
    /// A row of a sharded run (Slurm, Ray) rather than of the journal.
    pub shard: Option<ShardPlace>,
    /// Earlier jobs of the same run, oldest first (the run was resumed):
    /// their rows are folded into this one, their logs shown above its own.
    pub earlier: Vec<String>,
}

/// Where a row of a sharded run sits: the run's row, or one shard's row
/// under it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardPlace {
    /// The run's id (`slurm/NAME`, `ray/NAME`).
    pub run: String,
    /// The shard (`None`: the run's own row).
    pub index: Option<u32>,
    /// What the row is shown as.
    pub label: String,
    /// The shard's log file (read from disk, as it grows).
    pub log: Option<PathBuf>,
    /// How to run it again (it runs outside the TUI).
    pub rerun: String,
}

impl JobItem {
    /// The id the job is shown by: its run's, once known, else its own
    /// (one id per thing).
    pub fn shown_id(&self) -> &str {
        match &self.shard {
            Some(p) => &p.label,
            None => self.run.as_deref().unwrap_or(&self.id),
        }
    }

    fn fraction(&self) -> f64 {
        if self.total == 0 {
            if self.status == "succeeded" || self.status == "empty" {
                1.0
            } else {
                0.0
            }
        } else {
            (self.done as f64 / self.total as f64).clamp(0.0, 1.0)
        }
    }
}

/// State of the Jobs view.
#[derive(Debug, Default)]
pub struct JobsView {
    /// Newest first.
    pub items: Vec<JobItem>,
    /// The last log lines of each job, by id (a multi-line entry is split
    /// into its lines).
    pub logs: BTreeMap<String, VecDeque<String>>,
    /// The selected row.
    pub selected: usize,
    /// Rows the log is scrolled back from its tail (0: it follows the tail).
    pub log_scroll: usize,
    /// Jobs started by this process (the journal also lists other
    /// processes' jobs).
    pub local: std::collections::BTreeSet<String>,
    /// The selected job's log fills the view (Enter; Enter or Esc again: back).
    pub log_full: bool,
    /// Jobs whose kept log (`jobs/<id>.log`) was asked for.
    log_requested: std::collections::BTreeSet<String>,
    table_area: Rect,
}

impl JobsView {
    /// Merge the journal: rows not seen live are added, live ones kept.
    pub fn set_rows(&mut self, rows: Vec<JobRow>) {
        for r in rows {
            let total = 1000;
            let run = r
                .params
                .get("run")
                .and_then(|v| v.as_str())
                .map(String::from);
            let item = JobItem {
                done: (r.progress * total as f64).round() as u64,
                total,
                id: r.id,
                kind: r.kind,
                status: r.status,
                message: once_per_url(&r.message),
                created_at: r.created_at,
                run,
                params: r.params,
                shard: None,
                earlier: Vec::new(),
            };
            // A job another process runs writes on to its log: read it again.
            if item.status == "running" && !self.local.contains(&item.id) {
                self.log_requested.remove(&item.id);
            }
            match self.items.iter_mut().find(|i| i.id == item.id) {
                // A live job knows more than the journal (which lags, and
                // keeps only a fraction): its exact counts stay.
                Some(i)
                    if i.status == item.status
                        || i.status == CANCELLING && item.status == "running" =>
                {
                    i.params = item.params;
                    if i.run.is_none() {
                        i.run = item.run;
                    }
                }
                Some(i) => *i = item,
                None => self.items.push(item),
            }
        }
        self.fold_runs();
        self.sort();
        self.clamp();
    }

    /// One row per run: the jobs of a resumed run (the one interrupted or
    /// cancelled, the one that resumed it) fold into the newest, which
    /// shows the run's latest state; the earlier ones stay by id for their
    /// logs. The selection stays on the run.
    fn fold_runs(&mut self) {
        let newer = |a: &JobItem, b: &JobItem| (&a.created_at, &a.id) > (&b.created_at, &b.id);
        let run_of = |j: &JobItem| j.run.clone().filter(|_| j.shard.is_none());
        let mut newest: BTreeMap<String, usize> = BTreeMap::new();
        for (i, j) in self.items.iter().enumerate() {
            if let Some(run) = run_of(j) {
                match newest.get(&run) {
                    Some(&k) if !newer(j, &self.items[k]) => {}
                    _ => {
                        newest.insert(run, i);
                    }
                }
            }
        }
        let mut folded: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (i, j) in self.items.iter().enumerate() {
            let Some(&k) = run_of(j).and_then(|run| newest.get(&run)) else {
                continue;
            };
            if k != i {
                let ids = folded.entry(k).or_default();
                ids.extend(j.earlier.iter().cloned());
                ids.push(j.id.clone());
            }
        }
        if folded.is_empty() {
            return;
        }
        let selected = self.selected_item().map(|j| j.id.clone());
        for (k, ids) in &folded {
            let earlier = &mut self.items[*k].earlier;
            earlier.extend(ids.iter().cloned());
            // Job ids start with their start time: oldest first.
            earlier.sort();
            earlier.dedup();
        }
        let keep: Vec<bool> = (0..self.items.len())
            .map(|i| {
                run_of(&self.items[i])
                    .and_then(|run| newest.get(&run))
                    .is_none_or(|&k| k == i)
            })
            .collect();
        let mut keep = keep.into_iter();
        self.items.retain(|_| keep.next().unwrap_or(true));
        if let Some(id) = selected {
            if let Some(i) = self
                .items
                .iter()
                .position(|j| j.id == id || j.earlier.contains(&id))
            {
                self.selected = i;
            }
        }
    }

    /// Newest first; a sharded run's shards in order under its row.
    fn sort(&mut self) {
        let key = |j: &JobItem| match &j.shard {
            Some(p) => (p.run.clone(), p.index.map_or(0, |i| u64::from(i) + 1)),
            None => (j.id.clone(), 0),
        };
        let selected = self.selected_item().map(|j| j.id.clone());
        self.items.sort_by(|a, b| {
            let (ga, oa) = key(a);
            let (gb, ob) = key(b);
            b.created_at
                .cmp(&a.created_at)
                .then(gb.cmp(&ga))
                .then(oa.cmp(&ob))
        });
        if let Some(id) = selected {
            if let Some(i) = self.items.iter().position(|j| j.id == id) {
                self.selected = i;
            }
        }
    }

    /// The workspace's sharded runs (Slurm arrays, Ray runs) arrived: each
    /// is a row with its shards under it (queued, running, done, failed),
    /// replacing what was shown of them.
    pub fn set_sharded(&mut self, runs: Vec<ShardedRun>) {
        let old: BTreeMap<String, String> = self
            .items
            .iter()
            .filter(|j| j.shard.is_some())
            .map(|j| (j.id.clone(), j.status.clone()))
            .collect();
        self.items.retain(|j| j.shard.is_none());
        for run in runs {
            let id = run.id();
            let n = run.shards.len() as u64;
            let [queued, running, done, failed] = [
                ShardState::Queued,
                ShardState::Running,
                ShardState::Done,
                ShardState::Failed,
            ]
            .map(|s| run.count(s));
            let status = if running > 0 {
                "running"
            } else if failed > 0 {
                "failed"
            } else if done as u64 == n {
                "succeeded"
            } else {
                "queued"
            };
            let counts: Vec<String> = [
                (done, "done"),
                (running, "running"),
                (failed, "failed"),
                (queued, "queued"),
            ]
            .iter()
            .filter(|(k, _)| *k > 0)
            .map(|(k, w)| format!("{k} {w}"))
            .collect();
            let mut log = vec![format!(
                "{} {} run {}: `endless {}` in {} shards, in {}",
                run.engine,
                run.kind,
                run.name,
                run.command.join(" "),
                n,
                run.dir.display()
            )];
            for s in &run.shards {
                log.push(format!(
                    "shard {}/{n}: {} ({}); log {}",
                    s.index,
                    s.state,
                    s.detail,
                    s.log.display()
                ));
                if s.state == ShardState::Failed {
                    log.push(format!("  re-run it alone: {}", run.rerun_shard(s.index)));
                }
            }
            log.push(format!("merge: {}", run.merge));
            if let Some(note) = &run.note {
                log.push(format!("note: {note}"));
            }
            self.logs.insert(id.clone(), log.into());
            self.items.push(JobItem {
                id: id.clone(),
                kind: format!("{} {}", run.engine, run.kind),
                status: status.into(),
                done: done as u64,
                total: n,
                message: format!("{}; merge: {}", counts.join(" · "), run.merge),
                created_at: run.created_at.clone(),
                run: None,
                params: serde_json::Value::Null,
                shard: Some(ShardPlace {
                    run: id.clone(),
                    index: None,
                    label: id.clone(),
                    log: None,
                    rerun: run.rerun.replace("{i}", "I"),
                }),
                earlier: Vec::new(),
            });
            for s in &run.shards {
                let shard_id = format!("{id}/shard-{}", s.index);
                let state = s.state.to_string();
                // A shard's log is read again while it may grow, and when
                // its state changes.
                if s.state == ShardState::Running || old.get(&shard_id) != Some(&state) {
                    self.log_requested.remove(&shard_id);
                }
                let items = s.items.map_or(String::new(), |k| {
                    format!(" · {}", crate::plural::count(k, "task"))
                });
                self.items.push(JobItem {
                    id: shard_id,
                    kind: "shard".into(),
                    status: state,
                    done: if s.state == ShardState::Done { 1000 } else { 0 },
                    total: 1000,
                    message: format!("{}{items}", s.detail),
                    created_at: run.created_at.clone(),
                    run: None,
                    params: serde_json::Value::Null,
                    shard: Some(ShardPlace {
                        run: id.clone(),
                        index: Some(s.index),
                        label: format!("└ shard {}/{n}", s.index),
                        log: Some(s.log.clone()),
                        rerun: run.rerun_shard(s.index),
                    }),
                    earlier: Vec::new(),
                });
            }
        }
        self.sort();
        self.clamp();
    }

    /// The selected shard's log file, when it should be read (not read
    /// yet, or it may have grown since).
    pub fn wants_file_log(&mut self) -> Option<(String, PathBuf)> {
        let j = self.selected_item()?;
        let path = j.shard.as_ref()?.log.clone()?;
        if self.log_requested.contains(&j.id) {
            return None;
        }
        let id = j.id.clone();
        self.log_requested.insert(id.clone());
        Some((id, path))
    }

    /// The selected job's kept log, when it should be read: a job of an
    /// earlier process (or another one) whose lines this view never heard.
    /// A resumed run's earlier jobs' logs are asked for too, one by one.
    pub fn wants_log(&mut self) -> Option<String> {
        let j = self.selected_item()?;
        if j.shard.is_some() {
            return None;
        }
        let id = j
            .earlier
            .iter()
            .chain(std::iter::once(&j.id))
            .find(|id| !self.local.contains(*id) && !self.log_requested.contains(*id))?
            .clone();
        self.log_requested.insert(id.clone());
        Some(id)
    }

    /// Job `id`'s kept log lines arrived (they replace what is shown).
    pub fn set_log(&mut self, id: String, lines: Vec<String>) {
        if self.local.contains(&id) {
            return;
        }
        let log: VecDeque<String> = lines
            .iter()
            .rev()
            .take(LOG_LINES)
            .rev()
            .map(|l| once_per_url(l))
            .collect();
        self.logs.insert(id, log);
    }

    /// The shown id of job `id` (its run's, once known).
    pub fn shown_id_of(&self, id: &str) -> String {
        self.items
            .iter()
            .find(|i| i.id == id)
            .map_or(id, JobItem::shown_id)
            .to_string()
    }

    /// Apply a job event.
    pub fn event(&mut self, ev: JobEvent) {
        match ev {
            JobEvent::Started { id, kind } => {
                self.local.insert(id.0.clone());
                if !self.items.iter().any(|i| i.id == id.0) {
                    self.items.insert(
                        0,
                        JobItem {
                            id: id.0,
                            kind,
                            status: "running".into(),
                            done: 0,
                            total: 0,
                            message: "starting".into(),
                            created_at: crate::store::now(),
                            run: None,
                            params: serde_json::Value::Null,
                            shard: None,
                            earlier: Vec::new(),
                        },
                    );
                    self.selected = 0;
                }
            }
            JobEvent::Progress {
                id,
                done,
                total,
                stage,
            } => {
                if let Some(i) = self.item(&id.0) {
                    i.done = done;
                    i.total = total;
                    i.message = stage;
                    if i.status != CANCELLING {
                        i.status = "running".into();
                    }
                }
            }
            JobEvent::Run { id, run } => {
                if let Some(i) = self.item(&id.0) {
                    i.run = Some(run);
                }
                // A resumed run: one row, the job that resumes it.
                self.fold_runs();
            }
            JobEvent::Log { id, line } => {
                let log = self.logs.entry(id.0).or_default();
                // A URL is said once (transport errors repeat their caller's).
                let line = once_per_url(&line);
                for l in line.split('\n') {
                    log.push_back(l.trim_end_matches('\r').to_string());
                }
                while log.len() > LOG_LINES {
                    log.pop_front();
                }
            }
            JobEvent::Finished { id, outcome } => {
                if let Some(i) = self.item(&id.0) {
                    let (status, msg) = match outcome {
                        JobOutcome::Succeeded(m) => ("succeeded", m),
                        JobOutcome::Failed(m) => ("failed", once_per_url(&m)),
                        JobOutcome::Cancelled => {
                            // Say how far it got: the progress stays as it was.
                            let how_far = if i.total > 0 && i.total != 1000 {
                                format!("cancelled at {}/{} ({})", i.done, i.total, i.message)
                            } else {
                                format!("cancelled at {:.0}%", i.fraction() * 100.0)
                            };
                            ("cancelled", how_far)
                        }
                        JobOutcome::Empty(m) => ("empty", m),
                    };
                    i.status = status.into();
                    if (status == "succeeded" || status == "empty") && i.total == 0 {
                        i.total = 1;
                        i.done = 1;
                    }
                    i.message = msg;
                }
            }
        }
        self.clamp();
    }

    /// Ids of the jobs of this process still running (or cancelling).
    pub fn running_here(&self) -> Vec<String> {
        self.items
            .iter()
            .filter(|i| self.local.contains(&i.id))
            .filter(|i| i.status == "running" || i.status == CANCELLING)
            .map(|i| i.id.clone())
            .collect()
    }

    /// Mark a job whose cancellation was asked for (until it finishes).
    pub fn cancelling(&mut self, id: &str) {
        if let Some(i) = self.item(id) {
            i.status = CANCELLING.into();
        }
    }

    fn item(&mut self, id: &str) -> Option<&mut JobItem> {
        self.items.iter_mut().find(|i| i.id == id)
    }

    fn clamp(&mut self) {
        self.selected = self.selected.min(self.items.len().saturating_sub(1));
    }

    /// The selected job.
    pub fn selected_item(&self) -> Option<&JobItem> {
        self.items.get(self.selected)
    }

    /// Move the selection.
    pub fn command(&mut self, cmd: Command) {
        let n = self.items.len();
        if n == 0 {
            return;
        }
        let before = self.selected;
        match cmd {
            Command::Up => self.selected = self.selected.saturating_sub(1),
            Command::Down => self.selected = (self.selected + 1).min(n - 1),
            Command::Top => self.selected = 0,
            Command::Bottom => self.selected = n - 1,
            Command::PageUp => self.log_scroll += 10,
            Command::PageDown => self.log_scroll = self.log_scroll.saturating_sub(10),
            Command::Select => self.log_full = !self.log_full,
            Command::Back => self.log_full = false,
            _ => {}
        }
        if self.selected != before {
            self.log_scroll = 0;
        }
    }

    /// Click selects a row; the wheel moves.
    pub fn mouse(&mut self, m: MouseEvent) {
        match m.kind {
            MouseEventKind::ScrollDown => self.command(Command::Down),
            MouseEventKind::ScrollUp => self.command(Command::Up),
            MouseEventKind::Down(MouseButton::Left) => {
                let a = self.table_area;
                if a.contains(Position::new(m.column, m.row)) && m.row > a.y + 1 {
                    let i = (m.row - a.y - 2) as usize;
                    if i < self.items.len() {
                        self.selected = i;
                    }
                }
            }
            _ => {}
        }
    }

    /// Draw the job table and the selected job's log.
    pub fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, theme: &Theme, keys: &Keymap) {
        let [table_area, log_area] = if self.log_full && !self.items.is_empty() {
            [Rect::default(), area]
        } else {
            Layout::vertical([Constraint::Percentage(45), Constraint::Fill(1)]).areas(area)
        };
        self.table_area = table_area;
        let k = |c| keys.hint(c);
        let launch = format!(
            " {} eval · {} validate · {} LLM gen · {} offline · {} train · {} cancel · {} retry ",
            k(Command::JobEval),
            k(Command::JobValidate),
            k(Command::JobGenerate),
            k(Command::JobOffline),
            k(Command::JobTrain),
            k(Command::JobCancel),
            k(Command::JobRetry),
        );
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(theme.muted())
            .title(Span::styled(" Jobs ", theme.accent()))
            .title_bottom(Span::styled(launch, theme.muted()));
        if self.items.is_empty() {
            let p = Paragraph::new(vec![
                Line::from(Span::styled("No jobs yet", theme.accent())),
                Line::from(""),
                Line::from("Start evaluation, validation or generation with the keys below;"),
                Line::from("jobs run in the background, are journaled, and can be cancelled."),
            ])
            .block(block)
            .style(theme.base());
            frame.render_widget(p, table_area);
        } else if !table_area.is_empty() {
            // Columns give way by priority: the job id and its status keep
            // their width longest (a long id shortened in the middle); the
            // stage or result shrinks first (the log below has it whole),
            // then the progress bar down to its count, then it goes.
            const BAR: usize = 12;
            // Counts too long for the column (a pull's bytes) show as a
            // percentage; the stage gives the figures.
            let count = |j: &JobItem| {
                if j.total > 0 && j.total != 1000 && j.total < 10_000 {
                    format!(" {}/{}", j.done, j.total)
                } else {
                    format!(" {:>3.0}%", j.fraction() * 100.0)
                }
            };
            let counts: Vec<String> = self.items.iter().map(count).collect();
            let first_line = |j: &JobItem| j.message.lines().next().unwrap_or("").to_string();
            let messages: Vec<String> = self.items.iter().map(first_line).collect();
            let cols = [
                Column::new(
                    widest("job", self.items.iter().map(JobItem::shown_id)),
                    14,
                    9,
                ),
                Column::fixed(
                    widest("status", self.items.iter().map(|j| j.status.as_str())),
                    10,
                ),
                Column::new(
                    BAR + widest("", counts.iter().map(String::as_str)),
                    widest("", counts.iter().map(String::as_str)) as u16,
                    2,
                )
                .optional(),
                Column::new(
                    widest("stage / result", messages.iter().map(String::as_str)),
                    16,
                    1,
                )
                .grow(),
            ];
            // The borders and the selection mark take four cells.
            let widths = fit(&cols, table_area.width.saturating_sub(4), 1);
            let w = |k: usize| widths[k].unwrap_or(0) as usize;
            let rows: Vec<Row<'_>> = self
                .items
                .iter()
                .zip(counts.iter().zip(&messages))
                .map(|(j, (count, message))| {
                    let status_style = match j.status.as_str() {
                        "succeeded" | "done" => theme.success(),
                        "failed" | "interrupted" => theme.failure(),
                        // Done, but did nothing: amber.
                        "empty" => theme.warning(),
                        "running" | CANCELLING => theme.accent(),
                        _ => theme.muted(),
                    };
                    let bar_w = w(2).saturating_sub(count.chars().count()).min(BAR);
                    let cells = [
                        Cell::from(cut_middle(j.shown_id(), w(0) as u16)),
                        Cell::from(Span::styled(j.status.clone(), status_style)),
                        Cell::from(Line::from(vec![
                            Span::styled(bar(j.fraction(), bar_w), theme.accent()),
                            Span::raw(count.clone()),
                        ])),
                        Cell::from(Span::styled(
                            cut_end(message, w(3) as u16),
                            match j.status.as_str() {
                                "failed" | "interrupted" => theme.failure(),
                                "empty" => theme.warning(),
                                _ => theme.base(),
                            },
                        )),
                    ];
                    Row::new(shown(cells, &widths))
                })
                .collect();
            let header = shown(["job", "status", "progress", "stage / result"], &widths);
            // The selected row is marked as in the other tables.
            let table = Table::new(rows, constraints(&widths))
                .header(Row::new(header).style(theme.muted()))
                .row_highlight_style(theme.selected())
                .highlight_symbol("▶ ")
                .highlight_spacing(HighlightSpacing::Always)
                .block(block)
                .style(theme.base());
            let mut state = TableState::default().with_selected(Some(self.selected));
            frame.render_stateful_widget(table, table_area, &mut state);
        }
        // The log, wrapped to the pane, showing its tail (or scrolled back).
        let width = log_area.width.saturating_sub(2).max(1) as usize;
        let room = log_area.height.saturating_sub(2) as usize;
        // A resumed run's earlier jobs' logs come first, each resumption
        // marked.
        let mut rows: Vec<(String, ratatui::style::Style)> = Vec::new();
        if let Some(j) = self.selected_item() {
            for (n, id) in j.earlier.iter().chain(std::iter::once(&j.id)).enumerate() {
                if n > 0 {
                    rows.extend(
                        wrap("── resumed ──", width)
                            .into_iter()
                            .map(|r| (r, theme.muted())),
                    );
                }
                for l in self.logs.get(id).into_iter().flatten() {
                    rows.extend(wrap(l, width).into_iter().map(|r| (r, theme.base())));
                }
            }
        }
        // A job that ended says how, in full, below its log.
        if let Some(j) = self.selected_item() {
            let style = match j.status.as_str() {
                "failed" | "interrupted" => Some(theme.failure()),
                "empty" => Some(theme.warning()),
                "succeeded" => Some(theme.success()),
                "cancelled" => Some(theme.muted()),
                _ => None,
            };
            if let Some(style) = style.filter(|_| !j.message.is_empty()) {
                for l in format!("{}: {}", j.status, j.message).split('\n') {
                    rows.extend(wrap(l, width).into_iter().map(|r| (r, style)));
                }
            }
        }
        self.log_scroll = self.log_scroll.min(rows.len().saturating_sub(room));
        let end = rows.len() - self.log_scroll;
        let start = end.saturating_sub(room);
        let mut title = vec![Span::styled(
            match self.selected_item() {
                Some(j) if j.shard.is_some() => format!(" log: {} ", j.id),
                Some(j) => format!(" log: {} ", j.shown_id()),
                None => " log ".into(),
            },
            theme.accent(),
        )];
        if self.log_scroll > 0 {
            title.push(Span::styled(
                format!("[-{} rows, pgdn follows] ", self.log_scroll),
                theme.warning(),
            ));
        }
        if self.log_full {
            title.push(Span::styled(
                "[full screen: enter or esc goes back] ",
                theme.muted(),
            ));
        }
        let lines: Vec<Line<'_>> = rows[start..end]
            .iter()
            .map(|(l, style)| Line::from(Span::styled(l.clone(), *style)))
            .collect();
        let p = Paragraph::new(lines)
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .border_style(theme.muted())
                    .title(Line::from(title)),
            )
            .style(theme.base());
        frame.render_widget(p, log_area);
    }
}

impl Component for JobsView {
    fn handle_command(&mut self, cmd: Command) -> Option<Action> {
        self.command(cmd);
        None
    }

    fn handle_mouse(&mut self, event: MouseEvent) -> Option<Action> {
        self.mouse(event);
        None
    }

    fn update(&mut self, action: Action) -> Option<Action> {
        match action {
            Action::Job(ev) => self.event(ev),
            Action::JobsLoaded(rows) => self.set_rows(rows),
            Action::JobLogLoaded(id, lines) => self.set_log(id, lines),
            Action::ShardRunsLoaded(runs) => self.set_sharded(runs),
            _ => {}
        }
        None
    }

    fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, ctx: &DrawContext<'_>) {
        JobsView::draw(self, frame, area, ctx.theme, ctx.keymap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::JobId;

    fn row(id: &str, status: &str, created_at: &str) -> JobRow {
        JobRow {
            id: id.into(),
            kind: "eval".into(),
            params: serde_json::json!({"policy": "oracle", "run": "eval-5f3a"}),
            status: status.into(),
            progress: 0.5,
            message: String::new(),
            created_at: created_at.into(),
            updated_at: created_at.into(),
        }
    }

    #[test]
    fn a_resumed_run_is_one_row_in_its_latest_state() {
        let mut view = JobsView::default();
        let old = row(
            "eval-20261204T100000-1",
            "interrupted",
            "2026-12-04T10:00:00Z",
        );
        let other = JobRow {
            id: "train-20261204T110000-1".into(),
            kind: "train".into(),
            params: serde_json::json!({}),
            ..row("", "succeeded", "2026-12-04T11:00:00Z")
        };
        view.set_rows(vec![old.clone(), other]);
        view.selected = view.items.iter().position(|j| j.id == old.id).unwrap();
        // R resumes it in this process: a new job that names the same run.
        let new = JobId("eval-20261204T120000-1".into());
        view.event(JobEvent::Started {
            id: new.clone(),
            kind: "eval".into(),
        });
        view.event(JobEvent::Run {
            id: new.clone(),
            run: "eval-5f3a".into(),
        });
        let runs: Vec<&str> = view.items.iter().map(JobItem::shown_id).collect();
        assert_eq!(
            runs,
            ["eval-5f3a", "train-20261204T110000-1"],
            "one row per run"
        );
        assert_eq!(view.items[0].id, new.0, "the row is the newest job's");
        assert_eq!(view.items[0].status, "running");
        assert_eq!(view.items[0].earlier, std::slice::from_ref(&old.id));
        assert_eq!(view.selected, 0, "the selection stays on the run");
        // The earlier job's kept log is asked for; the live one's is heard.
        assert_eq!(view.wants_log(), Some(old.id.clone()));
        assert_eq!(view.wants_log(), None);
        // It finishes; the journal (read again, as after a restart) lists
        // both jobs: still one row, succeeded.
        view.event(JobEvent::Finished {
            id: new.clone(),
            outcome: JobOutcome::Succeeded("10 episodes".into()),
        });
        let mut finished = row(&new.0, "succeeded", "2026-12-04T12:00:00Z");
        finished.progress = 1.0;
        view.set_rows(vec![finished.clone(), old.clone()]);
        let statuses: Vec<(&str, &str)> = view
            .items
            .iter()
            .map(|j| (j.shown_id(), j.status.as_str()))
            .collect();
        assert_eq!(
            statuses,
            [
                ("eval-5f3a", "succeeded"),
                ("train-20261204T110000-1", "succeeded")
            ]
        );
        // A fresh view (another TUI, a restart) folds the journal alike,
        // whatever the order of its rows.
        let mut fresh = JobsView::default();
        fresh.set_rows(vec![old.clone(), finished]);
        assert_eq!(fresh.items.len(), 1);
        assert_eq!(fresh.items[0].status, "succeeded");
        assert_eq!(fresh.items[0].earlier, [old.id]);
    }
}
