//! The Episodes view: every recorded episode with pass/fail and failure
//! mode; filtered by failure mode (or any failure), searched with `/`,
//! sorted by any column ([`super::episodes_order`]).

use crate::tui::action::Action;
use crate::tui::component::{Component, DrawContext};
use crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, HighlightSpacing, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use crate::store::EpisodeRow;
use crate::tui::keymap::Command;
use crate::tui::theme::Theme;
use crate::tui::widgets::columns::{self, constraints, cut_end, cut_middle, fit, widest, Column};
use crate::tui::widgets::empty::draw_empty;
use crate::tui::widgets::task_marks::{result_cell, stars};

use super::episodes_order::{labels, shown};
pub use super::episodes_order::{EpisodeSort, ANY_FAILURE, NO_FAILURE};

/// State of the Episodes view.
#[derive(Debug, Default)]
pub struct EpisodesView {
    rows: Vec<EpisodeRow>,
    /// The store has answered at least once (so "no episodes" is true).
    pub loaded: bool,
    visible: Vec<usize>,
    selected: usize,
    offset: usize,
    /// Failure-mode filter (`none` = passed / no failure mode; `any
    /// failure` = every episode that did not pass).
    pub failure: Option<String>,
    /// The `/` search (case-insensitive).
    pub search: String,
    /// The sort column.
    pub sort: EpisodeSort,
    /// Sort descending.
    pub reverse: bool,
    table_area: Rect,
    clicks: crate::tui::widgets::double_click::DoubleClick,
}

impl EpisodesView {
    /// Replace all rows.
    pub fn set_rows(&mut self, rows: Vec<EpisodeRow>) {
        self.rows = rows;
        self.loaded = true;
        self.refresh();
    }

    /// Filter by failure mode (`None`: any; [`ANY_FAILURE`]; a mode, or
    /// [`NO_FAILURE`] for the passed ones).
    pub fn set_failure(&mut self, failure: Option<String>) {
        self.failure = failure;
        self.refresh();
    }

    /// Every failure label of the loaded episodes (`none` for passed
    /// ones), sorted.
    pub fn modes(&self) -> Vec<String> {
        let mut m: Vec<String> = self
            .rows
            .iter()
            .flat_map(|r| {
                let l = labels(r);
                if l.is_empty() {
                    vec![NO_FAILURE.to_string()]
                } else {
                    l.into_iter().map(String::from).collect()
                }
            })
            .collect();
        m.sort();
        m.dedup();
        m
    }

    fn refresh(&mut self) {
        let keep = self.selected_key();
        let f = self.failure.as_deref();
        let search = self.search.to_lowercase();
        let rows = &self.rows;
        self.visible = (0..rows.len())
            .filter(|&i| shown(&rows[i], f, &search))
            .collect();
        let (sort, reverse) = (self.sort, self.reverse);
        self.visible.sort_by(|&a, &b| {
            let o = sort.compare(&rows[a], &rows[b]);
            if reverse {
                o.reverse()
            } else {
                o
            }
        });
        if let Some(pos) = keep.and_then(|k| {
            self.visible
                .iter()
                .position(|&i| Self::key_of(&self.rows[i]) == k)
        }) {
            self.selected = pos;
        }
        self.selected = self.selected.min(self.visible.len().saturating_sub(1));
    }

    fn key_of(r: &EpisodeRow) -> (String, String, u32) {
        (r.run_id.clone(), r.task_id.clone(), r.sample)
    }

    fn selected_key(&self) -> Option<(String, String, u32)> {
        self.selected_row().map(Self::key_of)
    }

    /// Set the search text (the selection stays on its episode when shown).
    pub fn set_search(&mut self, search: String) {
        self.search = search;
        self.refresh();
    }

    /// All rows.
    pub fn rows(&self) -> &[EpisodeRow] {
        &self.rows
    }

    /// The selected episode.
    pub fn selected_row(&self) -> Option<&EpisodeRow> {
        self.visible.get(self.selected).map(|&i| &self.rows[i])
    }

    fn move_by(&mut self, d: isize) {
        if !self.visible.is_empty() {
            let max = self.visible.len() as isize - 1;
            self.selected = (self.selected as isize + d).clamp(0, max) as usize;
        }
    }

    /// Apply a command.
    pub fn command(&mut self, cmd: Command) {
        let page = self.table_area.height.saturating_sub(1).max(1) as isize;
        match cmd {
            Command::Up => self.move_by(-1),
            Command::Down => self.move_by(1),
            Command::PageUp => self.move_by(-page),
            Command::PageDown => self.move_by(page),
            Command::Top => self.move_by(isize::MIN / 2),
            Command::Bottom => self.move_by(isize::MAX / 2),
            Command::SortNext => {
                self.sort = self.sort.next();
                self.refresh();
            }
            Command::SortReverse => {
                self.reverse = !self.reverse;
                self.refresh();
            }
            Command::ClearFilters | Command::Back => {
                self.failure = None;
                self.search.clear();
                self.refresh();
            }
            _ => {}
        }
    }

    /// Click selects, wheel scrolls; returns true on a double click on a
    /// row (which opens it).
    pub fn mouse(&mut self, m: MouseEvent) -> bool {
        let pos = Position::new(m.column, m.row);
        if !self.table_area.contains(pos) {
            return false;
        }
        match m.kind {
            MouseEventKind::ScrollDown => self.move_by(3),
            MouseEventKind::ScrollUp => self.move_by(-3),
            MouseEventKind::Down(MouseButton::Left) => {
                if let Some(r) = m.row.checked_sub(self.table_area.y + 1) {
                    let idx = self.offset + r as usize;
                    if idx < self.visible.len() {
                        self.selected = idx;
                        return self.clicks.click(idx, std::time::Instant::now());
                    }
                }
            }
            _ => {}
        }
        false
    }

    /// Draw the filter line and the table.
    pub fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
        if self.loaded && self.rows.is_empty() {
            self.table_area = Rect::default();
            draw_empty(
                frame,
                area,
                theme,
                "No episodes yet",
                &[
                    "Every episode an agent plays is recorded under runs/<run-id>/ and",
                    "listed here with its result, reward, turns and failure mode (loop,",
                    "turn exhaustion, premature done, malformed output, timeout).",
                    "",
                    "Record some with `endless eval --policy oracle` or `endless run TASK`.",
                ],
            );
            return;
        }
        let [bar, table] =
            Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
        let passed = self
            .visible
            .iter()
            .filter(|&&i| self.rows[i].passed)
            .count();
        let mut spans = vec![
            Span::styled("failure mode ", theme.muted()),
            Span::styled(
                self.failure.clone().unwrap_or_else(|| "any".into()),
                theme.accent(),
            ),
        ];
        if !self.search.is_empty() {
            spans.push(Span::styled("  search ", theme.muted()));
            spans.push(Span::styled(format!("{:?}", self.search), theme.accent()));
        }
        if self.sort != EpisodeSort::default() || self.reverse {
            spans.push(Span::styled("  sort ", theme.muted()));
            spans.push(Span::styled(
                format!(
                    "{}{}",
                    self.sort.column().to_lowercase(),
                    if self.reverse { "↓" } else { "↑" }
                ),
                theme.accent(),
            ));
        }
        spans.push(Span::styled(
            format!(
                "  {}/{} shown, {passed} passed",
                self.visible.len(),
                self.rows.len()
            ),
            theme.muted(),
        ));
        let taken = self
            .visible
            .iter()
            .filter(|&&i| self.rows[i].taken_over)
            .count();
        if taken > 0 {
            spans.push(Span::styled(
                format!(", {taken} ✋ taken over"),
                theme.warning(),
            ));
        }
        let line = Line::from(spans);
        frame.render_widget(Paragraph::new(line), bar);
        self.table_area = table;
        let height = table.height.saturating_sub(1) as usize;
        if self.selected < self.offset {
            self.offset = self.selected;
        } else if height > 0 && self.selected >= self.offset + height {
            self.offset = self.selected + 1 - height;
        }
        self.offset = self
            .offset
            .min(self.visible.len().saturating_sub(height.max(1)));
        let end = (self.offset + height).min(self.visible.len());
        // Columns give way by priority: task, run, result and failure mode
        // keep their width longest; the end reason shrinks and goes first.
        let vis = || self.visible.iter().map(|&i| &self.rows[i]);
        // A taken-over episode's result carries a hand (a space and two
        // cells), a fork a ⑂ (a space and one).
        let marks = 3 * usize::from(vis().any(|e| e.taken_over))
            + 2 * usize::from(vis().any(|e| e.forked_from.is_some()));
        let failures: Vec<String> = vis().map(failure_cell_text).collect();
        let cols = [
            // At 80 columns the start time, the duration and the end
            // reason give way first; the verdict, turns and failure stay.
            Column::fixed(11, 2).optional(),
            Column::new(widest("Run↑", vis().map(|e| e.run_id.as_str())), 10, 8),
            Column::new(widest("Task↑", vis().map(|e| e.task_id.as_str())), 10, 9),
            Column::fixed(3, 6),
            Column::fixed(4 + marks, 10),
            Column::fixed(7, 3).optional(),
            Column::fixed(6, 3).optional(),
            Column::fixed(6, 2).optional(),
            Column::new(widest("End", vis().map(|e| e.end_reason.as_str())), 6, 1).optional(),
            Column::fixed(widest("Failure↑", failures.iter().map(String::as_str)), 10),
            Column::fixed(7, 4).optional(),
            Column::new(widest("Policy↑", vis().map(|e| e.policy.as_str())), 8, 1).optional(),
        ];
        // The highlight symbol takes two cells.
        let widths = fit(&cols, table.width.saturating_sub(2), 1);
        let w = |k: usize| widths[k].unwrap_or(0);
        let rows: Vec<Row<'_>> = self.visible[self.offset..end]
            .iter()
            .map(|&i| {
                let e = &self.rows[i];
                let cells = [
                    Cell::from(Span::styled(started(e), theme.muted())),
                    Cell::from(cut_middle(&e.run_id, w(1))),
                    Cell::from(cut_middle(&e.task_id, w(2))),
                    Cell::from(e.sample.to_string()),
                    result_cell(e, theme),
                    // The share of final tests passed: the score only of a
                    // pass; a failure's is muted, a hint, not a result.
                    Cell::from(Span::styled(
                        format!("{:.2}", e.reward),
                        if e.passed {
                            theme.base()
                        } else {
                            theme.muted()
                        },
                    )),
                    Cell::from(e.turns.to_string()),
                    Cell::from(duration(e.duration_secs)),
                    Cell::from(cut_end(&e.end_reason, w(8))),
                    Cell::from(Span::styled(
                        failure_cell_text(e),
                        if e.failure_mode.is_some() {
                            theme.warning()
                        } else {
                            theme.muted()
                        },
                    )),
                    Cell::from(stars(e.rating)),
                    Cell::from(cut_middle(&e.policy, w(11))),
                ];
                Row::new(columns::shown(cells, &widths))
            })
            .collect();
        let header = [
            "Started", "Run", "Task", "#", "Res", "Partial", "Turns", "Time", "End", "Failure",
            "Rating", "Policy",
        ]
        .map(|h| {
            // The sorted column carries an arrow (once sorted otherwise
            // than newest first).
            let sorted =
                (self.sort != EpisodeSort::default() || self.reverse) && h == self.sort.column();
            match (sorted, self.reverse) {
                (true, false) => format!("{h}↑"),
                (true, true) => format!("{h}↓"),
                _ => h.to_string(),
            }
        });
        let t = Table::new(rows, constraints(&widths))
            .header(Row::new(columns::shown(header, &widths)).style(theme.muted()))
            .row_highlight_style(theme.selected())
            .highlight_symbol("▶ ")
            .highlight_spacing(HighlightSpacing::Always)
            .style(Style::new().fg(theme.foreground));
        let mut state = TableState::default()
            .with_selected((!self.visible.is_empty()).then(|| self.selected - self.offset));
        frame.render_stateful_widget(t, table, &mut state);
    }
}

impl Component for EpisodesView {
    fn handle_command(&mut self, cmd: Command) -> Option<Action> {
        self.command(cmd);
        None
    }

    /// A double click on a row inspects it.
    fn handle_mouse(&mut self, event: MouseEvent) -> Option<Action> {
        self.mouse(event)
            .then_some(Action::Command(Command::Select))
    }

    fn update(&mut self, action: Action) -> Option<Action> {
        if let Action::EpisodesLoaded(rows) = action {
            self.set_rows(rows);
        }
        None
    }

    fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, ctx: &DrawContext<'_>) {
        EpisodesView::draw(self, frame, area, ctx.theme);
    }
}

/// The Failure cell: the primary label, and how many more apply (`loop +1`:
/// the inspector names them all); `-` for a pass.
fn failure_cell_text(e: &EpisodeRow) -> String {
    match labels(e).as_slice() {
        [] => "-".into(),
        [one] => (*one).to_string(),
        [first, rest @ ..] => format!("{first} +{}", rest.len()),
    }
}

/// When the episode started (`12-04 10:00`, UTC): when it was indexed,
/// less how long it took; `-` when unknown.
fn started(e: &EpisodeRow) -> String {
    chrono::DateTime::parse_from_rfc3339(&e.created_at)
        .ok()
        .map(|t| {
            let took = chrono::Duration::milliseconds((e.duration_secs * 1000.0) as i64);
            (t.with_timezone(&chrono::Utc) - took)
                .format("%m-%d %H:%M")
                .to_string()
        })
        .unwrap_or_else(|| "-".into())
}

/// `4.2s`, `1:05`, `1:02:03`.
fn duration(secs: f64) -> String {
    if secs < 60.0 {
        return format!("{secs:.1}s");
    }
    let s = secs.round() as u64;
    match s / 3600 {
        0 => format!("{}:{:02}", s / 60, s % 60),
        h => format!("{h}:{:02}:{:02}", s / 60 % 60, s % 60),
    }
}
