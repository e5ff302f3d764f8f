//! The Tasks view: a sortable, filterable table over the workspace's tasks
//! with a detail pane below it.

use crate::tui::action::Action;
use crate::tui::component::{Component, DrawContext};
use crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, HighlightSpacing, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use std::collections::HashMap;

use super::detail::{DetailState, DetailTab};
use crate::audit::AuditRow;
use crate::store::{TaskRow, TaskStatus};
use crate::tui::keymap::Command;
use crate::tui::theme::Theme;
use crate::tui::widgets::columns::{constraints, cut_end, cut_middle, fit, shown, widest, Column};
use crate::tui::widgets::empty::draw_empty;
use crate::tui::widgets::task_marks::{stars, status_style};
use crate::workbench::task_search::{haystack, Search};

/// Sortable columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortKey {
    /// Task id.
    #[default]
    Id,
    /// Name (the id where a task has none).
    Name,
    /// Category.
    Category,
    /// Complexity (1-5).
    Complexity,
    /// Curation status.
    Status,
    /// pass@1 from the latest evaluation.
    PassAt1,
    /// The curator's rating.
    Rating,
    /// The audit: findings, then not audited.
    Audit,
}

impl SortKey {
    const ALL: [SortKey; 8] = [
        SortKey::Id,
        SortKey::Name,
        SortKey::Category,
        SortKey::Complexity,
        SortKey::Status,
        SortKey::PassAt1,
        SortKey::Rating,
        SortKey::Audit,
    ];

    /// Column label.
    pub fn label(self) -> &'static str {
        match self {
            SortKey::Id => "id",
            SortKey::Name => "name",
            SortKey::Category => "category",
            SortKey::Complexity => "complexity",
            SortKey::Status => "status",
            SortKey::PassAt1 => "pass@1",
            SortKey::Rating => "rating",
            SortKey::Audit => "audit",
        }
    }

    /// The key whose [`SortKey::label`] is `label`.
    pub fn named(label: &str) -> Option<SortKey> {
        SortKey::ALL.into_iter().find(|k| k.label() == label)
    }

    fn next(self) -> SortKey {
        let i = SortKey::ALL.iter().position(|k| *k == self).unwrap_or(0);
        SortKey::ALL[(i + 1) % SortKey::ALL.len()]
    }
}

/// Which rows are shown.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// Only tasks with this status.
    pub status: Option<TaskStatus>,
    /// Only tasks of this category.
    pub category: Option<String>,
    /// Only tasks with this tag.
    pub tag: Option<String>,
    /// Only tasks whose audit matches: a finding label as stored
    /// (`weak-tests`), or [`AUDIT_FLAGGED`], [`AUDIT_CLEAN`],
    /// [`AUDIT_NONE`].
    pub audit: Option<String>,
    /// Case-insensitive substring of id, name, instruction, a tag or an
    /// audit label (as stored or shown).
    pub search: String,
}

/// The audit filter's value for tasks with any finding.
pub const AUDIT_FLAGGED: &str = "flagged";
/// The audit filter's value for audited tasks without findings.
pub const AUDIT_CLEAN: &str = "clean";
/// The audit filter's value for tasks never audited.
pub const AUDIT_NONE: &str = "not-audited";

/// Whether task audit `row` (`None`: not audited) passes audit filter
/// `want` (see [`Filter::audit`]).
pub fn audit_matches(want: &str, row: Option<&AuditRow>) -> bool {
    match (want, row) {
        (AUDIT_NONE, r) => r.is_none(),
        (_, None) => false,
        (AUDIT_FLAGGED, Some(r)) => r.findings > 0,
        (AUDIT_CLEAN, Some(r)) => r.findings == 0,
        (label, Some(r)) => {
            let label = crate::audit::label_named(label).unwrap_or(label);
            r.labels.iter().any(|l| l == label)
        }
    }
}

/// The Audit column's cell in `width` characters: `—` not audited,
/// `✓ clean`, `? partial` (a check ran out of time or failed, nothing
/// found), or the number of findings with their short labels
/// (`2 weak,flaky`), `N flags` where those do not fit.
pub fn audit_cell(row: Option<&AuditRow>, width: u16) -> String {
    let Some(r) = row else {
        return "—".into();
    };
    if r.findings == 0 {
        return if r.complete { "✓ clean" } else { "? partial" }.into();
    }
    let labels: Vec<&str> = r
        .labels
        .iter()
        .map(|l| crate::audit::short_label(l))
        .collect();
    let full = format!("{} {}", r.findings, labels.join(","));
    if full.chars().count() <= width as usize {
        return full;
    }
    let flags = format!(
        "{} flag{}",
        r.findings,
        if r.findings == 1 { "" } else { "s" }
    );
    cut_end(&flags, width)
}

/// Where keys go inside the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Focus {
    /// The task table.
    #[default]
    Table,
    /// The detail pane (scrolling, tabs).
    Detail,
}

/// State of the Tasks view.
#[derive(Debug, Default)]
pub struct TasksView {
    rows: Vec<TaskRow>,
    /// Each audited task's audit, by task id.
    audits: HashMap<String, AuditRow>,
    /// Lowercased id + name + instruction + tags + audit labels, aligned
    /// with `rows`.
    haystacks: Vec<String>,
    /// Whether the first load has arrived.
    pub loaded: bool,
    /// Indices into `rows` that pass the filter, in sort order.
    visible: Vec<usize>,
    selected: usize,
    offset: usize,
    /// The sort column.
    pub sort: SortKey,
    /// Sort descending.
    pub reverse: bool,
    /// Which rows are shown.
    pub filter: Filter,
    /// Where keys go.
    pub focus: Focus,
    /// The selected task's detail pane.
    pub detail: DetailState,
    table_area: Rect,
    clicks: crate::tui::widgets::double_click::DoubleClick,
}

/// How a row sorts by audit: not audited first, then clean, then by
/// number of findings.
fn audit_rank(a: Option<&AuditRow>) -> i64 {
    a.map_or(-1, |a| i64::from(a.findings))
}

/// The name a row sorts by: its name, or its id where it has none.
fn sort_name(r: &TaskRow) -> String {
    if r.name.is_empty() {
        r.id.to_lowercase()
    } else {
        r.name.to_lowercase()
    }
}

fn pass1(r: &TaskRow) -> f64 {
    r.pass_at_k.get("1").copied().unwrap_or(-1.0)
}

fn status_rank(s: TaskStatus) -> u8 {
    match s {
        TaskStatus::Candidate => 0,
        TaskStatus::Accepted => 1,
        TaskStatus::Rejected => 2,
        TaskStatus::Archived => 3,
    }
}

impl TasksView {
    /// Replace all rows, keeping the selection on the same id when possible.
    /// Returns the id now selected.
    pub fn set_rows(&mut self, rows: Vec<TaskRow>) -> Option<String> {
        let keep = self.selected_id();
        self.haystacks = rows
            .iter()
            .map(|r| haystack(r, self.audits.get(&r.id)))
            .collect();
        self.rows = rows;
        self.loaded = true;
        self.refresh(keep)
    }

    /// Replace one row (after curation), re-applying filter and sort.
    pub fn update_row(&mut self, row: TaskRow) {
        let keep = self.selected_id();
        if let Some(i) = self.rows.iter().position(|r| r.id == row.id) {
            self.haystacks[i] = haystack(&row, self.audits.get(&row.id));
            self.rows[i] = row;
        }
        self.refresh(keep);
    }

    /// Replace every task's audit (from the index), re-applying filter and
    /// sort. Returns the id now selected.
    pub fn set_audits(&mut self, audits: Vec<AuditRow>) -> Option<String> {
        let keep = self.selected_id();
        self.audits = audits.into_iter().map(|a| (a.task_id.clone(), a)).collect();
        self.haystacks = self
            .rows
            .iter()
            .map(|r| haystack(r, self.audits.get(&r.id)))
            .collect();
        self.refresh(keep)
    }

    /// Task `id`'s audit, if it was audited.
    pub fn audit(&self, id: &str) -> Option<&AuditRow> {
        self.audits.get(id)
    }

    /// How many loaded tasks have an audit finding.
    pub fn flagged(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| self.audits.get(&r.id).is_some_and(|a| a.findings > 0))
            .count()
    }

    /// The finding labels of the loaded tasks, in [`crate::audit::LABELS`]
    /// order, each once.
    pub fn audit_labels(&self) -> Vec<&'static str> {
        crate::audit::LABELS
            .into_iter()
            .filter(|l| {
                self.rows.iter().any(|r| {
                    self.audits
                        .get(&r.id)
                        .is_some_and(|a| a.labels.iter().any(|x| x == l))
                })
            })
            .collect()
    }

    /// Filter by audit (`None`: any; see [`Filter::audit`]; a label may be
    /// given as stored or shown). Returns the id now selected.
    pub fn set_audit_filter(&mut self, audit: Option<String>) -> Option<String> {
        let keep = self.selected_id();
        self.filter.audit = audit.map(|a| match crate::audit::label_named(&a) {
            Some(label) => label.to_string(),
            None => a.trim().to_string(),
        });
        self.refresh(keep)
    }

    /// Total rows, and rows passing the filter.
    pub fn counts(&self) -> (usize, usize) {
        (self.rows.len(), self.visible.len())
    }

    /// Every row, shown or not.
    pub fn rows(&self) -> &[TaskRow] {
        &self.rows
    }

    /// The row of task `id`, shown or not.
    pub fn row(&self, id: &str) -> Option<&TaskRow> {
        self.rows.iter().find(|r| r.id == id)
    }

    /// The selected row.
    pub fn selected_row(&self) -> Option<&TaskRow> {
        self.visible.get(self.selected).map(|&i| &self.rows[i])
    }

    /// The selected task id.
    pub fn selected_id(&self) -> Option<String> {
        self.selected_row().map(|r| r.id.clone())
    }

    /// Show and select task `id`, clearing filters that hide it. Returns
    /// the id now selected.
    pub fn select_id(&mut self, id: &str) -> Option<String> {
        if !self.rows.iter().any(|r| r.id == id) {
            return self.selected_id();
        }
        if !self.visible.iter().any(|&i| self.rows[i].id == id) {
            self.filter = Filter::default();
        }
        self.refresh(Some(id.to_string()))
    }

    /// Set the search text. Returns the id now selected.
    pub fn set_search(&mut self, search: String) -> Option<String> {
        let keep = self.selected_id();
        self.filter.search = search;
        self.refresh(keep)
    }

    /// Recompute `visible`; keep `keep` selected if it is still shown.
    fn refresh(&mut self, keep: Option<String>) -> Option<String> {
        let search = Search::new(&self.filter.search);
        let f = &self.filter;
        let mut visible: Vec<usize> = (0..self.rows.len())
            .filter(|&i| {
                let r = &self.rows[i];
                f.status.is_none_or(|s| r.status == s)
                    && f.category.as_ref().is_none_or(|c| &r.category == c)
                    && f.tag.as_ref().is_none_or(|t| r.tags.contains(t))
                    && f.audit
                        .as_deref()
                        .is_none_or(|a| audit_matches(a, self.audits.get(&r.id)))
                    && search.matches(&self.haystacks[i])
            })
            .collect();
        let rows = &self.rows;
        visible.sort_by(|&a, &b| {
            let (x, y) = (&rows[a], &rows[b]);
            let ord = match self.sort {
                SortKey::Id => std::cmp::Ordering::Equal,
                SortKey::Name => sort_name(x).cmp(&sort_name(y)),
                SortKey::Category => x.category.cmp(&y.category),
                SortKey::Complexity => x.complexity.cmp(&y.complexity),
                SortKey::Status => status_rank(x.status).cmp(&status_rank(y.status)),
                SortKey::PassAt1 => pass1(x).total_cmp(&pass1(y)),
                SortKey::Rating => x.rating.cmp(&y.rating),
                SortKey::Audit => {
                    audit_rank(self.audits.get(&x.id)).cmp(&audit_rank(self.audits.get(&y.id)))
                }
            };
            ord.then_with(|| x.id.cmp(&y.id))
        });
        if self.reverse {
            visible.reverse();
        }
        self.visible = visible;
        self.selected = keep
            .and_then(|id| self.visible.iter().position(|&i| self.rows[i].id == id))
            .unwrap_or(0);
        self.selected_id()
    }

    /// Filter by `category` (`None`: any). Returns the id to load if the
    /// selection changed.
    pub fn set_category(&mut self, category: Option<String>) -> Option<String> {
        let keep = self.selected_id();
        self.filter.category = category;
        self.refresh(keep)
    }

    /// Filter by `tag` (`None`: any). Returns the id now selected.
    pub fn set_tag(&mut self, tag: Option<String>) -> Option<String> {
        let keep = self.selected_id();
        self.filter.tag = tag;
        self.refresh(keep)
    }

    /// The tags of the loaded tasks, sorted, each once.
    pub fn tags(&self) -> Vec<String> {
        let mut t: Vec<String> = self.rows.iter().flat_map(|r| r.tags.clone()).collect();
        t.sort();
        t.dedup();
        t
    }

    /// The categories of the loaded tasks, sorted.
    pub fn categories(&self) -> Vec<String> {
        let mut c: Vec<String> = self.rows.iter().map(|r| r.category.clone()).collect();
        c.sort();
        c.dedup();
        c
    }

    fn move_by(&mut self, delta: isize) -> Option<String> {
        if self.visible.is_empty() {
            return None;
        }
        let max = self.visible.len() as isize - 1;
        self.selected = (self.selected as isize + delta).clamp(0, max) as usize;
        self.selected_id()
    }

    fn page(&self) -> isize {
        (self.table_area.height.saturating_sub(1)).max(1) as isize
    }

    /// Apply a view-level command. Returns the id to load if the selection
    /// may have changed.
    pub fn command(&mut self, cmd: Command) -> Option<String> {
        if self.focus == Focus::Detail && self.detail.tab == DetailTab::Episodes {
            // The Episodes tab is a list: the keys move its selection.
            let step = match cmd {
                Command::Up => Some(-1),
                Command::Down => Some(1),
                Command::PageUp => Some(-10),
                Command::PageDown => Some(10),
                Command::Top => Some(isize::MIN / 2),
                Command::Bottom => Some(isize::MAX / 2),
                _ => None,
            };
            if let Some(step) = step {
                self.detail.move_episode(step);
                return None;
            }
        }
        if self.focus == Focus::Detail {
            match cmd {
                Command::Up => {
                    self.detail.scroll_by(-1);
                    return None;
                }
                Command::Down => {
                    self.detail.scroll_by(1);
                    return None;
                }
                Command::PageUp => {
                    self.detail.scroll_by(-10);
                    return None;
                }
                Command::PageDown => {
                    self.detail.scroll_by(10);
                    return None;
                }
                Command::Top => {
                    self.detail.scroll_to(0);
                    return None;
                }
                Command::Left | Command::Right => {
                    let step = if cmd == Command::Left { -8 } else { 8 };
                    self.detail.scroll_sideways(step);
                    return None;
                }
                // Esc first restores a maximised pane, then unfocuses.
                Command::Back if self.detail.maximised => {
                    self.detail.maximised = false;
                    return None;
                }
                Command::Back | Command::Select => {
                    self.detail.maximised = false;
                    self.focus = Focus::Table;
                    return None;
                }
                _ => {}
            }
        }
        let keep = self.selected_id();
        match cmd {
            Command::Up => self.move_by(-1),
            Command::Down => self.move_by(1),
            Command::PageUp => self.move_by(-self.page()),
            Command::PageDown => self.move_by(self.page()),
            Command::Top => self.move_by(isize::MIN / 2),
            Command::Bottom => self.move_by(isize::MAX / 2),
            Command::Select => {
                if self.selected_row().is_some() {
                    self.focus = Focus::Detail;
                }
                None
            }
            Command::Back => {
                if self.filter.search.is_empty() {
                    None
                } else {
                    self.set_search(String::new())
                }
            }
            Command::NextTab => {
                self.detail.next_tab(1);
                None
            }
            Command::Wrap => {
                self.detail.toggle_wrap();
                None
            }
            Command::Maximise => {
                if self.selected_row().is_some() {
                    self.detail.maximised = !self.detail.maximised;
                    self.focus = Focus::Detail;
                }
                None
            }
            Command::PrevTab => {
                self.detail.next_tab(-1);
                None
            }
            Command::SortNext => {
                self.sort = self.sort.next();
                self.refresh(keep)
            }
            Command::SortReverse => {
                self.reverse = !self.reverse;
                self.refresh(keep)
            }
            Command::FilterStatus => {
                self.filter.status = match self.filter.status {
                    None => Some(TaskStatus::Candidate),
                    Some(TaskStatus::Candidate) => Some(TaskStatus::Accepted),
                    Some(TaskStatus::Accepted) => Some(TaskStatus::Rejected),
                    Some(TaskStatus::Rejected) => Some(TaskStatus::Archived),
                    Some(TaskStatus::Archived) => None,
                };
                self.refresh(keep)
            }
            Command::ClearFilters => {
                self.filter = Filter::default();
                self.refresh(keep)
            }
            _ => None,
        }
    }

    /// Handle a mouse event. Returns the id to load if the selection changed.
    pub fn mouse(&mut self, m: MouseEvent) -> Option<String> {
        let pos = Position::new(m.column, m.row);
        if self.detail.area().contains(pos) {
            match m.kind {
                MouseEventKind::ScrollDown => {
                    self.detail.scroll_by(3);
                }
                MouseEventKind::ScrollUp => {
                    self.detail.scroll_by(-3);
                }
                MouseEventKind::Down(MouseButton::Left) => {
                    self.focus = Focus::Detail;
                    self.detail.click(pos);
                }
                _ => {}
            }
            return None;
        }
        if !self.table_area.contains(pos) {
            return None;
        }
        match m.kind {
            MouseEventKind::ScrollDown => self.move_by(3),
            MouseEventKind::ScrollUp => self.move_by(-3),
            MouseEventKind::Down(MouseButton::Left) => {
                self.focus = Focus::Table;
                let row = m.row.checked_sub(self.table_area.y + 1)? as usize;
                let idx = self.offset + row;
                if idx < self.visible.len() {
                    self.selected = idx;
                    // A double click opens the row: the detail pane takes the keys.
                    if self.clicks.click(idx, std::time::Instant::now()) {
                        self.focus = Focus::Detail;
                    }
                }
                self.selected_id()
            }
            _ => None,
        }
    }

    /// Draw the filter line, the table and the detail pane.
    pub fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
        if self.loaded && self.rows.is_empty() {
            self.table_area = Rect::default();
            draw_empty(
                frame,
                area,
                theme,
                "No tasks in this workspace yet",
                &[
                    "Tasks appear here once they are generated or imported:",
                    "",
                    "  endless generate --offline --count 20     offline task families, no LLM",
                    "  endless generate --count N --llm URL --model M",
                    "  endless tasks import PATH                 native, reference, Harbor, TB1",
                    "",
                    "Then press ctrl-r here to reload.",
                ],
            );
            return;
        }
        let row = self.selected_row().cloned();
        if self.detail.maximised && row.is_some() {
            // The maximised detail pane takes the whole view.
            self.table_area = Rect::default();
            self.detail.draw(
                frame,
                area,
                theme,
                row.as_ref(),
                self.focus == Focus::Detail,
            );
            return;
        }
        let [bar, table, detail] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Percentage(40),
            Constraint::Fill(1),
        ])
        .areas(area);
        self.draw_filter_bar(frame, bar, theme);
        self.draw_table(frame, table, theme);
        self.detail.draw(
            frame,
            detail,
            theme,
            row.as_ref(),
            self.focus == Focus::Detail,
        );
    }

    fn draw_filter_bar(&self, frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
        let f = &self.filter;
        let val = |s: Option<&str>| s.unwrap_or("any").to_string();
        let mut spans = vec![
            Span::styled("status ", theme.muted()),
            Span::styled(val(f.status.map(|s| s.as_str())), theme.accent()),
            Span::styled("  category ", theme.muted()),
            Span::styled(val(f.category.as_deref()), theme.accent()),
        ];
        if let Some(tag) = &f.tag {
            spans.push(Span::styled("  tag ", theme.muted()));
            spans.push(Span::styled(tag.clone(), theme.accent()));
        }
        if let Some(audit) = &f.audit {
            spans.push(Span::styled("  audit ", theme.muted()));
            spans.push(Span::styled(audit.clone(), theme.accent()));
        }
        if !f.search.is_empty() {
            spans.push(Span::styled("  search ", theme.muted()));
            spans.push(Span::styled(format!("{:?}", f.search), theme.accent()));
        }
        spans.push(Span::styled("  sort ", theme.muted()));
        spans.push(Span::styled(
            format!(
                "{}{}",
                self.sort.label(),
                if self.reverse { "↓" } else { "↑" }
            ),
            theme.accent(),
        ));
        let (total, shown) = self.counts();
        let count = format!("{shown}/{total} ");
        let flagged = self.flagged();
        let mut right_spans = Vec::new();
        if flagged > 0 {
            right_spans.push(Span::styled(format!("{flagged} flagged"), theme.warning()));
            right_spans.push(Span::raw("  "));
        }
        right_spans.push(Span::styled(count, theme.muted()));
        let right_line = Line::from(right_spans);
        let [left, right] = Layout::horizontal([
            Constraint::Fill(1),
            Constraint::Length(right_line.width() as u16),
        ])
        .areas(area);
        frame.render_widget(Paragraph::new(Line::from(spans)), left);
        frame.render_widget(Paragraph::new(right_line).right_aligned(), right);
    }

    fn draw_table(&mut self, frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
        self.table_area = area;
        if !self.loaded {
            frame.render_widget(
                Paragraph::new(Span::styled(" loading tasks…", theme.muted())),
                area,
            );
            return;
        }
        if self.visible.is_empty() {
            frame.render_widget(
                Paragraph::new(vec![
                    Line::from(Span::styled(" No tasks match the filter.", theme.warning())),
                    Line::from(Span::styled(
                        " Clear the filters (x) or the search (esc).",
                        theme.muted(),
                    )),
                ]),
                area,
            );
            return;
        }
        let height = area.height.saturating_sub(1) as usize;
        // Only the visible window becomes widgets: 10,000 rows stay cheap.
        if self.selected < self.offset {
            self.offset = self.selected;
        } else if height > 0 && self.selected >= self.offset + height {
            self.offset = self.selected + 1 - height;
        }
        self.offset = self
            .offset
            .min(self.visible.len().saturating_sub(height.max(1)));
        // Columns give way by priority: the id last, the name first.
        let ids = || self.visible.iter().map(|&i| self.rows[i].id.as_str());
        let names = || self.visible.iter().map(|&i| self.rows[i].name.as_str());
        let cats = || self.visible.iter().map(|&i| self.rows[i].category.as_str());
        let audit_cells: Vec<String> = self
            .visible
            .iter()
            .map(|&i| audit_cell(self.audits.get(&self.rows[i].id), u16::MAX))
            .collect();
        let cols = [
            Column::new(widest("ID↑", ids()), 12, 9),
            Column::new(widest("Name", names()), 10, 1)
                .optional()
                .grow(),
            Column::new(widest("Category↑", cats()), 8, 4).optional(),
            Column::fixed(3, 3).optional(),
            Column::fixed(9, 8),
            Column::fixed(7, 2).optional(),
            Column::fixed(7, 5).optional(),
            // Audit findings shrink to "N flags" before the name gives way,
            // and stay.
            Column::new(
                widest("Audit", audit_cells.iter().map(String::as_str)),
                7,
                0,
            ),
        ];
        // The highlight symbol takes two cells.
        let widths = fit(&cols, area.width.saturating_sub(2), 1);
        let w = |k: usize| widths[k].unwrap_or(0);
        let window = &self.visible[self.offset..(self.offset + height).min(self.visible.len())];
        let rows: Vec<Row<'_>> = window
            .iter()
            .map(|&i| {
                let r = &self.rows[i];
                let cells = [
                    Cell::from(cut_middle(&r.id, w(0))),
                    Cell::from(cut_end(&r.name, w(1))),
                    Cell::from(cut_end(&r.category, w(2))),
                    Cell::from(r.complexity.map(|c| c.to_string()).unwrap_or_default()),
                    Cell::from(Span::styled(
                        r.status.as_str(),
                        status_style(r.status, theme),
                    )),
                    Cell::from(
                        r.pass_at_k
                            .get("1")
                            .map(|p| format!("{p:.2}"))
                            .unwrap_or_else(|| "-".into()),
                    ),
                    Cell::from(stars(r.rating)),
                    audit_span(self.audits.get(&r.id), w(7), theme),
                ];
                Row::new(shown(cells, &widths))
            })
            .collect();
        let sort_mark = |k: SortKey, label: &'static str| -> Cell<'static> {
            if self.sort == k {
                Cell::from(Span::styled(
                    format!("{label}{}", if self.reverse { "↓" } else { "↑" }),
                    theme.accent(),
                ))
            } else {
                Cell::from(label)
            }
        };
        let header = [
            sort_mark(SortKey::Id, "ID"),
            sort_mark(SortKey::Name, "Name"),
            sort_mark(SortKey::Category, "Category"),
            sort_mark(SortKey::Complexity, "Cx"),
            sort_mark(SortKey::Status, "Status"),
            sort_mark(SortKey::PassAt1, "pass@1"),
            sort_mark(SortKey::Rating, "Rating"),
            sort_mark(SortKey::Audit, "Audit"),
        ];
        let header = shown(header, &widths);
        let widths = constraints(&widths);
        let table = Table::new(rows, widths)
            .header(Row::new(header).style(theme.muted()))
            .row_highlight_style(if self.focus == Focus::Table {
                theme.selected()
            } else {
                Style::new().bg(theme.selection)
            })
            .highlight_symbol("▶ ")
            .highlight_spacing(HighlightSpacing::Always)
            .style(Style::new().fg(theme.foreground));
        let mut state = TableState::default().with_selected(Some(self.selected - self.offset));
        frame.render_stateful_widget(table, area, &mut state);
    }
}

/// The Audit cell, coloured: findings as warnings, clean as success.
fn audit_span(row: Option<&AuditRow>, width: u16, theme: &Theme) -> Cell<'static> {
    let text = audit_cell(row, width);
    let style = match row {
        None => theme.muted(),
        Some(r) if r.findings > 0 => theme.warning(),
        Some(r) if !r.complete => theme.muted(),
        Some(_) => theme.success(),
    };
    Cell::from(Span::styled(text, style))
}

impl Component for TasksView {
    fn handle_command(&mut self, cmd: Command) -> Option<Action> {
        self.command(cmd).map(Action::TaskSelected)
    }

    fn handle_mouse(&mut self, event: MouseEvent) -> Option<Action> {
        self.mouse(event).map(Action::TaskSelected)
    }

    fn update(&mut self, action: Action) -> Option<Action> {
        match action {
            Action::TasksLoaded(rows) => self.set_rows(rows).map(Action::TaskSelected),
            Action::TaskLoaded(task, episodes) => {
                self.detail.set_task(*task, episodes);
                None
            }
            Action::TaskRowUpdated(row) => {
                self.update_row(*row);
                None
            }
            Action::AuditsLoaded(rows) => self.set_audits(rows).map(Action::TaskSelected),
            Action::AuditLoaded(id, report) => {
                self.detail.set_audit(&id, report.map(|r| *r));
                None
            }
            _ => None,
        }
    }

    fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, ctx: &DrawContext<'_>) {
        TasksView::draw(self, frame, area, ctx.theme);
    }
}
