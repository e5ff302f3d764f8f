//! Why a task did not validate, in classes a curator can act on (issue 31):
//! the build could not reach a host, or a package does not exist, or failed
//! otherwise; the tests miss a module or a file; the oracle fails; the final
//! tests already pass on the initial state; the tests or the oracle could
//! not reach a host; a stand-in differs from the image the task was written
//! for. [`classify`] reads them from a [`Validation`]'s problems, test
//! reports and notes, and [`first_blocker`] the first of them with the host
//! or difference it names (issue 52); the classes themselves are part of
//! what validation found (`validation.rs`).

use super::hosts::{unreachable_host, unresolved_name};
use super::standin_diff::difference;
use super::validation::{Blocker, FailureClass, Validation};

/// What the build's output says when a host could not be reached.
const NETWORK: &[&str] = &[
    "could not resolve host",
    "temporary failure in name resolution",
    "temporary failure resolving",
    "could not resolve",
    "name or service not known",
    "network is unreachable",
    "failed to establish a new connection",
    "connection refused",
    "connection timed out",
    "could not connect to",
    "no route to host",
    "failed to fetch",
    "network access is not allowed",
    "does not allow network",
];

/// What it says when a package or image does not exist.
const NOT_FOUND: &[&str] = &[
    "unable to locate package",
    "has no installation candidate",
    "no matching distribution found",
    "could not find a version that satisfies",
    "no solution found when resolving",
    "manifest unknown",
    "package not found",
    "was not found in the package registry",
];

/// The failure classes of `v`, sorted, without repeats (empty when valid).
pub fn classify(v: &Validation) -> Vec<FailureClass> {
    let mut out: Vec<FailureClass> = v.problems.iter().map(|p| judge(v, p).class).collect();
    out.sort();
    out.dedup();
    out
}

/// The first problem of `v` that stopped the task (problems are in the
/// order validation met them: build, initial tests, final tests, oracle),
/// with its class and what it names; `None` when valid.
pub fn first_blocker(v: &Validation) -> Option<Blocker> {
    v.problems.first().map(|p| judge(v, p))
}

/// The blocker `problem` of `v` is.
fn judge(v: &Validation, problem: &str) -> Blocker {
    let low = problem.to_ascii_lowercase();
    let stand_in = v
        .notes
        .iter()
        .find_map(|n| crate::images::stand_in_of_note(n));
    if low.starts_with("the environment did not build") {
        if let Some((host, line)) = unreachable_host(problem) {
            return network(FailureClass::BuildNetwork, host, line);
        }
        if let Some(b) = stand_in.and_then(|s| on_stand_in(s, problem)) {
            return b;
        }
        if let Some(line) = line_with(problem, NETWORK) {
            return plain(FailureClass::BuildNetwork, Some(line));
        }
        if let Some(line) = line_with(problem, NOT_FOUND) {
            return plain(FailureClass::BuildPackageNotFound, Some(line));
        }
        return plain(FailureClass::BuildOther, last_line(problem));
    }
    if low.starts_with("final tests already pass") {
        return plain(FailureClass::FinalPassesInitially, None);
    }
    let (report, fallback) = if low.starts_with("the oracle solution") {
        (v.oracle.as_ref(), FailureClass::OracleFails)
    } else if low.starts_with("initial tests") {
        (v.initial.as_ref(), FailureClass::TestsOther)
    } else if low.starts_with("final tests could not run") {
        (v.final_on_initial.as_ref(), FailureClass::TestsOther)
    } else {
        (None, FailureClass::TestsOther)
    };
    // What ran, in order: the oracle's solve.sh (for its problem), then the
    // tests' output and the failing tests' messages.
    let mut text = String::new();
    if fallback == FailureClass::OracleFails {
        if let Some(out) = &v.oracle_output {
            text.push_str(out);
            text.push('\n');
        }
    }
    text.push_str(problem);
    if let Some(r) = report {
        text.push('\n');
        text.push_str(&r.output);
        for t in r.tests.iter().filter(|t| !t.passed) {
            text.push('\n');
            text.push_str(&t.message);
        }
    }
    if let Some((host, line)) = unreachable_host(&text) {
        return network(FailureClass::TestsNetwork, host, line);
    }
    if let Some(line) = unresolved_name(&text) {
        return plain(FailureClass::TestsNetwork, Some(line));
    }
    if let Some(b) = stand_in.and_then(|s| on_stand_in(s, &text)) {
        return b;
    }
    if let Some((class, line)) = missing(&text) {
        return plain(class, Some(line));
    }
    let first_message = report.and_then(|r| {
        r.tests
            .iter()
            .filter(|t| !t.passed)
            .find_map(|t| last_line(&t.message))
    });
    plain(fallback, first_message.or_else(|| last_line(problem)))
}

/// A network blocker naming `host`.
fn network(class: FailureClass, host: String, line: String) -> Blocker {
    Blocker {
        host: Some(host),
        ..plain(class, Some(line))
    }
}

/// A blocker of `class` shown by `line`, naming nothing.
fn plain(class: FailureClass, line: Option<String>) -> Blocker {
    Blocker {
        class,
        host: None,
        stand_in: None,
        difference: None,
        line: line.map(|l| cap(&l)),
    }
}

/// The stand-in difference `text` shows on stand-in `name`, if any.
fn on_stand_in(name: &str, text: &str) -> Option<Blocker> {
    let (difference, line) = difference(text)?;
    Some(Blocker {
        stand_in: Some(name.to_string()),
        difference: Some(difference),
        ..plain(FailureClass::StandInDifference, Some(line))
    })
}

/// The last non-empty line of `text`, trimmed.
fn last_line(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map(str::to_string)
}

/// `line` cut to [`LINE_CHARS`] characters.
fn cap(line: &str) -> String {
    match line.char_indices().nth(LINE_CHARS) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_string(),
    }
}

/// How much of the line that shows a blocker is kept.
const LINE_CHARS: usize = 300;

/// The first line of `text` (trimmed) containing one of `markers`
/// (lowercase), whatever its case.
fn line_with(text: &str, markers: &[&str]) -> Option<String> {
    text.lines()
        .find(|l| {
            let l = l.to_ascii_lowercase();
            markers.iter().any(|m| l.contains(m))
        })
        .map(|l| l.trim().to_string())
}

/// A missing module or file in `text`, with the line that says so.
fn missing(text: &str) -> Option<(FailureClass, String)> {
    if let Some(line) = line_with(text, &["modulenotfounderror", "no module named"]) {
        return Some((FailureClass::TestsMissingModule, line));
    }
    if let Some(line) = line_with(text, &["filenotfounderror", "no such file or directory"]) {
        return Some((FailureClass::TestsMissingFile, line));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::VerifierPath;
    use crate::verify::{TestCase, TestReport};
    use std::time::Duration;

    fn validation(problems: &[&str]) -> Validation {
        Validation {
            task_id: "t".into(),
            image: None,
            initial_passes: true,
            final_fails_initially: true,
            oracle_passes: None,
            problems: problems.iter().map(|s| s.to_string()).collect(),
            notes: Vec::new(),
            failure_classes: Vec::new(),
            blocker: None,
            initial: None,
            final_on_initial: None,
            baseline: None,
            oracle: None,
            oracle_output: None,
            duration: Duration::ZERO,
        }
    }

    fn report(message: &str, output: &str) -> TestReport {
        TestReport {
            tests: vec![TestCase {
                name: "test_outputs::test_a".into(),
                passed: false,
                message: message.into(),
            }],
            passed: false,
            junit_xml: String::new(),
            output: output.into(),
            duration: Duration::ZERO,
            verifier: VerifierPath::Warm,
            exit_code: Some(1),
        }
    }

    #[test]
    fn build_failures_are_sorted_by_cause() {
        let v = validation(&["the environment did not build: step 3 (RUN curl -fsSL https://example.invalid/x | sh) failed: curl: (6) Could not resolve host: example.invalid"]);
        assert_eq!(classify(&v), vec![FailureClass::BuildNetwork]);
        let v = validation(&[
            "the environment did not build: step 2 failed: E: Unable to locate package nosuchpkg",
        ]);
        assert_eq!(classify(&v), vec![FailureClass::BuildPackageNotFound]);
        let v = validation(&[
            "the environment did not build: ERROR: No matching distribution found for nosuch==1.0",
        ]);
        assert_eq!(classify(&v), vec![FailureClass::BuildPackageNotFound]);
        let v = validation(&["the environment did not build: step 4 failed: exit code 2"]);
        assert_eq!(classify(&v), vec![FailureClass::BuildOther]);
    }

    #[test]
    fn test_failures_name_what_is_missing() {
        let mut v = validation(&[
            "the oracle solution does not pass the final tests (failing: test_outputs::test_a)",
        ]);
        v.oracle = Some(report(
            "E   ModuleNotFoundError: No module named 'rdflib'",
            "",
        ));
        assert_eq!(classify(&v), vec![FailureClass::TestsMissingModule]);
        v.oracle = Some(report(
            "FileNotFoundError: [Errno 2] No such file or directory: '/tests/data.json'",
            "",
        ));
        assert_eq!(classify(&v), vec![FailureClass::TestsMissingFile]);
        v.oracle = Some(report("assert 3 == 4", ""));
        assert_eq!(classify(&v), vec![FailureClass::OracleFails]);
        let v = validation(&["final tests already pass on the initial state"]);
        assert_eq!(classify(&v), vec![FailureClass::FinalPassesInitially]);
        assert!(classify(&validation(&[])).is_empty());
        assert_eq!(
            serde_json::to_value(FailureClass::BuildPackageNotFound).unwrap(),
            serde_json::json!("build-package-not-found")
        );
    }

    /// A build problem as validation words it, around `output`.
    fn build(step: &str, output: &str) -> String {
        format!(
            "the environment did not build: setup step 3 ({step}) failed with exit code Some(100); its output:\n{output}"
        )
    }

    #[test]
    fn a_build_that_cannot_reach_a_host_names_it() {
        // apt-get update against an archive the machine cannot reach.
        let apt = "Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]\n\
                   Err:2 http://ppa.launchpadcontent.net/deadsnakes/ppa/ubuntu noble InRelease\n  \
                   Temporary failure resolving 'ppa.launchpadcontent.net'\n\
                   Reading package lists...\n\
                   W: Failed to fetch http://ppa.launchpadcontent.net/deadsnakes/ppa/ubuntu/dists/noble/InRelease  Temporary failure resolving 'ppa.launchpadcontent.net'\n\
                   E: Unable to locate package python3.12";
        let v = validation(&[&build(
            "RUN apt-get update && apt-get install -y python3.12",
            apt,
        )]);
        let b = first_blocker(&v).unwrap();
        assert_eq!(b.class, FailureClass::BuildNetwork);
        assert_eq!(b.host.as_deref(), Some("ppa.launchpadcontent.net"));
        assert_eq!(
            b.line.as_deref(),
            Some("Temporary failure resolving 'ppa.launchpadcontent.net'")
        );
        assert_eq!(
            b.label(),
            "build-network: ppa.launchpadcontent.net cannot be reached"
        );
        // git clone of a GitHub repository.
        let git = "Cloning into '/opt/repo'...\n\
                   fatal: unable to access 'https://github.com/psf/requests.git/': Could not resolve host: github.com";
        let v = validation(&[&build(
            "RUN git clone https://github.com/psf/requests.git /opt/repo",
            git,
        )]);
        assert_eq!(
            first_blocker(&v).unwrap().host.as_deref(),
            Some("github.com")
        );
        // A network failure naming no host keeps its class, with its line.
        let pip = "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f2>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/numpy/\n\
                   ERROR: Could not find a version that satisfies the requirement numpy==2.3.3 (from versions: none)";
        let v = validation(&[&build("RUN pip install numpy==2.3.3", pip)]);
        let b = first_blocker(&v).unwrap();
        assert_eq!(
            (b.class, b.host.as_deref()),
            (FailureClass::BuildNetwork, None)
        );
        assert!(b.line.unwrap().starts_with("WARNING: Retrying"));
    }

    #[test]
    fn tests_that_cannot_reach_a_host_are_not_broken() {
        // Harbor's test.sh installs uv with curl before running pytest.
        let out = "+ curl -LsSf https://astral.sh/uv/0.9.5/install.sh\n\
                   curl: (6) Could not resolve host: astral.sh\n\
                   /tests/test.sh: line 5: /root/.local/bin/env: No such file or directory\n\
                   /tests/test.sh: line 6: uvx: command not found";
        let mut v = validation(&[
            "the oracle solution does not pass the final tests (no test results; output ends with: uvx: command not found)",
        ]);
        v.oracle = Some(report("", out));
        let b = first_blocker(&v).unwrap();
        assert_eq!(b.class, FailureClass::TestsNetwork);
        assert_eq!(b.host.as_deref(), Some("astral.sh"));
        assert_eq!(
            b.line.as_deref(),
            Some("curl: (6) Could not resolve host: astral.sh")
        );
        assert_eq!(classify(&v), vec![FailureClass::TestsNetwork]);
        // The oracle's solve.sh downloading a model from Hugging Face.
        let mut v = validation(&[
            "the oracle solution does not pass the final tests (failing: test_outputs::test_a)",
        ]);
        v.oracle = Some(report("assert Path('/app/model').exists()", ""));
        v.oracle_output = Some(
            "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the cached files.\n\
             requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /bert-base-uncased/resolve/main/config.json (Caused by NameResolutionError(\"<urllib3.connection.HTTPSConnection object at 0x7f>: Failed to resolve 'huggingface.co' ([Errno -3] Temporary failure in name resolution)\"))".into(),
        );
        let b = first_blocker(&v).unwrap();
        assert_eq!(
            (b.class, b.host.as_deref()),
            (FailureClass::TestsNetwork, Some("huggingface.co"))
        );
        // pip names no host: still the network, shown by its line.
        v.oracle = Some(report("assert False", ""));
        v.oracle_output = Some(
            "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f635d4b1310>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/roman/\n\
             ERROR: No matching distribution found for roman==4.2\n\
             ModuleNotFoundError: No module named 'roman'".into(),
        );
        let b = first_blocker(&v).unwrap();
        assert_eq!(
            (b.class, b.host.as_deref()),
            (FailureClass::TestsNetwork, None)
        );
        assert!(b.detail().starts_with("WARNING: Retrying"), "{b:?}");
        // A test connecting to a server on the machine itself is not the network.
        v.oracle_output = None;
        v.oracle = Some(report(
            "requests.exceptions.ConnectionError: HTTPConnectionPool(host='localhost', port=8080): Max retries exceeded with url: / (Caused by NewConnectionError(': Failed to establish a new connection: [Errno 111] Connection refused'))",
            "",
        ));
        let b = first_blocker(&v).unwrap();
        assert_eq!((b.class, b.host), (FailureClass::OracleFails, None));
    }

    #[test]
    fn a_stand_in_difference_names_the_stand_in_and_what_differs() {
        let note = "base image: ubuntu:24.04 is served by the stand-in localhost/stand-in/debian:trixie (Debian trixie instead of Ubuntu 24.04 (apt installs from Debian's archive))";
        let apt =
            "Reading package lists...\nBuilding dependency tree...\nReading state information...\n\
                   E: Version '4.3.3-2build2' for 'r-base-core' was not found";
        let mut v = validation(&[&build(
            "RUN apt-get update && apt-get install -y r-base-core=4.3.3-2build2",
            apt,
        )]);
        // Without a stand-in it stays what it was.
        assert_eq!(first_blocker(&v).unwrap().class, FailureClass::BuildOther);
        v.notes.push(note.into());
        let b = first_blocker(&v).unwrap();
        assert_eq!(b.class, FailureClass::StandInDifference);
        assert_eq!(
            b.stand_in.as_deref(),
            Some("localhost/stand-in/debian:trixie")
        );
        assert_eq!(
            b.difference.as_deref(),
            Some("version r-base-core=4.3.3-2build2 is not in its archive")
        );
        assert_eq!(
            b.detail(),
            "stand-in localhost/stand-in/debian:trixie: version r-base-core=4.3.3-2build2 is not in its archive"
        );
        // A package the stand-in's archive lacks, installed by test.sh.
        let mut v = validation(&[
            "initial tests fail on the initial state (failing: test_outputs::test_a)",
        ]);
        v.notes.push(note.into());
        v.initial = Some(report(
            "E   ModuleNotFoundError: No module named 'cv2'",
            "E: Package 'libgl1-mesa-glx' has no installation candidate",
        ));
        let b = first_blocker(&v).unwrap();
        assert_eq!(b.class, FailureClass::StandInDifference);
        assert_eq!(
            b.difference.as_deref(),
            Some("package libgl1-mesa-glx is not in its archive")
        );
    }

    #[test]
    fn the_first_problem_is_the_blocker_and_unknown_output_keeps_its_class() {
        let mut v = validation(&[
            &build(
                "RUN make",
                "cc -o x x.c\nmake: *** [Makefile:3: all] Error 1",
            ),
            "final tests already pass on the initial state",
        ]);
        let b = first_blocker(&v).unwrap();
        assert_eq!(b.class, FailureClass::BuildOther);
        assert_eq!((b.host, b.stand_in), (None, None));
        assert_eq!(
            b.line.as_deref(),
            Some("make: *** [Makefile:3: all] Error 1")
        );
        v.problems.remove(0);
        let b = first_blocker(&v).unwrap();
        assert_eq!(
            (b.class, b.line),
            (FailureClass::FinalPassesInitially, None)
        );
        v.problems.clear();
        assert_eq!(first_blocker(&v), None);
        // The record reads back.
        let b = first_blocker(&validation(&[&build(
            "RUN x",
            "curl: (6) Could not resolve host: github.com",
        )]))
        .unwrap();
        let json = serde_json::to_value(&b).unwrap();
        assert_eq!(json["class"], "build-network");
        assert_eq!(json["host"], "github.com");
        assert!(json.get("stand_in").is_none(), "{json}");
        assert_eq!(serde_json::from_value::<Blocker>(json).unwrap(), b);
    }
}
