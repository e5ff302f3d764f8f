//! How far getting an image has come: a pull's layers and bytes, a build's
//! steps. Pulls ([`super::pull_from`]) and builds (the sandbox's) report
//! [`Progress`] to a callback; the workbench turns it into job progress
//! events, which the CLI's progress bars and the TUI's Jobs view draw.

/// What a pull or a build has done so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// An image being pulled (layers already in the store count as done).
    Pull {
        /// The canonical reference.
        reference: String,
        /// Layers complete.
        layers_done: usize,
        /// Layers in the image.
        layers: usize,
        /// Compressed bytes complete.
        bytes_done: u64,
        /// Compressed bytes of all layers.
        bytes: u64,
    },
    /// A build step starting, or taken from the cache.
    Step {
        /// Its number in the whole build (1-based, earlier stages first).
        index: usize,
        /// Steps in the whole build.
        steps: usize,
        /// The step as written (`environment/Dockerfile line 3: RUN ...`).
        what: String,
        /// Whether its layer came from the cache.
        cached: bool,
    },
}

/// Where progress goes.
pub type ProgressFn<'a> = &'a (dyn Fn(&Progress) + Sync);

/// A callback for progress nobody watches.
pub fn no_progress(_: &Progress) {}

impl Progress {
    /// Units done and in all, for a bar: bytes of a pull, steps of a build.
    pub fn counts(&self) -> (u64, u64) {
        match self {
            Progress::Pull {
                bytes_done, bytes, ..
            } => (*bytes_done, *bytes),
            Progress::Step { index, steps, .. } => (*index as u64, *steps as u64),
        }
    }

    /// One line, the figures first (a narrow column cuts the end):
    /// `pull 1/2 layers, 1.2/4.5 MB: REF`, `build step 3/7: RUN make
    /// (environment/Dockerfile line 3, cached)`.
    pub fn line(&self) -> String {
        match self {
            Progress::Pull {
                reference,
                layers_done,
                layers,
                bytes_done,
                bytes,
            } => format!(
                "pull {layers_done}/{layers} layers, {:.1}/{}: {reference}",
                *bytes_done as f64 / 1e6,
                megabytes(*bytes)
            ),
            Progress::Step {
                index,
                steps,
                what,
                cached,
            } => {
                // `environment/Dockerfile line 3: RUN make`: the instruction
                // first, where it is written after it.
                let (text, mut notes) = match what.split_once(": ") {
                    Some((at, text)) if at.contains(" line ") => (text, vec![at]),
                    _ => (what.as_str(), Vec::new()),
                };
                if *cached {
                    notes.push("cached");
                }
                let notes = if notes.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", notes.join(", "))
                };
                format!("build step {index}/{steps}: {text}{notes}")
            }
        }
    }
}

/// `n` bytes as megabytes with one decimal (`4.5 MB`).
pub fn megabytes(n: u64) -> String {
    format!("{:.1} MB", n as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_counts() {
        let p = Progress::Pull {
            reference: "127.0.0.1:5000/x:1".into(),
            layers_done: 1,
            layers: 2,
            bytes_done: 1_240_000,
            bytes: 4_500_000,
        };
        assert_eq!(p.line(), "pull 1/2 layers, 1.2/4.5 MB: 127.0.0.1:5000/x:1");
        assert_eq!(p.counts(), (1_240_000, 4_500_000));
        let step = |what: &str, cached| Progress::Step {
            index: 3,
            steps: 7,
            what: what.into(),
            cached,
        };
        let s = step("environment/Dockerfile line 3: RUN make: all", true);
        assert_eq!(
            s.line(),
            "build step 3/7: RUN make: all (environment/Dockerfile line 3, cached)"
        );
        assert_eq!(s.counts(), (3, 7));
        assert_eq!(
            step("create the agent account", false).line(),
            "build step 3/7: create the agent account"
        );
    }
}
