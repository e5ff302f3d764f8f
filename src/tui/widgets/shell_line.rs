//! The command line of a taken-over session: what the user types is kept
//! and shown here (the session's terminal does not echo), Enter hands the
//! line over to run, and up / down walk back through the lines run before.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::input::TextInput;

/// Lines kept in the history.
const HISTORY: usize = 100;

/// A one-line command editor with a history.
#[derive(Debug, Clone, Default)]
pub struct ShellLine {
    /// The line being typed.
    pub input: TextInput,
    history: Vec<String>,
    /// Position while walking the history (`None`: a fresh line).
    back: Option<usize>,
}

impl ShellLine {
    /// Apply a key; returns the command to run when Enter ends a non-blank
    /// line. Esc and ctrl-c clear the line; up / down recall earlier lines.
    pub fn key(&mut self, key: &KeyEvent) -> Option<String> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Enter => {
                let line = std::mem::take(&mut self.input).value;
                self.back = None;
                if line.trim().is_empty() {
                    return None;
                }
                if self.history.last() != Some(&line) {
                    self.history.push(line.clone());
                    if self.history.len() > HISTORY {
                        self.history.remove(0);
                    }
                }
                return Some(line);
            }
            KeyCode::Esc => self.clear(),
            KeyCode::Char('c') if ctrl => self.clear(),
            KeyCode::Up if !self.history.is_empty() => {
                let i = self
                    .back
                    .map_or(self.history.len() - 1, |i| i.saturating_sub(1));
                self.recall(Some(i));
            }
            KeyCode::Down => match self.back {
                Some(i) if i + 1 < self.history.len() => self.recall(Some(i + 1)),
                Some(_) => self.recall(None),
                None => {}
            },
            _ => {
                self.input.handle_key(key);
            }
        }
        None
    }

    fn clear(&mut self) {
        self.input = TextInput::default();
        self.back = None;
    }

    fn recall(&mut self, at: Option<usize>) {
        self.back = at;
        let line = at
            .and_then(|i| self.history.get(i))
            .cloned()
            .unwrap_or_default();
        self.input = TextInput::new(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn press(line: &mut ShellLine, code: KeyCode) -> Option<String> {
        line.key(&KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn typed(line: &mut ShellLine, s: &str) {
        for c in s.chars() {
            press(line, KeyCode::Char(c));
        }
    }

    #[test]
    fn enter_runs_the_line_and_history_recalls_it() {
        let mut l = ShellLine::default();
        assert_eq!(
            press(&mut l, KeyCode::Enter),
            None,
            "a blank line runs nothing"
        );
        typed(&mut l, "ls -x");
        press(&mut l, KeyCode::Backspace);
        typed(&mut l, "l");
        assert_eq!(l.input.value, "ls -l");
        assert_eq!(press(&mut l, KeyCode::Enter).as_deref(), Some("ls -l"));
        assert!(l.input.value.is_empty());
        typed(&mut l, "pwd");
        press(&mut l, KeyCode::Enter);
        press(&mut l, KeyCode::Up);
        assert_eq!(l.input.value, "pwd");
        press(&mut l, KeyCode::Up);
        press(&mut l, KeyCode::Up);
        assert_eq!(l.input.value, "ls -l");
        press(&mut l, KeyCode::Down);
        assert_eq!(l.input.value, "pwd");
        press(&mut l, KeyCode::Down);
        assert_eq!(l.input.value, "");
        typed(&mut l, "half");
        l.key(&KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
        assert_eq!(l.input.value, "");
        typed(&mut l, "q");
        assert_eq!(l.input.value, "q", "q is just a letter here");
    }
}
