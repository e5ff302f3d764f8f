//! `cheap-solutions`: scripted shortcut policies built from the
//! instruction alone, each played in a fresh sandbox as the agent:
//!
//! - `empty-files`: create every path the instruction names that does not
//!   exist yet, empty;
//! - `echo-values`: write the values the instruction shows (code blocks,
//!   `inline code`, "quoted strings") into those paths;
//! - `copy-input-N`: copy the N-th existing file the instruction names to
//!   those paths.
//!
//! A shortcut the final tests accept is a finding with its transcript.

use super::lab::{failures, transcript, Deadline, Lab};
use super::mentions::{paths_in, values_in};
use super::snapshot::shell_quote;
use super::{Check, CheckResult, CheckStatus, Finding};

/// The label of its findings.
pub const LABEL: &str = "cheap-solution";

/// Inputs tried by `copy-input-N` (the first ones the instruction names).
const MAX_INPUTS: usize = 3;

/// One shortcut: a name and its commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortcut {
    /// `empty-files`, `echo-values`, `copy-input-1`...
    pub name: String,
    /// The commands the agent's shell runs.
    pub commands: Vec<String>,
}

/// The shortcuts for an instruction naming `paths` (absolute) and showing
/// `values`. Each command creates only paths that do not exist yet (those
/// that exist are the inputs). With `initial` (the initial state's files),
/// shortcuts that could change nothing are left out: none when every path
/// exists (doing nothing is the passes-without-work check), and copies
/// only of files that exist.
pub fn shortcuts(
    paths: &[String],
    values: &[String],
    initial: Option<&super::snapshot::Manifest>,
) -> Vec<Shortcut> {
    if paths.is_empty() {
        return Vec::new();
    }
    let exists = |p: &String| initial.map(|m| m.contains_key(p.as_str()));
    if paths.iter().all(|p| exists(p) == Some(true)) {
        return Vec::new();
    }
    let list = paths
        .iter()
        .map(|p| shell_quote(p))
        .collect::<Vec<_>>()
        .join(" ");
    let each_missing = |body: &str| {
        format!(
            "for p in {list}; do [ -e \"$p\" ] || {{ mkdir -p \"$(dirname \"$p\")\" && {body}; }}; done"
        )
    };
    let mut out = vec![Shortcut {
        name: "empty-files".into(),
        commands: vec![each_missing(": > \"$p\"")],
    }];
    if !values.is_empty() {
        let args = values
            .iter()
            .map(|v| shell_quote(v))
            .collect::<Vec<_>>()
            .join(" ");
        out.push(Shortcut {
            name: "echo-values".into(),
            commands: vec![each_missing(&format!("printf '%s\\n' {args} > \"$p\""))],
        });
    }
    let inputs = paths
        .iter()
        .filter(|p| initial.is_none_or(|m| m.get(p.as_str()).is_some_and(|e| e.kind == 'f')));
    for (n, src) in inputs.take(MAX_INPUTS).enumerate() {
        let src = shell_quote(src);
        out.push(Shortcut {
            name: format!("copy-input-{}", n + 1),
            commands: vec![format!(
                "if [ -f {src} ]; then {}; fi",
                each_missing(&format!("cp {src} \"$p\""))
            )],
        });
    }
    out
}

/// Run the check (`initial`: the initial state's files, when listed).
pub(crate) fn run(
    lab: &Lab<'_>,
    initial: Option<&super::snapshot::Manifest>,
    deadline: Deadline,
) -> CheckResult {
    let check = Check::CheapSolutions;
    let home = crate::sandbox::home_of(&lab.image.user);
    let paths = paths_in(&lab.task.instruction, &home, &lab.image.workdir);
    let values = values_in(&lab.task.instruction);
    let list = shortcuts(&paths, &values, initial);
    if list.is_empty() {
        return CheckResult::done(
            check,
            Vec::new(),
            vec!["the instruction names no path to create: no shortcut to try".into()],
        );
    }
    let mut findings = Vec::new();
    let mut notes = Vec::new();
    for (i, s) in list.iter().enumerate() {
        if deadline.passed() {
            let mut r = CheckResult::new(
                check,
                CheckStatus::OutOfTime {
                    done: format!("{i} of {} shortcuts played", list.len()),
                },
            );
            r.findings = findings;
            r.notes = notes;
            return r;
        }
        match lab.play(s.commands.clone()) {
            Ok(played) => {
                if played.report.passed {
                    findings.push(Finding {
                        check,
                        label: LABEL.into(),
                        summary: format!("the shortcut `{}` passes the final tests", s.name),
                        tests: super::lab::names(&played.report, true),
                        evidence: transcript(&played.trajectory),
                    });
                } else if played.report.fraction_passed() > 0.0 {
                    notes.push(format!(
                        "`{}` passes {:.0}% of the final tests; still failing:\n{}",
                        s.name,
                        played.report.fraction_passed() * 100.0,
                        failures(&played.report)
                    ));
                }
                played.session.close();
            }
            Err(e) => return CheckResult::error(check, format!("shortcut `{}`: {e}", s.name)),
        }
    }
    CheckResult::done(check, findings, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortcuts_from_paths_and_values() {
        let s = shortcuts(&["/home/user/out.txt".into()], &["42".into()], None);
        let names: Vec<&str> = s.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, vec!["empty-files", "echo-values", "copy-input-1"]);
        assert_eq!(
            s[0].commands[0],
            "for p in '/home/user/out.txt'; do [ -e \"$p\" ] || { mkdir -p \"$(dirname \"$p\")\" && : > \"$p\"; }; done"
        );
        assert!(s[1].commands[0].contains("printf '%s\\n' '42' > \"$p\""));
        assert!(shortcuts(&[], &["x".into()], None).is_empty());
        // Knowing the initial state: copies only of files there, nothing when all exist.
        let m = crate::audit::snapshot::parse("f\t644\t0\t0\t1\t1\t/in.txt\n");
        let both = vec!["/in.txt".to_string(), "/out.txt".to_string()];
        let names: Vec<String> = shortcuts(&both, &[], Some(&m))
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, vec!["empty-files", "copy-input-1"]);
        assert!(shortcuts(&both[..1], &[], Some(&m)).is_empty());
    }

    #[test]
    fn shortcut_commands_run_in_bash() {
        // The commands are real shell: run them on a scratch directory.
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.txt");
        std::fs::write(&input, "data\n").unwrap();
        let out = dir.path().join("sub/out.txt");
        let paths = vec![input.display().to_string(), out.display().to_string()];
        for s in shortcuts(&paths, &["a b".into(), "c".into()], None) {
            let _ = std::fs::remove_dir_all(dir.path().join("sub"));
            let st = std::process::Command::new("bash")
                .arg("-c")
                .arg(&s.commands[0])
                .status()
                .unwrap();
            assert!(st.success(), "{}", s.name);
            if s.name == "copy-input-2" {
                assert!(!out.exists(), "a missing input is not copied");
                continue;
            }
            let got = std::fs::read_to_string(&out).unwrap();
            let want = match s.name.as_str() {
                "empty-files" => "",
                "echo-values" => "a b\nc\n",
                _ => "data\n",
            };
            assert_eq!(got, want, "{}", s.name);
            assert_eq!(std::fs::read_to_string(&input).unwrap(), "data\n");
        }
    }
}
