//! The Training view: the PPO runs under `<workspace>/checkpoints/` (as
//! `rl::run_files` lays them out) and, for the selected run, a dashboard:
//! charts per PPO step (reward and pass rate, losses, entropy / KL / clip
//! fraction, throughput, the SFT loss curve), dev pass@1 before and after,
//! the checkpoints, and the run's status and message. The data comes from
//! `tui::runtime::watcher`, which re-reads the files as they change.

use crate::tui::action::Action;
use crate::tui::component::{Component, DrawContext};
use crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::{Color, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, Borders, Cell, Chart, Dataset, GraphType, HighlightSpacing, Paragraph, Row, Table,
    TableState, Wrap,
};
use ratatui::Frame;

use crate::rl::run_files::{EvalRecord, RunStatus, RunView};
use crate::rl::StepMetrics;
use crate::tui::keymap::{Command, Keymap};
use crate::tui::theme::Theme;
use crate::tui::widgets::empty::draw_empty;
use crate::tui::widgets::num::num;

/// Which chart the dashboard shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChartKind {
    /// Reward and pass rate per PPO step (with dev pass@1 points).
    #[default]
    Reward,
    /// Policy loss, value loss, gradient norm.
    Loss,
    /// Entropy, approximate KL, clip fraction.
    Stability,
    /// Tokens per second and seconds per step.
    Throughput,
    /// The supervised warm-start's loss.
    Sft,
}

impl ChartKind {
    /// All charts, in switching order.
    pub const ALL: [ChartKind; 5] = [
        ChartKind::Reward,
        ChartKind::Loss,
        ChartKind::Stability,
        ChartKind::Throughput,
        ChartKind::Sft,
    ];

    /// Short name for the chart tabs.
    pub fn title(self) -> &'static str {
        match self {
            ChartKind::Reward => "reward",
            ChartKind::Loss => "loss",
            ChartKind::Stability => "kl/ent",
            ChartKind::Throughput => "tok/s",
            ChartKind::Sft => "sft",
        }
    }

    fn index(self) -> usize {
        ChartKind::ALL.iter().position(|c| *c == self).unwrap_or(0)
    }

    fn step(self, by: isize) -> ChartKind {
        let n = ChartKind::ALL.len() as isize;
        ChartKind::ALL[((self.index() as isize + by).rem_euclid(n)) as usize]
    }
}

/// State of the Training view.
#[derive(Debug, Default)]
pub struct TrainingView {
    /// Newest first.
    pub runs: Vec<RunView>,
    /// The selected run.
    pub selected: usize,
    /// The chart shown for it.
    pub chart: ChartKind,
    table_area: Rect,
    /// First row shown in the run table.
    offset: usize,
    /// A training job this TUI started: its run is selected once its
    /// directory (named after the job) appears.
    following: Option<String>,
}

impl TrainingView {
    /// Replace the runs, keeping the selected run selected.
    pub fn set_runs(&mut self, runs: Vec<RunView>) {
        let current = self.runs.get(self.selected).map(|r| r.dir.clone());
        self.runs = runs;
        if let Some(dir) = current {
            if let Some(i) = self.runs.iter().position(|r| r.dir == dir) {
                self.selected = i;
            }
        }
        self.selected = self.selected.min(self.runs.len().saturating_sub(1));
        self.select_followed();
    }

    /// Select the run of training job `job` (now, or once it appears).
    pub fn follow_job(&mut self, job: &str) {
        self.following = Some(job.to_string());
        self.select_followed();
    }

    fn select_followed(&mut self) {
        let Some(job) = self.following.as_deref() else {
            return;
        };
        if let Some(i) = self.runs.iter().position(|r| run_dir_name(r) == job) {
            self.selected = i;
            self.following = None;
        }
    }

    /// The job that wrote the selected run: its directory's name (a run
    /// the TUI started is named after its job).
    pub fn selected_job(&self) -> Option<String> {
        self.selected_run().map(run_dir_name)
    }

    /// The selected run.
    pub fn selected_run(&self) -> Option<&RunView> {
        self.runs.get(self.selected)
    }

    /// Select runs and switch charts; `false` when the command is not the view's.
    pub fn command(&mut self, cmd: Command) -> bool {
        let n = self.runs.len();
        match cmd {
            Command::Up => self.selected = self.selected.saturating_sub(1),
            Command::Down => self.selected = (self.selected + 1).min(n.saturating_sub(1)),
            Command::Top => self.selected = 0,
            Command::Bottom => self.selected = n.saturating_sub(1),
            Command::NextTab | Command::Right => self.chart = self.chart.step(1),
            Command::PrevTab | Command::Left => self.chart = self.chart.step(-1),
            _ => return false,
        }
        true
    }

    /// Click selects a run; the wheel moves.
    pub fn mouse(&mut self, m: MouseEvent) {
        match m.kind {
            MouseEventKind::ScrollDown => {
                self.command(Command::Down);
            }
            MouseEventKind::ScrollUp => {
                self.command(Command::Up);
            }
            MouseEventKind::Down(MouseButton::Left) => {
                let a = self.table_area;
                if a.contains(Position::new(m.column, m.row)) && m.row > a.y + 1 {
                    let i = self.offset + (m.row - a.y - 2) as usize;
                    if i < self.runs.len() {
                        self.selected = i;
                    }
                }
            }
            _ => {}
        }
    }

    /// Draw the run table and the selected run's dashboard.
    pub fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, theme: &Theme, keys: &Keymap) {
        if self.runs.is_empty() {
            draw_empty_state(frame, area, theme, keys);
            return;
        }
        let max_rows = if area.height >= 30 { 8 } else { 4 };
        let table_h = (self.runs.len().min(max_rows) as u16 + 3).min(area.height);
        let [table_area, dash] =
            Layout::vertical([Constraint::Length(table_h), Constraint::Fill(1)]).areas(area);
        self.table_area = table_area;
        self.draw_table(frame, table_area, theme);
        let Some(run) = self.runs.get(self.selected) else {
            return;
        };
        let side_w = if area.width >= 110 { 46 } else { 36 };
        let [chart_area, side] =
            Layout::horizontal([Constraint::Fill(1), Constraint::Length(side_w)]).areas(dash);
        draw_charts(frame, chart_area, theme, keys, run, self.chart);
        draw_details(frame, side, theme, run);
    }

    fn draw_table(&mut self, frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
        let rows: Vec<Row<'_>> = self
            .runs
            .iter()
            .map(|r| {
                let info = r.info.as_ref();
                let (status, style) = match info.map(|i| i.status) {
                    Some(s) => (s.as_str(), status_style(theme, s)),
                    None => ("?", theme.muted()),
                };
                let last = r.ppo.last();
                Row::new(vec![
                    Cell::from(run_id(r)),
                    Cell::from(info.map(|i| i.init.clone()).unwrap_or_default()),
                    Cell::from(Span::styled(status, style)),
                    Cell::from(
                        info.map(|i| format!("{}/{}", i.steps_done, i.steps))
                            .unwrap_or_default(),
                    ),
                    Cell::from(last.map(|m| num(m.reward)).unwrap_or_else(|| "-".into())),
                    Cell::from(last.map(|m| num(m.pass_rate)).unwrap_or_else(|| "-".into())),
                    Cell::from(dev_summary(&r.evals)),
                ])
            })
            .collect();
        let table = Table::new(
            rows,
            [
                Constraint::Fill(1),
                Constraint::Length(8),
                Constraint::Length(8),
                Constraint::Length(9),
                Constraint::Length(6),
                Constraint::Length(5),
                Constraint::Length(11),
            ],
        )
        .header(
            Row::new([
                "run",
                "init",
                "status",
                "steps",
                "reward",
                "pass",
                "dev pass@1",
            ])
            .style(theme.muted()),
        )
        .row_highlight_style(theme.selected())
        .highlight_symbol("▶ ")
        .highlight_spacing(HighlightSpacing::Always)
        .block(
            Block::default()
                .borders(Borders::ALL)
                .border_style(theme.muted())
                .title(Span::styled(
                    format!(" Training runs ({}) ", self.runs.len()),
                    theme.accent(),
                )),
        )
        .style(theme.base());
        let mut state = TableState::default()
            .with_offset(self.offset)
            .with_selected(Some(self.selected));
        frame.render_stateful_widget(table, area, &mut state);
        self.offset = state.offset();
    }
}

fn draw_empty_state(frame: &mut Frame<'_>, area: Rect, theme: &Theme, keys: &Keymap) {
    let start = format!(
        "Start one with {} (a form; also in the Jobs view, {}), or from the shell:",
        keys.hint(Command::JobTrain),
        keys.hint(Command::ViewJobs),
    );
    let lines = [
        "Runs under <workspace>/checkpoints/<train-id>/ appear here as they go,",
        "also those started by `endless train` in another terminal: reward and",
        "pass rate per PPO step, losses, entropy / KL / clip fraction, tokens/s,",
        "the SFT loss curve, dev pass@1 before -> after, and the checkpoints.",
        "",
        start.as_str(),
        "  endless train --init tiny --sft --steps 20",
    ];
    draw_empty(frame, area, theme, "No training runs yet", &lines);
}

fn status_style(theme: &Theme, s: RunStatus) -> Style {
    match s {
        RunStatus::Running => theme.accent(),
        RunStatus::Finished => theme.success(),
        RunStatus::Stopped => theme.warning(),
        RunStatus::Failed => theme.failure(),
    }
}

/// The run directory's name.
fn run_dir_name(r: &RunView) -> String {
    r.dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn run_id(r: &RunView) -> String {
    match &r.info {
        Some(i) if !i.id.is_empty() => i.id.clone(),
        _ => r
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

/// The last record with this label.
fn eval<'a>(evals: &'a [EvalRecord], label: &str) -> Option<&'a EvalRecord> {
    evals.iter().rev().find(|e| e.label == label)
}

/// `0.25→0.40`, `0.25→…`, or `-`.
fn dev_summary(evals: &[EvalRecord]) -> String {
    match (eval(evals, "before"), eval(evals, "after")) {
        (Some(b), Some(a)) => format!("{:.2}→{:.2}", b.pass_at_1, a.pass_at_1),
        (Some(b), None) => format!("{:.2}→…", b.pass_at_1),
        (None, Some(a)) => format!("→{:.2}", a.pass_at_1),
        (None, None) => "-".into(),
    }
}

/// One series of a chart panel.
struct Series {
    name: &'static str,
    color: Color,
    points: Vec<(f64, f64)>,
    scatter: bool,
}

/// Points of a per-step metric (non-finite values are left out).
fn ppo_points(ppo: &[StepMetrics], f: impl Fn(&StepMetrics) -> f64) -> Vec<(f64, f64)> {
    ppo.iter()
        .map(|m| (m.step as f64, f(m)))
        .filter(|(_, y)| y.is_finite())
        .collect()
}

fn series(name: &'static str, color: Color, points: Vec<(f64, f64)>) -> Series {
    Series {
        name,
        color,
        points,
        scatter: false,
    }
}

/// The panels of a chart, each one y scale.
fn panels(run: &RunView, kind: ChartKind, theme: &Theme) -> Vec<Vec<Series>> {
    let ppo = &run.ppo;
    match kind {
        ChartKind::Reward => {
            let mut s = vec![
                series("reward", theme.accent, ppo_points(ppo, |m| m.reward)),
                series("pass", theme.success, ppo_points(ppo, |m| m.pass_rate)),
            ];
            let dev: Vec<(f64, f64)> = run
                .evals
                .iter()
                .map(|e| (e.step as f64, e.pass_at_1))
                .collect();
            if !dev.is_empty() {
                s.push(Series {
                    name: "dev",
                    color: theme.warning,
                    points: dev,
                    scatter: true,
                });
            }
            vec![s]
        }
        ChartKind::Loss => vec![
            vec![series(
                "policy loss",
                theme.accent,
                ppo_points(ppo, |m| m.policy_loss),
            )],
            vec![series(
                "value loss",
                theme.success,
                ppo_points(ppo, |m| m.value_loss),
            )],
            vec![series(
                "grad norm",
                theme.warning,
                ppo_points(ppo, |m| m.grad_norm),
            )],
        ],
        ChartKind::Stability => vec![
            vec![series(
                "entropy",
                theme.accent,
                ppo_points(ppo, |m| m.entropy),
            )],
            {
                let mut kl = vec![series(
                    "approx KL",
                    theme.warning,
                    ppo_points(ppo, |m| m.approx_kl),
                )];
                // Runs with a KL penalty: the distance to where PPO started.
                if ppo.iter().any(|m| m.kl_ref > 0.0) {
                    kl.push(series(
                        "KL to start",
                        theme.accent,
                        ppo_points(ppo, |m| m.kl_ref),
                    ));
                }
                kl
            },
            vec![series(
                "clip frac",
                theme.privileged,
                ppo_points(ppo, |m| m.clip_frac),
            )],
        ],
        ChartKind::Throughput => vec![
            vec![series(
                "tokens/s",
                theme.accent,
                ppo_points(ppo, |m| m.tokens_per_s),
            )],
            vec![series(
                "s/step",
                theme.success,
                ppo_points(ppo, |m| m.seconds),
            )],
        ],
        ChartKind::Sft => vec![vec![series(
            "sft loss",
            theme.accent,
            run.sft
                .iter()
                .map(|m| (m.step as f64, m.loss))
                .filter(|(_, y)| y.is_finite())
                .collect(),
        )]],
    }
}

fn bounds(values: impl Iterator<Item = f64>) -> Option<[f64; 2]> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() || !hi.is_finite() {
        return None;
    }
    if hi - lo < 1e-12 {
        let pad = if lo.abs() > 1e-12 {
            lo.abs() * 0.1
        } else {
            1.0
        };
        return Some([lo - pad, hi + pad]);
    }
    Some([lo, hi])
}

fn draw_charts(
    frame: &mut Frame<'_>,
    area: Rect,
    theme: &Theme,
    keys: &Keymap,
    run: &RunView,
    kind: ChartKind,
) {
    let mut tabs = vec![Span::raw(" ")];
    for k in ChartKind::ALL {
        let style = if k == kind {
            theme.accent().bg(theme.selection)
        } else {
            theme.muted()
        };
        tabs.push(Span::styled(k.title(), style));
        tabs.push(Span::raw(" "));
    }
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.muted())
        .title(Line::from(tabs))
        .title_bottom(Span::styled(
            format!(
                " {}/{} chart ",
                keys.hint(Command::PrevTab),
                keys.hint(Command::NextTab)
            ),
            theme.muted(),
        ));
    let inner = block.inner(area);
    frame.render_widget(block.style(theme.base()), area);
    let panels = panels(run, kind, theme);
    if panels.iter().all(|p| p.iter().all(|s| s.points.is_empty())) {
        let text = match kind {
            ChartKind::Sft if run.info.as_ref().is_some_and(|i| i.sft_steps == 0) => {
                "no supervised warm-start in this run (endless train --sft)"
            }
            ChartKind::Sft => "no SFT steps yet",
            _ => "no PPO steps yet",
        };
        frame.render_widget(
            Paragraph::new(Span::styled(text, theme.muted())).wrap(Wrap { trim: true }),
            inner,
        );
        return;
    }
    let x_all = panels
        .iter()
        .flatten()
        .flat_map(|s| s.points.iter().map(|p| p.0));
    let [x0, x1] = bounds(x_all).unwrap_or([0.0, 1.0]);
    let n = panels.len();
    // One y-label width for every panel, so that their plots line up.
    let y_bounds: Vec<[f64; 2]> = panels
        .iter()
        .map(|panel| {
            let y = bounds(panel.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
            match (kind, y) {
                // Rates live in [0, 1]: keep that scale so runs compare.
                (ChartKind::Reward, Some([lo, hi])) => [lo.min(0.0), hi.max(1.0)],
                (_, Some(b)) => b,
                (_, None) => [0.0, 1.0],
            }
        })
        .collect();
    let label_w = y_bounds
        .iter()
        .flat_map(|b| b.iter().map(|v| num(*v).chars().count()))
        .max()
        .unwrap_or(1);
    let areas = Layout::vertical(vec![Constraint::Fill(1); n]).split(inner);
    for (i, (panel, parea)) in panels.iter().zip(areas.iter()).enumerate() {
        let last = i + 1 == n;
        let mut title = Vec::new();
        for s in panel {
            let value = s.points.last().map(|p| num(p.1)).unwrap_or("-".into());
            title.push(Span::styled(
                format!("{} ", s.name),
                Style::new().fg(s.color),
            ));
            title.push(Span::styled(format!("{value}  "), theme.base()));
        }
        let [y0, y1] = y_bounds[i];
        let datasets: Vec<Dataset<'_>> = panel
            .iter()
            .map(|s| {
                Dataset::default()
                    .name(s.name)
                    .marker(if s.scatter {
                        Marker::Dot
                    } else {
                        Marker::Braille
                    })
                    .graph_type(if s.scatter {
                        GraphType::Scatter
                    } else {
                        GraphType::Line
                    })
                    .style(Style::new().fg(s.color))
                    .data(&s.points)
            })
            .collect();
        let mut x_axis = Axis::default().bounds([x0, x1]).style(theme.muted());
        if last {
            x_axis = x_axis.labels([
                Span::styled(format!("{x0:.0}"), theme.muted()),
                Span::styled(
                    format!(
                        "{} {x1:.0}",
                        if kind == ChartKind::Sft {
                            "sft step"
                        } else {
                            "step"
                        }
                    ),
                    theme.muted(),
                ),
            ]);
        }
        let chart = Chart::new(datasets)
            .block(Block::default().title(Line::from(title)))
            .style(theme.base())
            .legend_position(None)
            .x_axis(x_axis)
            .y_axis(
                Axis::default()
                    .bounds([y0, y1])
                    .style(theme.muted())
                    .labels([
                        Span::styled(format!("{:>label_w$}", num(y0)), theme.muted()),
                        Span::styled(format!("{:>label_w$}", num(y1)), theme.muted()),
                    ]),
            );
        frame.render_widget(chart, *parea);
    }
}

fn draw_details(frame: &mut Frame<'_>, area: Rect, theme: &Theme, run: &RunView) {
    let label = |s: &str| Span::styled(format!("{s:<8}"), theme.muted());
    let mut lines: Vec<Line<'_>> = Vec::new();
    match &run.info {
        Some(info) => {
            let style = status_style(theme, info.status);
            lines.push(Line::from(vec![
                label("status"),
                Span::styled(info.status.as_str(), style),
                Span::styled(
                    format!("  step {}/{}", info.steps_done, info.steps),
                    theme.base(),
                ),
            ]));
            if let Some(m) = info.message.as_deref().filter(|m| !m.is_empty()) {
                let style = match info.status {
                    RunStatus::Running | RunStatus::Finished => theme.base(),
                    _ => style,
                };
                lines.push(Line::from(Span::styled(m.to_string(), style)));
            }
        }
        None => lines.push(Line::from(Span::styled(
            "train.json is unreadable",
            theme.failure(),
        ))),
    }
    // Dev pass@1: every evaluation, with the change since `before` in points.
    if !run.evals.is_empty() {
        lines.push(Line::from(Span::styled("dev pass@1", theme.accent())));
        let before = eval(&run.evals, "before").map(|e| e.pass_at_1);
        for e in &run.evals {
            let mut spans = vec![
                label(&format!(" {}", e.label)),
                Span::styled(
                    format!("{:.3} ({}/{})", e.pass_at_1, e.passed, e.episodes),
                    theme.base(),
                ),
            ];
            if let Some(b) = before.filter(|_| e.label != "before") {
                let delta = (e.pass_at_1 - b) * 100.0;
                let style = if delta > 0.0 {
                    theme.success()
                } else if delta < 0.0 {
                    theme.failure()
                } else {
                    theme.muted()
                };
                spans.push(Span::styled(format!(" {delta:+.1} pts"), style));
            }
            lines.push(Line::from(spans));
        }
    }
    if let Some(info) = &run.info {
        lines.push(Line::from(vec![
            label("init"),
            Span::styled(
                format!("{} ({} params)", info.init, params(info.params)),
                theme.base(),
            ),
        ]));
        lines.push(Line::from(vec![
            label("tasks"),
            Span::styled(
                format!("{} train · {} dev", info.tasks, info.eval_tasks),
                theme.base(),
            ),
        ]));
        lines.push(Line::from(vec![
            label("rollout"),
            Span::styled(
                format!("{} samples · {} turns", info.samples, info.max_turns),
                theme.base(),
            ),
        ]));
        let sft = if info.sft_steps == 0 {
            "none".to_string()
        } else {
            match (run.sft.first(), run.sft.last()) {
                (Some(a), Some(b)) => format!(
                    "{}/{}, loss {}→{}",
                    b.step,
                    info.sft_steps,
                    num(a.loss),
                    num(b.loss)
                ),
                _ => format!("0/{} steps", info.sft_steps),
            }
        };
        lines.push(Line::from(vec![
            label("sft"),
            Span::styled(sft, theme.base()),
        ]));
        lines.push(Line::from(vec![
            label("updated"),
            Span::styled(info.updated.replace('T', " "), theme.base()),
        ]));
    }
    lines.push(Line::from(vec![
        Span::styled("checkpoints", theme.accent()),
        Span::styled(format!(" ({})", run.checkpoints.len()), theme.muted()),
    ]));
    if run.checkpoints.is_empty() {
        lines.push(Line::from(Span::styled(" none yet", theme.muted())));
    }
    let shown = if area.height >= 30 { 6 } else { 2 };
    let skip = run.checkpoints.len().saturating_sub(shown);
    for (i, c) in run.checkpoints.iter().enumerate().skip(skip) {
        let latest = i + 1 == run.checkpoints.len();
        lines.push(Line::from(vec![
            Span::styled(format!(" {c}"), theme.base()),
            Span::styled(if latest { " (latest)" } else { "" }, theme.muted()),
        ]));
    }
    if let Some(m) = run.ppo.last() {
        lines.push(Line::from(Span::styled(
            format!("last step {}", m.step),
            theme.accent(),
        )));
        for (a, b) in [
            (("reward", m.reward), ("pass", m.pass_rate)),
            (("π loss", m.policy_loss), ("v loss", m.value_loss)),
            (("entropy", m.entropy), ("kl", m.approx_kl)),
            (("clip", m.clip_frac), ("grad", m.grad_norm)),
            (("tok/s", m.tokens_per_s), ("lr", m.lr)),
        ] {
            lines.push(Line::from(vec![
                Span::styled(format!(" {:<8}", a.0), theme.muted()),
                Span::styled(format!("{:<8}", num(a.1)), theme.base()),
                Span::styled(format!("{:<7}", b.0), theme.muted()),
                Span::styled(num(b.1), theme.base()),
            ]));
        }
    }
    let p = Paragraph::new(lines)
        .block(
            Block::default()
                .borders(Borders::ALL)
                .border_style(theme.muted())
                .title(Span::styled(format!(" {} ", run_id(run)), theme.accent())),
        )
        .style(theme.base())
        .wrap(Wrap { trim: false });
    frame.render_widget(p, area);
}

/// `1.2M`, `35k`, `800`.
fn params(n: usize) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.1}B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1}M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

impl Component for TrainingView {
    fn handle_command(&mut self, cmd: Command) -> Option<Action> {
        self.command(cmd);
        None
    }

    fn handle_mouse(&mut self, event: MouseEvent) -> Option<Action> {
        self.mouse(event);
        None
    }

    fn update(&mut self, action: Action) -> Option<Action> {
        if let Action::TrainingLoaded(runs) = action {
            self.set_runs(runs);
        }
        None
    }

    fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, ctx: &DrawContext<'_>) {
        TrainingView::draw(self, frame, area, ctx.theme, ctx.keymap);
    }
}
