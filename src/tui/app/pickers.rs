//! The fuzzy pickers: the Tasks view's category filter (`c`), the Episodes
//! view's failure-mode filter (`f`) and the inspector's failure label
//! (`b`) open a filterable list instead of cycling one value at a time.

use crossterm::event::KeyEvent;

use super::App;
use crate::tui::views::episodes::{ANY_FAILURE, NO_FAILURE};
use crate::tui::views::inspector::LABELS;
use crate::tui::widgets::picker::{Choice, PickOutcome, Picker};

/// What an open picker sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PickerKind {
    /// The Tasks view's category filter.
    Category,
    /// The Tasks view's tag filter.
    Tag,
    /// The Tasks view's audit filter.
    Audit,
    /// The Episodes view's failure-mode filter.
    Failure,
    /// The inspected episode's failure label.
    Label,
}

impl App {
    /// Open the picker of `kind` over what the workspace holds, the current
    /// value selected.
    pub(super) fn open_picker(&mut self, kind: PickerKind) {
        let picker = match kind {
            PickerKind::Category => {
                let mut choices = vec![Choice::new(None, "any category")];
                let cats = self.tasks.categories();
                choices.extend(
                    cats.iter()
                        .map(|c| Choice::new(Some(c.as_str()), c.as_str())),
                );
                Picker::new("category", choices, self.tasks.filter.category.as_deref())
            }
            PickerKind::Tag => {
                let mut choices = vec![Choice::new(None, "any tag")];
                let tags = self.tasks.tags();
                choices.extend(
                    tags.iter()
                        .map(|t| Choice::new(Some(t.as_str()), t.as_str())),
                );
                Picker::new("tag", choices, self.tasks.filter.tag.as_deref())
            }
            PickerKind::Audit => {
                use crate::tui::views::tasks::{AUDIT_CLEAN, AUDIT_FLAGGED, AUDIT_NONE};
                let mut choices = vec![
                    Choice::new(None, "any audit"),
                    Choice::new(Some(AUDIT_FLAGGED), "flagged (any finding)"),
                    Choice::new(Some(AUDIT_CLEAN), "clean"),
                    Choice::new(Some(AUDIT_NONE), "not audited"),
                ];
                let shown: Vec<(&'static str, String)> = self
                    .tasks
                    .audit_labels()
                    .into_iter()
                    .map(|l| (l, format!("{l} ({})", crate::audit::short_label(l))))
                    .collect();
                choices.extend(shown.iter().map(|(l, s)| Choice::new(Some(*l), s.as_str())));
                Picker::new("audit", choices, self.tasks.filter.audit.as_deref())
            }
            PickerKind::Failure => {
                let mut choices = vec![
                    Choice::new(None, "any"),
                    Choice::new(Some(ANY_FAILURE), ANY_FAILURE),
                ];
                let modes = self.episodes.modes();
                choices.extend(modes.iter().map(|m| {
                    if m == NO_FAILURE {
                        Choice::new(Some(m.as_str()), "none (passed)")
                    } else {
                        Choice::new(Some(m.as_str()), m.as_str())
                    }
                }));
                Picker::new("failure mode", choices, self.episodes.failure.as_deref())
            }
            PickerKind::Label => {
                let Some(insp) = self.inspector.as_ref() else {
                    return;
                };
                let mut choices = vec![Choice::new(None, "no label")];
                choices.extend(
                    LABELS
                        .iter()
                        .map(|(k, shown)| Choice::new(Some(*k), *shown)),
                );
                Picker::new("failure label", choices, insp.episode.row.label.as_deref())
            }
        };
        self.picker = Some((kind, picker));
    }

    /// A key while a picker is open: Enter applies the choice.
    pub(super) fn picker_key(&mut self, key: KeyEvent) {
        let Some((kind, picker)) = self.picker.as_mut() else {
            return;
        };
        let kind = *kind;
        let value = match picker.handle_key(&key) {
            PickOutcome::Choosing => return,
            PickOutcome::Cancel => {
                self.picker = None;
                return;
            }
            PickOutcome::Picked(v) => v,
        };
        self.picker = None;
        match kind {
            PickerKind::Category => {
                let sel = self.tasks.set_category(value);
                self.load_selected(sel);
            }
            PickerKind::Tag => {
                let sel = self.tasks.set_tag(value);
                self.load_selected(sel);
            }
            PickerKind::Audit => {
                let sel = self.tasks.set_audit_filter(value);
                self.load_selected(sel);
            }
            PickerKind::Failure => self.episodes.set_failure(value),
            PickerKind::Label => {
                let Some(insp) = self.inspector.as_mut() else {
                    return;
                };
                if insp.episode.row.label == value {
                    return;
                }
                let before = insp.episode.row.clone();
                insp.episode.row.label = value;
                let after = insp.episode.row.clone();
                self.curate_episode(&before, &after);
            }
        }
    }
}
