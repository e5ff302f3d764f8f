//! Rewritten copies of a task's final tests: under a clock a year later,
//! or with their tests in reverse order.
//!
//! The clock: faketime is not available in the sandbox, and a time
//! namespace (`CLONE_NEWTIME`) cannot do it: Linux time namespaces offset
//! only `CLOCK_MONOTONIC` and `CLOCK_BOOTTIME`, never `CLOCK_REALTIME`,
//! the clock `date`, `time.time()` and `datetime.now()` read. So the test
//! modules get a preamble that shifts Python's clock inside the verifier
//! (`time.time`, `time.time_ns`, `localtime`, `gmtime`, `ctime`,
//! `strftime`, `datetime.datetime.now/today/utcnow`, `datetime.date.today`)
//! by [`SHIFT_DAYS`]. Programs the tests start (`date`, a script of the
//! agent's) still see the real clock.
//!
//! The order: test functions and `Test` classes at the top level of each
//! module are moved to its end in reverse order (pytest collects in
//! definition order), and the test files run in reverse order. Tests inside
//! classes keep their order.

use crate::task::Task;

/// How far the clock moves: a year and a day.
pub const SHIFT_DAYS: u32 = 366;

/// The preamble that shifts Python's clock by [`SHIFT_DAYS`] (installed
/// once per interpreter, whatever the number of modules).
pub fn clock_preamble() -> String {
    format!(
        r#"import datetime as _endless_dt, time as _endless_time  # endless audit: clock shifted
if not getattr(_endless_time, "_endless_shifted", False):
    _endless_shift = {days} * 86400
    _endless_real = (_endless_time.time, _endless_time.time_ns, _endless_time.localtime,
                     _endless_time.gmtime, _endless_time.ctime, _endless_time.strftime)
    _endless_time.time = lambda: _endless_real[0]() + _endless_shift
    _endless_time.time_ns = lambda: _endless_real[1]() + _endless_shift * 10**9
    _endless_time.localtime = lambda s=None: _endless_real[2](_endless_time.time() if s is None else s)
    _endless_time.gmtime = lambda s=None: _endless_real[3](_endless_time.time() if s is None else s)
    _endless_time.ctime = lambda s=None: _endless_real[4](_endless_time.time() if s is None else s)
    _endless_time.strftime = lambda f, t=None: _endless_real[5](f, _endless_time.localtime() if t is None else t)
    class _EndlessDatetime(_endless_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls.fromtimestamp(_endless_time.time(), tz)
        @classmethod
        def today(cls):
            return cls.fromtimestamp(_endless_time.time())
        @classmethod
        def utcnow(cls):
            return cls.fromtimestamp(_endless_time.time(), _endless_dt.timezone.utc).replace(tzinfo=None)
    class _EndlessDate(_endless_dt.date):
        @classmethod
        def today(cls):
            return cls.fromtimestamp(_endless_time.time())
    _endless_dt.datetime = _EndlessDatetime
    _endless_dt.date = _EndlessDate
    _endless_time._endless_shifted = True
"#,
        days = SHIFT_DAYS
    )
}

/// `source` with the clock preamble after its `from __future__` imports.
pub fn shift_clock(source: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let mut after = 0;
    let mut i = 0;
    while i < lines.len() {
        if lines[i].starts_with("from __future__ import") {
            let mut end = i;
            if lines[i].contains('(') && !lines[i].contains(')') {
                while end + 1 < lines.len() && !lines[end].contains(')') {
                    end += 1;
                }
            }
            after = end + 1;
            i = end;
        }
        i += 1;
    }
    let mut out = String::new();
    for l in &lines[..after] {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str(&clock_preamble());
    for l in &lines[after..] {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// `source` with its top-level test functions and classes moved to the
/// end in reverse order (decorators go with their function).
pub fn reverse_tests(source: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    // Where each top-level statement starts (outside triple-quoted strings).
    let mut starts = Vec::new();
    let mut in_string: Option<&str> = None;
    for (i, l) in lines.iter().enumerate() {
        let top = in_string.is_none()
            && l.chars().next().is_some_and(|c| {
                !c.is_whitespace() && c != '#' && c != ')' && c != ']' && c != '}'
            });
        if top {
            let continues_decorator = starts.last().is_some_and(|&s: &usize| {
                lines[s].starts_with('@')
                    && (s..i).all(|k| lines[k].starts_with('@') || lines[k].trim().is_empty())
            });
            if !continues_decorator {
                starts.push(i);
            }
        }
        for q in ["\"\"\"", "'''"] {
            let n = l.matches(q).count();
            if n % 2 == 1 {
                in_string = match in_string {
                    Some(open) if open == q => None,
                    None => Some(q),
                    other => other,
                };
            }
        }
    }
    if starts.first() != Some(&0) {
        starts.insert(0, 0);
    }
    let mut kept = Vec::new();
    let mut tests = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(lines.len());
        let block = &lines[s..end];
        let def = block
            .iter()
            .find(|l| !l.starts_with('@'))
            .copied()
            .unwrap_or("");
        let is_test = def.starts_with("def test")
            || def.starts_with("async def test")
            || def.starts_with("class Test");
        if is_test {
            tests.push(block);
        } else {
            kept.push(block);
        }
    }
    let mut out = String::new();
    for block in kept {
        for l in block {
            out.push_str(l);
            out.push('\n');
        }
    }
    for block in tests.into_iter().rev() {
        if !out.is_empty() && !out.ends_with("\n\n") {
            out.push('\n');
        }
        for l in block {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// A copy of `task` whose final test modules are rewritten by `f`; `None`
/// when its final tests are a verifier script (not Python modules).
pub fn with_final_tests(task: &Task, f: impl Fn(&str) -> String) -> Option<Task> {
    if task.meta.verifier.script.is_some() {
        return None;
    }
    let mut out = task.clone();
    for name in &task.meta.verifier.final_tests {
        let Some(source) = task.tests.text(name) else {
            continue;
        };
        if name.ends_with(".py") {
            let executable = task.tests.0.get(name).is_some_and(|e| e.executable);
            out.tests
                .insert(name.clone(), f(source).into_bytes(), executable);
        }
    }
    Some(out)
}

/// [`with_final_tests`] with [`shift_clock`].
pub fn clock_shifted(task: &Task) -> Option<Task> {
    with_final_tests(task, shift_clock)
}

/// [`with_final_tests`] with [`reverse_tests`], the files in reverse order too.
pub fn reversed(task: &Task) -> Option<Task> {
    let mut out = with_final_tests(task, reverse_tests)?;
    out.meta.verifier.final_tests.reverse();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "import os\n\nX = 1\n\n\ndef helper():\n    return 1\n\n\ndef test_a():\n    assert True\n\n\n@mark\n@other\ndef test_b():\n    s = \"\"\"\nnot top\n\"\"\"\n\n\nclass TestC:\n    def test_c(self):\n        pass\n";

    #[test]
    fn tests_move_to_the_end_reversed_with_their_decorators() {
        let out = reverse_tests(SRC);
        let order: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("def ") || l.starts_with("class ") || l.starts_with('@'))
            .collect();
        assert_eq!(
            order,
            vec![
                "def helper():",
                "class TestC:",
                "@mark",
                "@other",
                "def test_b():",
                "def test_a():"
            ]
        );
        assert!(out.contains("    s = \"\"\"\nnot top\n\"\"\"\n"), "{out}");
        assert!(out.starts_with("import os\n\nX = 1\n"));
    }

    #[test]
    fn the_clock_preamble_goes_after_future_imports() {
        let out = shift_clock("\"\"\"doc\"\"\"\nfrom __future__ import annotations\nimport os\n");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[1], "from __future__ import annotations");
        assert!(lines[2].starts_with("import datetime as _endless_dt"));
        assert!(out.ends_with("import os\n"));
        assert!(shift_clock("import os\n").starts_with("import datetime as _endless_dt"));
    }

    /// The rewritten modules are valid Python that does what they say:
    /// with the host's interpreter, when there is one.
    #[test]
    fn rewritten_modules_run_under_python() {
        let python = crate::verify::PYTHON;
        if !std::path::Path::new(python).exists() {
            eprintln!("SKIP: no {python}");
            return;
        }
        let script = format!(
            "{}\nimport datetime, time\nfrom datetime import date\nprint(datetime.datetime.now().year - {}, date.today().year - {}, int((time.time() - {}) / 86400))\n",
            shift_clock(""),
            chrono::Utc::now().format("%Y"),
            chrono::Utc::now().format("%Y"),
            chrono::Utc::now().timestamp()
        );
        let out = std::process::Command::new(python)
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = String::from_utf8_lossy(&out.stdout);
        let parts: Vec<&str> = got.split_whitespace().collect();
        assert_eq!(parts.len(), 3, "{got}");
        // 366 days on: next year (or the one after, from a December 31st).
        assert!(
            (parts[0] == "1" || parts[0] == "2") && parts[0] == parts[1],
            "a year later: {got}"
        );
        assert_eq!(parts[2], "366", "{got}");
        let order = std::process::Command::new(python)
            .arg("-c")
            .arg(format!(
                "{}\nprint([n for n in dir() if n.startswith('test')] and list(k for k in globals() if k.startswith(('test', 'Test'))))",
                reverse_tests("def test_a():\n    pass\n\n\ndef test_b():\n    pass\n")
            ))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&order.stdout).trim(),
            "['test_b', 'test_a']"
        );
    }
}
