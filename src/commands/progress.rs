//! The CLI's view of a foreground job: its [`JobEvent`]s drawn as an
//! indicatif progress bar (progress moves the bar, log lines print above
//! it when asked), and Ctrl-C turned into the job's cancel.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::broadcast::{self, error::TryRecvError};

use crate::jobs::{JobContext, JobEvent};

/// How a [`JobBar`] draws.
pub(crate) struct BarStyle {
    /// The indicatif template.
    pub template: &'static str,
    /// Show each progress event's stage as the bar's message.
    pub stage_as_message: bool,
    /// Print the job's log lines above the bar (not when it is hidden).
    pub print_logs: bool,
}

/// A progress bar fed by a job's events on a thread of its own.
pub(crate) struct JobBar {
    bar: ProgressBar,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl JobBar {
    /// Draw the events `rx` hears with `style`.
    pub fn start(mut rx: broadcast::Receiver<JobEvent>, style: BarStyle) -> JobBar {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(style.template)
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let (b, s) = (bar.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || loop {
                match rx.try_recv() {
                    Ok(JobEvent::Progress {
                        done, total, stage, ..
                    }) => {
                        b.set_length(total);
                        b.set_position(done);
                        if style.stage_as_message {
                            b.set_message(stage);
                        }
                    }
                    // A hidden bar (stderr is not a terminal) drops them.
                    Ok(JobEvent::Log { line, .. }) if style.print_logs => {
                        b.println(crate::task::terminal_safe(&line));
                    }
                    Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                    Err(TryRecvError::Closed) => return,
                    Err(TryRecvError::Empty) => {
                        if s.load(Ordering::Relaxed) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(30));
                    }
                }
            })
            .ok();
        JobBar { bar, stop, thread }
    }

    /// The bar, for messages of the command's own.
    pub fn bar(&self) -> &ProgressBar {
        &self.bar
    }

    /// Draw what is left to hear and stop; returns the bar (to finish or
    /// clear).
    fn stop(mut self) -> ProgressBar {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.bar.clone()
    }

    /// Stop and leave the bar drawn.
    pub fn finish(self) {
        self.stop().finish();
    }

    /// Stop and erase the bar.
    pub fn finish_and_clear(self) {
        self.stop().finish_and_clear();
    }
}

impl Drop for JobBar {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Ctrl-C cancels `job` (it stops after what is running); a second Ctrl-C
/// exits at once with status 130. `what` says what the first one does.
pub(crate) fn cancel_on_ctrl_c(job: &JobContext, what: &'static str) {
    let cancel = job.cancel_flag();
    let _ = std::thread::Builder::new()
        .name("ctrl-c".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    say_err!("\nendless: {what} (Ctrl-C again to abort)");
                    cancel.store(true, Ordering::Relaxed);
                    let _ = tokio::signal::ctrl_c().await;
                    std::process::exit(130);
                }
            });
        });
}
