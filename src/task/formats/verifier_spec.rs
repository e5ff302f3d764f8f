//! What a task's test runner needs from its verifier environment: the
//! Python version, the PyPI packages at pinned versions, the Debian
//! packages, and how the tests run.
//!
//! Harbor / Terminal-Bench 2 tasks install their test tools in
//! `tests/test.sh` at verification time (`apt-get install`, the uv
//! installer, then `uvx -p 3.13 -w pytest==8.4.1 ... pytest ...`); [`parse_test_sh`]
//! reads those lines into a [`VerifierSpec`]. A line that installs or runs
//! something in a form it does not know is an error naming the file and
//! the line, never a guess. Native tasks declare the same in `task.toml`
//! (`[verifier] python`, `packages`, `apt`), read by [`VerifierEnvSpec::from_section`].

use std::path::Path;

use crate::task::BundleError;
use crate::task::VerifierSection;

/// One PyPI package: its (normalised) name and pinned version, if any.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Package {
    /// The distribution name, lower case, `_` and `.` as `-`, extras kept (`a[b]`).
    pub name: String,
    /// The `==` version (`None`: the newest).
    pub version: Option<String>,
}

impl Package {
    /// Parse `name`, `name==1.2` or `name[extra]==1.2`; other specifiers
    /// (`>=`, URLs, paths) are refused with why.
    pub fn parse(text: &str) -> Result<Package, String> {
        let text = text.trim();
        let (name, version) = match text.split_once("==") {
            Some((n, v)) => (n.trim(), Some(v.trim())),
            None => (text, None),
        };
        let plain = |s: &str, extra: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c) || extra.contains(c))
        };
        if !plain(name, "[],") || !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(format!(
                "`{text}` is not a package name with an optional `==VERSION` pin (other specifiers, URLs and paths are not supported)"
            ));
        }
        if let Some(v) = version {
            if !plain(v, "+!") {
                return Err(format!("`{text}`: `{v}` is not a version"));
            }
        }
        Ok(Package {
            name: name.to_ascii_lowercase().replace(['_', '.'], "-"),
            version: version.map(str::to_owned),
        })
    }

    /// `name==version` or `name`, as pip takes it.
    pub fn requirement(&self) -> String {
        match &self.version {
            Some(v) => format!("{}=={v}", self.name),
            None => self.name.clone(),
        }
    }

    /// The name without extras (`a[b]` -> `a`).
    fn base_name(&self) -> &str {
        self.name.split('[').next().unwrap_or(&self.name)
    }
}

/// How the tests run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runner {
    /// pytest, with these arguments as written (files and options).
    Pytest(Vec<String>),
    /// The script itself computes the reward (`/logs/verifier/reward.txt`).
    Script,
}

/// What the verifier environment holds (the part that is built).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifierEnvSpec {
    /// The `X.Y` Python version asked for (`None`: the image's own).
    pub python: Option<String>,
    /// PyPI packages, sorted by name, one entry per name.
    pub packages: Vec<Package>,
    /// Debian packages, sorted, deduplicated.
    pub apt: Vec<String>,
    /// Package indexes (URLs) searched besides PyPI, in the order written,
    /// deduplicated.
    pub indexes: Vec<String>,
    /// Built from the image's Python even when nothing else is asked for:
    /// the tests load the agent's packages (`[verifier] agent_packages`),
    /// built for that Python.
    pub image_python: bool,
}

/// A test runner read from `tests/test.sh`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierSpec {
    /// What the environment must hold.
    pub env: VerifierEnvSpec,
    /// How the tests run.
    pub runner: Runner,
    /// The line of the script that runs pytest (1-based; 0: none).
    pub pytest_line: usize,
    /// Whether pytest runs in an environment of its own (`uvx`, `uv run`,
    /// `uv tool run`, or after `uv venv`), where the tests see no package
    /// the agent installed; otherwise they run on the image's own Python,
    /// with the agent's packages (see `[verifier] agent_packages`).
    pub isolated: bool,
}

impl VerifierEnvSpec {
    /// Nothing asked for: the built-in runtime serves.
    pub fn is_empty(&self) -> bool {
        !self.image_python
            && self.python.is_none()
            && self.packages.is_empty()
            && self.apt.is_empty()
    }

    /// Add `p`, replacing an earlier entry of the same name (a later pin wins).
    fn add(&mut self, p: Package) {
        self.packages.retain(|q| q.base_name() != p.base_name());
        self.packages.push(p);
    }

    fn finish(mut self) -> Self {
        self.packages.sort();
        self.apt.sort();
        self.apt.dedup();
        let mut seen = std::collections::HashSet::new();
        self.indexes.retain(|u| seen.insert(u.clone()));
        self
    }

    /// The environment a native task declares in `task.toml` `[verifier]`
    /// (`python = "3.13"`, `packages = ["pytest==8.4.1", ...]`,
    /// `apt = [...]`); errors name `file` and the field.
    pub fn from_section(v: &VerifierSection, file: &Path) -> Result<VerifierEnvSpec, BundleError> {
        let mut spec = VerifierEnvSpec {
            image_python: v.agent_packages,
            ..VerifierEnvSpec::default()
        };
        if let Some(py) = &v.python {
            let norm = python_version(py).ok_or_else(|| {
                BundleError::invalid(
                    file,
                    Some("verifier.python"),
                    format!("`{py}` is not a Python version (expected X.Y, e.g. \"3.13\")"),
                )
            })?;
            spec.python = Some(norm);
        }
        for (i, text) in v.packages.iter().enumerate() {
            let p = Package::parse(text).map_err(|e| {
                BundleError::invalid(file, Some(&format!("verifier.packages[{i}]")), e)
            })?;
            spec.add(p);
        }
        for (i, name) in v.apt.iter().enumerate() {
            if !is_debian_name(name) {
                return Err(BundleError::invalid(
                    file,
                    Some(&format!("verifier.apt[{i}]")),
                    format!("`{name}` is not a Debian package name"),
                ));
            }
            spec.apt.push(name.clone());
        }
        for (i, url) in v.index.iter().enumerate() {
            spec.indexes.push(index_url(url).map_err(|e| {
                BundleError::invalid(file, Some(&format!("verifier.index[{i}]")), e)
            })?);
        }
        Ok(spec.finish())
    }

    /// Write this environment into `[verifier]` (`python`, `packages`, `apt`).
    pub fn store_in(&self, v: &mut VerifierSection) {
        v.python = self.python.clone();
        v.packages = self.packages.iter().map(Package::requirement).collect();
        v.apt = self.apt.clone();
        v.index = self.indexes.clone();
    }

    /// A stable text of the whole spec (part of cache keys).
    pub fn key_text(&self) -> String {
        let pk: Vec<String> = self.packages.iter().map(Package::requirement).collect();
        format!(
            "python={}\npackages={}\napt={}\n",
            self.python.as_deref().unwrap_or("image"),
            pk.join(" "),
            self.apt.join(" ")
        ) + &if self.indexes.is_empty() {
            String::new()
        } else {
            format!("index={}\n", self.indexes.join(" "))
        }
    }
}

/// A package index's URL (`https://...` or `http://...`, uv's `NAME=URL`
/// form read as its URL), or why it is not one.
fn index_url(text: &str) -> Result<String, String> {
    let url = match text.split_once('=') {
        Some((name, url)) if !name.contains("://") => url,
        _ => text,
    };
    let plain = !url.is_empty() && !url.contains(|c: char| c.is_whitespace() || c == '\'');
    if plain && (url.starts_with("https://") || url.starts_with("http://")) {
        Ok(url.to_string())
    } else {
        Err(format!(
            "`{text}` is not a package index URL (http:// or https://)"
        ))
    }
}

/// `3.13`, `3.13.2`, `python3.13`, `cpython-3.13` -> `3.13`.
fn python_version(text: &str) -> Option<String> {
    let t = text
        .trim()
        .trim_start_matches("cpython-")
        .trim_start_matches("cpython")
        .trim_start_matches("python");
    let mut parts = t.split('.');
    let major = parts.next()?.parse::<u32>().ok()?;
    let minor = parts.next()?.parse::<u32>().ok()?;
    if major != 3 || parts.any(|p| p.parse::<u32>().is_err()) {
        return None;
    }
    Some(format!("{major}.{minor}"))
}

fn is_debian_name(name: &str) -> bool {
    name.len() >= 2
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
}

/// An error at `line` of `file`.
fn at(file: &str, line: usize, text: &str, why: impl std::fmt::Display) -> BundleError {
    BundleError::invalid(
        Path::new(file),
        Some(&format!("line {line}")),
        format!("{why}: `{}`", text.trim()),
    )
}

/// Packages that only run the tests or write their report: a spec
/// asking for nothing else needs no environment of its own (the built-in
/// runtime's pytest serves).
const RUNNER_PACKAGES: &[&str] = &["pytest", "pytest-json-ctrf", "pytest-json-report"];

/// Debian packages test scripts install only to fetch or run the test
/// tools (the uv installer, pytest itself).
const RUNNER_APT: &[&str] = &["curl", "wget", "ca-certificates", "python3-pytest"];

impl VerifierEnvSpec {
    /// Whether the tests need more than the built-in runtime has: a package
    /// other than pytest and its report plugins, or a Debian package other
    /// than those that fetch the test tools. The Python version alone does
    /// not count (the built-in runtime serves, as before).
    pub fn needs_environment(&self) -> bool {
        self.packages
            .iter()
            .any(|p| !RUNNER_PACKAGES.contains(&p.base_name()))
            || self.apt.iter().any(|a| !RUNNER_APT.contains(&a.as_str()))
    }
}

/// Read `script` (the text of `file`, e.g. `tests/test.sh`): its install
/// lines into the environment, its pytest line into the runner.
/// [`Runner::Script`] when no line runs pytest, or when a line does
/// something else than install test tools, run pytest, report the reward
/// or move around (`cd`, `mkdir`, `if [ ... ]`, `echo`): such a script must
/// run itself.
pub fn parse_test_sh(script: &str, file: &str) -> Result<VerifierSpec, BundleError> {
    let mut env = VerifierEnvSpec::default();
    let mut pytest: Option<Vec<String>> = None;
    let mut pytest_line = 0;
    let mut other = false;
    let mut number = 0;
    let mut pending = String::new();
    let mut first_line = 0;
    let mut isolated = false;
    let mut heredoc: Option<String> = None;
    for raw in script.lines() {
        number += 1;
        if let Some(end) = &heredoc {
            if raw.trim() == end.as_str() {
                heredoc = None;
            }
            continue;
        }
        if pending.is_empty() {
            first_line = number;
        }
        if let Some(head) = raw.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(raw);
        let line = std::mem::take(&mut pending);
        if let Some(end) = heredoc_end(&line) {
            // A here-document feeds a program text of its own: run as written.
            heredoc = Some(end);
            other = true;
            if mentions_tools(&line) {
                return Err(at(
                    file,
                    first_line,
                    &line,
                    "a here-document given to a test tool cannot be read",
                ));
            }
            continue;
        }
        for command in split_commands(&line) {
            match read_command(&command, &mut env) {
                Ok(Command::Venv) => isolated = true,
                Ok(Command::Tests(args, own_env)) => {
                    if pytest.is_some() {
                        // A second pytest run (another test file, another
                        // Python): the script runs itself, in an
                        // environment holding what both runs asked for.
                        other = true;
                        continue;
                    }
                    pytest = Some(args);
                    pytest_line = first_line;
                    isolated |= own_env;
                }
                Ok(Command::Other) => other = true,
                Ok(Command::Install | Command::Boilerplate) => {}
                Err(why) => return Err(at(file, first_line, &line, why)),
            }
        }
    }
    let runner = match pytest {
        Some(args) if !other => {
            if !env.packages.iter().any(|p| p.base_name() == "pytest") {
                env.add(Package {
                    name: "pytest".into(),
                    version: None,
                });
            }
            Runner::Pytest(args)
        }
        _ => Runner::Script,
    };
    Ok(VerifierSpec {
        env: env.finish(),
        runner,
        pytest_line,
        isolated,
    })
}

/// The delimiter of a here-document the line opens (`<<EOF`, `<<'EOF'`,
/// `<<-EOF`), if any.
fn heredoc_end(line: &str) -> Option<String> {
    let at = line.find("<<")?;
    let rest = line[at + 2..].trim_start_matches('-').trim_start();
    if rest.starts_with('<') {
        return None; // a here-string (`<<<`)
    }
    let word: String = rest
        .chars()
        .take_while(|c| !c.is_whitespace() && !";&|)".contains(*c))
        .filter(|c| *c != '\'' && *c != '"')
        .collect();
    (!word.is_empty()).then_some(word)
}

/// What one simple command of a test script does.
enum Command {
    /// Installs test tools (recorded in the environment).
    Install,
    /// Runs pytest with these arguments; in an environment of its own
    /// (`uvx`, `uv run`) or not.
    Tests(Vec<String>, bool),
    /// Makes a virtual environment the later lines use (`uv venv`).
    Venv,
    /// Moves around or reports: changes nothing the tests see.
    Boilerplate,
    /// Anything else: the script must run itself.
    Other,
}

/// The simple commands of a line: split at `&&`, `||`, `;` and `|`
/// outside quotes (a pipe into `sh` stays with its left side), with
/// comments dropped.
fn split_commands(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut single, mut double) = (false, false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && (cur.is_empty() || cur.ends_with(char::is_whitespace)) => {
                break
            }
            '&' if cur.ends_with(['>', '<']) || chars.peek() == Some(&'>') => {}
            ';' | '&' | '|' if !single && !double => {
                if c == '|' && chars.peek() != Some(&'|') {
                    // A pipe: keep `... | sh` whole (the installer form).
                    cur.push(c);
                    continue;
                }
                if chars.peek() == Some(&c) {
                    chars.next();
                }
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Words that mark a command as one this parser must understand.
const TOOLS: &[&str] = &["uv", "uvx", "pip", "pip3", "apt-get", "apt", "pytest"];

/// Shell words that only move around, test, or report.
const BOILERPLATE: &[&str] = &[
    "source", ".", "export", "cd", "mkdir", "set", "exit", "echo", "printf", "test", "[", "[[",
    "true", ":", "fi", "done", "esac", "return", "unset", "shopt", "trap", "hash", "sleep",
];

/// Read one simple command: add what it installs to `env`, say whether it
/// runs pytest, and whether it is anything else.
fn read_command(command: &str, env: &mut VerifierEnvSpec) -> Result<Command, String> {
    let installer = command.contains("astral.sh/uv") || command.contains("/uv/install.sh");
    if installer && (command.starts_with("curl ") || command.starts_with("wget ")) {
        return Ok(Command::Boilerplate);
    }
    // Terminal-Bench 1's harness: its setup installs pytest, its runner
    // runs it on the test files.
    if command.contains("setup-uv-pytest.sh") {
        return Ok(Command::Boilerplate);
    }
    if command.contains("run-uv-pytest.sh") {
        return Ok(Command::Tests(Vec::new(), true));
    }
    let body = command
        .trim_start_matches(['(', '{', ' '])
        .trim_end_matches([')', '}', ' ']);
    let mut words = match shell_words::split(body) {
        Ok(words) => words,
        Err(e) if mentions_tools(body) => return Err(format!("cannot split the command ({e})")),
        Err(_) => return Ok(Command::Other),
    };
    if let Some(pipe) = words.iter().position(|w| w == "|") {
        words.truncate(pipe);
    }
    let mut words = without_redirections(&words);
    if let Some(last) = words.last_mut() {
        let trimmed = last.trim_end_matches([')', '}']).to_string();
        *last = trimmed;
    }
    words.retain(|w| !w.is_empty());
    let mut words: &[String] = &words;
    // `VAR=value cmd`, `sudo cmd`, `exec cmd`, `if cmd`, `then cmd`.
    while let Some(first) = words.first() {
        let assignment = first.contains('=') && !first.starts_with('=') && !first.starts_with('-');
        let keyword = matches!(
            first.as_str(),
            "sudo"
                | "exec"
                | "time"
                | "if"
                | "then"
                | "else"
                | "elif"
                | "while"
                | "until"
                | "do"
                | "!"
        );
        if assignment || keyword {
            words = &words[1..];
        } else {
            break;
        }
    }
    let Some(first) = words.first() else {
        return Ok(Command::Boilerplate);
    };
    let tool = first.rsplit('/').next().unwrap_or(first);
    let rest = &words[1..];
    let install = |r: Result<(), String>| r.map(|()| Command::Install);
    let run = |args: &[String], own_env: bool| {
        let info = |a: &String| matches!(a.as_str(), "--version" | "-V" | "--help" | "-h");
        if !args.is_empty() && args.iter().all(info) {
            Command::Boilerplate
        } else {
            Command::Tests(args.to_vec(), own_env)
        }
    };
    let tests = |args: &[String]| run(args, false);
    let uv_tests = |args: &[String]| run(args, true);
    match tool {
        "apt-get" | "apt" => install(apt(rest, env)),
        "pip" | "pip3" => install(pip(rest, env)),
        "python" | "python3" if rest.first().map(String::as_str) == Some("-m") => {
            match rest.get(1).map(String::as_str) {
                Some("pip") => install(pip(&rest[2..], env)),
                Some("pytest") => Ok(tests(&rest[2..])),
                _ => Ok(Command::Other),
            }
        }
        "pytest" | "py.test" => Ok(tests(rest)),
        "uvx" => uv_tool(rest, env).map(|a| uv_tests(&a)),
        "uv" => match rest.first().map(String::as_str) {
            Some("pip") if rest.get(1).map(String::as_str) == Some("install") => {
                install(pip(&rest[1..], env))
            }
            Some("venv") => uv_venv(&rest[1..], env).map(|()| Command::Venv),
            Some("tool") if rest.get(1).map(String::as_str) == Some("run") => {
                uv_tool(&rest[2..], env).map(|a| uv_tests(&a))
            }
            Some("run") => uv_tool(&rest[1..], env).map(|a| uv_tests(&a)),
            Some("add") => {
                for w in &rest[1..] {
                    if w.starts_with('-') {
                        return Err(format!("`uv add` option `{w}` is not supported"));
                    }
                    env.add(Package::parse(w)?);
                }
                Ok(Command::Install)
            }
            _ => Err("an unknown `uv` command".into()),
        },
        "echo" | "printf" => {
            // Reporting, or writing the reward: anything else it writes is work.
            if command.contains('>') && !command.contains("/logs/verifier") {
                Ok(Command::Other)
            } else {
                Ok(Command::Boilerplate)
            }
        }
        t if BOILERPLATE.contains(&t) => Ok(Command::Boilerplate),
        _ if mentions_tools(body) => Err(
            "a command that installs or runs test tools in a form the verifier cannot read".into(),
        ),
        _ => Ok(Command::Other),
    }
}

/// Whether `command` names a test tool as a word (quoted or not).
fn mentions_tools(command: &str) -> bool {
    command
        .split_whitespace()
        .any(|w| TOOLS.contains(&w.trim_matches(['"', '\'', '(', ')'])))
}

/// `words` without shell redirections (`> f`, `2>&1`, `>>f`, `< f`).
fn without_redirections(words: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_next = false;
    for w in words {
        if std::mem::take(&mut skip_next) {
            continue;
        }
        let op = w.trim_start_matches(|c: char| c.is_ascii_digit() || c == '&');
        if op.starts_with('>') || op.starts_with('<') {
            let target = op.trim_start_matches(['>', '<', '&']);
            skip_next = target.is_empty() && !op.ends_with('&');
            continue;
        }
        out.push(w.clone());
    }
    out
}

/// `apt-get` arguments: `update`, `install [-y] [--no-install-recommends] PKG...`.
fn apt(args: &[String], env: &mut VerifierEnvSpec) -> Result<(), String> {
    let mut sub = None;
    for a in args {
        if a.starts_with('-') {
            continue;
        }
        if sub.is_none() {
            sub = Some(a.as_str());
            continue;
        }
        if sub == Some("install") {
            let name = a.split('=').next().unwrap_or(a);
            if !is_debian_name(name) {
                return Err(format!("`{a}` is not a Debian package name"));
            }
            env.apt.push(name.to_string());
        }
    }
    match sub {
        Some("update" | "install" | "clean" | "autoremove") => Ok(()),
        Some(other) => Err(format!("`apt-get {other}` is not supported")),
        None => Err("`apt-get` without a command".into()),
    }
}

/// `pip install` arguments (after `pip`): options that change nothing
/// about what is installed are skipped; `-r`, `-e`, indexes and paths are
/// refused.
fn pip(args: &[String], env: &mut VerifierEnvSpec) -> Result<(), String> {
    let Some((sub, rest)) = args.split_first() else {
        return Err("`pip` without a command".into());
    };
    if sub != "install" {
        return Err(format!("`pip {sub}` is not supported"));
    }
    const HARMLESS: &[&str] = &[
        "-q",
        "--quiet",
        "-U",
        "--upgrade",
        "--no-cache-dir",
        "--break-system-packages",
        "--system",
        "--user",
        "--disable-pip-version-check",
        "--no-warn-script-location",
        "--root-user-action=ignore",
        "--progress-bar=off",
    ];
    for a in rest {
        if a.starts_with('-') {
            if !HARMLESS.contains(&a.as_str()) {
                return Err(format!("`pip install` option `{a}` is not supported"));
            }
            continue;
        }
        env.add(Package::parse(a)?);
    }
    Ok(())
}

/// `uv venv` arguments: the Python version `-p`/`--python` asks for (as
/// `uvx -p` does); the rest (the directory, `--seed`, ...) changes nothing
/// the tests see.
fn uv_venv(args: &[String], env: &mut VerifierEnvSpec) -> Result<(), String> {
    let mut words = args.iter();
    while let Some(a) = words.next() {
        let v = match a.split_once('=') {
            Some(("--python" | "-p", v)) => v.to_string(),
            None if a == "-p" || a == "--python" => words
                .next()
                .cloned()
                .ok_or_else(|| format!("`uv venv {a}` without a value"))?,
            _ => continue,
        };
        env.python =
            Some(python_version(&v).ok_or_else(|| format!("`{v}` is not a Python version"))?);
    }
    Ok(())
}

/// `uvx` / `uv run` / `uv tool run` arguments: `-p`/`--python`,
/// `-w`/`--with` (also `--with=`), then the command; the command must be
/// pytest or `python -m pytest` (its arguments are returned).
fn uv_tool(args: &[String], env: &mut VerifierEnvSpec) -> Result<Vec<String>, String> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a, None),
        };
        let mut value = || -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            i += 1;
            args.get(i)
                .cloned()
                .ok_or_else(|| format!("`{flag}` without a value"))
        };
        match flag {
            "-p" | "--python" => {
                let v = value()?;
                env.python = Some(
                    python_version(&v).ok_or_else(|| format!("`{v}` is not a Python version"))?,
                );
            }
            "-w" | "--with" => {
                for p in value()?.split(',') {
                    env.add(Package::parse(p)?);
                }
            }
            // Searched besides PyPI (pip has no index that replaces
            // PyPI for some packages only); one it cannot reach fails the
            // build as the network does.
            "--index" | "--default-index" | "--index-url" | "--extra-index-url" => {
                env.indexes.push(index_url(&value()?)?);
            }
            // pip takes the best match over all its indexes.
            "--index-strategy" => {
                let v = value()?;
                if !matches!(
                    v.as_str(),
                    "first-index" | "unsafe-first-match" | "unsafe-best-match"
                ) {
                    return Err(format!("`{v}` is not an index strategy"));
                }
            }
            "-q" | "--quiet" | "--no-project" | "--isolated" | "--no-cache" | "--offline" => {}
            "--from" => {
                let v = value()?;
                env.add(Package::parse(&v)?);
            }
            f if f.starts_with('-') => return Err(format!("`uvx` option `{f}` is not supported")),
            _ => break,
        }
        i += 1;
    }
    let Some(cmd) = args.get(i) else {
        return Err("`uvx` without a command".into());
    };
    let (name, pin) = match cmd.split_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (cmd.as_str(), None),
    };
    match name {
        "pytest" | "py.test" => {
            if let Some(v) = pin {
                env.add(Package::parse(&format!("pytest=={v}"))?);
            }
            Ok(args[i + 1..].to_vec())
        }
        "python" | "python3"
            if args.get(i + 1).map(String::as_str) == Some("-m")
                && args.get(i + 2).map(String::as_str) == Some("pytest") =>
        {
            Ok(args[i + 3..].to_vec())
        }
        other => Err(format!(
            "`{other}` run through uv: only pytest is supported as a test runner"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkg(name: &str, v: Option<&str>) -> Package {
        Package {
            name: name.into(),
            version: v.map(str::to_owned),
        }
    }

    /// The shape of most Terminal-Bench 2 `tests/test.sh` files.
    const TB2: &str = r#"#!/bin/bash

# Install curl
apt-get update
apt-get install -y curl

# Install uv
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh

source $HOME/.local/bin/env

# Check if we're in a valid working directory
if [ "$PWD" = "/" ]; then
    echo "Error: No working directory set. Please set a WORKDIR in your Dockerfile before running this script."
    exit 1
fi

uvx \
  -p 3.13 \
  -w pytest==8.4.1 \
  -w numpy==2.3.3 \
  -w scipy==1.16.2 \
  -w pytest-json-ctrf==0.3.5 \
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA

if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"#;

    #[test]
    fn reads_the_usual_terminal_bench_2_script() {
        let spec = parse_test_sh(TB2, "tests/test.sh").unwrap();
        assert_eq!(spec.env.python.as_deref(), Some("3.13"));
        assert_eq!(
            spec.env.packages,
            vec![
                pkg("numpy", Some("2.3.3")),
                pkg("pytest", Some("8.4.1")),
                pkg("pytest-json-ctrf", Some("0.3.5")),
                pkg("scipy", Some("1.16.2")),
            ]
        );
        assert_eq!(spec.env.apt, vec!["curl".to_string()]);
        assert_eq!(
            spec.runner,
            Runner::Pytest(
                [
                    "--ctrf",
                    "/logs/verifier/ctrf.json",
                    "/tests/test_outputs.py",
                    "-rA"
                ]
                .map(String::from)
                .to_vec()
            )
        );
    }

    #[test]
    fn reads_pip_uv_pip_with_and_one_line_forms() {
        let script = "set -e\n\
            DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv libgl1\n\
            pip install --no-cache-dir requests==2.32.3 'biopython==1.85'\n\
            uv pip install --system rdflib==7.1.4\n\
            python3 -m pip install -q Pillow\n\
            uv run --with=opencv-python-headless==4.12.0.88 --with pytest==8.4.1 pytest /tests/test_outputs.py && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n";
        let spec = parse_test_sh(script, "tests/test.sh").unwrap();
        assert_eq!(spec.env.python, None);
        assert_eq!(
            spec.env.packages,
            vec![
                pkg("biopython", Some("1.85")),
                pkg("opencv-python-headless", Some("4.12.0.88")),
                pkg("pillow", None),
                pkg("pytest", Some("8.4.1")),
                pkg("rdflib", Some("7.1.4")),
                pkg("requests", Some("2.32.3")),
            ]
        );
        assert_eq!(spec.env.apt, vec!["libgl1", "python3-venv"]);
        assert_eq!(
            spec.runner,
            Runner::Pytest(vec!["/tests/test_outputs.py".into()])
        );
    }

    #[test]
    fn a_script_computing_its_own_reward_is_a_script_runner() {
        let script = "#!/bin/bash\npip install numpy==2.3.3\n\
            if python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n";
        let spec = parse_test_sh(script, "tests/test.sh").unwrap();
        assert_eq!(spec.runner, Runner::Script);
        assert_eq!(spec.env.packages, vec![pkg("numpy", Some("2.3.3"))]);
    }

    #[test]
    fn a_bare_pytest_gets_pytest_installed_and_a_later_pin_wins() {
        let spec = parse_test_sh(
            "pip install pytest==8.3.0\npip install pytest==8.4.1\npytest -rA\n",
            "t",
        )
        .unwrap();
        assert_eq!(spec.env.packages, vec![pkg("pytest", Some("8.4.1"))]);
        let bare = parse_test_sh("cd /tests\npython3 -m pytest\n", "t").unwrap();
        assert_eq!(bare.env.packages, vec![pkg("pytest", None)]);
        assert_eq!(bare.runner, Runner::Pytest(vec![]));
    }

    #[test]
    fn lines_it_cannot_read_are_errors_naming_file_and_line() {
        let cases = [
            (
                "echo hi\npip install -r /tests/requirements.txt\n",
                2,
                "`-r`",
            ),
            (
                "uvx --with-requirements r.txt pytest\n",
                1,
                "--with-requirements",
            ),
            ("uvx ruff check .\n", 1, "only pytest"),
            ("pip install 'numpy>=2'\n", 1, "other specifiers"),
            ("\n\nuvx -p three pytest\n", 3, "not a Python version"),
            ("uvx \\\n  -w git+https://x/y.git \\\n  pytest\n", 1, "URLs"),
            ("uv venv -p three\n", 1, "not a Python version"),
            ("bash -c 'pip install numpy' && pytest\n", 1, "cannot read"),
        ];
        for (script, line, why) in cases {
            let err = parse_test_sh(script, "tests/test.sh")
                .unwrap_err()
                .to_string();
            assert!(err.contains("tests/test.sh"), "{err}");
            assert!(err.contains(&format!("line {line}")), "{script:?}: {err}");
            assert!(err.contains(why), "{script:?}: {err}");
        }
    }

    #[test]
    fn a_second_pytest_run_keeps_the_script_with_both_runs_packages() {
        let script = "uvx -p 3.13 -w pytest==8.4.1 -w numpy==2.3.3 pytest /tests/a.py\n\
            uvx -p 3.13 -w pytest==8.4.1 -w scipy==1.16.2 pytest /tests/b.py\n";
        let spec = parse_test_sh(script, "tests/test.sh").unwrap();
        assert_eq!(spec.runner, Runner::Script);
        assert_eq!(spec.pytest_line, 1);
        assert_eq!(
            spec.env.packages,
            vec![
                pkg("numpy", Some("2.3.3")),
                pkg("pytest", Some("8.4.1")),
                pkg("scipy", Some("1.16.2"))
            ]
        );
    }

    #[test]
    fn uvx_indexes_are_kept() {
        let script = "uvx -p 3.13 --index https://download.pytorch.org/whl/cpu \\\n  \
            --index-strategy unsafe-best-match --index=extra=https://example.org/simple \\\n  \
            -w torch==2.7.0 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA\n";
        let spec = parse_test_sh(script, "tests/test.sh").unwrap();
        assert_eq!(
            spec.env.indexes,
            [
                "https://download.pytorch.org/whl/cpu",
                "https://example.org/simple"
            ]
        );
        assert!(matches!(spec.runner, Runner::Pytest(_)));
        let mut v = VerifierSection::default();
        spec.env.store_in(&mut v);
        let back = VerifierEnvSpec::from_section(&v, Path::new("task.toml")).unwrap();
        assert_eq!(back, spec.env);
        assert!(back
            .key_text()
            .contains("index=https://download.pytorch.org/whl/cpu"));
        for (bad, why) in [
            ("uvx --index file:///x pytest\n", "not a package index URL"),
            (
                "uvx --index-strategy fastest pytest\n",
                "not an index strategy",
            ),
        ] {
            let err = parse_test_sh(bad, "tests/test.sh").unwrap_err().to_string();
            assert!(err.contains("line 1") && err.contains(why), "{err}");
        }
        v.index = vec!["ftp://x".into()];
        let err = VerifierEnvSpec::from_section(&v, Path::new("task.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("verifier.index[0]"), "{err}");
    }

    #[test]
    fn uv_venv_asks_for_its_python() {
        for line in [
            "uv venv -p 3.12",
            "uv venv .venv --python 3.12 --seed",
            "uv venv --python=3.12",
        ] {
            let spec = parse_test_sh(&format!("{line}\npytest /tests\n"), "t").unwrap();
            assert_eq!(spec.env.python.as_deref(), Some("3.12"), "{line}");
        }
        let plain = parse_test_sh("uv venv\npytest\n", "t").unwrap();
        assert_eq!(plain.env.python, None);
    }

    #[test]
    fn only_packages_beyond_the_test_tools_need_an_environment() {
        let spec = parse_test_sh(TB2, "tests/test.sh").unwrap();
        assert!(spec.env.needs_environment(), "numpy and scipy");
        let plain = TB2
            .replace("-w numpy==2.3.3", "")
            .replace("-w scipy==1.16.2", "");
        let spec = parse_test_sh(&plain, "tests/test.sh").unwrap();
        assert!(!spec.env.needs_environment(), "{:?}", spec.env);
        let apt = parse_test_sh("apt-get install -y jq\npytest\n", "t").unwrap();
        assert!(apt.env.needs_environment());
    }

    #[test]
    fn work_beside_the_tests_or_a_here_document_keeps_the_script() {
        let extra = "pytest /tests/test_outputs.py\nrm -rf /app/cache\n";
        assert_eq!(parse_test_sh(extra, "t").unwrap().runner, Runner::Script);
        let heredoc =
            "python3 - <<'EOF'\nimport pytest, don't\nEOF\necho 1 > /logs/verifier/reward.txt\n";
        let spec = parse_test_sh(heredoc, "t").unwrap();
        assert_eq!(spec.runner, Runner::Script);
        let err = parse_test_sh("pip install <<EOF\nx\nEOF\n", "t").unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
        // Unsplittable lines that name no test tool are the script's own work.
        let odd = "echo \"it's\npytest\n";
        assert_eq!(parse_test_sh(odd, "t").unwrap().runner, Runner::Script);
    }

    #[test]
    fn native_sections_are_checked_field_by_field() {
        let file = Path::new("task.toml");
        let mut v = VerifierSection {
            python: Some("3.11".into()),
            packages: vec!["pytest==8.4.1".into(), "NumPy==2.1.3".into()],
            apt: vec!["jq".into()],
            ..VerifierSection::default()
        };
        let spec = VerifierEnvSpec::from_section(&v, file).unwrap();
        assert_eq!(spec.python.as_deref(), Some("3.11"));
        assert_eq!(
            spec.packages,
            vec![pkg("numpy", Some("2.1.3")), pkg("pytest", Some("8.4.1"))]
        );
        let mut back = VerifierSection::default();
        spec.store_in(&mut back);
        assert_eq!(back.packages, ["numpy==2.1.3", "pytest==8.4.1"]);
        v.packages.push("scipy>=1".into());
        let err = VerifierEnvSpec::from_section(&v, file)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("task.toml") && err.contains("verifier.packages[2]"),
            "{err}"
        );
        v.packages.pop();
        v.python = Some("py3".into());
        let err = VerifierEnvSpec::from_section(&v, file)
            .unwrap_err()
            .to_string();
        assert!(err.contains("verifier.python"), "{err}");
        v.python = None;
        v.apt = vec!["Bad Name".into()];
        let err = VerifierEnvSpec::from_section(&v, file)
            .unwrap_err()
            .to_string();
        assert!(err.contains("verifier.apt[0]"), "{err}");
        assert!(
            VerifierEnvSpec::from_section(&VerifierSection::default(), file)
                .unwrap()
                .is_empty()
        );
    }
}
