//! The verifier's own program (`assets/verifier/verifier.py`) on its own,
//! with the host's Python and pytest (the runtime's): what the pre-warmed
//! interpreter prepares before it forks (pytest's configuration, the test
//! modules compiled ahead) is what pytest then uses, instead of building its
//! own, and changes nothing it reports. The sandboxed paths are tested in
//! `tests/verify.rs`.

use std::process::Command;

/// Runs the program's functions in one interpreter: the same tests three
/// times (prepared, then unprepared, then with a changed file), counting
/// the calls that preparing saves.
const DRIVER: &str = r#"
import json, os, sys, tempfile
program = sys.argv[1]
v = {"__name__": "verifier"}
exec(compile(open(program).read(), program, "exec"), v)
v["add_runtime_site_dirs"]()
work = tempfile.mkdtemp()
v["warm_up"](work)
import _pytest.config
from _pytest.assertion import rewrite

calls = {"get_config": 0, "rewrite": 0}
get_config, rewrite_test = _pytest.config.get_config, rewrite._rewrite_test
def counting_get_config(*a, **k):
    calls["get_config"] += 1
    return get_config(*a, **k)
def counting_rewrite(*a, **k):
    calls["rewrite"] += 1
    return rewrite_test(*a, **k)
_pytest.config.get_config = counting_get_config
rewrite._rewrite_test = counting_rewrite

root = os.path.join(work, "run")
tests = os.path.join(root, "tests")
os.makedirs(tests)
path = os.path.join(tests, "test_state.py")
source = "import os\n\ndef test_passes():\n    assert os.sep == '/'\n\ndef test_fails():\n    assert [1, 2] == [1, 3]\n"
ini = os.path.join(root, "pytest.ini")
with open(ini, "w") as f:
    f.write("[pytest]\n")
args = ["-p", "no:cacheprovider", "--noconftest", "--color=no", "-q", "-rA",
        "--rootdir=" + tests, "-c=" + ini]

def run(text, junit):
    with open(path, "w") as f:
        f.write(text)
    for m in [m for m in sys.modules if m.startswith("test_state")]:
        del sys.modules[m]
    before = dict(calls)
    import pytest
    v["adopt_prebuilt"](args)
    rc = int(pytest.main(args + ["--junitxml=" + junit, path]))
    used = {k: calls[k] - before[k] for k in calls}
    xml = open(junit).read()
    return {"rc": rc, "used": used, "passed": xml.count("<testcase") - xml.count("<failure"),
            "failed": xml.count("<failure"), "assert_detail": "[1, 2] == [1, 3]" in xml}

v["prebuild"](args[:2])
v["compile_ahead"]({path: source})
out = {"prepared": run(source, os.path.join(work, "1.xml"))}
# What the zygote prepared was used once: a second run in this process
# builds its own.
out["unprepared"] = run(source, os.path.join(work, "2.xml"))
v["prebuild"](args[:2])
changed = source.replace("[1, 3]", "[1, 2]")
out["changed"] = run(changed, os.path.join(work, "3.xml"))
# A run that blocks other plugins builds its own configuration.
v["prebuild"](["-p", "no:doctest"])
out["other_plugins"] = run(source, os.path.join(work, "4.xml"))
print(json.dumps(out))
"#;

#[test]
fn what_the_zygote_prepares_is_used_and_changes_no_result() {
    let program = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/verifier/verifier.py");
    let out = Command::new("/usr/bin/python3")
        .args(["-I", "-S", "-B", "-c", DRIVER, program])
        .output()
        .expect("run /usr/bin/python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "driver failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(last).expect(&stdout);
    let run = |name: &str| &v[name];
    // Prepared: neither the configuration nor the module was built again,
    // and pytest reported what it reports unprepared, assertion details too.
    assert_eq!(run("prepared")["used"]["get_config"], 0, "{v}");
    assert_eq!(run("prepared")["used"]["rewrite"], 0, "{v}");
    for name in ["prepared", "unprepared", "other_plugins"] {
        assert_eq!(run(name)["rc"], 1, "{name}: {v}");
        assert_eq!(run(name)["passed"], 1, "{name}: {v}");
        assert_eq!(run(name)["failed"], 1, "{name}: {v}");
        assert_eq!(run(name)["assert_detail"], true, "{name}: {v}");
    }
    assert_eq!(run("unprepared")["used"]["get_config"], 1, "{v}");
    assert_eq!(
        run("unprepared")["used"]["rewrite"],
        0,
        "cached module: {v}"
    );
    // A file whose bytes differ from what was compiled is compiled by pytest.
    assert_eq!(run("changed")["used"]["rewrite"], 1, "{v}");
    assert_eq!(run("changed")["used"]["get_config"], 0, "{v}");
    assert_eq!(run("changed")["rc"], 0, "{v}");
    assert_eq!(run("other_plugins")["used"]["get_config"], 1, "{v}");
}

/// Runs one failing test module (which uses pytest's own fixtures and one
/// of its own) twice in a fresh interpreter, with or without the program's
/// memos (argv[2] == "memo": statement ranges, option parsers, plugin
/// fixtures, entry points, the module parsed ahead), then lists the
/// fixtures; prints the second run's report, its JUnit XML without
/// timings, the listing, and how many syntax-tree nodes the tracebacks
/// visited, how many modules they parsed, how many option parsers
/// pytest built, how many attributes it looked at for fixtures and how
/// many `entry_points.txt` files it read, in the second run (as a forked
/// run of the pre-warmed verifier follows the zygote's warm-up run).
const TRACEBACKS: &str = r#"
import ast, os, re, sys, tempfile
program, mode = sys.argv[1], sys.argv[2]
v = {"__name__": "verifier"}
exec(compile(open(program).read(), program, "exec"), v)
v["add_runtime_site_dirs"]()
work = tempfile.mkdtemp()
tests = os.path.join(work, "tests")
os.makedirs(tests)
path = os.path.join(tests, "test_state.py")
helpers = "".join(
    "def check_%d(p):\n    # a comment\n    assert os.path.exists(p), 'missing ' + p\n\n" % i
    for i in range(3))
cases = "".join(
    "def test_%d():\n    check_%d('/nonexistent/%d')\n\n" % (i, i % 3, i) for i in range(8))
module = ("import os, pytest\n\n" + helpers + cases + "def test_passes():\n    assert True\n\n"
          "@pytest.fixture(autouse=True)\ndef around(request):\n    yield request.node.name\n\n"
          "def test_fixtures(tmp_path, capsys, monkeypatch, record_property, around):\n"
          "    monkeypatch.setenv('ENDLESS_X', '1')\n    print(around)\n"
          "    assert capsys.readouterr().out == 'test_fixtures\\n'\n"
          "    record_property('file', str((tmp_path / 'a').write_text('x')))\n\n"
          "def test_fixture_fails(capfd):\n    print('out')\n    assert capfd.readouterr().out == 'no'\n")
with open(path, "w") as f:
    f.write(module)
ini = os.path.join(work, "pytest.ini")
with open(ini, "w") as f:
    f.write("[pytest]\n")
counts = {}
def counting(owner, name, key):
    original = getattr(owner, name)
    counts[key] = 0
    def counted(*args, **kwargs):
        counts[key] += 1
        return original(*args, **kwargs)
    setattr(owner, name, counted)
counting(ast, "iter_child_nodes", "nodes")
parse, counts["parses"] = ast.parse, 0
def counted_parse(source, filename="<unknown>", *args, **kwargs):
    # pytest's parse of the whole module, for a traceback through it
    counts["parses"] += filename == "source" and source.startswith("import os, pytest")
    return parse(source, filename, *args, **kwargs)
ast.parse = counted_parse
import pytest
from _pytest import fixtures
from _pytest.config.argparsing import MyOptionParser
counting(MyOptionParser, "__init__", "parsers")
counting(fixtures, "getfixturemarker", "lookups")
import pathlib
read_text, counts["entry_points"] = pathlib.Path.read_text, 0
def counted_read_text(self, *args, **kwargs):
    counts["entry_points"] += self.name == "entry_points.txt"
    return read_text(self, *args, **kwargs)
pathlib.Path.read_text = counted_read_text
if mode == "memo":  # as the zygote, before its warm-up run
    v["remember_plugin_fixtures"]()
junit = os.path.join(work, "junit.xml")
os.chdir(work)  # paths in the report relative to the same place, wherever the test runs
fd = os.dup(1)
def run(name, *extra):
    report = os.path.join(work, name)
    os.dup2(os.open(report, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
    rc = pytest.main(["-p", "no:cacheprovider", "--noconftest", "--color=no", "-q", "-rA",
                      "--rootdir=" + tests, "-c=" + ini] + list(extra) + [path])
    sys.stdout.flush()
    os.dup2(fd, 1)
    return rc, open(report).read()
run("warm-up.txt", "--junitxml=" + junit)
if mode == "memo":  # as the zygote after its warm-up run, then as a forked run
    v["remember_entry_points"]()
    v["compile_ahead"]({path: module})
    v["remember_statement_ranges"]()
    v["reuse_option_parsers"]()
counts.update(dict.fromkeys(counts, 0))
rc, report = run("report.txt", "--junitxml=" + junit)
seen = (rc, counts["nodes"], counts["parses"], counts["parsers"], counts["lookups"],
        counts["entry_points"])
_, listing = run("fixtures.txt", "--fixtures", "-v")
def masked(t):
    t = t.replace(work, "WORK").replace(os.path.basename(work), "WORK")
    return re.sub(r"0x[0-9a-f]+", "0x?", t)
text = masked(re.sub(r" in [0-9.]+s", "", report))
xml = masked(re.sub(r'(time|timestamp|hostname)="[^"]*"', "", open(junit).read()))
print("rc=%d nodes=%d parses=%d parsers=%d lookups=%d entry_points=%d" % seen)
print(text)
print(xml)
print(masked(re.sub(r" in [0-9.]+s", "", listing)))
"#;

#[test]
fn remembered_statement_ranges_parsers_and_plugin_fixtures_change_no_report() {
    let program = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/verifier/verifier.py");
    let run = |mode: &str| {
        let out = Command::new("/usr/bin/python3")
            .args(["-I", "-S", "-B", "-c", TRACEBACKS, program, mode])
            .output()
            .expect("run /usr/bin/python3");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{mode}: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (head, rest) = stdout.split_once('\n').expect(&stdout);
        let count = |key: &str| -> usize {
            head.split(&format!("{key}="))
                .nth(1)
                .and_then(|w| w.split(' ').next())
                .and_then(|w| w.parse().ok())
                .expect(head)
        };
        assert!(head.starts_with("rc=1 "), "{mode}: {head}");
        (
            [
                count("nodes"),
                count("parses"),
                count("parsers"),
                count("lookups"),
                count("entry_points"),
            ],
            rest.to_string(),
        )
    };
    let ([plain_nodes, plain_parses, plain_parsers, plain_lookups, plain_entry_points], plain) =
        run("plain");
    let ([memo_nodes, memo_parses, memo_parsers, memo_lookups, memo_entry_points], memo) =
        run("memo");
    assert!(plain.contains("missing /nonexistent/7"), "{plain}");
    assert!(plain.contains("9 failed, 2 passed"), "{plain}");
    assert!(
        plain.contains("test_fixture_fails") && plain.contains("<property name=\"file\""),
        "the fixtures ran: {plain}"
    );
    assert!(
        plain.contains("tmp_path_factory") && plain.contains("monkeypatch"),
        "the fixture listing: {plain}"
    );
    assert!(
        plain.contains("# a comment"),
        "source lines in the traceback: {plain}"
    );
    assert!(
        memo == plain,
        "the report or JUnit XML differ:\n{memo}\n---\n{plain}"
    );
    // Eight failures of two entries each, at eleven distinct lines: pytest
    // walks the module's whole tree for each entry (and again for each
    // entry's indentation); remembered, each tree is walked once and each
    // line's search visits just its statements (3,640 nodes against 738
    // with pytest 7.2).
    assert!(
        memo_nodes * 4 <= plain_nodes,
        "syntax-tree nodes visited: {memo_nodes} remembered against {plain_nodes}"
    );
    // The module's tree was parsed by the zygote (compile_ahead), by the
    // text pytest parses for a traceback through it: the run parses it
    // not once.
    assert!(plain_parses > 0, "{plain_parses}");
    assert_eq!(memo_parses, 0, "the module parsed for tracebacks");
    // pytest parses the arguments six times a run; the parser is rebuilt
    // only after plugins added options.
    assert!(
        memo_parsers * 2 <= plain_parsers,
        "option parsers built: {memo_parsers} reused against {plain_parsers}"
    );
    // pytest's own plugin modules are scanned for fixtures once, not in
    // every run, and its own plugin objects (which hold none) not at all;
    // what is left is mostly the test module (1994 lookups against 438
    // with pytest 7.2).
    assert!(
        memo_lookups * 4 <= plain_lookups,
        "attributes looked at for fixtures: {memo_lookups} remembered against {plain_lookups}"
    );
    // Every distribution's entry points are read twice a run; remembered
    // by the zygote, not at all.
    assert!(plain_entry_points > 0, "{plain_entry_points}");
    assert_eq!(memo_entry_points, 0, "entry_points.txt files read");
}

/// Runs pytest on a passing test, one that fails quoting a 12 MB line (as
/// an agent's file quoted in an assertion message) and one more test with
/// a 20,000-character name, writes the JUnit XML, and writes the report the
/// program passes on (`bounded_report`) to the file argv[2], and the XML's
/// size before on stderr.
const BOUNDED: &str = r#"
import os, sys, tempfile
program = sys.argv[1]
v = {"__name__": "verifier"}
exec(compile(open(program).read(), program, "exec"), v)
v["add_runtime_site_dirs"]()
work = tempfile.mkdtemp()
with open(os.path.join(work, "agent.txt"), "w") as f:
    f.write("A" * 12_000_000 + "\n")
tests = os.path.join(work, "tests")
os.makedirs(tests)
with open(os.path.join(tests, "test_quotes.py"), "w") as f:
    f.write("import os, pytest\n\ndef test_passes():\n    pass\n\n"
            "def test_quotes_the_agents_line():\n"
            "    data = open(%r).read()\n"
            "    assert data == 'HELLO', data\n\n"
            "@pytest.mark.parametrize('x', ['B' * 20_000])\n"
            "def test_long_name(x):\n    pass\n" % os.path.join(work, "agent.txt"))
ini = os.path.join(work, "pytest.ini")
with open(ini, "w") as f:
    f.write("[pytest]\n")
junit = os.path.join(work, "junit.xml")
import pytest
devnull = os.open(os.devnull, os.O_WRONLY)
os.dup2(devnull, 1)
pytest.main(["-p", "no:cacheprovider", "--noconftest", "-q", "--rootdir=" + tests,
             "-c=" + ini, "--junitxml=" + junit, tests])
raw = open(junit, "rb").read()
out = v["bounded_report"](raw)
os.write(2, b"%d\n" % len(raw))
with open(sys.argv[2], "wb") as f:
    f.write(out)
"#;

/// Issue 46, breach 4: the verifier bounds the failure text its JUnit
/// report carries, so what a failing test quotes (data the agent shaped)
/// cannot make the report reach the 16 MiB capture limit: each message,
/// traceback and name is cut, with a marker, and the report still parses
/// into every test with its result.
#[test]
fn the_report_carries_bounded_failure_text() {
    let program = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/verifier/verifier.py");
    let report = tempfile::NamedTempFile::new().unwrap();
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.args(["-I", "-S", "-B", "-c", BOUNDED, program])
        .arg(report.path());
    let out = cmd.output().expect("run /usr/bin/python3");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "driver failed: {stderr}");
    let raw: usize = stderr.trim().lines().last().unwrap().parse().unwrap();
    let xml = std::fs::read_to_string(report.path()).unwrap();
    assert!(raw > 24_000_000, "pytest's own report: {raw} bytes");
    assert!(
        xml.len() < 64 * 1024,
        "the bounded report: {} bytes",
        xml.len()
    );
    let cases = endless::verify::parse_junit(&xml).unwrap();
    let names: Vec<(&str, bool)> = cases.iter().map(|c| (c.name.as_str(), c.passed)).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert_eq!(names[0], ("test_quotes::test_passes", true));
    assert_eq!(
        names[1],
        ("test_quotes::test_quotes_the_agents_line", false)
    );
    assert!(names[2].0.starts_with("test_quotes::test_long_name[BBB") && names[2].1);
    assert!(
        names[2].0.len() < 5000,
        "the long name was cut: {}",
        names[2].0.len()
    );
    let quoted = &cases[1].message;
    assert!(
        quoted.contains("AssertionError: AAAA") && quoted.contains(" characters cut]"),
        "{}",
        &quoted[..quoted.len().min(300)]
    );
}
