//! The command routers: app-wide commands (quit, help, switching views,
//! reload), then per view what needs more than the view itself (curation
//! requests, opening prompts, pickers and forms, the inspector's ratings); the rest
//! goes to the focused component.

use super::{App, FormKind, PickerKind, Prompt, PromptKind, View};
use crate::store::{EpisodeRow, TaskStatus};
use crate::tui::action::Request;
use crate::tui::component::Component;
use crate::tui::keymap::Command;
use crate::tui::launch::JobSpec;
use crate::tui::views::jobs::CANCELLING;
use crate::tui::widgets::input::TextInput;

impl App {
    /// Quit, unless jobs of this process are running: then ask first (they
    /// run on this process's threads and would stop half-way).
    fn quit(&mut self) {
        let running = self.jobs.running_here();
        if running.is_empty() {
            self.should_quit = true;
            return;
        }
        self.quit_asked = true;
        let n = running.len();
        let q = self.keymap.hint(Command::Quit);
        let c = self.keymap.hint(Command::JobCancel);
        let it = if n == 1 { "it" } else { "them" };
        self.error(format!(
            "{n} job{} running: {q} quits and stops {it} · {c} cancels {it} · esc stays",
            if n == 1 { "" } else { "s" },
        ));
    }

    /// Route a command the keymap resolved.
    pub(super) fn command(&mut self, cmd: Command) {
        if self.help.visible {
            match cmd {
                Command::Quit if self.quit_asked => self.should_quit = true,
                Command::Quit => self.quit(),
                // `/` filters the key list as you type.
                Command::Search => {
                    self.prompt = Some(Prompt {
                        kind: PromptKind::HelpSearch,
                        input: TextInput::new(self.help.filter.clone()),
                        task: None,
                    });
                }
                other => {
                    let next = self.help.handle_command(other);
                    self.follow(next);
                }
            }
            return;
        }
        self.status = None;
        let asked = std::mem::take(&mut self.quit_asked);
        match cmd {
            Command::Quit if asked => self.should_quit = true,
            Command::Quit => self.quit(),
            // The quit question offers to cancel the running jobs.
            Command::JobCancel if asked => {
                for id in self.jobs.running_here() {
                    self.jobs.cancelling(&id);
                    self.outbox.push(Request::CancelJob(id));
                }
                self.info("cancelling the running jobs; q quits once they have stopped".into());
            }
            Command::Help => {
                self.help.visible = true;
                self.help.scroll = 0;
                self.help.filter.clear();
                self.help.context = self.help_context();
            }
            Command::Undo => self.undo(),
            Command::NextView => self.view = View::ALL[(self.view.index() + 1) % View::ALL.len()],
            Command::PrevView => {
                self.view = View::ALL[(self.view.index() + View::ALL.len() - 1) % View::ALL.len()]
            }
            Command::ViewTasks => self.view = View::Tasks,
            Command::ViewLive => self.view = View::Live,
            Command::ViewEpisodes => self.view = View::Episodes,
            Command::ViewTraining => self.view = View::Training,
            Command::Reload => {
                self.outbox.push(Request::LoadTasks);
                self.outbox.push(Request::LoadEpisodes);
                if let Some(id) = self.tasks.selected_id() {
                    self.outbox.push(Request::LoadTask(id));
                }
                self.info("reloading".into());
            }
            Command::ViewJobs => {
                self.view = View::Jobs;
                self.outbox.push(Request::LoadJobs);
            }
            _ if self.view == View::Tasks && self.review.is_some() => self.review_command(cmd),
            _ => match self.view {
                View::Tasks => self.tasks_command(cmd),
                View::Live if cmd == Command::TakeOver => match self.live.take_over() {
                    Ok(()) => self.info(
                        "you have the session: enter runs a line, recorded as yours; ctrl-] gives it back"
                            .into(),
                    ),
                    Err(e) => self.error(e),
                },
                // Enter on a finished strip opens its episode.
                View::Live if cmd == Command::Select && !self.live.zoomed => {
                    match self.live.selected_finished() {
                        Some(Ok((run, task, sample))) => {
                            self.open_episode(Request::OpenEpisode { run, task, sample }, View::Live)
                        }
                        Some(Err(why)) => self.error(why),
                        None => {
                            let next = self.live.handle_command(cmd);
                            self.follow(next);
                        }
                    }
                }
                View::Live => {
                    let next = self.live.handle_command(cmd);
                    self.follow(next);
                }
                View::Episodes => self.episodes_command(cmd),
                View::Jobs => self.jobs_command(cmd),
                View::Training => self.training_command(cmd),
            },
        }
    }

    /// Read an episode for the inspector (`req`: a `LoadEpisode` or an
    /// `OpenEpisode`); once it arrives it shows over the Episodes view, and
    /// closing it goes back to `from`.
    fn open_episode(&mut self, req: Request, from: View) {
        self.outbox.push(req);
        self.opening = Some(from);
    }

    fn episodes_command(&mut self, cmd: Command) {
        if self.inspector.is_some() {
            self.inspector_command(cmd);
            return;
        }
        match cmd {
            Command::Select => {
                if let Some(row) = self.episodes.selected_row().cloned() {
                    self.inspector_from = None;
                    self.opening = None;
                    self.outbox.push(Request::LoadEpisode {
                        row,
                        compare: false,
                    });
                }
                return;
            }
            Command::ExportRatings => {
                self.outbox.push(Request::ExportRatings);
                return;
            }
            Command::Search => {
                self.prompt = Some(Prompt {
                    kind: PromptKind::EpisodeSearch,
                    input: TextInput::new(self.episodes.search.clone()),
                    task: None,
                });
                return;
            }
            Command::GotoTask => {}
            Command::FilterFailure => {
                self.open_picker(PickerKind::Failure);
                return;
            }
            other => {
                let next = self.episodes.handle_command(other);
                self.follow(next);
                return;
            }
        }
        // Enter on an episode opens its task's Episodes tab.
        let Some((task, run, sample)) = self
            .episodes
            .selected_row()
            .map(|e| (e.task_id.clone(), e.run_id.clone(), e.sample))
        else {
            return;
        };
        let sel = self.tasks.select_id(&task);
        if sel.as_deref() == Some(task.as_str()) {
            self.view = View::Tasks;
            self.tasks.detail.tab = crate::tui::views::detail::DetailTab::Episodes;
            // The Episodes tab takes the keys, on this episode (Enter inspects).
            self.tasks.focus = crate::tui::views::tasks::Focus::Detail;
            self.tasks.detail.select_episode(&run, sample);
            self.load_selected(sel);
        } else {
            self.error(format!("task {task} is not in the workspace"));
        }
    }

    fn inspector_command(&mut self, cmd: Command) {
        let Some(insp) = self.inspector.as_mut() else {
            return;
        };
        let row = insp.episode.row.clone();
        let rating = match cmd {
            Command::Rate1 => Some(Some(1)),
            Command::Rate2 => Some(Some(2)),
            Command::Rate3 => Some(Some(3)),
            Command::Rate4 => Some(Some(4)),
            Command::Rate5 => Some(Some(5)),
            Command::RateClear => Some(None),
            _ => None,
        };
        if let Some(r) = rating {
            insp.episode.row.rating = r;
            let after = insp.episode.row.clone();
            self.curate_episode(&row, &after);
            return;
        }
        match cmd {
            // Esc first restores a maximised body, then closes.
            Command::Back if insp.maximised => insp.maximised = false,
            // Back to where the episode was opened from.
            Command::Back => {
                self.inspector = None;
                if let Some(v) = self.inspector_from.take() {
                    self.view = v;
                }
            }
            Command::Label => self.open_picker(PickerKind::Label),
            Command::Note => {
                self.prompt = Some(Prompt {
                    kind: PromptKind::EpisodeNote,
                    input: TextInput::new(row.notes.clone()),
                    task: None,
                });
            }
            Command::ExportRatings => self.outbox.push(Request::ExportRatings),
            // `f` in the inspector forks the episode (a form asks where).
            Command::FilterFailure => {
                let steps = insp.episode.result.as_ref().map_or(0, |r| r.steps.len());
                if insp.episode.result.is_err() {
                    self.error("no result to fork from".into());
                    return;
                }
                self.fork_target = Some(super::ForkTarget {
                    parent: format!("{}/{}/{}", row.run_id, row.task_id, row.sample),
                    task: row.task_id.clone(),
                    steps,
                });
                self.open_form(FormKind::Fork);
            }
            Command::Compare => {
                if let Some(other) = insp.other.take() {
                    let r = &other.row;
                    self.info(format!(
                        "side by side closed ({}/{}#{} hidden); {} compares again",
                        r.run_id,
                        r.task_id,
                        r.sample,
                        self.keymap.hint(Command::Compare)
                    ));
                    return;
                }
                let same = |r: &&EpisodeRow| {
                    r.task_id == row.task_id && (r.run_id != row.run_id || r.sample != row.sample)
                };
                // A fork is compared with its parent first.
                let parent = insp
                    .episode
                    .result
                    .as_ref()
                    .ok()
                    .and_then(|r| r.forked_from.clone());
                let is_parent = |r: &&EpisodeRow| {
                    parent.as_ref().is_some_and(|p| {
                        (&p.run, &p.task, p.sample) == (&r.run_id, &r.task_id, r.sample)
                    })
                };
                let rows = self.episodes.rows();
                // A parent is compared with its newest fork.
                let me = format!("{}/{}/{}", row.run_id, row.task_id, row.sample);
                let is_child = |r: &&EpisodeRow| {
                    r.forked_from
                        .as_deref()
                        .and_then(|f| f.split('@').next())
                        .is_some_and(|f| f == me)
                };
                let child = rows
                    .iter()
                    .filter(is_child)
                    .max_by(|a, b| a.created_at.cmp(&b.created_at));
                let other = rows
                    .iter()
                    .find(is_parent)
                    .or(child)
                    .or_else(|| rows.iter().find(same));
                let fork_running =
                    self.jobs.items.iter().any(|j| {
                        j.kind == "fork" && (j.status == "running" || j.status == CANCELLING)
                    });
                match (other.cloned(), parent) {
                    (Some(other), _) => self.outbox.push(Request::LoadEpisode {
                        row: other,
                        compare: true,
                    }),
                    (None, Some(p)) => self.error(format!(
                        "this fork's parent {}/{}/{} is not in the index (its run was deleted or not imported)",
                        p.run, p.task, p.sample
                    )),
                    (None, None) if fork_running => self.error(format!(
                        "the fork of {}#{} is still running (see Live): m compares once its job finishes",
                        row.task_id, row.sample
                    )),
                    (None, None) => self.error(format!(
                        "{} has no other episode to compare with (fork this one with f, or run the task again)",
                        row.task_id
                    )),
                }
            }
            other => {
                let next = insp.handle_command(other);
                self.follow(next);
            }
        }
    }

    /// A command while the repair review is open: accept, discard, close,
    /// scroll; anything else is said to wait for it.
    fn review_command(&mut self, cmd: Command) {
        let Some(review) = self.review.as_mut() else {
            return;
        };
        let id = review.review.id.clone();
        match cmd {
            Command::Accept | Command::Reject => {
                let accept = cmd == Command::Accept;
                self.review = None;
                self.info(format!(
                    "{} the repair of {id}...",
                    if accept { "accepting" } else { "discarding" }
                ));
                self.outbox.push(Request::ResolveRepair { id, accept });
            }
            Command::Back => self.review = None,
            other => {
                if !review.scroll_by(other) {
                    let (a, r, b) = (
                        self.keymap.hint(Command::Accept),
                        self.keymap.hint(Command::Reject),
                        self.keymap.hint(Command::Back),
                    );
                    self.error(format!(
                        "the repair review is open: {a} accepts, {r} discards, {b} closes"
                    ));
                }
            }
        }
    }

    fn jobs_command(&mut self, cmd: Command) {
        let form = match cmd {
            Command::JobEval => Some(FormKind::Eval),
            Command::JobValidate => Some(FormKind::Validate),
            Command::JobAudit => Some(FormKind::Audit),
            Command::JobRepair => Some(FormKind::Repair),
            Command::JobGenerate => Some(FormKind::Generate),
            Command::JobOffline => Some(FormKind::Offline),
            Command::JobTrain => Some(FormKind::Train),
            Command::JobCancel => {
                match self.jobs.selected_item() {
                    Some(j) if j.status == "running" => {
                        let (id, name) = (j.id.clone(), j.shown_id().to_string());
                        self.info(format!("cancelling {name}…"));
                        self.jobs.cancelling(&id);
                        self.outbox.push(Request::CancelJob(id));
                    }
                    Some(j) => self.error(format!("{} is not running", j.shown_id())),
                    None => self.error("no job selected".into()),
                }
                None
            }
            Command::JobRetry => {
                self.retry_job();
                None
            }
            other => {
                let next = self.jobs.handle_command(other);
                self.follow(next);
                None
            }
        };
        if let Some(kind) = form {
            self.open_form(kind);
        }
    }

    /// Run the selected job again with its journalled parameters: an
    /// interrupted or cancelled evaluation resumes its run (the episodes it
    /// recorded are kept; the rest run); a training job resumes its run
    /// directory from its newest checkpoint.
    fn retry_job(&mut self) {
        let Some(j) = self.jobs.selected_item() else {
            self.error("no job selected".into());
            return;
        };
        if let Some(p) = &j.shard {
            let text = format!("{} runs on the cluster: re-run it with {}", j.id, p.rerun);
            self.error(text);
            return;
        }
        if matches!(j.status.as_str(), "running" | "queued" | CANCELLING) {
            self.error(format!(
                "{} is still running (cancel it first with {})",
                j.shown_id(),
                self.keymap.hint(Command::JobCancel)
            ));
            return;
        }
        let name = j.shown_id().to_string();
        let resumes = j.kind == "eval" && matches!(j.status.as_str(), "interrupted" | "cancelled");
        let mut params = j.params.clone();
        if let Some(p) = params.as_object_mut().filter(|_| j.kind == "train") {
            if p.get("out")
                .and_then(|o| o.as_str())
                .is_none_or(str::is_empty)
            {
                // Its run directory is named after the job: the same one resumes.
                p.insert("out".into(), format!("checkpoints/{}", j.id).into());
            }
        }
        match JobSpec::from_params(&j.kind, &params) {
            Ok(spec) => {
                self.info(if resumes {
                    format!("resuming {name}: its recorded episodes are kept, the rest run")
                } else if j.kind == "train" {
                    format!("resuming {name} from its newest checkpoint")
                } else {
                    format!("running {name} again…")
                });
                self.outbox.push(Request::Launch(spec));
            }
            Err(why) => self.error(format!("{name}: {why}")),
        }
    }

    fn training_command(&mut self, cmd: Command) {
        match cmd {
            // The training form opens here too (the job shows in the Jobs view).
            Command::JobTrain => self.open_form(FormKind::Train),
            // Cancel the selected run's job / open its log in the Jobs view.
            Command::JobCancel | Command::Select => {
                let Some(job) = self.training.selected_job() else {
                    self.error("no training run selected".into());
                    return;
                };
                let Some(i) = self.jobs.items.iter().position(|j| j.id == job) else {
                    self.error(format!(
                        "no job wrote run {job} (started outside this workspace's jobs)"
                    ));
                    return;
                };
                if cmd == Command::Select {
                    self.jobs.selected = i;
                    self.jobs.log_scroll = 0;
                    self.view = View::Jobs;
                } else if self.jobs.items[i].status == "running" {
                    self.info(format!("cancelling {job}…"));
                    self.jobs.cancelling(&job);
                    self.outbox.push(Request::CancelJob(job));
                } else {
                    self.error(format!("{job} is not running"));
                }
            }
            other => {
                let next = self.training.handle_command(other);
                self.follow(next);
            }
        }
    }

    fn tasks_command(&mut self, cmd: Command) {
        let id = self.tasks.selected_id();
        let needs_task = matches!(
            cmd,
            Command::Accept
                | Command::Reject
                | Command::Archive
                | Command::Rate1
                | Command::Rate2
                | Command::Rate3
                | Command::Rate4
                | Command::Rate5
                | Command::RateClear
                | Command::Tag
                | Command::Note
                | Command::Edit
                | Command::Validate
                | Command::RepairReview
        );
        if needs_task && id.is_none() {
            self.error("no task selected".into());
            return;
        }
        let id_s = id.clone().unwrap_or_default();
        // Enter on a row of the focused Episodes tab inspects that episode.
        let in_episodes = self.tasks.focus == crate::tui::views::tasks::Focus::Detail
            && self.tasks.detail.tab == crate::tui::views::detail::DetailTab::Episodes;
        if cmd == Command::Select && in_episodes {
            let shown = self
                .tasks
                .detail
                .task
                .as_ref()
                .is_some_and(|t| Some(t.id()) == id.as_deref());
            match self.tasks.detail.selected_episode().cloned() {
                Some(row) if shown => {
                    self.open_episode(
                        Request::LoadEpisode {
                            row,
                            compare: false,
                        },
                        View::Tasks,
                    );
                }
                _ => self.error(format!("{id_s} has no episodes to open yet")),
            }
            return;
        }
        match cmd {
            Command::FilterCategory => self.open_picker(PickerKind::Category),
            Command::FilterTag => self.open_picker(PickerKind::Tag),
            Command::FilterFailure => self.open_picker(PickerKind::Audit),
            Command::JobAudit => self.open_form(FormKind::Audit),
            // The launch keys work here as in the Jobs view (the job is
            // followed there); the evaluation form takes the selected task.
            Command::JobEval => {
                self.open_form(FormKind::Eval);
                if let (Some(id), Some((_, form))) = (id, self.form.as_mut()) {
                    form.set_value("tasks", &id);
                }
            }
            Command::JobValidate => self.open_form(FormKind::Validate),
            Command::JobGenerate => self.open_form(FormKind::Generate),
            Command::JobOffline => self.open_form(FormKind::Offline),
            Command::JobTrain => self.open_form(FormKind::Train),
            Command::JobRepair => self.open_form(FormKind::Repair),
            Command::RepairReview => self.outbox.push(Request::LoadRepair(id_s)),
            Command::Accept => self.curate_task(Request::SetStatus(id_s, TaskStatus::Accepted)),
            Command::Reject => self.curate_task(Request::SetStatus(id_s, TaskStatus::Rejected)),
            Command::Archive => self.curate_task(Request::SetStatus(id_s, TaskStatus::Archived)),
            Command::Rate1 => self.curate_task(Request::SetRating(id_s, Some(1))),
            Command::Rate2 => self.curate_task(Request::SetRating(id_s, Some(2))),
            Command::Rate3 => self.curate_task(Request::SetRating(id_s, Some(3))),
            Command::Rate4 => self.curate_task(Request::SetRating(id_s, Some(4))),
            Command::Rate5 => self.curate_task(Request::SetRating(id_s, Some(5))),
            Command::RateClear => self.curate_task(Request::SetRating(id_s, None)),
            Command::Tag => {
                let tags = self.tasks.selected_row().map(|r| r.tags.join(", "));
                self.prompt = Some(Prompt {
                    kind: PromptKind::Tags,
                    input: TextInput::new(tags.unwrap_or_default()),
                    task: id,
                });
            }
            Command::Note => {
                let notes = self.tasks.selected_row().map(|r| r.notes.clone());
                self.prompt = Some(Prompt {
                    kind: PromptKind::Note,
                    input: TextInput::new(notes.unwrap_or_default()),
                    task: id,
                });
            }
            Command::Search => {
                self.prompt = Some(Prompt {
                    kind: PromptKind::Search,
                    input: TextInput::new(self.tasks.filter.search.clone()),
                    task: None,
                });
            }
            Command::Edit => {
                let file = self
                    .tasks
                    .detail
                    .tab
                    .bundle_file(self.tasks.detail.task.as_ref());
                self.outbox.push(Request::OpenEditor { id: id_s, file });
            }
            Command::Validate => {
                // A background job: the store worker stays free while the
                // environment builds.
                self.info(format!("validating {id_s} (a job: see the Jobs view)..."));
                self.outbox
                    .push(Request::Launch(JobSpec::Validate { tasks: vec![id_s] }));
            }
            other => {
                let next = self.tasks.handle_command(other);
                self.follow(next);
            }
        }
    }
}
