//! A command beside a sandbox's shell whose output is handed over as it
//! comes (see [`Session::run_beside_streaming`](super::Session::run_beside_streaming)),
//! instead of all at once when it ends: its standard output and error on
//! one pipe, its file descriptor 3 on another, each delivered in the
//! pieces the pipe gives, up to [`CAPTURE_LIMIT`] bytes per pipe (the rest
//! is read and dropped, so the command never blocks on a full pipe).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::detach::detach_from_terminal;
use super::SandboxError;

/// The most [`spawn_capture`](super::session::spawn_capture) keeps of a
/// stream (a command's output, the verifier's result pipe); the rest is
/// read and dropped.
pub const CAPTURE_LIMIT: usize = 16 * 1024 * 1024;

/// Which pipe a piece of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pipe {
    /// The command's standard output and error, interleaved.
    Output,
    /// Its file descriptor 3.
    Fd3,
}

/// How a streamed command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamedExit {
    /// Exit code; `None` when killed or timed out.
    pub code: Option<i32>,
    /// It ran past its timeout and was killed.
    pub timed_out: bool,
    /// Some output was dropped past [`CAPTURE_LIMIT`] bytes of one pipe.
    pub truncated: bool,
}

/// Run `cmd` in a session of its own with stdin closed, its stdout and
/// stderr on one pipe and its fd 3 on another, calling `sink` with each
/// piece as it arrives; kill its process group after `timeout`, or as soon
/// as `cancel` is set (its caller went away: it then ends as killed, with
/// no exit status and not timed out).
pub fn run_streaming(
    mut cmd: Command,
    timeout: Duration,
    cancel: &AtomicBool,
    sink: &mut dyn FnMut(Pipe, &[u8]),
) -> Result<StreamedExit, SandboxError> {
    let (out_r, out_w) = pipe()?;
    let out_w2 = out_w
        .try_clone()
        .map_err(SandboxError::io("dup pipe", "pipe"))?;
    let (fd3_r, fd3_w) = pipe()?;
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd3_w);
    cmd.stdin(Stdio::null()).stdout(out_w).stderr(out_w2);
    detach_from_terminal(&mut cmd);
    // SAFETY: dup2/fcntl are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            super::fds::close_inherited(&[])?;
            if raw == 3 {
                if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(raw, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| SandboxError::Start(format!("spawn {:?}: {e}", cmd.get_program())))?;
    drop(cmd);
    drop(fd3_w);
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::channel::<(Pipe, Vec<u8>)>();
    let readers = [(Pipe::Output, out_r), (Pipe::Fd3, fd3_r)].map(|(which, mut file)| {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 16384];
            while let Ok(n) = file.read(&mut buf) {
                if n == 0 || tx.send((which, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        })
    });
    drop(tx);
    let deadline = Instant::now() + timeout;
    let (mut status, mut timed_out) = (None, false);
    let mut sent = [0usize; 2];
    let mut truncated = false;
    let mut exited = false;
    // Both pipes closed (every writer gone); the command may still run.
    let mut drained = false;
    while !(drained && exited) {
        if drained {
            let left = deadline.saturating_duration_since(Instant::now());
            std::thread::sleep(left.min(Duration::from_millis(20)));
        } else {
            let wait = if exited {
                Duration::from_millis(50)
            } else {
                deadline
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(20))
            };
            match rx.recv_timeout(wait) {
                Ok((which, bytes)) => {
                    let n = &mut sent[which as usize];
                    let room = CAPTURE_LIMIT.saturating_sub(*n);
                    let keep = bytes.len().min(room);
                    truncated |= keep < bytes.len();
                    if keep > 0 {
                        *n += keep;
                        sink(which, &bytes[..keep]);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => drained = true,
                Err(mpsc::RecvTimeoutError::Timeout) if exited => {
                    // Ended, but something it left holds the pipes: end it.
                    kill_group(pid);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
        if !exited {
            match child.try_wait() {
                Ok(Some(s)) => {
                    status = Some(s);
                    exited = true;
                }
                Ok(None) if Instant::now() >= deadline => {
                    timed_out = true;
                    kill_group(pid);
                    let _ = child.wait();
                    exited = true;
                }
                Ok(None) if cancel.load(Ordering::Relaxed) => {
                    kill_group(pid);
                    let _ = child.wait();
                    exited = true;
                }
                Ok(None) => {}
                Err(_) => exited = true,
            }
        }
    }
    kill_group(pid);
    for r in readers {
        let _ = r.join();
    }
    Ok(StreamedExit {
        code: status.and_then(|s| s.code()),
        timed_out,
        truncated,
    })
}

/// SIGKILL every process of the group `pid` leads.
fn kill_group(pid: i32) {
    // SAFETY: kill(2) on the process group the command leads.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}

/// A close-on-exec pipe as files: (read end, write end).
fn pipe() -> Result<(std::fs::File, std::fs::File), SandboxError> {
    let (r, w) = super::fds::pipe().map_err(SandboxError::io("create pipe", "pipe"))?;
    Ok((std::fs::File::from(r), std::fs::File::from(w)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn output_arrives_before_the_command_ends() {
        let start = Instant::now();
        let mut seen = Vec::new();
        let exit = run_streaming(
            sh("echo one; echo err >&3; sleep 1; echo two"),
            Duration::from_secs(10),
            &AtomicBool::new(false),
            &mut |pipe, bytes| seen.push((pipe, bytes.to_vec(), start.elapsed())),
        )
        .unwrap();
        assert_eq!(exit.code, Some(0));
        assert!(!exit.timed_out && !exit.truncated);
        let first = seen.iter().find(|(p, _, _)| *p == Pipe::Output).unwrap();
        assert_eq!(first.1, b"one\n");
        assert!(first.2 < Duration::from_millis(900), "{:?}", first.2);
        assert!(seen
            .iter()
            .any(|(p, b, _)| *p == Pipe::Fd3 && b == b"err\n"));
        let out: Vec<u8> = seen
            .iter()
            .filter(|(p, _, _)| *p == Pipe::Output)
            .flat_map(|(_, b, _)| b.clone())
            .collect();
        assert_eq!(out, b"one\ntwo\n");
    }

    #[test]
    fn the_exit_status_is_kept_however_fast_the_command_ends() {
        for _ in 0..20 {
            let exit = run_streaming(
                sh("exit 7"),
                Duration::from_secs(10),
                &AtomicBool::new(false),
                &mut |_, _| {},
            )
            .unwrap();
            assert_eq!(exit.code, Some(7), "{exit:?}");
        }
    }

    #[test]
    fn a_command_that_closes_its_output_still_has_its_timeout() {
        let start = Instant::now();
        let exit = run_streaming(
            sh("exec >&- 2>&- 3>&-; sleep 30"),
            Duration::from_millis(300),
            &AtomicBool::new(false),
            &mut |_, _| {},
        )
        .unwrap();
        assert!(exit.timed_out && exit.code.is_none(), "{exit:?}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_cancelled_command_is_killed_at_once() {
        let cancel = std::sync::Arc::new(AtomicBool::new(false));
        let setter = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            setter.store(true, Ordering::Relaxed);
        });
        let start = Instant::now();
        let exit = run_streaming(
            sh("exec >&- 2>&- 3>&-; sleep 30"),
            Duration::from_secs(60),
            &cancel,
            &mut |_, _| {},
        )
        .unwrap();
        assert!(!exit.timed_out && exit.code.is_none(), "{exit:?}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_command_past_its_timeout_is_killed() {
        let start = Instant::now();
        let exit = run_streaming(
            sh("sleep 30 & echo started; wait"),
            Duration::from_millis(300),
            &AtomicBool::new(false),
            &mut |_, _| {},
        )
        .unwrap();
        assert!(exit.timed_out && exit.code.is_none(), "{exit:?}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
