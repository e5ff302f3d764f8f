//! `underspecified` (static): paths, file names and exact strings the
//! final tests require that the instruction never mentions, nor the
//! initial state holds (the environment's files and setup, the initial
//! tests, and when a sandbox runs, the files of the initial state: a name
//! there, or one derived from it by an added extension like `.gz`, can be
//! found by looking). An exact string counts when it is compared in the
//! test (`==`, `!=`, `in`, `startswith`, `endswith`) and has a word the
//! instruction and the initial state never use. Candidates for a human,
//! each with the test line.
//!
//! What it cannot see: values the tests compute (a path joined from
//! variables, an expected list built in a loop), strings compared on
//! another line than the literal's, triple-quoted text (docstrings),
//! formats checked by a regular expression; and a mention in other words
//! ("the usual log file").

use super::mentions::{absolute, is_path_like, literal_pieces, paths_in, python_strings};
use super::{Check, CheckResult, Finding};
use crate::task::Task;

/// The label of its findings.
pub const LABEL: &str = "underspecified";

/// Trees whose paths are the system's, not the task's.
const SYSTEM: [&str; 10] = [
    "/usr/",
    "/bin/",
    "/sbin/",
    "/lib",
    "/proc/",
    "/dev/",
    "/sys/",
    "/run/",
    "/etc/passwd",
    "/tmp/endless",
];

/// Run the check; `initial` lists the files of the initial state, when a
/// sandbox listed them.
pub fn run(task: &Task, initial: Option<&super::snapshot::Manifest>) -> CheckResult {
    let check = Check::Underspecified;
    let home = crate::sandbox::home_of(&task.meta.agent.user);
    let workdir = task
        .meta
        .environment
        .workdir
        .trim_end_matches('/')
        .to_string();
    let mut ctx = Known::of(task, &home, &workdir);
    let mut findings = Vec::new();
    let mut notes = Vec::new();
    match initial {
        Some(m) => {
            for path in m.keys() {
                ctx.files.insert(path.clone());
                if let Some(base) = path.rsplit('/').next() {
                    ctx.files.insert(base.to_string());
                }
            }
        }
        None => notes.push(
            "the initial state's files were not listed (no sandbox): names only the setup creates may be reported".into(),
        ),
    }
    if let Some(script) = &task.meta.verifier.script {
        notes.push(format!(
            "tests/{script} is a verifier script: only pytest modules are read"
        ));
    }
    for file in &task.meta.verifier.final_tests {
        let Some(source) = task.tests.text(file).filter(|_| file.ends_with(".py")) else {
            continue;
        };
        findings.extend(candidates(file, source, &ctx));
    }
    CheckResult::done(check, findings, notes)
}

/// What the agent can know: the instruction (and the paths it names), and
/// what the initial state holds.
pub(crate) struct Known {
    instruction: String,
    instruction_lower: String,
    named: Vec<String>,
    environment: String,
    environment_lower: String,
    /// Paths and file names of the initial state.
    files: std::collections::BTreeSet<String>,
    home: String,
    workdir: String,
}

impl Known {
    /// What `task` tells or shows the agent.
    pub fn of(task: &Task, home: &str, workdir: &str) -> Known {
        let mut environment = String::new();
        for (path, entry) in task.environment.iter() {
            environment.push_str(path);
            environment.push('\n');
            environment.push_str(&String::from_utf8_lossy(&entry.bytes));
            environment.push('\n');
        }
        for name in &task.meta.verifier.initial_tests {
            if let Some(t) = task.tests.text(name) {
                environment.push_str(t);
            }
        }
        Known {
            instruction: task.instruction.clone(),
            instruction_lower: task.instruction.to_lowercase(),
            named: paths_in(&task.instruction, home, workdir),
            environment_lower: environment.to_lowercase(),
            environment,
            files: Default::default(),
            home: home.to_string(),
            workdir: workdir.to_string(),
        }
    }

    /// Whether path `p` (as the test writes it) is one the agent is told
    /// or can find.
    fn knows_path(&self, p: &str) -> bool {
        let p = p.trim_end_matches('/');
        let abs = absolute(p, &self.home, &self.workdir);
        let base = abs.rsplit('/').next().unwrap_or("");
        if abs == self.home || abs == self.workdir || p.is_empty() || base.is_empty() {
            return true;
        }
        let tilde = abs
            .strip_prefix(&format!("{}/", self.home))
            .map(|r| format!("~/{r}"));
        self.instruction.contains(p)
            || self.instruction.contains(&abs)
            || tilde.is_some_and(|t| self.instruction.contains(&t))
            || (base.len() >= 3 && self.instruction.contains(base))
            // A directory of a path the instruction names.
            || self.named.iter().any(|n| n.starts_with(&format!("{abs}/")))
            || self.environment.contains(p)
            || self.environment.contains(base)
            || self.in_initial_state(&abs)
    }

    /// Whether `abs` (or the file it is derived from by added extensions,
    /// `a.log.gz` from `a.log`) is a file of the initial state.
    fn in_initial_state(&self, abs: &str) -> bool {
        let base = abs.rsplit('/').next().unwrap_or(abs);
        let mut stem = base;
        loop {
            if self.files.contains(abs) || (stem.len() >= 5 && self.files.contains(stem)) {
                return true;
            }
            match stem.rsplit_once('.') {
                Some((s, _)) if !s.is_empty() => stem = s,
                _ => return false,
            }
        }
    }

    /// Whether exact string `s` is said in the instruction or present in
    /// the initial state, or every word of it is used there (its form
    /// may be computed, like `log 4` from the files).
    fn knows_string(&self, s: &str) -> bool {
        let lower = s.to_lowercase();
        if self.instruction_lower.contains(&lower) || self.environment.contains(s) {
            return true;
        }
        lower
            .split(|c: char| !c.is_alphabetic())
            .filter(|w| w.chars().count() >= 3)
            .all(|w| self.instruction_lower.contains(w) || self.environment_lower.contains(w))
    }
}

/// The candidates of one test module.
pub(crate) fn candidates(file: &str, source: &str, known: &Known) -> Vec<Finding> {
    let lines: Vec<&str> = source.lines().collect();
    // A module that makes files of its own (to run the agent's script on)
    // names them bare: those are its inputs, not what it requires.
    let makes_files = [
        "tmp_path",
        "mkdtemp",
        "TemporaryDirectory",
        "write_text(",
        ".touch(",
        "'w')",
        "\"w\")",
    ]
    .iter()
    .any(|m| source.contains(m));
    let mut out: Vec<Finding> = Vec::new();
    for lit in python_strings(source).into_iter().filter(|l| !l.triple) {
        let line = lines.get(lit.line - 1).copied().unwrap_or("");
        let pieces = if lit.formatted {
            literal_pieces(&lit.value)
        } else {
            vec![lit.value.clone()]
        };
        for piece in pieces {
            let p = piece.trim();
            let what = if is_path_like(p) {
                let bare = !p.contains('/');
                if SYSTEM.iter().any(|s| p.starts_with(s))
                    || known.knows_path(p)
                    || (bare && makes_files)
                {
                    continue;
                }
                "path"
            } else {
                let compared = compared_on(line, p);
                let telling = p.chars().count() >= 4 && p.chars().any(|c| c.is_alphabetic());
                if !compared || !telling || known.knows_string(p) {
                    continue;
                }
                "exact string"
            };
            let test = enclosing_test(&lines, lit.line).map_or_else(
                || file.trim_end_matches(".py").replace('/', "."),
                |t| format!("{}::{t}", file.trim_end_matches(".py").replace('/', ".")),
            );
            if out.iter().any(|f| f.summary.contains(&format!("`{p}`"))) {
                continue;
            }
            out.push(Finding {
                check: Check::Underspecified,
                label: LABEL.into(),
                summary: format!("the tests require the {what} `{p}`, which the instruction never mentions"),
                tests: vec![test],
                evidence: format!(
                    "tests/{file}:{}: {}\nmissing from the instruction (and not in the initial state): `{p}`",
                    lit.line,
                    line.trim()
                ),
            });
        }
    }
    out
}

/// Whether the literal `value` on `line` is compared (`==`, `!=`, `in`,
/// `startswith`, `endswith`) rather than an assertion's message.
fn compared_on(line: &str, value: &str) -> bool {
    let Some(at) = line.find(value) else {
        return false;
    };
    let t = line.trim_start();
    if t.starts_with("assert") {
        if let Some(msg) = message_start(line) {
            if at >= msg {
                return false;
            }
        }
    }
    let code = super::mentions::code_of(line);
    ["==", "!=", " in ", "startswith(", "endswith("]
        .iter()
        .any(|op| code.contains(op))
}

/// Where an `assert` line's message starts: after its last comma outside
/// brackets and quotes.
fn message_start(line: &str) -> Option<usize> {
    let (mut depth, mut quote, mut last) = (0i32, None, None);
    let mut chars = line.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match quote {
            Some(q) => {
                if c == '\\' {
                    chars.next();
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '\'' | '"' => quote = Some(c),
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                ',' if depth == 0 => last = Some(i),
                '#' => break,
                _ => {}
            },
        }
    }
    last
}

/// The name of the test function `line` (1-based) is in, if any.
fn enclosing_test(lines: &[&str], line: usize) -> Option<String> {
    lines[..line.min(lines.len())].iter().rev().find_map(|l| {
        let t = l.trim_start();
        let rest = t
            .strip_prefix("def ")
            .or_else(|| t.strip_prefix("async def "))?;
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        name.starts_with("test").then_some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(instruction: &str, final_test: &str) -> Task {
        let mut t = Task::minimal("t");
        t.instruction = instruction.into();
        t.meta.verifier.final_tests = vec!["test_final_state.py".into()];
        t.tests.insert_text("test_final_state.py", final_test);
        t.environment.insert_text(
            "setup.sh",
            "mkdir -p /home/user/data\necho 'alpha beta' > /home/user/data/in.csv\n",
        );
        t
    }

    #[test]
    fn paths_and_strings_the_instruction_never_gives_are_candidates() {
        let src = "import os\nHOME = '/home/user'\n\n\ndef test_report():\n    p = os.path.join(HOME, 'report_final.txt')\n    with open(p) as f:\n        assert f.read() == 'STATUS: GREEN', 'the report must say so'\n\n\ndef test_input_kept():\n    assert open('/home/user/data/in.csv').read() == 'alpha beta'\n";
        let t = task(
            "Summarise ~/data/in.csv in a report in your home directory.",
            src,
        );
        let r = run(&t, None);
        let got: Vec<(&str, &str)> = r
            .findings
            .iter()
            .map(|f| (f.summary.as_str(), f.tests[0].as_str()))
            .collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].0.contains("path `report_final.txt`"), "{got:?}");
        assert_eq!(got[0].1, "test_final_state::test_report");
        assert!(got[1].0.contains("exact string `STATUS: GREEN`"), "{got:?}");
        assert!(r.findings[0]
            .evidence
            .starts_with("tests/test_final_state.py:6:"));
        // Told: no finding.
        let t = task(
            "Write `STATUS: GREEN` to ~/report_final.txt after reading ~/data/in.csv.",
            src,
        );
        assert!(
            run(&t, None).findings.is_empty(),
            "{:?}",
            run(&t, None).findings
        );
        // A docstring, a message built with `in`, a computed form: not candidates.
        let src = "\"\"\"Checks for STATUS GREEN.\"\"\"\n\n\ndef test_x():\n    pytest.fail(f'cannot parse schedule in {x}')\n    assert got == ['alpha 4']\n";
        let t = task("Count the words of ~/data/in.csv.", src);
        assert!(
            run(&t, None).findings.is_empty(),
            "{:?}",
            run(&t, None).findings
        );
        // A name the initial state holds, or one derived from it, is found by looking.
        let src = "def test_x():\n    assert os.path.exists('/home/user/data/f0_1.log.gz')\n";
        let t = task("Compress the logs in ~/data.", src);
        assert_eq!(run(&t, None).findings.len(), 1);
        // A module that makes its own files names them bare: inputs.
        let src = "def test_x(tmp_path):\n    (tmp_path / 'db-1.tar.gz').touch()\n";
        assert!(run(&task("Rotate the backups.", src), None)
            .findings
            .is_empty());
        let listed =
            crate::audit::snapshot::parse("f\t644\t0\t0\t1\t1\t/home/user/data/f0_1.log\n");
        assert!(run(&t, Some(&listed)).findings.is_empty());
    }

    #[test]
    fn assertion_messages_are_not_required_strings() {
        assert!(!compared_on(
            "    assert x == 3, 'expected three lines'",
            "expected three lines"
        ));
        assert!(compared_on(
            "    assert x == 'three lines', 'msg'",
            "three lines"
        ));
        assert!(compared_on("    assert 'needle' in text", "needle"));
        assert!(!compared_on("    open(p, encoding='utf-8')", "utf-8"));
    }
}
