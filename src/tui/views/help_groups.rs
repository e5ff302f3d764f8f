//! Which keys work where, grouped: the help overlay shows the current
//! view's groups first, then the keys that work everywhere, then every
//! command; the status line's footer lists the same keys (short labels).
//! One table, so that help and footers never disagree.

use crate::tui::keymap::{Command, Keymap};

use Command as C;

/// Where the user is, for help and footers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HelpContext {
    /// The task table (its detail pane unfocused).
    #[default]
    Tasks,
    /// The Tasks view's detail pane, focused.
    TaskDetail,
    /// The detail pane's Episodes tab, focused.
    TaskEpisodes,
    /// The live panes.
    Live,
    /// A live session the user has taken over.
    Takeover,
    /// The episode list.
    Episodes,
    /// The episode inspector.
    Inspector,
    /// The jobs list.
    Jobs,
    /// Training runs.
    Training,
}

impl HelpContext {
    /// The name shown in the help's section titles.
    pub fn title(self) -> &'static str {
        match self {
            HelpContext::Tasks => "Tasks",
            HelpContext::TaskDetail => "Task detail",
            HelpContext::TaskEpisodes => "Task episodes",
            HelpContext::Live => "Live",
            HelpContext::Takeover => "Take-over",
            HelpContext::Episodes => "Episodes",
            HelpContext::Inspector => "Inspector",
            HelpContext::Jobs => "Jobs",
            HelpContext::Training => "Training",
        }
    }
}

/// The key of an entry: a bound command, or a fixed key (take-over keys,
/// which are not in the keymap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A command; its keys come from the keymap.
    Cmd(Command),
    /// Several commands shown as one (`1`-`5` rate).
    Range(Command, Command),
    /// A key the keymap does not bind.
    Fixed(&'static str),
}

/// One row: a key, a short label (footer) and what it does here (help).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: Key,
    /// The footer's label.
    pub short: &'static str,
    /// The help's description.
    pub long: &'static str,
}

/// A titled group of entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// The group's title.
    pub title: &'static str,
    /// Its rows, in footer order.
    pub entries: &'static [Entry],
}

const fn e(c: Command, short: &'static str, long: &'static str) -> Entry {
    Entry {
        key: Key::Cmd(c),
        short,
        long,
    }
}

const RATE: Entry = Entry {
    key: Key::Range(C::Rate1, C::Rate5),
    short: "rate",
    long: "Rate 1 to 5 stars",
};

const TASKS: &[Group] = &[
    Group {
        title: "curate",
        entries: &[
            e(C::Accept, "accept", "Accept the selected task"),
            e(C::Reject, "reject", "Reject it"),
            e(C::Archive, "archive", "Archive it"),
            RATE,
            e(C::RateClear, "unrate", "Clear the rating"),
            e(C::Tag, "tags", "Edit its tags (comma-separated)"),
            e(C::Note, "note", "Edit its note"),
            e(C::Undo, "undo", "Undo the last curation change"),
        ],
    },
    Group {
        title: "find",
        entries: &[
            e(C::Search, "search", "Search id, name, instruction and tags"),
            e(C::FilterTag, "tag", "Pick the tag filter from a fuzzy list"),
            e(C::FilterStatus, "status", "Cycle the status filter"),
            e(
                C::FilterCategory,
                "category",
                "Pick the category filter from a fuzzy list",
            ),
            e(
                C::FilterFailure,
                "audit",
                "Pick the audit filter: flagged, clean, not audited or a finding label",
            ),
            e(C::ClearFilters, "clear", "Clear search and filters"),
            e(C::SortNext, "sort", "Sort by the next column"),
            e(C::SortReverse, "reverse", "Reverse the sort order"),
        ],
    },
    Group {
        title: "detail and bundle",
        entries: &[
            e(
                C::Select,
                "detail",
                "Focus the detail pane (its tabs scroll)",
            ),
            e(C::NextTab, "next tab", "Next detail tab"),
            e(C::PrevTab, "prev tab", "Previous detail tab"),
            e(C::Back, "back", "Back to the table"),
            e(C::Edit, "edit", "Open the tab's bundle file in $EDITOR"),
            e(C::Validate, "validate", "Validate the task now (a job)"),
            e(
                C::JobAudit,
                "audit",
                "Audit the task (or any tasks: a form, then a job)",
            ),
            e(
                C::JobRepair,
                "repair",
                "Repair the task through the generator (or any tasks: a form, then a job)",
            ),
            e(
                C::RepairReview,
                "review repair",
                "Review its repair: a diff per file beside the reasons (a accepts, r discards)",
            ),
            e(
                C::Maximise,
                "maximise",
                "Maximise the detail pane (again or esc: restore)",
            ),
            e(
                C::Wrap,
                "wrap",
                "Wrap long code lines (off: they scroll sideways)",
            ),
            e(C::Left, "col left", "Focused code: scroll left"),
            e(C::Right, "col right", "Focused code: scroll right"),
        ],
    },
    Group {
        title: "move",
        entries: &[
            e(C::Up, "up", "Previous row"),
            e(C::Down, "down", "Next row"),
            e(C::PageUp, "page up", "A page up"),
            e(C::PageDown, "page down", "A page down"),
            e(C::Top, "first", "First row"),
            e(C::Bottom, "last", "Last row"),
        ],
    },
];

const CURATE_SHOWN: Group = Group {
    title: "curate the task",
    entries: &[
        e(C::Accept, "accept", "Accept the task"),
        e(C::Reject, "reject", "Reject it"),
        RATE,
        e(C::Tag, "tags", "Edit its tags (comma-separated)"),
        e(C::Note, "note", "Edit its note"),
    ],
};

const TASK_DETAIL: &[Group] = &[
    Group {
        title: "detail pane",
        entries: &[
            e(C::NextTab, "next tab", "Next detail tab"),
            e(C::PrevTab, "prev tab", "Previous detail tab"),
            e(C::Back, "table", "Back to the task table (also enter)"),
            e(
                C::Maximise,
                "maximise",
                "Maximise the detail pane (again or esc: restore)",
            ),
            e(
                C::Wrap,
                "wrap",
                "Wrap long code lines (off: they scroll sideways)",
            ),
            e(C::Edit, "edit", "Open the tab's bundle file in $EDITOR"),
        ],
    },
    CURATE_SHOWN,
    Group {
        title: "move",
        entries: &[
            e(C::Up, "up", "Scroll up"),
            e(C::Down, "down", "Scroll down"),
            e(C::PageUp, "page up", "A page up"),
            e(C::PageDown, "page down", "A page down"),
            e(C::Left, "col left", "Code: scroll left"),
            e(C::Right, "col right", "Code: scroll right"),
        ],
    },
];

const TASK_EPISODES: &[Group] = &[
    Group {
        title: "the task's episodes",
        entries: &[
            e(
                C::Select,
                "open episode",
                "Inspect the selected episode (esc there comes back here)",
            ),
            e(C::NextTab, "next tab", "Next detail tab"),
            e(C::PrevTab, "prev tab", "Previous detail tab"),
            e(C::Back, "table", "Back to the task table"),
            e(
                C::Maximise,
                "maximise",
                "Maximise the detail pane (again or esc: restore)",
            ),
        ],
    },
    CURATE_SHOWN,
    Group {
        title: "move",
        entries: &[
            e(C::Up, "up", "Previous episode"),
            e(C::Down, "down", "Next episode"),
            e(C::PageUp, "page up", "A page up"),
            e(C::PageDown, "page down", "A page down"),
            e(C::Top, "first", "Newest episode"),
            e(C::Bottom, "last", "Oldest episode"),
        ],
    },
];

const LIVE: &[Group] = &[
    Group {
        title: "panes",
        entries: &[
            e(
                C::Select,
                "zoom/open",
                "Zoom the selected pane (again: unzoom); on a finished strip: open its episode",
            ),
            e(C::Back, "unzoom", "Back to the grid"),
            e(
                C::TakeOver,
                "take over",
                "Take the zoomed session over: run commands yourself",
            ),
            e(C::PageUp, "scroll back", "Scroll the pane back"),
            e(C::PageDown, "scroll fwd", "Scroll the pane forward"),
            e(C::ClearFilters, "clear done", "Clear finished panes"),
        ],
    },
    Group {
        title: "move",
        entries: &[
            e(C::Left, "left", "Pane to the left"),
            e(C::Right, "right", "Pane to the right"),
            e(C::Up, "up", "Pane above"),
            e(C::Down, "down", "Pane below"),
            e(C::Top, "first", "First pane"),
            e(C::Bottom, "last", "Last pane"),
        ],
    },
];

const fn fixed(key: &'static str, short: &'static str, long: &'static str) -> Entry {
    Entry {
        key: Key::Fixed(key),
        short,
        long,
    }
}

const TAKEOVER: &[Group] = &[Group {
    title: "your session",
    entries: &[
        fixed("enter", "run", "Run the line (recorded as a human step)"),
        fixed("ctrl-]", "give back", "Give the session back to the agent"),
        fixed("up/down", "history", "Earlier lines"),
        fixed("esc", "clear", "Clear the line (also ctrl-c)"),
        fixed("pageup/pagedown", "scroll", "Scroll the pane"),
    ],
}];

const EPISODES: &[Group] = &[
    Group {
        title: "episodes",
        entries: &[
            e(C::Select, "inspect", "Inspect the selected episode"),
            e(C::GotoTask, "task", "Open its task"),
            e(
                C::Search,
                "search",
                "Search run, task, end, failure, label and notes",
            ),
            e(
                C::FilterFailure,
                "failure",
                "Pick the filter from a fuzzy list: any failure, a mode",
            ),
            e(C::SortNext, "sort", "Sort by the next column"),
            e(C::SortReverse, "reverse", "Reverse the sort order"),
            e(C::ClearFilters, "clear", "Clear search and filter"),
            e(
                C::ExportRatings,
                "export",
                "Export ratings to ratings.jsonl",
            ),
            e(C::Undo, "undo", "Undo the last rating, label or note"),
        ],
    },
    Group {
        title: "move",
        entries: &[
            e(C::Up, "up", "Previous row"),
            e(C::Down, "down", "Next row"),
            e(C::PageUp, "page up", "A page up"),
            e(C::PageDown, "page down", "A page down"),
            e(C::Top, "first", "First row"),
            e(C::Bottom, "last", "Last row"),
        ],
    },
];

const INSPECTOR: &[Group] = &[
    Group {
        title: "review",
        entries: &[
            RATE,
            e(C::RateClear, "unrate", "Clear the rating"),
            e(
                C::Label,
                "label",
                "Pick the failure label from a fuzzy list",
            ),
            e(C::Note, "note", "Edit the note"),
            e(C::Undo, "undo", "Undo the last rating, label or note"),
            e(
                C::Compare,
                "side by side",
                "Side by side with another episode of the task",
            ),
            e(
                C::FilterFailure,
                "fork",
                "Fork it at a step: re-run it to there, then a policy (or you) goes on",
            ),
            e(
                C::ExportRatings,
                "export",
                "Export ratings to ratings.jsonl",
            ),
            e(C::Back, "close", "Close the inspector"),
        ],
    },
    Group {
        title: "read",
        entries: &[
            e(
                C::NextTab,
                "next tab",
                "Next tab (trajectory, tests, replay)",
            ),
            e(C::PrevTab, "prev tab", "Previous tab"),
            e(C::Down, "down", "Scroll down"),
            e(C::Up, "up", "Scroll up"),
            e(C::PageDown, "page down", "A page down"),
            e(C::PageUp, "page up", "A page up"),
            e(C::Top, "top", "Back to the top"),
            e(
                C::Select,
                "expand",
                "Show every step's whole output (again: first lines)",
            ),
            e(
                C::Maximise,
                "maximise",
                "Maximise the body (again or esc: restore)",
            ),
        ],
    },
    Group {
        title: "replay",
        entries: &[
            e(C::PlayPause, "play", "Play / pause"),
            e(C::Left, "step back", "One event back"),
            e(C::Right, "step", "One event forward"),
            e(C::Faster, "faster", "Faster"),
            e(C::Slower, "slower", "Slower"),
        ],
    },
];

const JOBS: &[Group] = &[
    Group {
        title: "start and stop",
        entries: &[
            e(C::JobEval, "evaluate", "Evaluate a policy (form)"),
            e(C::JobValidate, "validate", "Validate tasks (form)"),
            e(
                C::JobGenerate,
                "LLM generate",
                "Generate tasks with an LLM (form)",
            ),
            e(C::JobOffline, "offline", "Generate tasks offline (form)"),
            e(C::JobTrain, "train", "Start a training run (form)"),
            e(C::JobAudit, "audit", "Audit tasks (form)"),
            e(C::JobCancel, "cancel", "Cancel the selected job"),
            e(
                C::JobRetry,
                "retry",
                "Run the selected job again: an interrupted or cancelled evaluation resumes its run",
            ),
            e(C::JobRepair, "repair", "Repair tasks through the generator (form)"),
        ],
    },
    Group {
        title: "move",
        entries: &[
            e(C::Up, "up", "Previous job"),
            e(C::Down, "down", "Next job"),
            e(C::PageUp, "log up", "Scroll the job's log up"),
            e(C::PageDown, "log down", "Scroll the job's log down"),
            e(
                C::Select,
                "full log",
                "Open the job's log full-screen (enter or esc: back)",
            ),
            e(C::Top, "first", "First job"),
            e(C::Bottom, "last", "Last job"),
        ],
    },
];

const TRAINING: &[Group] = &[Group {
    title: "runs and charts",
    entries: &[
        e(C::Down, "next run", "Next run"),
        e(C::Up, "prev run", "Previous run"),
        e(C::NextTab, "next chart", "Next chart"),
        e(C::PrevTab, "prev chart", "Previous chart"),
        e(C::JobTrain, "train", "Start a training run (form)"),
        e(
            C::Select,
            "job log",
            "The run's job in the Jobs view, with its log",
        ),
        e(C::JobCancel, "cancel", "Cancel the run's job"),
    ],
}];

/// The keys that work in every view.
pub const EVERYWHERE: Group = Group {
    title: "everywhere",
    entries: &[
        e(C::Help, "help", "Show or hide this help"),
        e(C::NextView, "next view", "Next view"),
        e(C::PrevView, "prev view", "Previous view"),
        e(C::ViewTasks, "tasks", "Tasks view"),
        e(C::ViewLive, "live", "Live view"),
        e(C::ViewEpisodes, "episodes", "Episodes view"),
        e(C::ViewJobs, "jobs", "Jobs view"),
        e(C::ViewTraining, "training", "Training view"),
        e(C::Reload, "reload", "Reload from the workspace"),
        e(C::Undo, "undo", "Undo the last curation change"),
        e(C::Quit, "quit", "Quit (asks first while jobs run)"),
    ],
};

/// The groups of keys that work in `ctx`, most used first.
pub fn groups(ctx: HelpContext) -> &'static [Group] {
    match ctx {
        HelpContext::Tasks => TASKS,
        HelpContext::TaskDetail => TASK_DETAIL,
        HelpContext::TaskEpisodes => TASK_EPISODES,
        HelpContext::Live => LIVE,
        HelpContext::Takeover => TAKEOVER,
        HelpContext::Episodes => EPISODES,
        HelpContext::Inspector => INSPECTOR,
        HelpContext::Jobs => JOBS,
        HelpContext::Training => TRAINING,
    }
}

/// The keys of an entry as text (`a`, `1-5`, `up/k`).
pub fn key_text(keymap: &Keymap, key: Key, all: bool) -> String {
    match key {
        Key::Cmd(c) => {
            let keys: Vec<String> = keymap.keys_for(c).iter().map(|k| k.to_string()).collect();
            match (keys.first(), all) {
                (None, _) => "-".into(),
                (Some(first), false) => first.clone(),
                (Some(_), true) => keys.join("/"),
            }
        }
        Key::Range(a, b) => format!("{}-{}", keymap.hint(a), keymap.hint(b)),
        Key::Fixed(k) => k.to_string(),
    }
}

/// The footer's hints for `ctx`: the help key first (a narrow terminal
/// cuts the end), every entry of its groups but plain movement (the
/// arrows work everywhere), then quit.
pub fn footer(keymap: &Keymap, ctx: HelpContext) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    if ctx != HelpContext::Takeover {
        out.push((keymap.hint(C::Help), "keys"));
    }
    out.extend(
        groups(ctx)
            .iter()
            .filter(|g| g.title != "move")
            .flat_map(|g| g.entries.iter())
            .map(|en| (key_text(keymap, en.key, false), en.short)),
    );
    if ctx != HelpContext::Takeover {
        out.push((keymap.hint(C::Quit), "quit"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_somewhere_and_footers_name_the_views_keys() {
        let contexts = [
            HelpContext::Tasks,
            HelpContext::TaskDetail,
            HelpContext::TaskEpisodes,
            HelpContext::Live,
            HelpContext::Takeover,
            HelpContext::Episodes,
            HelpContext::Inspector,
            HelpContext::Jobs,
            HelpContext::Training,
        ];
        let listed: Vec<Command> = contexts
            .iter()
            .flat_map(|c| groups(*c).iter())
            .chain(std::iter::once(&EVERYWHERE))
            .flat_map(|g| g.entries.iter())
            .flat_map(|e| match e.key {
                Key::Cmd(c) => vec![c],
                Key::Range(..) => vec![C::Rate1, C::Rate2, C::Rate3, C::Rate4, C::Rate5],
                Key::Fixed(_) => vec![],
            })
            .collect();
        for c in Command::ALL {
            assert!(listed.contains(c), "{} is in no group", c.name());
        }
        let keymap = Keymap::default();
        let live = footer(&keymap, HelpContext::Live);
        for want in [
            "zoom/open",
            "take over",
            "scroll back",
            "clear done",
            "quit",
        ] {
            assert!(live.iter().any(|(_, s)| *s == want), "{want}: {live:?}");
        }
        let tasks = footer(&keymap, HelpContext::Tasks);
        assert!(tasks.contains(&("1-5".into(), "rate")), "{tasks:?}");
        assert!(tasks.contains(&("u".into(), "undo")), "{tasks:?}");
        assert_eq!(key_text(&keymap, Key::Cmd(C::Up), true), "up/k");
        // The footer follows the focus: the detail pane's keys come first.
        let detail = footer(&keymap, HelpContext::TaskDetail);
        assert_eq!(detail[1], ("]".into(), "next tab"), "{detail:?}");
        assert!(detail.contains(&("esc".into(), "table")), "{detail:?}");
        let episodes = footer(&keymap, HelpContext::TaskEpisodes);
        assert_eq!(
            episodes[1],
            ("enter".into(), "open episode"),
            "{episodes:?}"
        );
    }
}
