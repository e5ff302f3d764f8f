//! The episode inspector (Enter on an episode): the step-by-step trajectory
//! with the loop and the earliest failing step marked, the final tests with
//! their failure messages, a replay of the `.cast` recording, the rating,
//! label and notes; and two episodes of one task side by side.

use crate::tui::action::Action;
use crate::tui::component::{Component, DrawContext};
use crossterm::event::{MouseEvent, MouseEventKind};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Tabs, Wrap};
use ratatui::Frame;
use tui_term::widget::PseudoTerminal;

use crate::agent::{StepKind, Takeover};
use crate::tui::keymap::Command;
use crate::tui::replay::Replay;
pub use crate::tui::runtime::episode_io::LoadedEpisode;
use crate::tui::theme::Theme;
use crate::tui::widgets::terminal::{paint_defaults, Following};

/// Failure labels a rater can give, as stored (`label`) and shown.
pub const LABELS: [(&str, &str); 4] = [
    ("task_ambiguous", "task ambiguous"),
    ("test_wrong", "test wrong"),
    ("environment_broken", "environment broken"),
    ("agent_error", "agent error"),
];

/// Output lines shown per step before eliding.
const OUTPUT_LINES: usize = 12;

/// The inspector's tabs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InspectorTab {
    /// Each turn's command and output.
    Trajectory,
    /// The final tests' results.
    Tests,
    /// The `.cast` recording, played back.
    Replay,
}

impl InspectorTab {
    const ALL: [InspectorTab; 3] = [
        InspectorTab::Trajectory,
        InspectorTab::Tests,
        InspectorTab::Replay,
    ];

    fn title(self) -> &'static str {
        match self {
            InspectorTab::Trajectory => "Trajectory",
            InspectorTab::Tests => "Final tests",
            InspectorTab::Replay => "Replay",
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|t| *t == self).unwrap_or(0)
    }
}

/// State of the open inspector.
#[derive(Debug)]
pub struct Inspector {
    /// The inspected episode (its row takes the ratings, labels, notes).
    pub episode: LoadedEpisode,
    /// The other episode shown side by side.
    pub other: Option<LoadedEpisode>,
    /// The tab shown.
    pub tab: InspectorTab,
    /// Lines scrolled past.
    pub scroll: u16,
    /// Playback of the recording, when there is one.
    pub replay: Option<Replay>,
    /// Every step's whole output is shown (enter toggles), not its first
    /// lines.
    pub expanded: bool,
    /// The body fills the view, without the header and tabs (`z`).
    pub maximised: bool,
    /// Rows of text the body showed when last drawn (a page).
    page: u16,
    /// The scroll that shows the body's last page, as last drawn.
    last_page: u16,
}

/// The page moved before the body was ever drawn.
const DEFAULT_PAGE: u16 = 10;

/// Rows `lines` take wrapped at `width` columns (at least one each).
fn wrapped_rows(lines: &[Line<'_>], width: u16) -> usize {
    let w = width.max(1) as usize;
    lines.iter().map(|l| l.width().div_ceil(w).max(1)).sum()
}

impl Inspector {
    /// Open on a loaded episode.
    pub fn new(episode: LoadedEpisode) -> Inspector {
        let replay = episode.cast.as_ref().ok().cloned().map(Replay::new);
        Inspector {
            episode,
            other: None,
            tab: InspectorTab::Trajectory,
            scroll: 0,
            replay,
            expanded: false,
            maximised: false,
            page: 0,
            last_page: 0,
        }
    }

    /// Apply a navigation / replay command; returns false if not handled.
    pub fn command(&mut self, cmd: Command) -> bool {
        let n = InspectorTab::ALL.len();
        match cmd {
            Command::NextTab => self.tab = InspectorTab::ALL[(self.tab.index() + 1) % n],
            Command::PrevTab => self.tab = InspectorTab::ALL[(self.tab.index() + n - 1) % n],
            Command::Up => self.scroll = self.scroll.saturating_sub(1),
            Command::Down => self.scroll = self.scroll.saturating_add(1),
            // A page is the body's height, as drawn.
            Command::PageUp => self.scroll = self.scroll.saturating_sub(self.page()),
            // Paging stops at the last page (line by line goes further).
            Command::PageDown => {
                let to = self.scroll.saturating_add(self.page());
                self.scroll = to.min(self.last_page.max(self.scroll));
            }
            Command::Top => self.scroll = 0,
            Command::Bottom => self.scroll = self.last_page,
            Command::Select if self.tab != InspectorTab::Replay => {
                self.expanded = !self.expanded;
            }
            Command::Maximise => self.maximised = !self.maximised,
            Command::PlayPause
            | Command::Left
            | Command::Right
            | Command::Faster
            | Command::Slower
                if self.tab == InspectorTab::Replay =>
            {
                if let Some(r) = self.replay.as_mut() {
                    match cmd {
                        Command::PlayPause => r.toggle(),
                        Command::Left => r.step(-1),
                        Command::Right => r.step(1),
                        Command::Faster => r.faster(true),
                        _ => r.faster(false),
                    }
                }
            }
            _ => return false,
        }
        true
    }

    /// Rows a page moves: the body's height inside its borders, as last
    /// drawn.
    pub fn page(&self) -> u16 {
        if self.page == 0 {
            DEFAULT_PAGE
        } else {
            self.page
        }
    }

    /// Draw into `area`.
    pub fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
        let (head_h, tabs_h) = if self.maximised {
            (0, 0)
        } else {
            (3 + note_rows(&self.episode.row.notes, area.width), 1)
        };
        let [head, tabs, body] = Layout::vertical([
            Constraint::Length(head_h),
            Constraint::Length(tabs_h),
            Constraint::Fill(1),
        ])
        .areas(area);
        if self.maximised {
            self.draw_body(frame, body, theme);
            return;
        }
        let [head, notes] =
            Layout::vertical([Constraint::Length(3), Constraint::Fill(1)]).areas(head);
        frame.render_widget(Paragraph::new(header(&self.episode, theme)), head);
        if notes.height > 0 {
            frame.render_widget(
                Paragraph::new(note_lines(&self.episode.row.notes, theme))
                    .wrap(Wrap { trim: false }),
                notes,
            );
        }
        let titles: Vec<Line<'_>> = InspectorTab::ALL
            .iter()
            .map(|t| {
                // The active tab is bracketed, not only coloured.
                Line::from(if *t == self.tab {
                    format!("[{}]", t.title())
                } else {
                    format!(" {} ", t.title())
                })
            })
            .collect();
        frame.render_widget(
            Tabs::new(titles)
                .select(self.tab.index())
                .style(theme.muted())
                .highlight_style(theme.accent().bg(theme.selection))
                .divider("|")
                .padding("", ""),
            tabs,
        );
        self.draw_body(frame, body, theme);
    }

    /// The tab's body: the trajectory or tests (side by side when
    /// comparing), or the replay.
    fn draw_body(&mut self, frame: &mut Frame<'_>, body: Rect, theme: &Theme) {
        match self.tab {
            InspectorTab::Replay => self.draw_replay(frame, body, theme),
            tab => {
                let panes: Vec<&LoadedEpisode> = std::iter::once(&self.episode)
                    .chain(self.other.as_ref())
                    .collect();
                let areas = Layout::horizontal(vec![Constraint::Fill(1); panes.len()]).split(body);
                // Inside the borders.
                self.page = body.height.saturating_sub(2).max(1);
                let page = self.page as usize;
                let panes: Vec<(&LoadedEpisode, Vec<Line<'static>>, Rect)> = panes
                    .into_iter()
                    .zip(areas.iter())
                    .map(|(ep, a)| {
                        let lines = match tab {
                            InspectorTab::Tests => test_lines(ep, theme),
                            _ => trajectory_lines(ep, theme, self.expanded),
                        };
                        (ep, lines, *a)
                    })
                    .collect();
                // The scroll goes as far as the longest pane's last line,
                // or its last page where lines wrap.
                let longest = panes.iter().map(|p| p.1.len()).max().unwrap_or(0);
                let last_page = panes
                    .iter()
                    .map(|(_, lines, a)| {
                        wrapped_rows(lines, a.width.saturating_sub(2)).saturating_sub(page)
                    })
                    .max()
                    .unwrap_or(0);
                let limit = longest
                    .saturating_sub(1)
                    .max(last_page)
                    .min(u16::MAX as usize) as u16;
                self.last_page = last_page.min(u16::MAX as usize) as u16;
                self.scroll = self.scroll.min(limit);
                let scroll = self.scroll;
                for (ep, lines, a) in panes {
                    let pos = format!(
                        " line {}/{}{} ",
                        (scroll as usize + 1).min(lines.len().max(1)),
                        lines.len(),
                        if tab == InspectorTab::Trajectory && self.expanded {
                            " · expanded"
                        } else {
                            ""
                        }
                    );
                    let title = format!(
                        " {}#{} {} ",
                        ep.row.task_id,
                        ep.row.sample,
                        if ep.row.passed { "PASS" } else { "FAIL" }
                    );
                    let p = Paragraph::new(lines)
                        .block(
                            Block::default()
                                .borders(Borders::ALL)
                                .border_style(theme.muted())
                                .title(Span::styled(title, theme.accent()))
                                .title_bottom(
                                    Line::from(Span::styled(pos, theme.muted())).right_aligned(),
                                ),
                        )
                        .style(theme.base())
                        .wrap(Wrap { trim: false })
                        .scroll((scroll, 0));
                    frame.render_widget(p, a);
                }
            }
        }
    }

    fn draw_replay(&self, frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
        let [screen_area, scrub] =
            Layout::vertical([Constraint::Fill(1), Constraint::Length(1)]).areas(area);
        let Some(r) = &self.replay else {
            let why = match &self.episode.cast {
                Err(e) => e.clone(),
                Ok(_) => "no recording".into(),
            };
            frame.render_widget(
                Paragraph::new(format!("No replay: {why}")).style(theme.muted()),
                screen_area,
            );
            return;
        };
        let parser = r.screen();
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(theme.muted())
            .title(Span::styled(
                if r.cast.transcript {
                    " transcript (no terminal recording) "
                } else {
                    " recording "
                },
                theme.accent(),
            ));
        // The recorded terminal is usually taller than the area: show the
        // rows that end at the newest output, as a live pane does.
        let screen = Following::new(parser.screen(), block.inner(screen_area).height);
        let term = PseudoTerminal::new(&screen)
            .block(block)
            .style(Style::new().fg(theme.foreground).bg(theme.background));
        frame.render_widget(term, screen_area);
        paint_defaults(
            frame.buffer_mut(),
            screen_area,
            theme.foreground,
            theme.background,
        );
        let n = r.cast.events.len();
        let frac = if n == 0 {
            1.0
        } else {
            r.position as f64 / n as f64
        };
        let w = (scrub.width as usize).saturating_sub(48).clamp(4, 60);
        let line = Line::from(vec![
            Span::styled(
                if r.playing { " ▶ " } else { " ⏸ " }.to_string(),
                theme.accent(),
            ),
            Span::raw(format!("{:>6.1}s / {:.1}s ", r.time(), r.cast.duration())),
            Span::styled(crate::tui::widgets::text::bar(frac, w), theme.accent()),
            Span::raw(format!(" event {}/{n}  speed {}x", r.position, r.speed)),
        ]);
        frame.render_widget(Paragraph::new(line), scrub);
    }
}

fn header(ep: &LoadedEpisode, theme: &Theme) -> Vec<Line<'static>> {
    let row = &ep.row;
    // The verdict and every failure label come first, so that a narrow
    // terminal cuts the run's details, never what went wrong.
    let mut first = vec![if row.passed {
        Span::styled("PASS", theme.success().add_modifier(Modifier::BOLD))
    } else {
        Span::styled("FAIL", theme.failure().add_modifier(Modifier::BOLD))
    }];
    for label in crate::tui::views::episodes_order::labels(row) {
        first.push(Span::styled(format!(" · {label}"), theme.failure()));
    }
    if ep.result.as_ref().is_ok_and(|r| r.taken_over.is_some()) {
        first.push(Span::styled(
            " · ✋ TAKEN OVER",
            theme.warning().add_modifier(Modifier::BOLD),
        ));
    }
    if let Some(f) = ep.result.as_ref().ok().and_then(|r| r.forked_from.as_ref()) {
        first.push(Span::styled(
            format!(
                " · fork of {}/{}/{} at step {}",
                f.run, f.task, f.sample, f.at_step
            ),
            theme.accent(),
        ));
    }
    let mut details = vec![
        Span::styled(format!("{}#{} ", row.task_id, row.sample), theme.accent()),
        Span::raw(format!(
            "run {} · {} turns · end {}",
            row.run_id, row.turns, row.end_reason
        )),
    ];
    if let Ok(r) = &ep.result {
        details.push(Span::raw(format!(" · policy {}", r.policy)));
    }
    let label = row
        .label
        .as_deref()
        .map(|l| {
            LABELS
                .iter()
                .find(|(k, _)| *k == l)
                .map_or(l.to_string(), |(_, h)| h.to_string())
        })
        .unwrap_or_else(|| "-".into());
    // The same stars as every table (`★★★··`).
    let rating = match row.rating {
        Some(r) => crate::tui::widgets::task_marks::stars(Some(r)),
        None => "unrated".into(),
    };
    let second = vec![
        Span::styled("rating ", theme.muted()),
        Span::styled(rating, theme.warning()),
        Span::styled("  label ", theme.muted()),
        Span::raw(label),
        Span::styled("  notes ", theme.muted()),
        Span::raw(if row.notes.is_empty() { "-" } else { "below" }),
    ];
    vec![Line::from(first), Line::from(details), Line::from(second)]
}

/// The notes in full, indented, to wrap under the header.
fn note_lines(notes: &str, theme: &Theme) -> Vec<Line<'static>> {
    let style = Style::new().fg(theme.foreground);
    notes
        .lines()
        .map(|l| Line::from(Span::styled(format!("  {l}"), style)))
        .collect()
}

/// Rows the wrapped notes take at `width` columns, at most six.
pub fn note_rows(notes: &str, width: u16) -> u16 {
    let w = width.max(1) as usize;
    let rows: usize = notes
        .lines()
        .map(|l| (l.chars().count() + 2).div_ceil(w).max(1))
        .sum();
    rows.min(6) as u16
}

/// The trajectory, step by step; `expanded` shows every output line
/// instead of each step's first [`OUTPUT_LINES`].
pub fn trajectory_lines(ep: &LoadedEpisode, theme: &Theme, expanded: bool) -> Vec<Line<'static>> {
    let r = match &ep.result {
        Ok(r) => r,
        Err(e) => return vec![Line::from(Span::styled(e.clone(), theme.failure()))],
    };
    let loop_start = crate::agent::find_loop(&r.steps);
    let earliest = r.earliest_failing_step.map(|s| s as usize);
    let mut out = Vec::new();
    if let Some(s) = loop_start {
        out.push(Line::from(Span::styled(
            format!("↻ the agent loops from step {s}: repeated commands highlighted"),
            theme.warning(),
        )));
    }
    if r.labels()
        .contains(&crate::agent::FailureMode::PrematureDone)
    {
        let failing = r.tests.iter().filter(|t| !t.passed).count();
        out.push(Line::from(Span::styled(
            format!(
                "⚑ the agent said done too early: {failing} of {} final tests fail",
                r.tests.len()
            ),
            theme.warning(),
        )));
    }
    if let Some(t) = &r.taken_over {
        out.push(Line::from(Span::styled(
            takeover_summary(t),
            theme.warning().add_modifier(Modifier::BOLD),
        )));
    }
    for (i, s) in r.steps.iter().enumerate() {
        let human = s.kind == StepKind::Human;
        let in_loop = loop_start.is_some_and(|l| i >= l) && s.command.is_some() && !human;
        let mut head = vec![if human {
            Span::styled(
                format!(
                    "── step {i} · turn {} · ✋ HUMAN (typed in a take-over)",
                    s.turn
                ),
                theme.warning().add_modifier(Modifier::BOLD),
            )
        } else {
            Span::styled(
                format!("── step {i} · turn {} · {:?}", s.turn, s.kind),
                theme.muted(),
            )
        }];
        if let Some(c) = s.exit_code {
            let st = if c == 0 {
                theme.success()
            } else {
                theme.failure()
            };
            head.push(Span::styled(format!(" · exit {c}"), st));
        }
        if s.timed_out {
            head.push(Span::styled(" · timed out", theme.failure()));
        }
        if earliest == Some(i) {
            head.push(Span::styled(
                " ◀ earliest failing step",
                theme
                    .failure()
                    .add_modifier(Modifier::BOLD | Modifier::REVERSED),
            ));
        }
        if in_loop {
            head.push(Span::styled(" ↻ loop", theme.warning()));
        }
        out.push(Line::from(head));
        if let Some(t) = s.think.as_deref().filter(|t| !t.trim().is_empty()) {
            for l in t.trim().lines() {
                out.push(Line::from(Span::styled(
                    format!("  think: {l}"),
                    theme.muted(),
                )));
            }
        }
        if let Some(cmd) = &s.command {
            let style = if in_loop {
                theme.warning().add_modifier(Modifier::REVERSED)
            } else if human {
                theme.warning()
            } else {
                theme.accent()
            };
            for (n, l) in cmd.lines().enumerate() {
                let prompt = match (n, human) {
                    (0, true) => "you$",
                    (0, false) => "$",
                    _ => ">",
                };
                out.push(Line::from(Span::styled(format!("  {prompt} {l}"), style)));
            }
        }
        let lines: Vec<&str> = s.output.trim_end().lines().collect();
        let keep = if expanded { lines.len() } else { OUTPUT_LINES };
        for l in lines.iter().take(keep) {
            out.push(Line::from(format!("    {l}")));
        }
        if lines.len() > keep {
            out.push(Line::from(Span::styled(
                format!("    … {} more lines (enter shows all)", lines.len() - keep),
                theme.muted(),
            )));
        }
        if let Some(e) = &s.error {
            out.push(Line::from(Span::styled(
                format!("  error: {e}"),
                theme.failure(),
            )));
        }
    }
    if let Some(e) = &r.error {
        out.push(Line::from(Span::styled(
            format!("episode error: {e}"),
            theme.failure(),
        )));
    }
    out
}

/// One line on a take-over: when, how much the human did, and that
/// evaluations leave the episode out.
pub fn takeover_summary(t: &Takeover) -> String {
    let s = if t.human_steps == 1 { "" } else { "s" };
    format!(
        "✋ taken over by a human at turn {} ({:.0} s in, {}): {} human command{s}, held {:.0} s; evaluations leave this episode out",
        t.turn, t.after_secs, t.at, t.human_steps, t.held_secs
    )
}

/// The final tests with each failing assertion's message.
pub fn test_lines(ep: &LoadedEpisode, theme: &Theme) -> Vec<Line<'static>> {
    let r = match &ep.result {
        Ok(r) => r,
        Err(e) => return vec![Line::from(Span::styled(e.clone(), theme.failure()))],
    };
    if r.tests.is_empty() {
        return vec![Line::from(Span::styled(
            "The final tests did not run.",
            theme.muted(),
        ))];
    }
    let mut out = Vec::new();
    for t in &r.tests {
        out.push(Line::from(vec![
            if t.passed {
                Span::styled("PASS ", theme.success())
            } else {
                Span::styled("FAIL ", theme.failure())
            },
            Span::raw(t.name.clone()),
        ]));
        if let Some(m) = &t.message {
            for l in m.lines() {
                out.push(Line::from(Span::styled(
                    format!("     {l}"),
                    theme.failure(),
                )));
            }
        }
    }
    out
}

impl Component for Inspector {
    fn handle_command(&mut self, cmd: Command) -> Option<Action> {
        self.command(cmd);
        None
    }

    /// The wheel scrolls.
    fn handle_mouse(&mut self, event: MouseEvent) -> Option<Action> {
        match event.kind {
            MouseEventKind::ScrollDown => self.handle_command(Command::Down),
            MouseEventKind::ScrollUp => self.handle_command(Command::Up),
            _ => None,
        }
    }

    /// Time passing plays the replay.
    fn update(&mut self, action: Action) -> Option<Action> {
        if let (Action::Tick(dt), Some(replay)) = (action, self.replay.as_mut()) {
            replay.tick(dt);
        }
        None
    }

    fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, ctx: &DrawContext<'_>) {
        Inspector::draw(self, frame, area, ctx.theme);
    }
}
