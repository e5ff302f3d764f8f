//! Key bindings: the command table, key-string parsing and the `[tui.keys]`
//! overrides (`action name -> "key"` or `["key", ...]`).

use std::fmt;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

macro_rules! commands {
    ($( $variant:ident => $name:literal, [$($key:literal),*], $desc:literal; )*) => {
        /// A user command that a key can be bound to.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Command { $( #[doc = $desc] $variant ),* }

        impl Command {
            /// Every command, in help order.
            pub const ALL: &'static [Command] = &[$(Command::$variant),*];

            /// The name used in `[tui.keys]`.
            pub fn name(self) -> &'static str {
                match self { $(Command::$variant => $name),* }
            }

            /// One line for the help overlay.
            pub fn description(self) -> &'static str {
                match self { $(Command::$variant => $desc),* }
            }

            /// The keys bound when the configuration says nothing.
            pub fn default_keys(self) -> &'static [&'static str] {
                match self { $(Command::$variant => &[$($key),*]),* }
            }
        }
    };
}

commands! {
    Quit => "quit", ["q", "ctrl-c"], "Quit";
    Help => "help", ["?"], "Show or hide this help";
    NextView => "next_view", ["tab"], "Next view";
    PrevView => "prev_view", ["shift-tab"], "Previous view";
    ViewTasks => "view_tasks", ["f1"], "Tasks view";
    ViewLive => "view_live", ["f2"], "Live view";
    ViewEpisodes => "view_episodes", ["f3"], "Episodes view";
    ViewJobs => "view_jobs", ["f4"], "Jobs view";
    ViewTraining => "view_training", ["f5"], "Training view";
    Up => "up", ["up", "k"], "Move up / scroll up";
    Down => "down", ["down", "j"], "Move down / scroll down";
    Left => "left", ["left", "h"], "Move left (live grid)";
    Right => "right", ["right", "l"], "Move right (live grid)";
    PageUp => "page_up", ["pageup", "ctrl-u"], "Page up / scroll a live pane back";
    PageDown => "page_down", ["pagedown", "ctrl-d"], "Page down / scroll a live pane forward";
    Top => "top", ["home", "g"], "First row";
    Bottom => "bottom", ["end", "G"], "Last row";
    Select => "select", ["enter"], "Focus the detail pane / zoom a live pane / inspect an episode";
    Back => "back", ["esc"], "Back: unfocus, unzoom, close";
    NextTab => "next_tab", ["]"], "Next detail tab";
    PrevTab => "prev_tab", ["["], "Previous detail tab";
    Search => "search", ["/"], "Search id, name, instruction and tags";
    FilterStatus => "filter_status", ["s"], "Cycle the status filter";
    FilterCategory => "filter_category", ["c"], "Pick the category filter (a fuzzy list)";
    FilterTag => "filter_tag", ["#"], "Pick the tag filter (tasks; a fuzzy list)";
    FilterFailure => "filter_failure", ["f"], "Pick the failure-mode filter (episodes) or the audit filter (tasks; a fuzzy list)";
    ClearFilters => "clear_filters", ["x"], "Clear all filters";
    SortNext => "sort_next", ["o"], "Sort by the next column";
    SortReverse => "sort_reverse", ["O"], "Reverse the sort order";
    Accept => "accept", ["a"], "Accept the task";
    Reject => "reject", ["r"], "Reject the task";
    Archive => "archive", ["A"], "Archive the task";
    Rate1 => "rate_1", ["1"], "Rate 1";
    Rate2 => "rate_2", ["2"], "Rate 2";
    Rate3 => "rate_3", ["3"], "Rate 3";
    Rate4 => "rate_4", ["4"], "Rate 4";
    Rate5 => "rate_5", ["5"], "Rate 5";
    RateClear => "rate_clear", ["0"], "Clear the rating";
    Tag => "tag", ["t"], "Edit tags (comma-separated)";
    Note => "note", ["n"], "Edit the note";
    Edit => "edit", ["e"], "Open the bundle file in $EDITOR";
    Validate => "validate", ["v"], "Validate the task now";
    Reload => "reload", ["ctrl-r"], "Reload from the workspace";
    Undo => "undo", ["u"], "Undo the last curation change (status, rating, tags, note; episode rating, label, note)";
    JobEval => "job_eval", ["E"], "Jobs / Tasks: start an evaluation (form; from Tasks, of the selected task)";
    JobValidate => "job_validate", ["V"], "Jobs / Tasks: validate the selected task / all tasks (form)";
    JobAudit => "job_audit", ["U"], "Jobs / Tasks: audit the selected task / all tasks (form)";
    JobRepair => "job_repair", ["F"], "Jobs / Tasks: repair the selected task / any tasks through the generator (form)";
    RepairReview => "repair_review", ["D"], "Tasks: review the task's repair, a diff per file (a accepts, r discards)";
    JobGenerate => "job_generate", ["L"], "Jobs / Tasks: LLM task generation (form)";
    JobOffline => "job_offline", ["P"], "Jobs / Tasks: offline (procedural) task generation (form)";
    JobTrain => "job_train", ["M"], "Jobs / Tasks / Training: start a training run (form)";
    JobCancel => "job_cancel", ["C"], "Jobs: cancel the selected job";
    JobRetry => "job_retry", ["R"], "Jobs: run the selected job again (an interrupted or cancelled evaluation resumes)";
    Label => "label", ["b"], "Episode: pick the failure label (a fuzzy list)";
    Compare => "compare", ["m"], "Episode: side by side with another episode of the task";
    ExportRatings => "export_ratings", ["X"], "Episodes: export ratings to ratings.jsonl";
    GotoTask => "goto_task", ["T"], "Episodes: open the episode's task";
    PlayPause => "play_pause", ["space"], "Replay: play / pause";
    TakeOver => "take_over", ["ctrl-t"], "Live: type into the zoomed session (ctrl-] gives it back)";
    Faster => "faster", ["+"], "Replay: faster";
    Slower => "slower", ["-"], "Replay: slower";
    Wrap => "wrap", ["w"], "Detail code: wrap long lines (off: left / right scroll sideways)";
    Maximise => "maximise", ["z"], "Maximise the detail pane / inspector body (esc restores)";
}

impl Command {
    /// Look a command up by its `[tui.keys]` name.
    pub fn from_name(name: &str) -> Option<Command> {
        Command::ALL.iter().copied().find(|c| c.name() == name)
    }
}

/// One key with modifiers, normalised so that it compares equal to the
/// crossterm event a terminal sends for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyBinding {
    /// The key.
    pub code: KeyCode,
    /// Ctrl, Alt, Shift.
    pub mods: KeyModifiers,
}

impl KeyBinding {
    /// Normalise: characters carry their case, so SHIFT is dropped for them;
    /// shift-tab is BackTab.
    pub fn new(code: KeyCode, mods: KeyModifiers) -> KeyBinding {
        let mut mods = mods & (KeyModifiers::CONTROL | KeyModifiers::ALT | KeyModifiers::SHIFT);
        let mut code = code;
        match code {
            KeyCode::Char(c) => {
                if mods.contains(KeyModifiers::SHIFT) && c.is_ascii_lowercase() {
                    code = KeyCode::Char(c.to_ascii_uppercase());
                }
                mods.remove(KeyModifiers::SHIFT);
            }
            KeyCode::Tab if mods.contains(KeyModifiers::SHIFT) => {
                code = KeyCode::BackTab;
                mods.remove(KeyModifiers::SHIFT);
            }
            KeyCode::BackTab => mods.remove(KeyModifiers::SHIFT),
            _ => {}
        }
        KeyBinding { code, mods }
    }

    /// The binding of a key event.
    pub fn from_event(ev: &KeyEvent) -> KeyBinding {
        KeyBinding::new(ev.code, ev.modifiers)
    }
}

impl fmt::Display for KeyBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mods.contains(KeyModifiers::CONTROL) {
            f.write_str("ctrl-")?;
        }
        if self.mods.contains(KeyModifiers::ALT) {
            f.write_str("alt-")?;
        }
        if self.mods.contains(KeyModifiers::SHIFT) {
            f.write_str("shift-")?;
        }
        match self.code {
            KeyCode::Char(' ') => f.write_str("space"),
            KeyCode::Char(c) => write!(f, "{c}"),
            KeyCode::F(n) => write!(f, "F{n}"),
            KeyCode::Enter => f.write_str("enter"),
            KeyCode::Esc => f.write_str("esc"),
            KeyCode::Tab => f.write_str("tab"),
            KeyCode::BackTab => f.write_str("shift-tab"),
            KeyCode::Backspace => f.write_str("backspace"),
            KeyCode::Delete => f.write_str("delete"),
            KeyCode::Insert => f.write_str("insert"),
            KeyCode::Home => f.write_str("home"),
            KeyCode::End => f.write_str("end"),
            KeyCode::PageUp => f.write_str("pageup"),
            KeyCode::PageDown => f.write_str("pagedown"),
            KeyCode::Up => f.write_str("up"),
            KeyCode::Down => f.write_str("down"),
            KeyCode::Left => f.write_str("left"),
            KeyCode::Right => f.write_str("right"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// A bad `[tui.keys]` entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeymapError {
    /// An action name the keymap does not know.
    #[error("[tui.keys] {action:?}: no such action (known actions: {known})")]
    UnknownAction {
        /// The name in the config.
        action: String,
        /// The actions there are, comma-separated.
        known: String,
    },
    /// A key string that does not parse.
    #[error("[tui.keys] {action} = {key:?}: {reason}")]
    BadKey {
        /// The action being bound.
        action: String,
        /// The key as written.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Neither a key string nor an array of them.
    #[error(
        "[tui.keys] {action}: expected a key string or an array of key strings, found {found}"
    )]
    BadValue {
        /// The action being bound.
        action: String,
        /// The TOML type found instead.
        found: String,
    },
}

const KEY_HELP: &str = "expected one character or a key name (enter, esc, tab, backspace, delete, insert, home, end, pageup, pagedown, up, down, left, right, space, f1-f12), optionally prefixed by ctrl-, alt- or shift-";

/// Parse a key string such as `q`, `G`, `ctrl-r`, `shift-tab`, `f5`, `enter`.
pub fn parse_key(s: &str) -> Result<KeyBinding, String> {
    if s.is_empty() {
        return Err(format!("empty key; {KEY_HELP}"));
    }
    let mut rest = s;
    let mut mods = KeyModifiers::NONE;
    loop {
        let lower = rest.to_ascii_lowercase();
        let found = [
            ("ctrl", KeyModifiers::CONTROL),
            ("alt", KeyModifiers::ALT),
            ("shift", KeyModifiers::SHIFT),
        ]
        .into_iter()
        .find_map(|(p, m)| {
            let plen = p.len() + 1;
            (lower.starts_with(p)
                && matches!(lower.as_bytes().get(p.len()), Some(b'-' | b'+'))
                && rest.len() > plen)
                .then_some((plen, m))
        });
        match found {
            Some((plen, m)) => {
                mods |= m;
                rest = &rest[plen..];
            }
            None => break,
        }
    }
    let mut chars = rest.chars();
    let code = match (chars.next(), chars.next()) {
        (Some(c), None) => KeyCode::Char(c),
        _ => {
            let name = rest.to_ascii_lowercase();
            match name.as_str() {
                "enter" | "return" => KeyCode::Enter,
                "esc" | "escape" => KeyCode::Esc,
                "tab" => KeyCode::Tab,
                "backtab" => KeyCode::BackTab,
                "backspace" => KeyCode::Backspace,
                "delete" | "del" => KeyCode::Delete,
                "insert" | "ins" => KeyCode::Insert,
                "home" => KeyCode::Home,
                "end" => KeyCode::End,
                "pageup" | "pgup" => KeyCode::PageUp,
                "pagedown" | "pgdn" => KeyCode::PageDown,
                "up" => KeyCode::Up,
                "down" => KeyCode::Down,
                "left" => KeyCode::Left,
                "right" => KeyCode::Right,
                "space" => KeyCode::Char(' '),
                f if f.starts_with('f') => match f[1..].parse::<u8>() {
                    Ok(n @ 1..=12) => KeyCode::F(n),
                    _ => return Err(format!("unknown key {rest:?}; {KEY_HELP}")),
                },
                _ => return Err(format!("unknown key {rest:?}; {KEY_HELP}")),
            }
        }
    };
    Ok(KeyBinding::new(code, mods))
}

/// The effective bindings: defaults with `[tui.keys]` applied.
#[derive(Debug, Clone)]
pub struct Keymap {
    bindings: Vec<(KeyBinding, Command)>,
}

impl Default for Keymap {
    fn default() -> Self {
        let mut bindings = Vec::new();
        for &cmd in Command::ALL {
            for key in cmd.default_keys() {
                match parse_key(key) {
                    Ok(k) => bindings.push((k, cmd)),
                    Err(e) => debug_assert!(false, "bad default key {key}: {e}"),
                }
            }
        }
        Keymap { bindings }
    }
}

impl Keymap {
    /// Defaults overridden by a `[tui.keys]` table. A configured action
    /// replaces all of its default keys; a key taken by it is removed from
    /// any other action.
    pub fn from_config(keys: &toml::Table) -> Result<Keymap, KeymapError> {
        let mut map = Keymap::default();
        for (action, value) in keys {
            let cmd = Command::from_name(action).ok_or_else(|| KeymapError::UnknownAction {
                action: action.clone(),
                known: Command::ALL
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
            let strings: Vec<&str> = match value {
                toml::Value::String(s) => vec![s.as_str()],
                toml::Value::Array(items) => items
                    .iter()
                    .map(|v| {
                        v.as_str().ok_or_else(|| KeymapError::BadValue {
                            action: action.clone(),
                            found: v.type_str().to_string(),
                        })
                    })
                    .collect::<Result<_, _>>()?,
                other => {
                    return Err(KeymapError::BadValue {
                        action: action.clone(),
                        found: other.type_str().to_string(),
                    })
                }
            };
            let mut parsed = Vec::new();
            for s in strings {
                let k = parse_key(s).map_err(|reason| KeymapError::BadKey {
                    action: action.clone(),
                    key: s.to_string(),
                    reason,
                })?;
                parsed.push(k);
            }
            map.bindings
                .retain(|(k, c)| *c != cmd && !parsed.contains(k));
            map.bindings.extend(parsed.into_iter().map(|k| (k, cmd)));
        }
        Ok(map)
    }

    /// The command bound to a key event, if any.
    pub fn lookup(&self, ev: &KeyEvent) -> Option<Command> {
        let key = KeyBinding::from_event(ev);
        self.bindings
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, c)| *c)
    }

    /// The keys bound to `cmd`, in binding order.
    pub fn keys_for(&self, cmd: Command) -> Vec<KeyBinding> {
        self.bindings
            .iter()
            .filter(|(_, c)| *c == cmd)
            .map(|(k, _)| *k)
            .collect()
    }

    /// The first key bound to `cmd`, as text (for hints), or `-`.
    pub fn hint(&self, cmd: Command) -> String {
        self.keys_for(cmd)
            .first()
            .map(|k| k.to_string())
            .unwrap_or_else(|| "-".into())
    }

    /// `(keys, name, description)` for every command: the help overlay.
    pub fn help_rows(&self) -> Vec<(String, &'static str, &'static str)> {
        Command::ALL
            .iter()
            .map(|&c| {
                let keys = self
                    .keys_for(c)
                    .iter()
                    .map(|k| k.to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                (keys, c.name(), c.description())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(code: KeyCode, mods: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, mods)
    }

    #[test]
    fn parses_keys() {
        assert_eq!(
            parse_key("ctrl-r").unwrap(),
            KeyBinding::new(KeyCode::Char('r'), KeyModifiers::CONTROL)
        );
        assert_eq!(parse_key("shift-tab").unwrap().code, KeyCode::BackTab);
        assert_eq!(parse_key("F5").unwrap().code, KeyCode::F(5));
        assert_eq!(parse_key("-").unwrap().code, KeyCode::Char('-'));
        assert_eq!(parse_key("ctrl--").unwrap().code, KeyCode::Char('-'));
        assert_eq!(parse_key("shift-a").unwrap(), parse_key("A").unwrap());
    }

    #[test]
    fn rejects_bad_keys_naming_them() {
        let mut t = toml::Table::new();
        t.insert("accept".into(), toml::Value::String("ctrl-banana".into()));
        let err = Keymap::from_config(&t).unwrap_err().to_string();
        assert!(err.contains("accept"), "{err}");
        assert!(err.contains("ctrl-banana"), "{err}");
        assert!(err.contains("banana"), "{err}");

        let mut t = toml::Table::new();
        t.insert("acept".into(), toml::Value::String("a".into()));
        let err = Keymap::from_config(&t).unwrap_err().to_string();
        assert!(err.contains("\"acept\""), "{err}");

        let mut t = toml::Table::new();
        t.insert("quit".into(), toml::Value::Integer(3));
        let err = Keymap::from_config(&t).unwrap_err().to_string();
        assert!(err.contains("quit") && err.contains("integer"), "{err}");

        assert!(parse_key("f13").unwrap_err().contains("f13"));
        assert!(parse_key("").is_err());
    }

    #[test]
    fn overrides_replace_and_steal_keys() {
        let mut t = toml::Table::new();
        t.insert(
            "quit".into(),
            toml::Value::Array(vec!["x".into(), "ctrl-q".into()]),
        );
        let map = Keymap::from_config(&t).unwrap();
        assert_eq!(
            map.lookup(&ev(KeyCode::Char('x'), KeyModifiers::NONE)),
            Some(Command::Quit)
        );
        assert_eq!(
            map.lookup(&ev(KeyCode::Char('q'), KeyModifiers::NONE)),
            None
        );
        assert!(map.keys_for(Command::ClearFilters).is_empty());
        // Shifted letters arrive as uppercase with SHIFT set.
        assert_eq!(
            map.lookup(&ev(KeyCode::Char('G'), KeyModifiers::SHIFT)),
            Some(Command::Bottom)
        );
    }

    #[test]
    fn defaults_have_no_duplicate_keys() {
        let map = Keymap::default();
        let mut seen = std::collections::HashSet::new();
        for (k, c) in &map.bindings {
            assert!(seen.insert(*k), "{k} bound twice (again to {})", c.name());
        }
    }
}
