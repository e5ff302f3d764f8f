//! Shell blocks of the documentation, run: every ```` ```sh ````,
//! ```` ```bash ````, ```` ```shell ```` and ```` ```console ```` block is
//! either run (in a fresh workspace, with a time budget, its exit status and
//! its shown output checked) or says why not in a comment line right above
//! it. The rules are in tests/docs.rs's opening comment.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::checks::rel;
use super::markdown::{CodeBlock, Doc};

/// The info strings (first word) of the blocks that are shell.
const SHELLS: &[&str] = &["sh", "bash", "shell", "console"];

/// A block's time budget unless its marker gives one.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(120);

/// What separates the output of one `$ ` command of a console block from the
/// next in the combined output (printed before each command).
const STEP: &str = "\u{1e}docs-step\u{1e}\n";

/// How a shell block is treated.
#[derive(Debug, PartialEq)]
pub enum Plan {
    /// `<!-- not run: REASON -->`.
    NotRun(String),
    /// Run, within `budget`, after the hidden `setup` commands (if any).
    Run {
        /// The time the block (setup included) may take.
        budget: Duration,
        /// Shell run first; its output is not matched (`setup: `...``).
        setup: Option<String>,
    },
}

/// Whether `block` is a shell block.
pub fn is_shell(block: &CodeBlock) -> bool {
    SHELLS.contains(&block.lang.split_whitespace().next().unwrap_or(""))
}

/// The plan of a shell block from the comment line above it: none (run
/// within [`DEFAULT_BUDGET`]), `not run: REASON`, or `run: ` followed by
/// `within N s` and/or `` setup: `CMD` `` (in this order, separated by
/// `;`; words after the setup command's closing backtick say why).
pub fn plan(block: &CodeBlock) -> Result<Plan, String> {
    let Some(marker) = block.marker.as_deref() else {
        return Ok(Plan::Run {
            budget: DEFAULT_BUDGET,
            setup: None,
        });
    };
    if let Some(reason) = marker.strip_prefix("not run:") {
        let reason = reason.trim();
        if reason.is_empty() {
            return Err("`<!-- not run: -->` without a reason".into());
        }
        return Ok(Plan::NotRun(reason.to_string()));
    }
    let Some(rest) = marker.strip_prefix("run:") else {
        return Err(format!(
            "unknown marker `<!-- {marker} -->` above a shell block \
             (`<!-- not run: REASON -->` or `<!-- run: within N s; setup: `CMD` -->`)"
        ));
    };
    let mut budget = DEFAULT_BUDGET;
    let mut rest = rest.trim();
    if let Some(after) = rest.strip_prefix("within ") {
        let (secs, tail) = after
            .split_once(" s")
            .ok_or_else(|| format!("`{rest}`: the budget is `within N s`"))?;
        budget = Duration::from_secs(secs.trim().parse().map_err(|_| {
            format!("`within {secs} s`: the budget is `within N s`, N whole seconds")
        })?);
        rest = tail.trim_start().trim_start_matches(';').trim();
    }
    let setup = if rest.is_empty() {
        None
    } else {
        let cmd = rest
            .strip_prefix("setup:")
            .map(str::trim)
            .and_then(|c| c.strip_prefix('`'))
            .and_then(|c| c.split_once('`'))
            .map(|(cmd, _why)| cmd)
            .ok_or_else(|| {
                format!(
                    "`{rest}` in `<!-- {marker} -->`: expected `within N s` and/or `setup: `CMD``"
                )
            })?;
        Some(cmd.to_string())
    };
    Ok(Plan::Run { budget, setup })
}

/// One `$ ` command of a console block and the output shown under it.
#[derive(Debug, Default, PartialEq)]
pub struct Step {
    /// The command (continuation lines joined with newlines).
    pub command: String,
    /// Line number of its `$ `.
    pub line: usize,
    /// The lines shown below it.
    pub expected: Vec<String>,
}

/// A block as a script: the commands, and for a console block the output
/// each one shows (for other shells, one step per block, nothing shown).
pub fn steps(block: &CodeBlock) -> Vec<Step> {
    if !block.lang.starts_with("console") {
        return vec![Step {
            command: block.lines.join("\n"),
            line: block.first_line,
            expected: Vec::new(),
        }];
    }
    let mut out: Vec<Step> = Vec::new();
    let mut continued = false;
    for (n, line) in (block.first_line..).zip(&block.lines) {
        if continued {
            let step = out.last_mut().unwrap();
            step.command.push('\n');
            step.command.push_str(line);
            continued = line.ends_with('\\');
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            out.push(Step {
                command: cmd.to_string(),
                line: n,
                expected: Vec::new(),
            });
            continued = cmd.ends_with('\\');
        } else if let Some(step) = out.last_mut() {
            step.expected.push(line.to_string());
        }
    }
    out
}

/// Whether `actual` is what `expected` shows. Trailing spaces and trailing
/// empty lines do not count; a line `...` stands for any lines (none too),
/// and `...` inside a line for any text on it; everything else is exact.
pub fn output_matches(expected: &[String], actual: &str) -> bool {
    fn trim(lines: Vec<&str>) -> Vec<&str> {
        let mut v: Vec<&str> = lines.into_iter().map(str::trim_end).collect();
        while v.last().is_some_and(|l| l.is_empty()) {
            v.pop();
        }
        v
    }
    let want = trim(expected.iter().map(String::as_str).collect());
    let have = trim(actual.lines().collect());
    lines_match(&want, &have)
}

fn lines_match(want: &[&str], have: &[&str]) -> bool {
    match want.split_first() {
        None => have.is_empty(),
        Some((&"...", rest)) => (0..=have.len()).any(|k| lines_match(rest, &have[k..])),
        Some((w, rest)) => {
            have.first().is_some_and(|h| line_matches(w, h)) && lines_match(rest, &have[1..])
        }
    }
}

/// One line against a pattern where `...` stands for any text.
pub fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("...").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || line.len() < first.len() + last.len() || !line.ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Runs every shell block of `doc` that is not marked `not run`, in order,
/// in a fresh temporary home and working directory shared by the blocks of
/// the file; returns the problems (bad markers, failures, output that
/// differs), as `file:line: what`.
pub fn run_blocks(root: &Path, file: &Path, doc: &Doc, endless: &Path) -> Vec<String> {
    let name = rel(root, file);
    let mut problems = Vec::new();
    let mut planned = Vec::new();
    for block in doc.blocks.iter().filter(|b| is_shell(b)) {
        match plan(block) {
            Ok(Plan::NotRun(_)) => {}
            Ok(Plan::Run { budget, setup }) => planned.push((block, budget, setup)),
            Err(e) => problems.push(format!("{name}:{}: {e}", block.first_line - 2)),
        }
    }
    if planned.is_empty() {
        return problems;
    }
    let dir = tempfile::tempdir().unwrap();
    let (home, work, bin) = (
        dir.path().join("home"),
        dir.path().join("work"),
        dir.path().join("bin"),
    );
    for d in [&home, &work, &bin] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::os::unix::fs::symlink(endless, bin.join("endless")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (block, budget, setup) in planned {
        let steps = steps(block);
        let mut script = String::from("set -e\n");
        if let Some(setup) = &setup {
            script.push_str(setup);
            script.push('\n');
        }
        for step in &steps {
            script.push_str(&format!("printf '{}'\n", STEP.replace('\n', "\\n")));
            script.push_str(&step.command);
            script.push('\n');
        }
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(&script)
            .current_dir(&work)
            .env("PATH", &path)
            .env("HOME", &home)
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("DOCS_REPO", root)
            .env("NO_COLOR", "1")
            .env_remove("ENDLESS_WORKSPACE")
            .env_remove("ENDLESS_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("RUST_LOG");
        let at = format!("{name}:{}", block.first_line);
        let (status, output, took) = match run(cmd, budget) {
            Ok(r) => r,
            Err(e) => {
                problems.push(format!("{at}: {e}"));
                continue;
            }
        };
        let mut chunks = output.split(STEP);
        let before = chunks.next().unwrap_or("");
        let chunks: Vec<&str> = chunks.collect();
        let Some(status) = status else {
            problems.push(format!(
                "{at}: ran past its budget of {} s (`<!-- run: within N s -->` sets another):\n{}",
                budget.as_secs(),
                tail(&output)
            ));
            continue;
        };
        if status != 0 {
            let shown = if chunks.is_empty() { before } else { &output };
            problems.push(format!(
                "{at}: exited with status {status} after {:.1} s:\n{}",
                took.as_secs_f64(),
                tail(shown)
            ));
            continue;
        }
        for (step, got) in steps.iter().zip(&chunks) {
            if !step.expected.is_empty() && !output_matches(&step.expected, got) {
                problems.push(format!(
                    "{name}:{}: `{}` printed what the doc does not show:\n--- shown\n{}\n--- printed\n{}",
                    step.line,
                    step.command,
                    step.expected.join("\n"),
                    got.trim_end()
                ));
            }
        }
    }
    problems
}

/// The last lines of an output, for messages.
fn tail(output: &str) -> String {
    let clean = output.replace(STEP, "");
    let lines: Vec<&str> = clean.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Runs `cmd` in its own process group with stdout and stderr in one file,
/// killing the group at `budget` and afterwards (background processes a
/// block left). Returns the exit status (none when killed), the output and
/// the time taken.
fn run(mut cmd: Command, budget: Duration) -> Result<(Option<i32>, String, Duration), String> {
    let mut out = tempfile::tempfile().map_err(|e| e.to_string())?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone().map_err(|e| e.to_string())?)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start bash: {e}"))?;
    let group = child.id() as i32;
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(s.code().unwrap_or(-1));
        }
        if started.elapsed() >= budget {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: kill(2) on the process group this function started.
    unsafe {
        libc::kill(-group, libc::SIGKILL);
    }
    let _ = child.wait();
    let took = started.elapsed();
    use std::io::Seek;
    out.rewind().map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    out.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    Ok((status, String::from_utf8_lossy(&bytes).into_owned(), took))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markdown::parse;

    #[test]
    fn markers_give_the_plan() {
        let doc = parse(concat!(
            "```sh\nls\n```\n",
            "<!-- not run: needs a GPU -->\n```bash\nnvidia-smi\n```\n",
            "<!-- run: within 300 s; setup: `endless generate --offline --count 3` (as the TUI) -->\n```console\n$ ls\n```\n",
            "<!-- not run: -->\n```sh\nls\n```\n",
            "<!-- run: in a while -->\n```sh\nls\n```\n",
            "```text\nnot shell\n```\n",
            "<!-- not run: a reason -->\n```sh\nfalse\n```\n```sh\ntrue\n```\n",
        ));
        let plans: Vec<_> = doc
            .blocks
            .iter()
            .filter(|b| is_shell(b))
            .map(plan)
            .collect();
        assert_eq!(
            plans[0],
            Ok(Plan::Run {
                budget: DEFAULT_BUDGET,
                setup: None
            })
        );
        assert_eq!(plans[1], Ok(Plan::NotRun("needs a GPU".into())));
        assert_eq!(
            plans[2],
            Ok(Plan::Run {
                budget: Duration::from_secs(300),
                setup: Some("endless generate --offline --count 3".into())
            })
        );
        assert!(plans[3].as_ref().unwrap_err().contains("without a reason"));
        assert!(plans[4].as_ref().unwrap_err().contains("`in a while`"));
        assert_eq!(plans[5], Ok(Plan::NotRun("a reason".into())));
        // A block right after a marked one is not marked by it.
        assert_eq!(
            plans[6],
            Ok(Plan::Run {
                budget: DEFAULT_BUDGET,
                setup: None
            })
        );
        assert_eq!(plans.len(), 7);
    }

    #[test]
    fn console_blocks_split_into_commands_and_their_output() {
        let doc = parse("```console\n$ echo a \\\n  b\na b\n$ true\n$ ls\nx\n...\n```\n");
        let steps = steps(&doc.blocks[0]);
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[0].command, "echo a \\\n  b");
        assert_eq!(steps[0].expected, ["a b"]);
        assert_eq!(steps[0].line, 2);
        assert!(steps[1].expected.is_empty());
        assert_eq!(steps[2].expected, ["x", "..."]);
    }

    #[test]
    fn output_matching_allows_elisions_only() {
        let e = |s: &str| s.lines().map(str::to_string).collect::<Vec<_>>();
        assert!(output_matches(&e("a\nb"), "a  \nb\n\n"));
        assert!(!output_matches(&e("a\nb"), "a\nb\nc"));
        assert!(!output_matches(&e("a\nb"), "a"));
        assert!(output_matches(&e("a\n...\nd"), "a\nb\nc\nd"));
        assert!(output_matches(&e("a\n...\nd"), "a\nd"));
        assert!(output_matches(&e("..."), ""));
        assert!(output_matches(
            &e("took ... s, passed 3 of ..."),
            "took 1.2 s, passed 3 of 4"
        ));
        assert!(!output_matches(&e("passed 3 of ..."), "passed 2 of 4"));
        assert!(!output_matches(&e("x...y"), "xy-"));
        assert!(line_matches("a...b...c", "a1b2c"));
        assert!(!line_matches("ab...ba", "aba"));
    }
}
