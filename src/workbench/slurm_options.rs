//! The sbatch options of `endless slurm submit`, checked before any goes
//! into a batch script: a value that could end its `#SBATCH` line (a
//! newline, a quote, `#`, a space) or pass for a shell word is refused,
//! naming its option (or `[slurm] extra` of the config).
//!
//! Options go on the jobs they concern: the site's (`--partition`,
//! `--account`, `--qos`, every `--sbatch-arg` and `[slurm] extra` line) on
//! every job of a submission; the resources of one shard (`--time`,
//! `--cpus`, `--mem`, `--gres`, `--constraint`, `--exclusive`,
//! `--requeue-before`) on the array only.

use anyhow::{bail, Result};

/// `'s'`, quoted for a POSIX shell.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `s` as one argument of an `#SBATCH` line: in double quotes, with `"`
/// and `\` escaped (sbatch's rules; an unquoted `#` or space would end it).
pub fn sbatch_quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', r"\\").replace('"', r#"\""#))
}

/// Refuse `value` (of `what`) when it holds a control character: a
/// newline would start a line of the batch script of its own.
pub fn no_control(what: &str, value: &str) -> Result<()> {
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        bail!("{what} {value:?}: holds the control character {c:?}, which would break the batch script");
    }
    Ok(())
}

/// The sbatch options endless writes itself: a `--sbatch-arg` or
/// `[slurm] extra` line may not set them.
const OWN: [&str; 11] = [
    "array",
    "output",
    "error",
    "input",
    "job-name",
    "dependency",
    "kill-on-invalid-dep",
    "open-mode",
    "wrap",
    "parsable",
    "signal",
];

/// The sbatch options of a submission, as given (checked by [`Self::check`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SbatchOptions {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// `--qos`.
    pub qos: Option<String>,
    /// `--time` of each array task.
    pub time: Option<String>,
    /// `--cpus-per-task` of each array task.
    pub cpus: Option<u32>,
    /// `--mem` of each array task.
    pub mem: Option<String>,
    /// `--gres` of each array task (`gpu:1`, `gpu:a100:2`).
    pub gres: Option<String>,
    /// `--constraint` of each array task (`intel&ib`, `[a|b]`).
    pub constraint: Option<String>,
    /// `--exclusive`: each array task has its node to itself.
    pub exclusive: bool,
    /// Seconds before its time limit at which an array task is told to
    /// stop (`--signal=B:USR1@S`): it stops its command, which resumes
    /// where it was, and requeues itself (`--requeue`).
    pub requeue_before: Option<u32>,
    /// Array tasks running at once (`--array=...%N`).
    pub max_parallel: Option<u32>,
    /// More sbatch options, each `--name` or `--name=value`, with where it
    /// came from (`--sbatch-arg`, `[slurm] extra`).
    pub extra: Vec<(String, String)>,
}

/// Refuse `value` of `option` unless it is non-empty and every byte is an
/// ASCII letter, a digit or one of `also`.
fn charset(option: &str, value: &str, also: &str, hint: &str) -> Result<()> {
    let ok = !value.is_empty()
        && value
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || also.as_bytes().contains(&c));
    if !ok {
        bail!("{option} {value:?}: {hint}");
    }
    Ok(())
}

/// The `#SBATCH` text of one extra option (`--name` or `--name=value`)
/// from `source`: the value quoted, the name checked.
fn extra_line(source: &str, arg: &str) -> Result<String> {
    no_control(source, arg)?;
    let (name, value) = match arg.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (arg, None),
    };
    let bare = name.strip_prefix("--").unwrap_or("");
    let ok = bare.starts_with(|c: char| c.is_ascii_lowercase())
        && bare
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
    if !ok {
        bail!("{source} {arg:?}: give a long sbatch option, `--name` or `--name=value` (e.g. `--reservation=maint`)");
    }
    if OWN.contains(&bare) {
        bail!("{source} {arg:?}: endless writes --{bare} itself; leave it out");
    }
    Ok(match value {
        Some(v) => format!("#SBATCH {name}={}\n", sbatch_quote(v)),
        None => format!("#SBATCH {name}\n"),
    })
}

impl SbatchOptions {
    /// Check every value, naming the option of one that does not fit.
    pub fn check(&self) -> Result<()> {
        let names = "use letters, digits, '-', '_' and '.'";
        if let Some(p) = &self.partition {
            charset(
                "--partition",
                p,
                "-_.,",
                &format!("{names} (a list: separated by ',')"),
            )?;
        }
        if let Some(a) = &self.account {
            charset("--account", a, "-_.", names)?;
        }
        if let Some(q) = &self.qos {
            charset("--qos", q, "-_.,", names)?;
        }
        if let Some(g) = &self.gres {
            charset(
                "--gres",
                g,
                "-_.,:",
                "use Slurm's form `name[:type]:count`, a list separated by ','",
            )?;
        }
        if let Some(c) = &self.constraint {
            charset(
                "--constraint",
                c,
                "-_.,:&|*[]()!",
                "use features joined by '&', '|', ',' (and '[...]', '*N'), without spaces or quotes",
            )?;
        }
        if let Some(t) = &self.time {
            let unlimited = ["unlimited", "infinite"]
                .iter()
                .any(|u| t.eq_ignore_ascii_case(u));
            let clock = t.starts_with(|c: char| c.is_ascii_digit())
                && t.bytes()
                    .all(|c| c.is_ascii_digit() || matches!(c, b':' | b'-'));
            if !unlimited && !clock {
                bail!(
                    "--time {t:?}: use Slurm's forms (`MINUTES`, `H:MM:SS`, `D-HH:MM:SS`, `UNLIMITED`)"
                );
            }
        }
        if let Some(m) = &self.mem {
            let digits = m
                .strip_suffix(['K', 'M', 'G', 'T', 'k', 'm', 'g', 't'])
                .unwrap_or(m);
            if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                bail!(
                    "--mem {m:?}: use a number of megabytes, or one with a unit (`512M`, `8G`, `1T`)"
                );
            }
        }
        if self.cpus == Some(0) {
            bail!("--cpus 0: ask for at least one CPU");
        }
        if self.max_parallel == Some(0) {
            bail!("--max-parallel 0: let at least one array task run");
        }
        if self.requeue_before == Some(0) {
            bail!("--requeue-before 0: give the seconds before the time limit (e.g. 120)");
        }
        for (source, arg) in &self.extra {
            extra_line(source, arg)?;
        }
        Ok(())
    }

    /// The site's lines, on every job of a submission.
    pub fn site_lines(&self) -> String {
        let mut out = String::new();
        for (option, value) in [
            ("partition", &self.partition),
            ("account", &self.account),
            ("qos", &self.qos),
        ] {
            if let Some(v) = value {
                out.push_str(&format!("#SBATCH --{option}={v}\n"));
            }
        }
        for (source, arg) in &self.extra {
            // Checked by `check`; one that does not pass is left out.
            if let Ok(line) = extra_line(source, arg) {
                out.push_str(&line);
            }
        }
        out
    }

    /// The lines of an array task's resources (with the site's).
    pub fn array_lines(&self) -> String {
        let mut out = self.site_lines();
        if let Some(t) = &self.time {
            out.push_str(&format!("#SBATCH --time={t}\n"));
        }
        if let Some(c) = self.cpus {
            out.push_str(&format!("#SBATCH --cpus-per-task={c}\n"));
        }
        if let Some(m) = &self.mem {
            out.push_str(&format!("#SBATCH --mem={m}\n"));
        }
        if let Some(g) = &self.gres {
            out.push_str(&format!("#SBATCH --gres={g}\n"));
        }
        if let Some(c) = &self.constraint {
            out.push_str(&format!("#SBATCH --constraint={}\n", sbatch_quote(c)));
        }
        if self.exclusive {
            out.push_str("#SBATCH --exclusive\n");
        }
        if let Some(s) = self.requeue_before {
            out.push_str(&format!("#SBATCH --signal=B:USR1@{s}\n#SBATCH --requeue\n"));
        }
        out
    }

    /// sbatch's `--array` value for array tasks `tasks` (`0-3`, `2,5`),
    /// throttled to [`Self::max_parallel`] at once (`0-3%2`).
    pub fn array_arg(&self, tasks: &str) -> String {
        match self.max_parallel {
            Some(n) => format!("--array={tasks}%{n}"),
            None => format!("--array={tasks}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> SbatchOptions {
        SbatchOptions {
            partition: Some("gpu,debug".into()),
            account: Some("proj-42".into()),
            qos: Some("high".into()),
            time: Some("1-02:00:00".into()),
            cpus: Some(4),
            mem: Some("8G".into()),
            gres: Some("gpu:a100:2".into()),
            constraint: Some("intel&[ib|eth]".into()),
            exclusive: true,
            requeue_before: Some(60),
            max_parallel: Some(3),
            extra: vec![
                ("[slurm] extra".into(), "--reservation=maint".into()),
                ("--sbatch-arg".into(), "--comment=a \"b\" #c".into()),
                ("--sbatch-arg".into(), "--hold".into()),
            ],
        }
    }

    #[test]
    fn every_option_goes_on_its_jobs_and_the_array_is_throttled() {
        let o = site();
        o.check().unwrap();
        assert_eq!(
            o.site_lines(),
            "#SBATCH --partition=gpu,debug\n#SBATCH --account=proj-42\n#SBATCH --qos=high\n\
             #SBATCH --reservation=\"maint\"\n#SBATCH --comment=\"a \\\"b\\\" #c\"\n#SBATCH --hold\n"
        );
        let array = o.array_lines();
        assert!(array.starts_with(&o.site_lines()), "{array}");
        assert!(
            array.ends_with(
                "#SBATCH --time=1-02:00:00\n#SBATCH --cpus-per-task=4\n#SBATCH --mem=8G\n\
                 #SBATCH --gres=gpu:a100:2\n#SBATCH --constraint=\"intel&[ib|eth]\"\n\
                 #SBATCH --exclusive\n#SBATCH --signal=B:USR1@60\n#SBATCH --requeue\n"
            ),
            "{array}"
        );
        assert_eq!(o.array_arg("0-7"), "--array=0-7%3");
        assert_eq!(SbatchOptions::default().array_arg("2,5"), "--array=2,5");
    }

    /// Issue 48: a newline (or a quote, `#`, a space) in any value became
    /// a line of the script or ended its `#SBATCH` line early.
    #[test]
    fn values_that_would_break_the_script_are_refused_by_option() {
        let nl = "1\n#SBATCH --uid=0\ntouch /tmp/pwned";
        let cases: Vec<(SbatchOptions, &str)> = vec![
            (
                SbatchOptions {
                    partition: Some(nl.into()),
                    ..site()
                },
                "--partition",
            ),
            (
                SbatchOptions {
                    partition: Some("a b".into()),
                    ..site()
                },
                "--partition",
            ),
            (
                SbatchOptions {
                    account: Some(nl.into()),
                    ..site()
                },
                "--account",
            ),
            (
                SbatchOptions {
                    account: Some("a;b".into()),
                    ..site()
                },
                "--account",
            ),
            (
                SbatchOptions {
                    qos: Some("q#".into()),
                    ..site()
                },
                "--qos",
            ),
            (
                SbatchOptions {
                    gres: Some("gpu:1 ".into()),
                    ..site()
                },
                "--gres",
            ),
            (
                SbatchOptions {
                    constraint: Some("a\"b".into()),
                    ..site()
                },
                "--constraint",
            ),
            (
                SbatchOptions {
                    constraint: Some(nl.into()),
                    ..site()
                },
                "--constraint",
            ),
            (
                SbatchOptions {
                    time: Some(nl.into()),
                    ..site()
                },
                "--time",
            ),
            (
                SbatchOptions {
                    time: Some("1:00 #".into()),
                    ..site()
                },
                "--time",
            ),
            (
                SbatchOptions {
                    mem: Some("8GB\r".into()),
                    ..site()
                },
                "--mem",
            ),
            (
                SbatchOptions {
                    cpus: Some(0),
                    ..site()
                },
                "--cpus",
            ),
            (
                SbatchOptions {
                    max_parallel: Some(0),
                    ..site()
                },
                "--max-parallel",
            ),
            (
                SbatchOptions {
                    requeue_before: Some(0),
                    ..site()
                },
                "--requeue-before",
            ),
            (
                SbatchOptions {
                    extra: vec![("--sbatch-arg".into(), format!("--comment={nl}"))],
                    ..site()
                },
                "--sbatch-arg",
            ),
            (
                SbatchOptions {
                    extra: vec![("[slurm] extra".into(), "-A proj".into())],
                    ..site()
                },
                "[slurm] extra",
            ),
            (
                SbatchOptions {
                    extra: vec![("--sbatch-arg".into(), "--output=/etc/x".into())],
                    ..site()
                },
                "--sbatch-arg",
            ),
            (
                SbatchOptions {
                    extra: vec![("--sbatch-arg".into(), "--x; rm".into())],
                    ..site()
                },
                "--sbatch-arg",
            ),
        ];
        for (o, option) in cases {
            let e = o.check().unwrap_err().to_string();
            assert!(e.starts_with(option), "{o:?}: {e}");
        }
        for time in ["30", "0:10:00", "UNLIMITED"] {
            SbatchOptions {
                time: Some(time.into()),
                ..site()
            }
            .check()
            .unwrap();
        }
        assert!(no_control("the workspace path", "/ws/a\nb").is_err());
        no_control("the workspace path", "/ws/with space/#1").unwrap();
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
    }
}
