//! The pytest options of a task's own test runner (Harbor's `tests/test.sh`:
//! `pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA`)
//! that the verifier's pytest may take too: those that only change what
//! pytest prints or writes beside the verdict (`-rA`, `-v`, `--tb=short`,
//! `--ctrf FILE`, `-W ...`) or which of the task's tests run as its author
//! chose (`-k`, `-m`, `--deselect`, `-x`, `--maxfail`). Options that would
//! change how the verdict is reached or reported (`-p no:...`, `--co`,
//! `-c`, `--rootdir`, `-o`, `--junitxml`, `--lf`, `--pdb`, ...) and options
//! this list does not know are refused at import, with the file and line.

/// Options the verifier always gives its pytest (see `verify/run.rs`).
const ALWAYS: &[&str] = &["-rA", "-q", "--color=no"];

/// Options kept, that take no value.
const FLAGS: &[&str] = &[
    "-v",
    "-vv",
    "-vvv",
    "-q",
    "-qq",
    "-s",
    "-l",
    "-x",
    "--verbose",
    "--quiet",
    "--exitfirst",
    "--showlocals",
    "--strict-markers",
    "--disable-warnings",
    "--no-header",
    "--no-summary",
];

/// Options kept, that take a value (`--opt VALUE` or `--opt=VALUE`).
const VALUED: &[&str] = &[
    "-k",
    "-m",
    "-W",
    "--tb",
    "--ctrf",
    "--maxfail",
    "--durations",
    "--deselect",
    "--color",
    "--capture",
];

/// The options of the pytest argument list `args` (files and options as
/// test.sh wrote them) that the verifier's pytest takes too, in order.
/// `Err`: an option that would change the verdict, or one not known here,
/// with why.
pub fn safe_options(args: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        if !a.starts_with('-') || a == "-" {
            continue; // a file or folder (checked by the caller)
        }
        if a == "--" {
            break;
        }
        // The verifier blocks the cache plugin itself (endless's own
        // exported test.sh says so too): nothing to keep.
        if a == "-pno:cacheprovider" {
            continue;
        }
        if a == "-p" && it.peek().is_some_and(|v| *v == "no:cacheprovider") {
            it.next();
            continue;
        }
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (a.as_str(), None),
        };
        // What the verifier's pytest is always given: nothing to keep.
        if ALWAYS.contains(&a.as_str()) {
            continue;
        }
        // `-rA`, `-ra`, `-rfE`: the summary's report characters.
        if let Some(chars) = name.strip_prefix("-r").filter(|_| !name.starts_with("--")) {
            if !chars.is_empty() && chars.chars().all(|c| "fEsxXpPaAwN".contains(c)) {
                out.push(a.clone());
                continue;
            }
        }
        // `-Wignore::DeprecationWarning`, `-kexpr`: a short option glued to its value.
        if inline.is_none() && !name.starts_with("--") && name.len() > 2 {
            let short = &name[..2];
            if ["-W", "-k", "-m"].contains(&short) {
                out.push(a.clone());
                continue;
            }
        }
        if FLAGS.contains(&name) && inline.is_none() {
            out.push(a.clone());
            continue;
        }
        if VALUED.contains(&name) {
            out.push(a.clone());
            if inline.is_none() {
                let value = it
                    .next()
                    .ok_or_else(|| format!("pytest option `{name}` has no value"))?;
                out.push(value.clone());
            }
            continue;
        }
        return Err(refusal(name));
    }
    Ok(out)
}

/// Why `name` is refused.
fn refusal(name: &str) -> String {
    let why = match name {
        "-p" => "it loads or blocks pytest plugins, which the verifier chooses",
        "--co" | "--collect-only" | "--setup-only" | "--setup-plan" | "--fixtures"
        | "--markers" | "--version" | "-h" | "--help" => "it keeps the tests from running",
        "-c" | "--rootdir" | "--confcutdir" | "-o" | "--override-ini" | "--noconftest"
        | "--config-file" | "--inifile" => {
            "it changes the configuration the verifier gives pytest"
        }
        "--junitxml" | "--junit-xml" | "--junit-prefix" => {
            "the verifier writes the JUnit report the verdict is read from"
        }
        "--lf" | "--last-failed" | "--ff" | "--failed-first" | "--sw" | "--stepwise"
        | "--nf" | "--new-first" | "--cache-clear" | "--runxfail" => {
            "it makes the verdict depend on an earlier run or turns expected failures into passes"
        }
        "--pdb" | "--trace" | "--pdbcls" => "it stops for a debugger",
        _ => {
            return format!(
                "pytest option `{name}` is not one the verifier passes through (kept: -r..., {}, {}); remove it from the pytest line",
                FLAGS.join(", "),
                VALUED.join(", ")
            )
        }
    };
    format!("pytest option `{name}` is refused: {why}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn harmless_options_are_kept_in_order_without_the_files() {
        let got = safe_options(
            &args("--ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA -k not_slow --tb=short -v -Wignore::DeprecationWarning"),
        )
        .unwrap();
        assert_eq!(
            got,
            args("--ctrf /logs/verifier/ctrf.json -k not_slow --tb=short -v -Wignore::DeprecationWarning")
        );
        assert!(safe_options(&args("/tests/test_outputs.py"))
            .unwrap()
            .is_empty());
        // What endless's own Harbor export writes.
        assert_eq!(
            safe_options(&args("-p no:cacheprovider -rA -ra test_outputs.py")).unwrap(),
            ["-ra"]
        );
    }

    #[test]
    fn options_that_change_the_verdict_are_refused_with_why() {
        for (line, what) in [
            ("-p no:randomly /tests/t.py", "plugins"),
            ("--co /tests/t.py", "keeps the tests from running"),
            ("--junitxml=/tmp/x.xml", "JUnit report"),
            ("-o addopts=-x", "configuration"),
            ("--lf", "earlier run"),
            ("--frobnicate", "not one the verifier passes through"),
        ] {
            let err = safe_options(&args(line)).unwrap_err();
            assert!(err.contains(what), "{line}: {err}");
        }
        assert!(safe_options(&args("--ctrf"))
            .unwrap_err()
            .contains("no value"));
    }
}
