//! A fuzzy picker: a popup list that a typed query narrows (the letters in
//! order, not necessarily together, as in fzf), best match first; up/down
//! move, Enter picks, Esc cancels. The category, failure-mode and label
//! pickers are this.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::{Position, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use super::input::{InputOutcome, TextInput};
use crate::tui::theme::Theme;

/// One choice: what it sets (`None`: the filter or label is cleared) and
/// what the list shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The value picked.
    pub value: Option<String>,
    /// The text shown and matched.
    pub shown: String,
}

impl Choice {
    /// A choice that sets `value`, shown as `shown`.
    pub fn new(value: Option<&str>, shown: impl Into<String>) -> Choice {
        Choice {
            value: value.map(String::from),
            shown: shown.into(),
        }
    }
}

/// What a key did to the picker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PickOutcome {
    /// Still choosing.
    Choosing,
    /// Enter on a choice: its value.
    Picked(Option<String>),
    /// Esc (or Enter with nothing matching).
    Cancel,
}

/// An open picker.
#[derive(Debug, Clone)]
pub struct Picker {
    /// The title on the border.
    pub title: String,
    /// Every choice, in their own order.
    pub choices: Vec<Choice>,
    /// What is typed.
    pub query: TextInput,
    /// Indices into `choices` that match the query, best first, with the
    /// matched characters' positions.
    matches: Vec<(usize, Vec<usize>)>,
    /// Index into `matches`.
    selected: usize,
}

impl Picker {
    /// A picker over `choices`, the one whose value is `current` selected.
    pub fn new(title: impl Into<String>, choices: Vec<Choice>, current: Option<&str>) -> Picker {
        let mut p = Picker {
            title: title.into(),
            choices,
            query: TextInput::default(),
            matches: Vec::new(),
            selected: 0,
        };
        p.refilter();
        p.selected = p
            .matches
            .iter()
            .position(|(i, _)| p.choices[*i].value.as_deref() == current)
            .unwrap_or(0);
        p
    }

    /// The choices shown, best match first.
    pub fn shown(&self) -> Vec<&str> {
        self.matches
            .iter()
            .map(|(i, _)| self.choices[*i].shown.as_str())
            .collect()
    }

    fn refilter(&mut self) {
        let q = self.query.value.clone();
        let mut scored: Vec<(i64, usize, Vec<usize>)> = self
            .choices
            .iter()
            .enumerate()
            .filter_map(|(i, c)| fuzzy_match(&q, &c.shown).map(|(s, pos)| (s, i, pos)))
            .collect();
        // Best score first; ties keep the choices' own order.
        scored.sort_by_key(|(s, i, _)| (std::cmp::Reverse(*s), *i));
        self.matches = scored.into_iter().map(|(_, i, pos)| (i, pos)).collect();
        self.selected = 0;
    }

    /// Apply one key.
    pub fn handle_key(&mut self, key: &KeyEvent) -> PickOutcome {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Up => self.selected = self.selected.saturating_sub(1),
            KeyCode::Char('p') if ctrl => self.selected = self.selected.saturating_sub(1),
            KeyCode::Down | KeyCode::Tab => {
                self.selected = (self.selected + 1).min(self.matches.len().saturating_sub(1))
            }
            KeyCode::Char('n') if ctrl => {
                self.selected = (self.selected + 1).min(self.matches.len().saturating_sub(1))
            }
            _ => {
                let before = self.query.value.clone();
                match self.query.handle_key(key) {
                    InputOutcome::Submit => {
                        return match self.matches.get(self.selected) {
                            Some((i, _)) => PickOutcome::Picked(self.choices[*i].value.clone()),
                            None => PickOutcome::Cancel,
                        }
                    }
                    InputOutcome::Cancel => return PickOutcome::Cancel,
                    InputOutcome::Editing if self.query.value != before => self.refilter(),
                    InputOutcome::Editing => {}
                }
            }
        }
        PickOutcome::Choosing
    }

    /// Draw as a popup in the middle of `area`.
    pub fn draw(&self, frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
        let widest = self
            .choices
            .iter()
            .map(|c| c.shown.chars().count())
            .max()
            .unwrap_or(0)
            .max(self.title.chars().count() + 2) as u16;
        // Wide enough for the keys on the bottom border.
        let w = (widest + 6).clamp(44, 60).min(area.width);
        let h = (self.choices.len() as u16 + 4)
            .clamp(5, 16)
            .min(area.height);
        let r = Rect::new(
            area.x + area.width.saturating_sub(w) / 2,
            area.y + area.height.saturating_sub(h) / 2,
            w,
            h,
        );
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(Style::new().fg(theme.accent))
            .title(Span::styled(format!(" {} ", self.title), theme.accent()))
            .title_bottom(Span::styled(
                " type to narrow · ↑↓ · enter picks · esc ",
                theme.muted(),
            ));
        let inner = block.inner(r);
        frame.render_widget(Clear, r);
        frame.render_widget(block, r);
        if inner.height == 0 || inner.width == 0 {
            return;
        }
        let mut lines = vec![Line::from(vec![
            Span::styled("> ", theme.accent()),
            Span::styled(self.query.value.clone(), Style::new().fg(theme.foreground)),
            Span::styled(
                format!("  {}/{}", self.matches.len(), self.choices.len()),
                theme.muted(),
            ),
        ])];
        let rows = inner.height.saturating_sub(1) as usize;
        let top = self.selected.saturating_sub(rows.saturating_sub(1));
        if self.matches.is_empty() {
            lines.push(Line::from(Span::styled(
                "  nothing matches",
                theme.warning(),
            )));
        }
        for (k, (i, pos)) in self.matches.iter().enumerate().skip(top).take(rows) {
            let sel = k == self.selected;
            let base = if sel { theme.selected() } else { theme.base() };
            // The selected line is marked ▶, not only coloured; matched
            // letters are bold and underlined.
            let mut spans = vec![Span::styled(if sel { "▶ " } else { "  " }, theme.accent())];
            for (ci, ch) in self.choices[*i].shown.chars().enumerate() {
                let style = if pos.contains(&ci) {
                    base.add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
                } else {
                    base
                };
                spans.push(Span::styled(ch.to_string(), style));
            }
            lines.push(Line::from(spans));
        }
        frame.render_widget(Paragraph::new(lines).style(theme.base()), inner);
        let x = inner.x + 2 + self.query.cursor() as u16;
        if x < inner.right() {
            frame.set_cursor_position(Position::new(x, inner.y));
        }
    }
}

/// Score `text` against `query`: `None` unless the query's characters
/// appear in `text` in order (ignoring case). Higher is better: letters
/// that follow each other, start a word or the text, and a short text
/// score more. Also returns the matched characters' positions.
pub fn fuzzy_match(query: &str, text: &str) -> Option<(i64, Vec<usize>)> {
    // Spaces, `_` and `-` in the query separate words and match anything
    // between them: `agent_error` finds the choice shown `agent error`.
    let q: Vec<char> = query
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect();
    let t: Vec<char> = text.chars().collect();
    let lower: Vec<char> = t
        .iter()
        .map(|c| c.to_lowercase().next().unwrap_or(*c))
        .collect();
    if q.is_empty() {
        return Some((0, Vec::new()));
    }
    let (n, m) = (t.len(), q.len());
    if m > n {
        return None;
    }
    let word_start = |i: usize| i == 0 || !t[i - 1].is_alphanumeric();
    // best[k][i]: the best score of the first k+1 query characters with
    // the last one at i (a small dynamic programme: texts are short).
    const NONE: i64 = i64::MIN / 2;
    let mut best = vec![vec![NONE; n]; m];
    let mut back = vec![vec![0usize; n]; m];
    for k in 0..m {
        let (mut run_max, mut run_arg) = (NONE, 0);
        for i in 0..n {
            if k > 0 && i >= 2 && best[k - 1][i - 2] > run_max {
                run_max = best[k - 1][i - 2];
                run_arg = i - 2;
            }
            if lower[i] != q[k] {
                continue;
            }
            let base = 10 + if word_start(i) { 8 } else { 0 };
            if k == 0 {
                best[0][i] = base + if i == 0 { 4 } else { 0 };
                continue;
            }
            let (mut s, mut arg) = (run_max, run_arg);
            if i >= 1 && best[k - 1][i - 1] > NONE && best[k - 1][i - 1] + 6 > s {
                s = best[k - 1][i - 1] + 6;
                arg = i - 1;
            }
            if s > NONE {
                best[k][i] = s + base;
                back[k][i] = arg;
            }
        }
    }
    let (mut at, score) = best[m - 1]
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, s)| *s > NONE)
        .max_by_key(|&(i, s)| (s, std::cmp::Reverse(i)))?;
    let mut pos = vec![0; m];
    for k in (0..m).rev() {
        pos[k] = at;
        at = back[k][at];
    }
    Some((score - (n - m) as i64 / 4, pos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn a_query_matches_letters_in_order_best_first() {
        assert!(fuzzy_match("txp", "text-processing").is_some());
        assert!(fuzzy_match("pxt", "text-processing").is_none());
        let (_, pos) = fuzzy_match("tp", "text-processing").unwrap();
        assert_eq!(pos, [0, 5], "word starts are preferred: {pos:?}");
        let (a, _) = fuzzy_match("arc", "archives").unwrap();
        let (b, _) = fuzzy_match("arc", "permissions-archive").unwrap();
        assert!(a > b, "{a} > {b}");
        assert_eq!(
            fuzzy_match("ARC", "archives").map(|m| m.1),
            Some(vec![0, 1, 2])
        );
        // What the store spells and what the screen shows meet.
        assert!(fuzzy_match("agent_error", "agent error").is_some());
        assert!(fuzzy_match("turn exhaustion", "turn_exhaustion").is_some());
        assert!(fuzzy_match("text_processing", "text-processing").is_some());
    }

    #[test]
    fn typing_narrows_arrows_move_enter_picks_esc_cancels() {
        let choices = vec![
            Choice::new(None, "any"),
            Choice::new(Some("archives"), "archives"),
            Choice::new(Some("permissions"), "permissions"),
            Choice::new(Some("text-processing"), "text-processing"),
        ];
        let mut p = Picker::new("category", choices.clone(), Some("permissions"));
        assert_eq!(p.shown().len(), 4);
        assert_eq!(
            p.handle_key(&key(KeyCode::Enter)),
            PickOutcome::Picked(Some("permissions".into()))
        );
        for c in "pr".chars() {
            assert_eq!(p.handle_key(&key(KeyCode::Char(c))), PickOutcome::Choosing);
        }
        // "pr" starting a word beats "p…r" spread out.
        assert_eq!(p.shown(), ["text-processing", "permissions"]);
        p.handle_key(&key(KeyCode::Down));
        p.handle_key(&key(KeyCode::Down));
        assert_eq!(
            p.handle_key(&key(KeyCode::Enter)),
            PickOutcome::Picked(Some("permissions".into()))
        );
        p.handle_key(&key(KeyCode::Char('z')));
        assert!(p.shown().is_empty());
        assert_eq!(p.handle_key(&key(KeyCode::Enter)), PickOutcome::Cancel);
        let mut p = Picker::new("category", choices, None);
        p.handle_key(&key(KeyCode::Down));
        assert_eq!(p.handle_key(&key(KeyCode::Esc)), PickOutcome::Cancel);
    }
}
