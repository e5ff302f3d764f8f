//! A small modal form: a title, a few labelled one-line fields, an
//! explanatory note. Tab / up / down move between fields, Enter submits,
//! Esc cancels.

use crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::{Position, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

use super::input::{InputOutcome, TextInput};
use crate::tui::theme::Theme;

/// One labelled field.
#[derive(Debug, Clone)]
pub struct Field {
    /// Shown before the input (and how the form's reader finds it).
    pub label: &'static str,
    /// The value being typed.
    pub input: TextInput,
}

/// A modal form.
#[derive(Debug, Clone)]
pub struct Form {
    /// The title on the border.
    pub title: String,
    /// The fields, top to bottom.
    pub fields: Vec<Field>,
    /// The field being edited.
    pub focus: usize,
    /// Shown under the fields (what the job does, or why it cannot run).
    pub note: String,
    /// Why the values cannot start the job: the field and the reason, shown
    /// under the fields until the next edit.
    pub error: Option<(&'static str, String)>,
}

/// What a key did to the form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormOutcome {
    /// Still being filled in.
    Editing,
    /// Enter: the values are to be used.
    Submit,
    /// Esc: the form is to be closed.
    Cancel,
}

impl Form {
    /// A form with `(label, default)` fields.
    pub fn new(title: impl Into<String>, fields: &[(&'static str, String)]) -> Form {
        Form {
            title: title.into(),
            fields: fields
                .iter()
                .map(|(label, v)| Field {
                    label,
                    input: TextInput::new(v.clone()),
                })
                .collect(),
            focus: 0,
            note: String::new(),
            error: None,
        }
    }

    /// Show why the values cannot be used, on field `label` (which takes
    /// the focus).
    pub fn set_error(&mut self, label: &'static str, message: impl Into<String>) {
        if let Some(i) = self.fields.iter().position(|f| f.label == label) {
            self.focus = i;
        }
        self.error = Some((label, message.into()));
    }

    /// With an explanatory note.
    pub fn with_note(mut self, note: impl Into<String>) -> Form {
        self.note = note.into();
        self
    }

    /// The value of the field labelled `label` (trimmed), or "".
    pub fn value(&self, label: &str) -> &str {
        self.fields
            .iter()
            .find(|f| f.label == label)
            .map(|f| f.input.value.trim())
            .unwrap_or("")
    }

    /// Put `value` in the field labelled `label` (if there is one).
    pub fn set_value(&mut self, label: &str, value: &str) {
        if let Some(f) = self.fields.iter_mut().find(|f| f.label == label) {
            f.input = TextInput::new(value.to_string());
        }
    }

    /// Apply a key.
    pub fn handle_key(&mut self, key: &KeyEvent) -> FormOutcome {
        let n = self.fields.len();
        if !matches!(key.code, KeyCode::Enter) {
            self.error = None;
        }
        match key.code {
            KeyCode::Tab | KeyCode::Down if n > 0 => {
                self.focus = (self.focus + 1) % n;
                FormOutcome::Editing
            }
            KeyCode::BackTab | KeyCode::Up if n > 0 => {
                self.focus = (self.focus + n - 1) % n;
                FormOutcome::Editing
            }
            KeyCode::Enter => FormOutcome::Submit,
            KeyCode::Esc => FormOutcome::Cancel,
            _ => match self.fields.get_mut(self.focus) {
                Some(f) => match f.input.handle_key(key) {
                    InputOutcome::Cancel => FormOutcome::Cancel,
                    InputOutcome::Submit => FormOutcome::Submit,
                    InputOutcome::Editing => FormOutcome::Editing,
                },
                None => FormOutcome::Editing,
            },
        }
    }

    /// Draw centred over `area`.
    pub fn draw(&self, frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
        // The label column holds the focus mark, the label and ": ".
        let label_w = self.fields.iter().map(|f| f.label.len()).max().unwrap_or(0) as u16 + 3;
        let w = area.width.min(72);
        let note_lines = if self.note.is_empty() {
            0
        } else {
            (self.note.len() as u16 / w.saturating_sub(4).max(1)) + 2
        };
        let h = (self.fields.len() as u16 + note_lines + 4).min(area.height);
        let r = Rect::new(
            area.x + area.width.saturating_sub(w) / 2,
            area.y + area.height.saturating_sub(h) / 2,
            w,
            h,
        );
        let mut lines = Vec::new();
        for (i, f) in self.fields.iter().enumerate() {
            let style = if i == self.focus {
                theme.selected()
            } else {
                theme.base()
            };
            // The field being edited is marked ▶, not only coloured.
            let mark = if i == self.focus { "▶" } else { " " };
            lines.push(Line::from(vec![
                Span::styled(
                    format!("{mark}{:>width$}: ", f.label, width = label_w as usize - 3),
                    theme.accent(),
                ),
                Span::styled(f.input.value.clone(), style),
            ]));
        }
        match &self.error {
            Some((label, message)) => lines.push(Line::from(Span::styled(
                format!("✗ {label}: {message}"),
                theme.failure(),
            ))),
            None => lines.push(Line::from("")),
        }
        if !self.note.is_empty() {
            lines.push(Line::from(Span::styled(self.note.clone(), theme.warning())));
        }
        lines.push(Line::from(Span::styled(
            "tab next field · enter start · esc cancel",
            theme.muted(),
        )));
        frame.render_widget(Clear, r);
        let p = Paragraph::new(lines)
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .border_style(theme.accent())
                    .title(Span::styled(format!(" {} ", self.title), theme.accent())),
            )
            .style(theme.base())
            .wrap(Wrap { trim: false });
        frame.render_widget(p, r);
        if let Some(f) = self.fields.get(self.focus) {
            let x = r.x + 1 + label_w + f.input.cursor() as u16;
            let y = r.y + 1 + self.focus as u16;
            if x < r.right().saturating_sub(1) && y < r.bottom().saturating_sub(1) {
                frame.set_cursor_position(Position::new(x, y));
            }
        }
    }
}
