//! The lines `endless train` prints on stderr as it goes, so that a long
//! run is never silent (in a terminal or piped to a file): each phase, the
//! supervised warm start's steps with loss, pace and ETA (the first, the
//! last, and one every [`PACE`] between), the episodes of a PPO step (every
//! [`PACE`], where no progress bar shows them), and every PPO step.

use std::time::{Duration, Instant};

use crate::rl::session::TrainEvent;

/// The longest a long phase stays silent.
pub const PACE: Duration = Duration::from_secs(10);

/// Turns training events into progress lines; remembers what it last said.
#[derive(Debug, Default)]
pub struct TrainLines {
    /// When the supervised steps began, and the step count then.
    sft_start: Option<(Instant, u64)>,
    /// When the last paced line was printed.
    last: Option<Instant>,
}

/// `1h02m`, `3m05s`, `42s`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

impl TrainLines {
    /// Lines as events come.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a paced line is due at `now` (and if so, it is now the last).
    fn due(&mut self, now: Instant) -> bool {
        let due = self.last.is_none_or(|t| now.duration_since(t) >= PACE);
        if due {
            self.last = Some(now);
        }
        due
    }

    /// The line `ev` prints at `now`, if any. `bar` says whether a drawn
    /// progress bar already shows episodes as they finish.
    pub fn line(&mut self, ev: &TrainEvent, now: Instant, bar: bool) -> Option<String> {
        match ev {
            TrainEvent::Phase(p) => {
                if p == "sft" {
                    self.sft_start = Some((now, 0));
                }
                Some(format!("phase: {p}"))
            }
            TrainEvent::Sft { total, metrics } => {
                let (start, base) = *self
                    .sft_start
                    .get_or_insert((now, metrics.step.saturating_sub(1)));
                let done = metrics.step.saturating_sub(base).max(1);
                let per_step = now.duration_since(start).as_secs_f64() / done as f64;
                let first_or_last = metrics.step == base + 1 || metrics.step >= *total;
                if !(self.due(now) || first_or_last) {
                    return None;
                }
                let left = total.saturating_sub(metrics.step) as f64 * per_step;
                Some(format!(
                    "sft {}/{total}  loss {:.4}  {:.1} s/step  eta {}",
                    metrics.step,
                    metrics.loss,
                    per_step,
                    clock(Duration::from_secs_f64(left))
                ))
            }
            TrainEvent::Rollouts { step, done, total } => {
                if bar || !self.due(now) {
                    return None;
                }
                Some(match step {
                    0 => format!("oracle episodes {done}/{total}"),
                    s => format!("ppo step {s}: episodes {done}/{total}"),
                })
            }
            TrainEvent::Step { total, metrics: m } => Some(format!(
                "step {:>4}/{total}  reward {:.3}  pass {:.2}  pg {:+.4}  v {:.4}  clip {:.3}  ent {:.3}  kl {:+.4}{}  |g| {:.3}  {:.0} tok/s  {:.1}s",
                m.step, m.reward, m.pass_rate, m.policy_loss, m.value_loss, m.clip_frac,
                m.entropy, m.approx_kl,
                match m.kl_ref {
                    k if k > 0.0 => format!("  kl-start {k:.4}"),
                    _ => String::new(),
                },
                m.grad_norm, m.tokens_per_s, m.seconds
            )),
            TrainEvent::Eval(e) => Some(format!(
                "dev pass@1 {}: {:.3} ({}/{})",
                e.label, e.pass_at_1, e.passed, e.episodes
            )),
            TrainEvent::Checkpoint(p) => Some(format!("checkpoint {}", p.display())),
            TrainEvent::Log(l) => Some(l.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rl::run_files::SftMetrics;

    fn sft(step: u64) -> TrainEvent {
        TrainEvent::Sft {
            total: 100,
            metrics: SftMetrics {
                step,
                loss: 2.5,
                agent_tokens: 10,
                tokens_per_s: 100.0,
                lr: 1e-3,
            },
        }
    }

    #[test]
    fn supervised_steps_print_the_first_the_last_and_one_every_pace_with_an_eta() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut l = TrainLines::new();
        assert_eq!(
            l.line(&TrainEvent::Phase("sft".into()), t0, false)
                .as_deref(),
            Some("phase: sft")
        );
        let first = l.line(&sft(1), at(2), true).unwrap();
        assert_eq!(first, "sft 1/100  loss 2.5000  2.0 s/step  eta 3m18s");
        assert_eq!(l.line(&sft(2), at(4), true), None, "within the pace");
        let paced = l.line(&sft(6), at(12), true).unwrap();
        assert!(
            paced.starts_with("sft 6/100") && paced.ends_with("eta 3m08s"),
            "{paced}"
        );
        assert_eq!(l.line(&sft(7), at(14), true), None);
        let last = l.line(&sft(100), at(15), true).unwrap();
        assert!(last.ends_with("eta 0s"), "{last}");
    }

    #[test]
    fn episodes_are_paced_and_left_to_a_drawn_bar() {
        let t0 = Instant::now();
        let ev = |done| TrainEvent::Rollouts {
            step: 2,
            done,
            total: 16,
        };
        let mut l = TrainLines::new();
        assert_eq!(l.line(&ev(1), t0, true), None);
        assert_eq!(
            l.line(&ev(1), t0, false).as_deref(),
            Some("ppo step 2: episodes 1/16")
        );
        assert_eq!(l.line(&ev(2), t0 + Duration::from_secs(3), false), None);
        assert!(l.line(&ev(9), t0 + PACE, false).is_some());
    }

    #[test]
    fn clock_reads_like_a_duration() {
        assert_eq!(clock(Duration::from_secs(42)), "42s");
        assert_eq!(clock(Duration::from_secs(185)), "3m05s");
        assert_eq!(clock(Duration::from_secs(3720)), "1h02m");
    }
}
