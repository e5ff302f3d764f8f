//! The view state one session leaves to the next on the same workspace:
//! the open view and how the Tasks and Episodes tables sort, by name
//! ([`crate::tui::runtime::view_state`] keeps it in the workspace).

use super::{App, View};
use crate::tui::runtime::view_state::{ViewState, FILE};
use crate::tui::views::episodes::EpisodeSort;
use crate::tui::views::tasks::SortKey;

impl App {
    /// What the next session restores.
    pub fn view_state(&self) -> ViewState {
        ViewState {
            view: self.view.title().to_lowercase(),
            tasks_sort: self.tasks.sort.label().to_string(),
            tasks_reverse: self.tasks.reverse,
            episodes_sort: self.episodes.sort.column().to_lowercase(),
            episodes_reverse: self.episodes.reverse,
        }
    }

    /// Restore a saved state (before the tables load). A name this version
    /// does not know leaves its part as it is and is said, as a warning.
    pub fn restore_view_state(&mut self, state: &ViewState) -> Result<(), String> {
        let mut unknown = Vec::new();
        match View::ALL
            .into_iter()
            .find(|v| v.title().eq_ignore_ascii_case(&state.view))
        {
            Some(v) => self.view = v,
            None => unknown.push(format!("view {:?}", state.view)),
        }
        match SortKey::named(&state.tasks_sort) {
            Some(k) => {
                self.tasks.sort = k;
                self.tasks.reverse = state.tasks_reverse;
            }
            None => unknown.push(format!("tasks_sort {:?}", state.tasks_sort)),
        }
        match EpisodeSort::ALL
            .into_iter()
            .find(|k| k.column().eq_ignore_ascii_case(&state.episodes_sort))
        {
            Some(k) => {
                self.episodes.sort = k;
                self.episodes.reverse = state.episodes_reverse;
            }
            None => unknown.push(format!("episodes_sort {:?}", state.episodes_sort)),
        }
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{FILE}: unknown {} (ignored: the defaults stay)",
                unknown.join(", ")
            ))
        }
    }
}
