//! Typed checks on the sandbox's state, rendered as pytest files (stdlib only)
//! and as human-readable lines for `truth.md`.

use super::util::{py, py_list};

/// One assertion about the filesystem, a database or a repository.
#[derive(Debug, Clone)]
pub enum Check {
    /// A regular file exists.
    File(String),
    /// A directory exists.
    Dir(String),
    /// Nothing (not even a dangling link) exists at the path.
    Absent(String),
    /// The file's text is exactly this.
    Content(String, String),
    /// The file's lines (trailing newline optional) are exactly these.
    Lines(String, Vec<String>),
    /// The file's lines, in any order, are exactly these.
    LinesAnyOrder(String, Vec<String>),
    /// The file contains this substring.
    Contains(String, String),
    /// The file does not contain this substring.
    NotContains(String, String),
    /// Permission bits (`stat.S_IMODE`).
    Mode(String, u32),
    /// A symbolic link pointing at exactly this target.
    Symlink(String, String),
    /// The file parses as JSON equal to this JSON text.
    Json(String, String),
    /// The JSON object in the file has these numeric fields within `tol`.
    JsonNumbers(String, Vec<(String, f64)>, f64),
    /// The file holds one number within `tol` of the value.
    Number(String, f64, f64),
    /// A tar archive (any compression) whose regular-file members, with a
    /// leading `./` removed, are exactly these.
    TarMembers(String, Vec<String>),
    /// A zip archive whose file members are exactly these.
    ZipMembers(String, Vec<String>),
    /// A gzip file whose decompressed text is this.
    Gzip(String, String),
    /// An xz file whose decompressed text is this.
    Xz(String, String),
    /// An SQLite query whose rows (each cell as `str`) are exactly these.
    Sqlite(String, String, Vec<Vec<String>>),
    /// `git <args>` in the repository prints this (stripped).
    Git(String, Vec<String>, String),
    /// The file's SHA-256 is this hex digest.
    Sha256(String, String),
    /// Two files have identical bytes.
    SameAs(String, String),
    /// `<path>` holds a `sha256sum` line for the file it sits beside.
    ChecksumSidecar(String, String),
    /// Free-form test: a name, a truth line and the Python body (4-space indented by the renderer).
    Custom {
        /// Test-function suffix.
        name: String,
        /// Line for truth.md.
        describe: String,
        /// Python statements.
        body: String,
    },
}

impl Check {
    /// A short human description for `truth.md`.
    pub fn describe(&self) -> String {
        match self {
            Check::File(p) => format!("`{p}` is a regular file"),
            Check::Dir(p) => format!("`{p}` is a directory"),
            Check::Absent(p) => format!("`{p}` does not exist"),
            Check::Content(p, t) => format!("`{p}` contains exactly:\n```\n{t}```"),
            Check::Lines(p, l) => {
                format!("`{p}` has exactly these lines:\n```\n{}\n```", l.join("\n"))
            }
            Check::LinesAnyOrder(p, l) => {
                format!(
                    "`{p}` has these lines (any order):\n```\n{}\n```",
                    l.join("\n")
                )
            }
            Check::Contains(p, s) => format!("`{p}` contains `{s}`"),
            Check::NotContains(p, s) => format!("`{p}` does not contain `{s}`"),
            Check::Mode(p, m) => format!("`{p}` has mode {m:04o}"),
            Check::Symlink(p, t) => format!("`{p}` is a symlink to `{t}`"),
            Check::Json(p, j) => format!("`{p}` is JSON equal to `{j}`"),
            Check::JsonNumbers(p, kv, tol) => {
                let parts: Vec<String> = kv.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("`{p}` is a JSON object with {} (±{tol})", parts.join(", "))
            }
            Check::Number(p, v, tol) => format!("`{p}` holds the number {v} (±{tol})"),
            Check::TarMembers(p, m) => {
                format!("`{p}` is a tar archive of exactly: {}", m.join(", "))
            }
            Check::ZipMembers(p, m) => {
                format!("`{p}` is a zip archive of exactly: {}", m.join(", "))
            }
            Check::Gzip(p, _) => format!("`{p}` is gzip-compressed original content"),
            Check::Xz(p, _) => format!("`{p}` is xz-compressed original content"),
            Check::Sqlite(db, q, rows) => format!("in `{db}`, `{q}` returns {rows:?}"),
            Check::Git(r, a, out) => format!("in `{r}`, `git {}` prints `{out}`", a.join(" ")),
            Check::Sha256(p, h) => format!("`{p}` has SHA-256 {h}"),
            Check::SameAs(p, o) => format!("`{p}` is byte-identical to `{o}`"),
            Check::ChecksumSidecar(s, f) => format!("`{s}` holds the sha256sum line of `{f}`"),
            Check::Custom { describe, .. } => describe.clone(),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Check::File(_) => "file_exists",
            Check::Dir(_) => "dir_exists",
            Check::Absent(_) => "absent",
            Check::Content(..) => "content",
            Check::Lines(..) => "lines",
            Check::LinesAnyOrder(..) => "lines_any_order",
            Check::Contains(..) => "contains",
            Check::NotContains(..) => "not_contains",
            Check::Mode(..) => "mode",
            Check::Symlink(..) => "symlink",
            Check::Json(..) => "json",
            Check::JsonNumbers(..) => "json_numbers",
            Check::Number(..) => "number",
            Check::TarMembers(..) => "tar_members",
            Check::ZipMembers(..) => "zip_members",
            Check::Gzip(..) => "gzip",
            Check::Xz(..) => "xz",
            Check::Sqlite(..) => "sqlite",
            Check::Git(..) => "git",
            Check::Sha256(..) => "sha256",
            Check::SameAs(..) => "same_as",
            Check::ChecksumSidecar(..) => "checksum_sidecar",
            Check::Custom { .. } => "custom",
        }
    }

    /// The Python statements of this check (values are bound to local names
    /// first, so that f-strings never nest quotes: Python 3.11 forbids that).
    fn body(&self) -> String {
        match self {
            Check::File(p) => format!(
                "path = {}\nassert os.path.isfile(path), f\"{{path}} should be a regular file but is missing\"",
                py(p)
            ),
            Check::Dir(p) => format!(
                "path = {}\nassert os.path.isdir(path), f\"directory {{path}} is missing\"",
                py(p)
            ),
            Check::Absent(p) => format!(
                "path = {}\nassert not os.path.lexists(path), f\"{{path}} should not exist\"",
                py(p)
            ),
            Check::Content(p, t) => format!("_expect_text({}, {})", py(p), py(t)),
            Check::Lines(p, l) => format!("_expect_lines({}, {}, ordered=True)", py(p), py_list(l)),
            Check::LinesAnyOrder(p, l) => {
                format!("_expect_lines({}, {}, ordered=False)", py(p), py_list(l))
            }
            Check::Contains(p, s) => format!(
                "path, needle = {}, {}\nassert needle in _read(path), f\"{{path}} should contain {{needle!r}}\"",
                py(p),
                py(s)
            ),
            Check::NotContains(p, s) => format!(
                "path, needle = {}, {}\nassert needle not in _read(path), f\"{{path}} still contains {{needle!r}}\"",
                py(p),
                py(s)
            ),
            Check::Mode(p, m) => format!(
                "path = {}\nassert os.path.exists(path), f\"{{path}} is missing\"\nmode = stat.S_IMODE(os.stat(path).st_mode)\nassert mode == 0o{m:o}, f\"{{path}} has mode {{oct(mode)}}, expected 0o{m:o}\"",
                py(p)
            ),
            Check::Symlink(p, t) => format!(
                "path, expected = {}, {}\nassert os.path.islink(path), f\"{{path}} should be a symbolic link\"\ntarget = os.readlink(path)\nassert target == expected, f\"{{path}} points at {{target!r}}, expected {{expected!r}}\"",
                py(p),
                py(t)
            ),
            Check::Json(p, j) => format!(
                "path = {}\ntry:\n    data = json.loads(_read(path))\nexcept ValueError as e:\n    pytest.fail(f\"{{path}} is not valid JSON: {{e}}\")\nexpected = json.loads({})\nassert data == expected, f\"{{path}} holds {{data!r}}, expected {{expected!r}}\"",
                py(p),
                py(j)
            ),
            Check::JsonNumbers(p, kv, tol) => {
                let mut s = format!(
                    "path = {}\ntry:\n    data = json.loads(_read(path))\nexcept ValueError as e:\n    pytest.fail(f\"{{path}} is not valid JSON: {{e}}\")\nassert isinstance(data, dict), f\"{{path}} should hold a JSON object\"\n",
                    py(p)
                );
                for (k, v) in kv {
                    s.push_str(&format!(
                        "key = {}\nassert key in data, f\"{{path}} lacks the key {{key!r}}\"\nassert isinstance(data[key], (int, float)), f\"{{key}} should be a number, got {{data[key]!r}}\"\nassert abs(data[key] - {v:?}) <= {tol:?}, f\"{{key}} is {{data[key]}}, expected {v:?}\"\n",
                        py(k)
                    ));
                }
                s
            }
            Check::Number(p, v, tol) => format!(
                "path = {}\nraw = _read(path).strip()\ntry:\n    value = float(raw)\nexcept ValueError:\n    pytest.fail(f\"{{path}} should hold one number, got {{raw!r}}\")\nassert abs(value - {v:?}) <= {tol:?}, f\"{{path}} holds {{value}}, expected {v:?}\"",
                py(p)
            ),
            Check::TarMembers(p, m) => format!(
                "path, expected = {}, sorted({})\nassert os.path.isfile(path), f\"archive {{path}} is missing\"\nassert tarfile.is_tarfile(path), f\"{{path}} is not a tar archive\"\nwith tarfile.open(path) as tf:\n    names = sorted(_norm(m.name) for m in tf.getmembers() if m.isfile())\nassert names == expected, f\"{{path}} holds {{names}}, expected {{expected}}\"",
                py(p),
                py_list(m)
            ),
            Check::ZipMembers(p, m) => format!(
                "path, expected = {}, sorted({})\nassert os.path.isfile(path), f\"archive {{path}} is missing\"\nassert zipfile.is_zipfile(path), f\"{{path}} is not a zip archive\"\nwith zipfile.ZipFile(path) as zf:\n    names = sorted(_norm(n) for n in zf.namelist() if not n.endswith('/'))\nassert names == expected, f\"{{path}} holds {{names}}, expected {{expected}}\"",
                py(p),
                py_list(m)
            ),
            Check::Gzip(p, t) => format!(
                "path = {}\nassert os.path.isfile(path), f\"{{path}} is missing\"\ntry:\n    with gzip.open(path, 'rt', encoding='utf-8') as f:\n        text = f.read()\nexcept OSError as e:\n    pytest.fail(f\"{{path}} is not valid gzip: {{e}}\")\nassert text == {}, f\"{{path}} does not decompress to the original content\"",
                py(p),
                py(t)
            ),
            Check::Xz(p, t) => format!(
                "path = {}\nassert os.path.isfile(path), f\"{{path}} is missing\"\ntry:\n    with lzma.open(path, 'rt', encoding='utf-8') as f:\n        text = f.read()\nexcept (OSError, lzma.LZMAError) as e:\n    pytest.fail(f\"{{path}} is not valid xz: {{e}}\")\nassert text == {}, f\"{{path}} does not decompress to the original content\"",
                py(p),
                py(t)
            ),
            Check::Sqlite(db, q, rows) => {
                let rows_py: Vec<String> = rows.iter().map(|r| py_list(r)).collect();
                format!(
                    "db, query = {}, {}\nassert os.path.isfile(db), f\"database {{db}} is missing\"\ncon = sqlite3.connect(db)\ntry:\n    rows = [[str(c) for c in r] for r in con.execute(query).fetchall()]\nfinally:\n    con.close()\nexpected = [{}]\nassert rows == expected, f\"{{query}} returned {{rows}}, expected {{expected}}\"",
                    py(db),
                    py(q),
                    rows_py.join(", ")
                )
            }
            Check::Git(r, a, out) => format!(
                "repo, args, expected = {}, {}, {}\nres = _git(repo, args)\nassert res.returncode == 0, f\"git {{args}} failed in {{repo}}: {{res.stderr}}\"\nassert res.stdout.strip() == expected, f\"git {{args}} printed {{res.stdout.strip()!r}}, expected {{expected!r}}\"",
                py(r),
                py_list(a),
                py(out)
            ),
            Check::Sha256(p, h) => format!(
                "path, expected = {}, {}\nassert os.path.isfile(path), f\"{{path}} is missing\"\nwith open(path, 'rb') as f:\n    digest = hashlib.sha256(f.read()).hexdigest()\nassert digest == expected, f\"{{path}} has SHA-256 {{digest}}, expected {{expected}}\"",
                py(p),
                py(h)
            ),
            Check::SameAs(p, o) => format!(
                "path, other = {}, {}\nassert os.path.isfile(path), f\"{{path}} is missing\"\nwith open(path, 'rb') as a, open(other, 'rb') as b:\n    assert a.read() == b.read(), f\"{{path}} differs from {{other}}\"",
                py(p),
                py(o)
            ),
            Check::ChecksumSidecar(s, f) => format!(
                "sidecar, target = {}, {}\nassert os.path.isfile(target), f\"{{target}} is missing\"\nwith open(target, 'rb') as fh:\n    digest = hashlib.sha256(fh.read()).hexdigest()\nexpected = digest + '  ' + os.path.basename(target)\ngot = _read(sidecar).strip()\nassert got == expected, f\"{{sidecar}} holds {{got!r}}, expected {{expected!r}} (sha256sum format)\"",
                py(s),
                py(f)
            ),
            Check::Custom { body, .. } => body.clone(),
        }
    }
}

const PRELUDE: &str = r#"import gzip
import hashlib
import json
import lzma
import os
import sqlite3
import stat
import subprocess
import tarfile
import zipfile

import pytest


def _read(path):
    assert os.path.isfile(path), f"{path} should be a regular file but is missing"
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _expect_text(path, expected):
    text = _read(path)
    if text != expected:
        got_lines, exp_lines = text.splitlines(), expected.splitlines()
        for i, (g, e) in enumerate(zip(got_lines, exp_lines), 1):
            if g != e:
                pytest.fail(f"{path} line {i} is {g!r}, expected {e!r}")
        pytest.fail(f"{path} has {len(got_lines)} lines, expected {len(exp_lines)} "
                    f"(or differs in trailing whitespace)")


def _expect_lines(path, expected, ordered):
    got = [l.rstrip("\r") for l in _read(path).splitlines()]
    while got and got[-1] == "":
        got.pop()
    if not ordered:
        got, expected = sorted(got), sorted(expected)
    if got != expected:
        missing = [l for l in expected if l not in got]
        extra = [l for l in got if l not in expected]
        pytest.fail(f"{path}: lines differ; missing {missing[:5]}, unexpected {extra[:5]}"
                    f"{'' if missing or extra else ' (order is wrong)'}")


def _norm(name):
    while name.startswith("./"):
        name = name[2:]
    return name.rstrip("/")


def _git(repo, args):
    return subprocess.run(["git", "-c", "safe.directory=*", "-C", repo] + list(args),
                          capture_output=True, text=True, check=False)
"#;

/// Render a pytest file: `doc` is the module docstring.
pub fn render(doc: &str, checks: &[Check]) -> String {
    let mut s = format!("\"\"\"{}\"\"\"\n\n", doc.replace("\"\"\"", "'''"));
    s.push_str(PRELUDE);
    for (i, c) in checks.iter().enumerate() {
        let suffix = match c {
            Check::Custom { name, .. } => name.clone(),
            _ => c.name().to_string(),
        };
        s.push_str(&format!("\n\ndef test_{:02}_{}():\n", i + 1, suffix));
        s.push_str(&format!("    \"\"\"{}\"\"\"\n", first_line(&c.describe())));
        for line in c.body().lines() {
            if line.is_empty() {
                s.push('\n');
            } else {
                s.push_str("    ");
                s.push_str(line);
                s.push('\n');
            }
        }
    }
    s
}

fn first_line(s: &str) -> String {
    s.lines()
        .next()
        .unwrap_or("")
        .replace('\\', "/")
        .replace("\"\"\"", "'''")
        .trim_end_matches(':')
        .to_string()
}
