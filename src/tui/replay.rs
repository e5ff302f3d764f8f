//! Replay of an asciicast v2 recording (`<episode>.cast`): the output
//! events, a position on the timeline, play / pause / step / speed, and the
//! screen at the position rendered through a vt100 parser.

/// A parsed recording.
#[derive(Debug, Clone, Default)]
pub struct Cast {
    /// Terminal columns recorded.
    pub width: u16,
    /// Terminal rows recorded.
    pub height: u16,
    /// `(seconds, bytes)` of each output event, in order.
    pub events: Vec<(f64, Vec<u8>)>,
    /// Made from the episode's steps (no terminal was recorded, as for a
    /// run imported from Harbor), not from a `.cast` file.
    pub transcript: bool,
}

impl Cast {
    /// Parse asciicast v2 text; bad lines are reported with their number.
    pub fn parse(text: &str) -> Result<Cast, String> {
        let mut lines = text.lines();
        let header: serde_json::Value = lines
            .next()
            .ok_or("empty recording")
            .and_then(|l| serde_json::from_str(l).map_err(|_| "line 1: not a JSON header"))?;
        let dim = |k: &str| header.get(k).and_then(|v| v.as_u64()).unwrap_or(80) as u16;
        let mut cast = Cast {
            width: dim("width").max(1),
            height: dim("height").max(1),
            events: Vec::new(),
            transcript: false,
        };
        for (n, line) in lines.enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| format!("line {}: not a JSON event: {e}", n + 2))?;
            let (Some(t), Some(kind), Some(data)) = (
                v.get(0).and_then(|t| t.as_f64()),
                v.get(1).and_then(|k| k.as_str()),
                v.get(2).and_then(|d| d.as_str()),
            ) else {
                return Err(format!("line {}: expected [time, code, data]", n + 2));
            };
            if kind == "o" {
                cast.events.push((t, data.as_bytes().to_vec()));
            }
        }
        cast.strip_markers();
        Ok(cast)
    }

    /// Take the exec protocol's end markers out of the output events (a
    /// marker split across events included): people never see them.
    fn strip_markers(&mut self) {
        use crate::tui::widgets::terminal::MarkerFilter;
        let mut filter = MarkerFilter::default();
        for (_, bytes) in &mut self.events {
            *bytes = filter.push_bytes(bytes);
        }
        if let Some((_, last)) = self.events.last_mut() {
            last.extend(filter.finish());
        }
        self.events.retain(|(_, b)| !b.is_empty());
    }

    /// A transcript to play where no terminal was recorded: each step's
    /// command after a `$ ` prompt, then its output, one event per step,
    /// timed by the steps' own durations.
    pub fn transcript(steps: &[crate::agent::Step]) -> Cast {
        let mut events = Vec::new();
        let mut t = 0.0;
        for s in steps {
            t += s.policy_secs.max(0.0) + 0.1;
            let mut text = String::new();
            if s.kind == crate::agent::StepKind::Human {
                text.push_str("[human] ");
            }
            match &s.command {
                Some(c) => text.push_str(&format!("$ {c}\n")),
                None if s.kind == crate::agent::StepKind::Done => text.push_str("[done]\n"),
                None => text.push_str(&format!(
                    "[turn {}: {}]\n",
                    s.turn,
                    s.error.as_deref().unwrap_or("no command")
                )),
            }
            if !s.output.is_empty() {
                text.push_str(&s.output);
                if !s.output.ends_with('\n') {
                    text.push('\n');
                }
            }
            // A terminal needs carriage returns; control bytes from the
            // output are shown, never obeyed.
            let text = text.replace("\r\n", "\n");
            let shown = crate::task::terminal_safe(&text).replace('\n', "\r\n");
            events.push((t, shown.into_bytes()));
            t += s.exec_secs.max(0.0);
        }
        Cast {
            width: 100,
            height: 30,
            events,
            transcript: true,
        }
    }

    /// Length in seconds.
    pub fn duration(&self) -> f64 {
        self.events.last().map_or(0.0, |e| e.0)
    }
}

/// Playback state.
#[derive(Debug, Clone)]
pub struct Replay {
    /// The recording.
    pub cast: Cast,
    /// Events shown (a prefix of `cast.events`).
    pub position: usize,
    /// Playing (rather than paused).
    pub playing: bool,
    /// Playback speed multiplier.
    pub speed: f64,
    /// Seconds of recording time played since the current event.
    clock: f64,
}

/// Speeds the speed keys step through.
const SPEEDS: [f64; 6] = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0];

impl Replay {
    /// Paused at the end (the final screen is the most telling).
    pub fn new(cast: Cast) -> Replay {
        let position = cast.events.len();
        Replay {
            cast,
            position,
            playing: false,
            speed: 1.0,
            clock: 0.0,
        }
    }

    /// The time of the current position.
    pub fn time(&self) -> f64 {
        match self.position {
            0 => 0.0,
            p => self.cast.events[p - 1].0,
        }
    }

    /// Play or pause; playing at the end restarts.
    pub fn toggle(&mut self) {
        if !self.playing && self.position >= self.cast.events.len() {
            self.position = 0;
        }
        self.playing = !self.playing;
        self.clock = 0.0;
    }

    /// Step `n` events (negative: back); pauses.
    pub fn step(&mut self, n: isize) {
        self.playing = false;
        let max = self.cast.events.len() as isize;
        self.position = (self.position as isize + n).clamp(0, max) as usize;
    }

    /// Next / previous speed.
    pub fn faster(&mut self, up: bool) {
        let i = SPEEDS.iter().position(|s| *s >= self.speed).unwrap_or(1);
        let j = if up {
            (i + 1).min(SPEEDS.len() - 1)
        } else {
            i.saturating_sub(1)
        };
        self.speed = SPEEDS[j];
    }

    /// Advance playback by `dt` wall seconds.
    pub fn tick(&mut self, dt: f64) {
        if !self.playing {
            return;
        }
        self.clock += dt * self.speed;
        while let Some((t, _)) = self.cast.events.get(self.position) {
            // Long idle gaps are capped at two seconds of recording time.
            let gap = (t - self.time()).min(2.0);
            if self.clock < gap {
                break;
            }
            self.clock -= gap;
            self.position += 1;
        }
        if self.position >= self.cast.events.len() {
            self.playing = false;
        }
    }

    /// A parser holding the screen at the current position.
    pub fn screen(&self) -> vt100::Parser {
        let mut p = vt100::Parser::new(self.cast.height, self.cast.width, 0);
        for (_, bytes) in &self.cast.events[..self.position] {
            p.process(bytes);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_steps_and_plays() {
        let text = "{\"version\":2,\"width\":20,\"height\":4}\n[0.1,\"o\",\"$ ls\\r\\n\"]\n[0.2,\"i\",\"x\"]\n[1.0,\"o\",\"a b\\r\\n\"]\n";
        let cast = Cast::parse(text).unwrap();
        assert_eq!((cast.width, cast.height, cast.events.len()), (20, 4, 2));
        let mut r = Replay::new(cast);
        assert!(r.screen().screen().contents().contains("a b"));
        r.step(-1);
        assert!(!r.screen().screen().contents().contains("a b"));
        r.toggle();
        r.tick(0.5);
        assert_eq!(r.position, 1);
        r.tick(1.0);
        assert_eq!(r.position, 2);
        assert!(!r.playing);
        assert!(Cast::parse("{}\n[1]\n").unwrap_err().contains("line 2"));
    }

    #[test]
    fn steps_play_as_a_transcript_without_a_recording() {
        use crate::agent::{Step, StepKind};
        let mut ls = Step::new(1, StepKind::Command);
        ls.command = Some("ls".into());
        ls.output = "a.txt\r\nb.txt\x1b[2J".into();
        ls.exec_secs = 1.0;
        let mut bad = Step::new(2, StepKind::Malformed);
        bad.error = Some("no command".into());
        let done = Step::new(3, StepKind::Done);
        let cast = Cast::transcript(&[ls, bad, done]);
        assert!(cast.transcript);
        assert_eq!(cast.events.len(), 3);
        assert!(cast.events[1].0 > cast.events[0].0 + 1.0);
        let screen = Replay::new(cast).screen().screen().contents();
        assert!(screen.contains("$ ls\na.txt\nb.txt"), "{screen}");
        assert!(
            screen.contains("\\x1b[2J"),
            "control bytes are shown: {screen}"
        );
        assert!(
            screen.contains("[turn 2: no command]") && screen.contains("[done]"),
            "{screen}"
        );
    }

    #[test]
    fn markers_never_reach_the_screen() {
        let text = "{\"version\":2,\"width\":30,\"height\":4}\n[0.1,\"o\",\"hi\\r\\n\\r\\n__END\"]\n[0.2,\"o\",\"LESS_t_1_0__\\r\\n\"]\n";
        let cast = Cast::parse(text).unwrap();
        let screen = Replay::new(cast).screen().screen().contents();
        assert!(!screen.contains("ENDLESS"), "{screen}");
        assert!(screen.contains("hi"), "{screen}");
    }
}
