//! Keys while a prompt is open, and the mouse: hit-testing the tab bar,
//! then the focused component (the help overlay first, when open).

use crossterm::event::{KeyEvent, MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::Position;

use super::{App, PromptKind};
use crate::tui::action::Request;
use crate::tui::component::Component;
use crate::tui::widgets::input::InputOutcome;

impl App {
    /// A key while a prompt is open.
    pub(super) fn prompt_key(&mut self, key: KeyEvent) {
        let Some(prompt) = self.prompt.as_mut() else {
            return;
        };
        let outcome = prompt.input.handle_key(&key);
        let kind = prompt.kind;
        let value = prompt.input.value.clone();
        let task = prompt.task.clone();
        match (outcome, kind) {
            (InputOutcome::Editing, PromptKind::Search) => {
                let sel = self.tasks.set_search(value);
                self.load_selected(sel);
            }
            (InputOutcome::Editing, PromptKind::EpisodeSearch) => self.episodes.set_search(value),
            (InputOutcome::Editing, PromptKind::HelpSearch) => {
                self.help.filter = value;
                self.help.scroll = 0;
            }
            (InputOutcome::Cancel, PromptKind::HelpSearch) => {
                self.prompt = None;
                self.help.filter.clear();
            }
            (InputOutcome::Submit, PromptKind::HelpSearch) => self.prompt = None,
            (InputOutcome::Editing, _) => {}
            (InputOutcome::Cancel, PromptKind::EpisodeSearch) => {
                self.prompt = None;
                self.episodes.set_search(String::new());
            }
            (InputOutcome::Submit, PromptKind::EpisodeSearch) => self.prompt = None,
            (InputOutcome::Cancel, PromptKind::Search) => {
                self.prompt = None;
                let sel = self.tasks.set_search(String::new());
                self.load_selected(sel);
            }
            (InputOutcome::Cancel, _) => self.prompt = None,
            (InputOutcome::Submit, PromptKind::Search) => self.prompt = None,
            (InputOutcome::Submit, PromptKind::Tags) => {
                self.prompt = None;
                let tags: Vec<String> = value
                    .split(',')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect();
                if let Some(id) = task {
                    self.curate_task(Request::SetTags(id, tags));
                }
            }
            (InputOutcome::Submit, PromptKind::Note) => {
                self.prompt = None;
                if let Some(id) = task {
                    self.curate_task(Request::SetNotes(id, value));
                }
            }
            (InputOutcome::Submit, PromptKind::EpisodeNote) => {
                self.prompt = None;
                if let Some(insp) = self.inspector.as_mut() {
                    let before = insp.episode.row.clone();
                    insp.episode.row.notes = value;
                    let after = insp.episode.row.clone();
                    self.curate_episode(&before, &after);
                }
            }
        }
    }

    /// A mouse event: the help overlay takes it when open; a click on a tab
    /// switches to it; otherwise the focused component gets it.
    pub(super) fn mouse(&mut self, m: MouseEvent) {
        let pos = Position::new(m.column, m.row);
        if self.help.visible {
            let next = self.help.handle_mouse(m);
            self.follow(next);
            return;
        }
        if let MouseEventKind::Down(MouseButton::Left) = m.kind {
            if let Some((_, v)) = self.tab_areas.iter().find(|(r, _)| r.contains(pos)) {
                self.view = *v;
                return;
            }
        }
        let view = self.view;
        let next = self.component(view).handle_mouse(m);
        self.follow(next);
    }
}
