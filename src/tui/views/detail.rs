//! The task detail pane: tabs over a task bundle, with the truth visibly
//! marked PRIVILEGED and tests / scripts syntax-highlighted.

use std::path::PathBuf;

use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, BorderType, Borders, Cell, HighlightSpacing, Paragraph, Row, Table, TableState, Wrap,
};
use ratatui::Frame;

use crate::store::{EpisodeRow, TaskRow};
use crate::task::Task;
use crate::tui::theme::Theme;
use crate::tui::widgets::highlight::{highlight_line, Lang};
use crate::tui::widgets::task_marks::{result_cell, stars, status_style};

/// The detail tabs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DetailTab {
    /// What the agent is asked to do.
    #[default]
    Instruction,
    /// The privileged description of the solution (never shown to the agent).
    Truth,
    /// The environment definition and its files.
    Environment,
    /// Tests that must pass on the initial state.
    InitialTests,
    /// Tests that decide the episode.
    FinalTests,
    /// The oracle solution.
    Solution,
    /// Who or what made the task, and how.
    Provenance,
    /// The task's episodes across runs.
    Episodes,
    /// The task's audit: each check and each finding with its evidence.
    Audit,
}

impl DetailTab {
    /// All tabs in order.
    pub const ALL: [DetailTab; 9] = [
        DetailTab::Instruction,
        DetailTab::Truth,
        DetailTab::Environment,
        DetailTab::InitialTests,
        DetailTab::FinalTests,
        DetailTab::Solution,
        DetailTab::Provenance,
        DetailTab::Episodes,
        DetailTab::Audit,
    ];

    /// Tab title; `short` for narrow terminals.
    pub fn title(self, short: bool) -> &'static str {
        match (self, short) {
            (DetailTab::Instruction, false) => "Instruction",
            (DetailTab::Instruction, true) => "Instr",
            (DetailTab::Truth, false) => "Truth (PRIVILEGED)",
            (DetailTab::Truth, true) => "Truth!",
            (DetailTab::Environment, false) => "Environment",
            (DetailTab::Environment, true) => "Env",
            (DetailTab::InitialTests, false) => "Initial tests",
            (DetailTab::InitialTests, true) => "Init",
            (DetailTab::FinalTests, false) => "Final tests",
            (DetailTab::FinalTests, true) => "Final",
            (DetailTab::Solution, false) => "Solution",
            (DetailTab::Solution, true) => "Sol",
            (DetailTab::Provenance, false) => "Provenance",
            (DetailTab::Provenance, true) => "Prov",
            (DetailTab::Episodes, false) => "Episodes",
            (DetailTab::Episodes, true) => "Eps",
            (DetailTab::Audit, false) => "Audit",
            (DetailTab::Audit, true) => "Aud",
        }
    }

    /// The bundle file `$EDITOR` opens for this tab (relative to the bundle).
    pub fn bundle_file(self, task: Option<&Task>) -> PathBuf {
        let first = |v: Option<&Vec<String>>, default: &str| {
            v.and_then(|v| v.first().cloned())
                .unwrap_or_else(|| default.to_string())
        };
        match self {
            DetailTab::Instruction => "instruction.md".into(),
            DetailTab::Truth => "truth.md".into(),
            DetailTab::Environment => match task.and_then(|t| t.environment_definition()) {
                Some((kind, _)) => PathBuf::from("environment").join(kind.file_name()),
                None => "environment/setup.sh".into(),
            },
            DetailTab::InitialTests => PathBuf::from("tests").join(first(
                task.map(|t| &t.meta.verifier.initial_tests),
                crate::task::INITIAL_TESTS,
            )),
            DetailTab::FinalTests => PathBuf::from("tests").join(first(
                task.map(|t| &t.meta.verifier.final_tests),
                crate::task::FINAL_TESTS,
            )),
            DetailTab::Solution => "solution/solve.sh".into(),
            DetailTab::Provenance | DetailTab::Episodes => "task.toml".into(),
            DetailTab::Audit => crate::audit::file::AUDIT_FILE.into(),
        }
    }
}

/// Which tab titles (indices into [`DetailTab::ALL`]) go short first when
/// the tab bar is too narrow: the longest, bar the privileged marker.
const SHORTEN_ORDER: [usize; 9] = [3, 4, 2, 0, 6, 1, 5, 7, 8];

/// One line of tab content before styling.
enum Src<'a> {
    /// A file header.
    Header(String),
    /// A code line in a language.
    Code(Lang, &'a str, usize, usize),
    /// Plain text.
    Text(String),
}

/// State of the detail pane.
#[derive(Debug, Default)]
pub struct DetailState {
    /// The loaded bundle (matches `requested` once it arrives).
    pub task: Option<Task>,
    /// Episodes of that task.
    pub episodes: Vec<EpisodeRow>,
    /// The tab shown.
    pub tab: DetailTab,
    /// The pane fills the whole view (`z`; esc restores).
    pub maximised: bool,
    /// The shown task's image and build-cache state (Environment tab),
    /// once loaded.
    pub env: Option<crate::workbench::TaskEnv>,
    env_requested: Option<String>,
    scroll: u16,
    /// Columns scrolled sideways (code tabs, when not wrapping).
    hscroll: u16,
    /// Wrap long code lines instead of scrolling them sideways.
    wrap: bool,
    requested: Option<String>,
    area: Rect,
    tab_areas: Vec<(Rect, DetailTab)>,
    /// The selected row of the Episodes tab (Enter opens it).
    ep_selected: usize,
    /// The episode (`run`, `sample`) to select once the task's episodes
    /// arrive (a jump from the Episodes view).
    ep_wanted: Option<(String, u32)>,
    /// Rows of the Episodes tab scrolled past.
    ep_offset: usize,
    /// The stored audit of a task (`None`: not audited), once loaded.
    audit: Option<(String, Option<crate::audit::AuditReport>)>,
}

impl DetailState {
    /// Record that `id` should be shown; true if it needs loading.
    pub fn wants(&mut self, id: &str) -> bool {
        if self.requested.as_deref() == Some(id) {
            return false;
        }
        self.requested = Some(id.to_string());
        true
    }

    /// Force the next `wants(id)` to load again (after an edit).
    pub fn invalidate(&mut self) {
        self.requested = None;
        self.env_requested = None;
    }

    /// The task whose image and build-cache state should be loaded now:
    /// the shown one, once, while the Environment tab is open.
    pub fn wants_env(&mut self) -> Option<String> {
        let id = self.task.as_ref()?.id().to_string();
        if self.tab != DetailTab::Environment || self.env_requested.as_deref() == Some(&id) {
            return None;
        }
        self.env_requested = Some(id.clone());
        Some(id)
    }

    /// A task's image and build-cache state arrived (stale ones dropped).
    pub fn set_env(&mut self, env: crate::workbench::TaskEnv) {
        if self.env_requested.as_deref() == Some(env.task_id.as_str()) {
            self.env = Some(env);
        }
    }

    /// A bundle arrived; stale ones (the user moved on) are dropped.
    pub fn set_task(&mut self, task: Task, episodes: Vec<EpisodeRow>) {
        if self.requested.as_deref().is_some_and(|r| r != task.id()) {
            return;
        }
        let same = self.task.as_ref().map(|t| t.id()) == Some(task.id());
        // Newest first, as in the Episodes view; the selection stays on its
        // episode across reloads (or goes to the one asked for).
        let kept = self
            .selected_episode()
            .map(|e| (e.run_id.clone(), e.sample));
        let keep = self.ep_wanted.take().or(kept.filter(|_| same));
        if !same {
            self.scroll = 0;
            self.hscroll = 0;
            self.ep_selected = 0;
            self.ep_offset = 0;
        }
        let mut episodes = episodes;
        episodes.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then_with(|| b.run_id.cmp(&a.run_id))
                .then_with(|| a.sample.cmp(&b.sample))
        });
        self.requested = Some(task.id().to_string());
        self.task = Some(task);
        self.episodes = episodes;
        if let Some((run, sample)) = keep {
            if let Some(i) = self
                .episodes
                .iter()
                .position(|e| e.run_id == run && e.sample == sample)
            {
                self.ep_selected = i;
            }
        }
        self.ep_selected = self.ep_selected.min(self.episodes.len().saturating_sub(1));
    }

    /// A task's stored audit arrived (stale ones, for a task no longer
    /// asked for, are dropped).
    pub fn set_audit(&mut self, id: &str, report: Option<crate::audit::AuditReport>) {
        if self.requested.as_deref().is_some_and(|r| r != id) {
            return;
        }
        self.audit = Some((id.to_string(), report));
    }

    /// The shown task's audit: `None` until it is loaded, `Some(None)`
    /// when the task was never audited.
    pub fn audit_of(&self, id: &str) -> Option<Option<&crate::audit::AuditReport>> {
        self.audit
            .as_ref()
            .filter(|(a, _)| a == id)
            .map(|(_, r)| r.as_ref())
    }

    /// The selected row of the Episodes tab.
    pub fn selected_episode(&self) -> Option<&EpisodeRow> {
        self.episodes.get(self.ep_selected)
    }

    /// Select episode `run`#`sample` in the Episodes tab: now if the shown
    /// list has it, and again when the next load of the task arrives.
    pub fn select_episode(&mut self, run: &str, sample: u32) {
        if let Some(i) = self
            .episodes
            .iter()
            .position(|e| e.run_id == run && e.sample == sample)
        {
            self.ep_selected = i;
        }
        // The shown list may be another task's: the next load selects it too.
        self.ep_wanted = Some((run.to_string(), sample));
    }

    /// Move the Episodes tab's selection by `delta` rows (clamped).
    pub fn move_episode(&mut self, delta: isize) {
        self.ep_wanted = None;
        let max = self.episodes.len().saturating_sub(1) as isize;
        self.ep_selected = (self.ep_selected as isize + delta).clamp(0, max.max(0)) as usize;
    }

    /// The pane's last drawn area (for the mouse).
    pub fn area(&self) -> Rect {
        self.area
    }

    /// Scroll by `delta` lines.
    pub fn scroll_by(&mut self, delta: i32) {
        self.scroll = (self.scroll as i32 + delta).clamp(0, u16::MAX as i32) as u16;
    }

    /// Scroll to a line.
    pub fn scroll_to(&mut self, line: u16) {
        self.scroll = line;
    }

    /// Scroll code sideways by `delta` columns (ignored while wrapping;
    /// the next draw clamps it to the widest visible line).
    pub fn scroll_sideways(&mut self, delta: i32) {
        if !self.wrap {
            self.hscroll = (self.hscroll as i32 + delta).clamp(0, u16::MAX as i32) as u16;
        }
    }

    /// Toggle wrapping long code lines (scrolling sideways resets).
    pub fn toggle_wrap(&mut self) {
        self.wrap = !self.wrap;
        self.hscroll = 0;
    }

    /// Whether long code lines wrap.
    pub fn wraps(&self) -> bool {
        self.wrap
    }

    /// Columns scrolled sideways.
    pub fn sideways(&self) -> u16 {
        self.hscroll
    }

    /// Move `delta` tabs (wrapping).
    pub fn next_tab(&mut self, delta: isize) {
        let n = DetailTab::ALL.len() as isize;
        let i = DetailTab::ALL
            .iter()
            .position(|t| *t == self.tab)
            .unwrap_or(0) as isize;
        self.tab = DetailTab::ALL[((i + delta).rem_euclid(n)) as usize];
        self.scroll = 0;
        self.hscroll = 0;
    }

    /// A click: switch tab if it hit one.
    pub fn click(&mut self, pos: Position) {
        if let Some((_, t)) = self.tab_areas.iter().find(|(r, _)| r.contains(pos)) {
            self.tab = *t;
            self.scroll = 0;
        }
    }

    /// Draw the pane for `row` (the selected row).
    pub fn draw(
        &mut self,
        frame: &mut Frame<'_>,
        area: Rect,
        theme: &Theme,
        row: Option<&TaskRow>,
        focused: bool,
    ) {
        self.area = area;
        let privileged = self.tab == DetailTab::Truth;
        let border = if privileged {
            theme.privileged()
        } else if focused {
            Style::new().fg(theme.accent)
        } else {
            theme.muted()
        };
        let title = match row {
            Some(r) if r.name.is_empty() || r.name == r.id => format!(" {} ", r.id),
            Some(r) => format!(" {} — {} ", r.id, r.name),
            None => " no task selected ".into(),
        };
        // Focus shows by more than colour: a thick border and a marked,
        // bold title.
        let (title, title_style, border_type) = if focused {
            (
                format!("▶{title}"),
                theme.accent().add_modifier(Modifier::BOLD),
                BorderType::Thick,
            )
        } else {
            (title, theme.accent(), BorderType::Plain)
        };
        let mut block = Block::default()
            .borders(Borders::ALL)
            .border_type(border_type)
            .border_style(border)
            .title(Span::styled(title, title_style));
        if privileged {
            block = block.title_top(
                Line::from(Span::styled(
                    " PRIVILEGED ",
                    theme.privileged().add_modifier(Modifier::REVERSED),
                ))
                .right_aligned(),
            );
        }
        let inner = block.inner(area);
        frame.render_widget(block, area);
        let Some(row) = row else {
            return;
        };
        let [tabs, summary, body] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(1),
            Constraint::Fill(1),
        ])
        .areas(inner);
        self.draw_tabs(frame, tabs, theme);
        frame.render_widget(Paragraph::new(summary_line(row, theme)), summary);
        let Some(owned) = self.task.take().filter(|t| t.id() == row.id) else {
            frame.render_widget(
                Paragraph::new(Span::styled("loading…", theme.muted())),
                body,
            );
            return;
        };
        let task = &owned;
        match self.tab {
            DetailTab::Instruction => self.draw_prose(
                frame,
                body,
                &task.instruction,
                Style::new().fg(theme.foreground),
                None,
                theme,
            ),
            DetailTab::Truth => self.draw_prose(
                frame,
                body,
                &task.truth,
                Style::new().fg(theme.foreground),
                Some("PRIVILEGED: ground truth for tests and review; never shown to the agent."),
                theme,
            ),
            DetailTab::Episodes => self.draw_episodes(frame, body, theme, focused),
            DetailTab::Audit => {
                let lines = match self.audit_of(task.id()) {
                    None => vec![Line::from(Span::styled(
                        "loading the audit…",
                        theme.muted(),
                    ))],
                    Some(report) => super::detail_audit::audit_lines(report, task.id(), theme),
                };
                self.draw_lines(frame, body, lines, theme);
            }
            DetailTab::Provenance => {
                let text = provenance_text(task, row);
                self.draw_prose(
                    frame,
                    body,
                    &text,
                    Style::new().fg(theme.foreground),
                    None,
                    theme,
                )
            }
            tab => {
                let mut lines = Vec::new();
                if let Some(env) = self
                    .env
                    .as_ref()
                    .filter(|e| tab == DetailTab::Environment && e.task_id == task.id())
                {
                    let (heading, text) = super::detail_env::env_lines(env);
                    lines.push(Src::Header(heading));
                    lines.extend(text.into_iter().map(Src::Text));
                }
                lines.extend(code_lines(task, tab));
                self.draw_code(frame, body, &lines, theme);
            }
        }
        self.task = Some(owned);
    }

    fn draw_tabs(&mut self, frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
        // Titles go short one by one, the longest first, until they fit.
        let mut short = [false; DetailTab::ALL.len()];
        let width = |short: &[bool]| -> u16 {
            DetailTab::ALL
                .iter()
                .zip(short)
                .map(|(t, s)| t.title(*s).chars().count() as u16 + 3)
                .sum()
        };
        // The active tab keeps its long title longest.
        let active = DetailTab::ALL.iter().position(|t| *t == self.tab);
        let order = SHORTEN_ORDER
            .iter()
            .filter(|i| Some(**i) != active)
            .chain(active.iter());
        for &i in order {
            if width(&short) <= area.width {
                break;
            }
            short[i] = true;
        }
        self.tab_areas.clear();
        let mut spans = Vec::new();
        let mut x = area.x;
        for (i, t) in DetailTab::ALL.into_iter().enumerate() {
            // The active tab is bracketed, not only coloured.
            let label = if t == self.tab {
                format!("[{}]", t.title(short[i]))
            } else {
                format!(" {} ", t.title(short[i]))
            };
            let w = label.chars().count() as u16;
            self.tab_areas.push((Rect::new(x, area.y, w, 1), t));
            x = x.saturating_add(w + 1);
            let style = if t == self.tab {
                if t == DetailTab::Truth {
                    theme.privileged().add_modifier(Modifier::REVERSED)
                } else {
                    theme.accent().bg(theme.selection)
                }
            } else if t == DetailTab::Truth {
                Style::new().fg(theme.privileged)
            } else {
                theme.muted()
            };
            spans.push(Span::styled(label, style));
            spans.push(Span::raw(" "));
        }
        frame.render_widget(Paragraph::new(Line::from(spans)), area);
    }

    fn draw_prose(
        &mut self,
        frame: &mut Frame<'_>,
        area: Rect,
        text: &str,
        style: Style,
        banner: Option<&str>,
        theme: &Theme,
    ) {
        let mut lines = Vec::new();
        if let Some(b) = banner {
            lines.push(Line::from(Span::styled(b.to_string(), theme.privileged())));
            lines.push(Line::from(""));
        }
        if text.trim().is_empty() {
            lines.push(Line::from(Span::styled("(empty)", theme.muted())));
        }
        lines.extend(
            text.lines()
                .map(|l| Line::from(Span::styled(l.to_string(), style))),
        );
        frame.render_widget(
            Paragraph::new(lines)
                .wrap(Wrap { trim: false })
                .scroll((self.scroll, 0)),
            area,
        );
    }

    /// Styled lines, wrapped and scrolled, the position in the border when
    /// they overflow.
    fn draw_lines(
        &mut self,
        frame: &mut Frame<'_>,
        area: Rect,
        lines: Vec<Line<'static>>,
        theme: &Theme,
    ) {
        // Rows as wrapped (the scroll counts rows; long words aside).
        let cols = usize::from(area.width.max(1));
        let total: usize = lines.iter().map(|l| l.width().div_ceil(cols).max(1)).sum();
        self.scroll = self
            .scroll
            .min(total.saturating_sub(1).min(u16::MAX as usize) as u16);
        let from = self.scroll as usize;
        let para = Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .scroll((self.scroll, 0));
        frame.render_widget(para, area);
        if total > area.height as usize {
            let pos = format!(" row {}/{total} ", (from + 1).min(total.max(1)));
            self.draw_position(frame, &pos, theme);
        }
    }

    fn draw_code(&mut self, frame: &mut Frame<'_>, area: Rect, lines: &[Src<'_>], theme: &Theme) {
        let max = lines.len().saturating_sub(1) as u16;
        self.scroll = self.scroll.min(max);
        let from = self.scroll as usize;
        let shown = &lines[from.min(lines.len())..(from + area.height as usize).min(lines.len())];
        // Sideways scrolling stops once the widest visible line's end shows.
        let widest = shown.iter().map(src_width).max().unwrap_or(0);
        let room = widest.saturating_sub(area.width as usize);
        self.hscroll = self.hscroll.min(room.min(u16::MAX as usize) as u16);
        let out: Vec<Line<'static>> = shown
            .iter()
            .map(|l| match l {
                Src::Header(h) => Line::from(Span::styled(h.clone(), theme.accent())),
                Src::Text(t) => Line::from(Span::styled(t.clone(), theme.muted())),
                Src::Code(lang, text, n, total) => {
                    let width = total.to_string().len();
                    let mut spans = vec![Span::styled(format!("{n:>width$} "), theme.muted())];
                    spans.extend(highlight_line(&text.replace('\t', "    "), *lang, theme));
                    Line::from(spans)
                }
            })
            .collect();
        let para = if self.wrap {
            Paragraph::new(out).wrap(Wrap { trim: false })
        } else {
            Paragraph::new(out).scroll((0, self.hscroll))
        };
        frame.render_widget(para, area);
        let overflows = widest > area.width as usize || lines.len() > area.height as usize;
        if overflows || self.wrap {
            let pos = position_label(from, lines.len(), self.hscroll, self.wrap);
            self.draw_position(frame, &pos, theme);
        }
    }

    /// Write `pos` into the pane's bottom border, right-aligned.
    fn draw_position(&self, frame: &mut Frame<'_>, pos: &str, theme: &Theme) {
        let a = self.area;
        let w = (pos.chars().count() as u16).min(a.width.saturating_sub(2));
        if a.height < 2 || w == 0 {
            return;
        }
        let r = Rect::new(a.right().saturating_sub(w + 1), a.bottom() - 1, w, 1);
        frame.render_widget(
            Paragraph::new(Span::styled(pos.to_string(), theme.muted())),
            r,
        );
    }

    fn draw_episodes(&mut self, frame: &mut Frame<'_>, area: Rect, theme: &Theme, focused: bool) {
        if self.episodes.is_empty() {
            frame.render_widget(
                Paragraph::new(vec![
                    Line::from(Span::styled("No episodes of this task yet.", theme.muted())),
                    Line::from(Span::styled(
                        "Run `endless run TASK --policy oracle` or `endless eval` to record some.",
                        theme.muted(),
                    )),
                ]),
                area,
            );
            return;
        }
        // Only the visible window becomes rows; the selection stays in it.
        let height = area.height.saturating_sub(1).max(1) as usize;
        self.ep_selected = self.ep_selected.min(self.episodes.len() - 1);
        if self.ep_selected < self.ep_offset {
            self.ep_offset = self.ep_selected;
        } else if self.ep_selected >= self.ep_offset + height {
            self.ep_offset = self.ep_selected + 1 - height;
        }
        let rows = self
            .episodes
            .iter()
            .skip(self.ep_offset)
            .take(height)
            .map(|e| {
                Row::new(vec![
                    Cell::from(e.run_id.clone()),
                    Cell::from(e.sample.to_string()),
                    result_cell(e, theme),
                    Cell::from(format!("{:.2}", e.reward)),
                    Cell::from(e.turns.to_string()),
                    Cell::from(e.end_reason.clone()),
                    Cell::from(e.failure_mode.clone().unwrap_or_else(|| "-".into())),
                ])
            });
        let table = Table::new(
            rows,
            [
                Constraint::Fill(2),
                Constraint::Length(3),
                // "PASS ✋": the hand is two cells wide.
                Constraint::Length(7),
                Constraint::Length(6),
                Constraint::Length(5),
                Constraint::Fill(1),
                Constraint::Fill(1),
            ],
        )
        .header(
            Row::new(vec!["Run", "#", "Res", "Reward", "Turns", "End", "Failure"])
                .style(theme.muted()),
        )
        // The selected episode is marked like other tables' rows (Enter
        // opens it in the inspector while the pane has the focus).
        .row_highlight_style(if focused {
            theme.selected()
        } else {
            Style::new().bg(theme.selection)
        })
        .highlight_symbol("▶ ")
        .highlight_spacing(HighlightSpacing::Always)
        .style(Style::new().fg(theme.foreground));
        let mut state =
            TableState::default().with_selected(Some(self.ep_selected - self.ep_offset));
        frame.render_stateful_widget(table, area, &mut state);
    }
}

/// Display columns of a code-tab line as drawn (gutter included).
fn src_width(l: &Src<'_>) -> usize {
    match l {
        Src::Header(h) | Src::Text(h) => h.chars().count(),
        Src::Code(_, text, _, total) => {
            // A tab is drawn as four spaces.
            let tabs = text.matches('\t').count();
            total.to_string().len() + 1 + text.chars().count() + tabs * 3
        }
    }
}

/// The scroll position shown in the border: `line 12/80 · col 40`, or
/// `· wrap` while wrapping.
pub fn position_label(from: usize, total: usize, hscroll: u16, wrap: bool) -> String {
    let line = (from + 1).min(total.max(1));
    if wrap {
        format!(" line {line}/{total} · wrap ")
    } else {
        format!(" line {line}/{total} · col {} ", hscroll as usize + 1)
    }
}

fn summary_line<'a>(row: &TaskRow, theme: &Theme) -> Line<'a> {
    let mut spans = vec![
        Span::styled(
            row.status.as_str().to_string(),
            status_style(row.status, theme),
        ),
        Span::styled("  rating ", theme.muted()),
        Span::styled(stars(row.rating), Style::new().fg(theme.warning)),
    ];
    if !row.tags.is_empty() {
        spans.push(Span::styled("  tags ", theme.muted()));
        spans.push(Span::raw(row.tags.join(", ")));
    }
    if !row.notes.is_empty() {
        spans.push(Span::styled("  note ", theme.muted()));
        spans.push(Span::raw(
            row.notes.lines().next().unwrap_or("").to_string(),
        ));
    }
    Line::from(spans)
}

fn provenance_text(task: &Task, row: &TaskRow) -> String {
    let p = &task.meta.provenance;
    let t = &task.meta.task;
    let mut out = String::new();
    let mut kv = |k: &str, v: String| {
        if !v.is_empty() {
            out.push_str(&format!("{k:<14} {v}\n"));
        }
    };
    kv("category", t.category.clone());
    kv(
        "complexity",
        t.complexity.map(|c| c.to_string()).unwrap_or_default(),
    );
    kv("scenario", t.scenario.clone());
    kv("difficulty", t.difficulty.clone());
    kv("format", t.source_format.clone());
    kv("generator", p.generator.clone());
    kv("model", p.model.clone());
    kv("seed", p.seed.map(|s| s.to_string()).unwrap_or_default());
    kv("created", p.created.clone());
    for (stage, n) in &p.attempts {
        kv(&format!("attempts.{stage}"), n.to_string());
    }
    for (k, v) in &p.extra {
        kv(k, v.to_string());
    }
    kv(
        "pass@k",
        row.pass_at_k
            .iter()
            .map(|(k, v)| format!("pass@{k}={v:.2}"))
            .collect::<Vec<_>>()
            .join(" "),
    );
    kv("max turns", task.meta.agent.max_turns.to_string());
    kv("notes", row.notes.clone());
    if out.is_empty() {
        out.push_str("(no provenance recorded)");
    }
    out
}

fn push_file<'a>(out: &mut Vec<Src<'a>>, header: String, text: &'a str, lang: Lang) {
    out.push(Src::Header(format!("── {header} ──")));
    let total = text.lines().count();
    for (i, l) in text.lines().enumerate() {
        out.push(Src::Code(lang, l, i + 1, total));
    }
    out.push(Src::Text(String::new()));
}

fn code_lines(task: &Task, tab: DetailTab) -> Vec<Src<'_>> {
    let mut out = Vec::new();
    match tab {
        DetailTab::Environment => {
            if let Some((kind, text)) = task.environment_definition() {
                let name = format!("environment/{}", kind.file_name());
                push_file(&mut out, name.clone(), text, Lang::from_path(&name));
            }
            let others: Vec<&String> = task
                .environment
                .iter()
                .map(|(p, _)| p)
                .filter(|p| {
                    task.environment_definition()
                        .is_none_or(|(k, _)| k.file_name() != p.as_str())
                })
                .collect();
            if !others.is_empty() {
                out.push(Src::Header("── other files ──".into()));
                out.extend(
                    others
                        .into_iter()
                        .map(|p| Src::Text(format!("environment/{p}"))),
                );
            }
            if out.is_empty() {
                out.push(Src::Text("No environment definition.".into()));
            }
        }
        DetailTab::InitialTests | DetailTab::FinalTests => {
            let v = &task.meta.verifier;
            let files = if tab == DetailTab::InitialTests {
                &v.initial_tests
            } else {
                &v.final_tests
            };
            for f in files {
                match task.tests.text(f) {
                    Some(text) => {
                        push_file(&mut out, format!("tests/{f}"), text, Lang::from_path(f))
                    }
                    None => out.push(Src::Text(format!("tests/{f} is missing"))),
                }
            }
            if tab == DetailTab::FinalTests {
                if let Some(s) = &v.script {
                    if let Some(text) = task.tests.text(s) {
                        push_file(
                            &mut out,
                            format!("tests/{s} (verifier script)"),
                            text,
                            Lang::Shell,
                        );
                    }
                }
            }
            if out.is_empty() {
                out.push(Src::Text("No tests.".into()));
            }
        }
        DetailTab::Solution => {
            for (path, entry) in task.solution.iter() {
                match std::str::from_utf8(&entry.bytes) {
                    Ok(text) => push_file(
                        &mut out,
                        format!("solution/{path}"),
                        text,
                        Lang::from_path(path),
                    ),
                    Err(_) => out.push(Src::Text(format!("solution/{path} (binary)"))),
                }
            }
            if out.is_empty() {
                out.push(Src::Text("No oracle solution (solution/solve.sh).".into()));
            }
        }
        _ => {}
    }
    out
}
