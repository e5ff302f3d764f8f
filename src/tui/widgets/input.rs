//! A one-line text input (search, tags, notes).

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// What a key did to the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputOutcome {
    /// Still editing (the value may have changed).
    Editing,
    /// Enter: use the value.
    Submit,
    /// Esc: drop it.
    Cancel,
}

/// Text plus a cursor (in characters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextInput {
    /// The text.
    pub value: String,
    cursor: usize,
}

impl TextInput {
    /// An input holding `value`, cursor at the end.
    pub fn new(value: impl Into<String>) -> Self {
        let value = value.into();
        let cursor = value.chars().count();
        TextInput { value, cursor }
    }

    /// Cursor position in characters.
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    fn byte_at(&self, chars: usize) -> usize {
        self.value
            .char_indices()
            .nth(chars)
            .map(|(i, _)| i)
            .unwrap_or(self.value.len())
    }

    /// Apply one key.
    pub fn handle_key(&mut self, key: &KeyEvent) -> InputOutcome {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Enter => return InputOutcome::Submit,
            KeyCode::Esc => return InputOutcome::Cancel,
            KeyCode::Char('c') if ctrl => return InputOutcome::Cancel,
            KeyCode::Char('u') if ctrl => {
                self.value.clear();
                self.cursor = 0;
            }
            KeyCode::Char('a') if ctrl => self.cursor = 0,
            KeyCode::Char('e') if ctrl => self.cursor = self.value.chars().count(),
            KeyCode::Char(c) if !ctrl => {
                let at = self.byte_at(self.cursor);
                self.value.insert(at, c);
                self.cursor += 1;
            }
            KeyCode::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                let at = self.byte_at(self.cursor);
                self.value.remove(at);
            }
            KeyCode::Delete if self.cursor < self.value.chars().count() => {
                let at = self.byte_at(self.cursor);
                self.value.remove(at);
            }
            KeyCode::Left => self.cursor = self.cursor.saturating_sub(1),
            KeyCode::Right => self.cursor = (self.cursor + 1).min(self.value.chars().count()),
            KeyCode::Home => self.cursor = 0,
            KeyCode::End => self.cursor = self.value.chars().count(),
            _ => {}
        }
        InputOutcome::Editing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn edits_unicode_text() {
        let mut i = TextInput::new("hé");
        i.handle_key(&key(KeyCode::Left));
        i.handle_key(&key(KeyCode::Char('x')));
        assert_eq!(i.value, "hxé");
        i.handle_key(&key(KeyCode::Backspace));
        i.handle_key(&key(KeyCode::Delete));
        assert_eq!(i.value, "h");
        assert_eq!(i.handle_key(&key(KeyCode::Enter)), InputOutcome::Submit);
    }
}
