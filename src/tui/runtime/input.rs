//! The input thread: reads terminal events and sends them to the event
//! loop. It can be paused while an external program (the editor) owns the
//! terminal.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossterm::event;

use crate::tui::action::Msg;

/// Handle to the input thread.
pub struct InputThread {
    paused: Arc<AtomicBool>,
    idle: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl InputThread {
    /// Start reading terminal events into `tx`.
    pub fn spawn(tx: Sender<Msg>) -> InputThread {
        let paused = Arc::new(AtomicBool::new(false));
        let idle = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, i, s) = (paused.clone(), idle.clone(), stop.clone());
        thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if p.load(Ordering::SeqCst) {
                    i.store(true, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(10));
                    continue;
                }
                i.store(false, Ordering::SeqCst);
                match event::poll(Duration::from_millis(50)) {
                    Ok(true) => {
                        if p.load(Ordering::SeqCst) {
                            continue;
                        }
                        let msg = match event::read() {
                            Ok(ev) => Msg::Input(ev),
                            Err(e) => Msg::InputError(e.to_string()),
                        };
                        if tx.send(msg).is_err() {
                            return;
                        }
                    }
                    Ok(false) => {}
                    Err(e) => {
                        let _ = tx.send(Msg::InputError(e.to_string()));
                        return;
                    }
                }
            }
        });
        InputThread { paused, idle, stop }
    }

    /// Stop reading (waits up to a second for the thread to go idle).
    pub fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
        for _ in 0..100 {
            if self.idle.load(Ordering::SeqCst) {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Resume reading.
    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }
}

impl Drop for InputThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
