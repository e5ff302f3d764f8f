# The verifier's own program (see src/verify/run.rs and
# src/sandbox/local/warm.rs), run by the trusted runtime's Python with
# `-I -S -B` (no PYTHON* variables, no site hooks, no script directory on
# sys.path). Two ways in, one way of running the tests:
#
#   cold:   python -c SRC cold     the payload on stdin, run once, exit.
#   zygote: python -c SRC zygote   import pytest and warm it up once, then
#           fork a child per verification request that arrives on fd 3 (a
#           unix socket only endless holds the other end of). The child
#           enters the episode's namespaces, becomes the task's user and
#           runs the tests exactly as the cold path does.
#   prestarted: python -c SRC prestarted   started with the session, inside
#           it as the cold path is (a sealed environment's interpreter, see
#           src/sandbox/local/prestart.rs): a line of hints on stdin, then
#           the payload when the tests are due; it runs them as cold does.
#
# The payload is JSON: {"root": private dir, "files": {rel: hex bytes},
# "args": pytest arguments}. pytest writes the JUnit XML into a pipe of its
# own, which is passed on to fd 3; no program a test runs gets either pipe
# (both are close-on-exec) and no file holds the results, so agent code a
# test executes (as the task's user) cannot rewrite them.
import json
import os
import stat
import sys
import threading

# Set in the zygote before it forks, inherited by every child (see
# `prebuild`): pytest's Config with the default plugins registered, for the
# "-p no:..." plugins it was built without, and test modules rewritten and
# compiled ahead, by (path, sha256 of the source).
PREBUILT = []
COMPILED = {}
# Compiled test modules the zygote keeps (the oldest are forgotten first).
MAX_COMPILED = 512
# Syntax trees of test modules, parsed in the zygote, by the text pytest
# parses when it formats a traceback through them (see `parse_ahead`); the
# newest MAX_PARSED are kept.
PARSED = {}
MAX_PARSED = 32


def add_runtime_site_dirs():
    """The runtime's site directories on sys.path (site hooks stay off)."""
    v = "%d.%d" % sys.version_info[:2]
    for d in ("lib/python3/dist-packages", "local/lib/python%s/dist-packages" % v,
              "lib/python%s/site-packages" % v, "local/lib/python%s/site-packages" % v):
        d = os.path.join(sys.prefix, d)
        if os.path.isdir(d) and d not in sys.path:
            sys.path.append(d)


def add_agent_site_dirs():
    """The image's live site directories after ours (`[verifier]
    agent_packages`): the packages the agent installed during the episode.
    pytest, pluggy and their plugins are imported already, from our own
    directories, and stay ours."""
    v = "%d.%d" % sys.version_info[:2]
    for d in ("/usr/local/lib/python%s/site-packages" % v,
              "/usr/local/lib/python%s/dist-packages" % v,
              "/usr/lib/python3/dist-packages",
              "/usr/lib/python%s/site-packages" % v,
              os.path.expanduser("~/.local/lib/python%s/site-packages" % v)):
        if os.path.isdir(d) and d not in sys.path:
            sys.path.append(d)


def run_tests(payload, gate=None):
    """Unpack the tests, run pytest, pass the JUnit XML on to fd 3; the exit code.
    With `gate` (a pipe's read end), wait at the start of collection, before
    any code of the task runs, until endless writes one byte to it."""
    import pytest
    plugins = []
    if gate is not None:
        class Gate:
            @pytest.hookimpl(tryfirst=True)
            def pytest_collection(self, session):
                if os.read(gate, 1) != b"1":
                    os._exit(125)
                os.close(gate)
        plugins.append(Gate())
    write_tests(payload)
    if payload.get("agent_site"):
        add_agent_site_dirs()
    os.set_inheritable(3, False)
    r, w = os.pipe()
    junit = []

    def drain():
        with os.fdopen(r, "rb") as f:
            junit.append(f.read())

    reader = threading.Thread(target=drain)
    reader.start()
    remember_statement_ranges()
    reuse_option_parsers()
    remember_plugin_fixtures()
    adopt_prebuilt(payload["args"])
    rc = pytest.main(payload["args"] + ["--junitxml=/proc/self/fd/%d" % w], plugins=plugins)
    os.close(w)
    reader.join()
    view = memoryview(bounded_report(junit[0] if junit else b""))
    while view:
        view = view[os.write(3, view):]
    sys.stdout.flush()
    sys.stderr.flush()
    return int(rc)


# What the JUnit report may carry: each text and attribute value (a failure's
# message and traceback, captured output, a test's name) is cut to MAX_TEXT
# characters, and the whole report is kept under MAX_REPORT bytes (endless
# keeps 16 MiB of it): data of the agent's that a failing test quotes cannot
# make the report too long to be scored.
MAX_TEXT = 4096
MAX_REPORT = 4 << 20


def bounded_report(report):
    """The JUnit report `report` (bytes) with every text and attribute value
    longer than MAX_TEXT characters cut to its head and tail around a marker,
    cut shorter while the report is over MAX_REPORT bytes. A report that does
    not parse is passed on unchanged (endless counts a cut one as failed)."""
    if len(report) <= MAX_TEXT:
        return report
    from xml.etree import ElementTree
    out = report
    for limit in (MAX_TEXT, 512, 64):
        try:
            root = ElementTree.fromstring(report)
        except ElementTree.ParseError:
            return report
        for el in root.iter():
            el.text = cut_text(el.text, limit)
            el.tail = cut_text(el.tail, limit)
            for key, value in el.attrib.items():
                el.attrib[key] = cut_text(value, limit)
        out = ElementTree.tostring(root, encoding="utf-8")
        if len(out) <= MAX_REPORT:
            break
    return out


def cut_text(text, limit):
    """`text` when it has at most `limit` characters, else its first and last
    `limit` / 2 around a line saying how many were cut."""
    if text is None or len(text) <= limit:
        return text
    keep = limit // 2
    return "%s\n[endless: %d characters cut]\n%s" % (
        text[:keep], len(text) - 2 * keep, text[-keep:])


def write_tests(payload):
    """Write the payload's files under its root, but those already there:
    where the backend can, they were written before privileges were dropped
    and the directory is read-only (see `seal_tests`)."""
    root = payload["root"]
    for rel, data in payload["files"].items():
        path = os.path.join(root, rel)
        if os.path.lexists(path):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "xb") as f:
            f.write(bytes.fromhex(data))


def seal_tests(payload, req, calls):
    """Still privileged: write the tests into the private tmpfs (as the
    task's user: host root is not mapped in the sandbox's namespace) and make
    it read-only, so that nothing a test starts (whatever its user) can
    plant a module beside them, which pytest puts first on sys.path."""
    has_tests = any(rel.startswith("tests/") for rel in payload["files"])
    if has_tests:
        tests_mount_point()
        # Harbor's /logs/verifier/ (reward.txt, reward.json, ctrf.json): a
        # fresh tmpfs of ours, writable by the tests, as on the cold path.
        logs_mount_point()
        calls["mount"]("tmpfs", "/logs/verifier", "tmpfs", MS_NOSUID | MS_NODEV,
                       req["logs_data"])
    calls["set_fs_ids"](req["uid"], req["gid"])
    write_tests(payload)
    calls["mount"](None, payload["root"], None,
                   MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    if has_tests:
        # A copy of the tests folder at /tests, on a fresh tmpfs of this
        # verification's that the tests may write to (as Harbor's is), in
        # this namespace only (as VerifierPlan::apply does on the cold path).
        calls["mount"]("tmpfs", "/tests", "tmpfs", MS_NOSUID | MS_NODEV, req["tests_data"])
        copy_tests(payload)


def copy_tests(payload):
    """The payload's tests folder (`tests/...`) at /tests, with the task's
    user's file-system ids."""
    for rel, data in payload["files"].items():
        if not rel.startswith("tests/"):
            continue
        path = os.path.join("/tests", rel[len("tests/"):])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "xb") as f:
            f.write(bytes.fromhex(data))


def tests_mount_point():
    """A directory at /tests to bind the tests folder on: made when missing;
    anything else there (a link the agent planted) is refused."""
    try:
        st = os.lstat("/tests")
    except FileNotFoundError:
        os.mkdir("/tests", 0o755)
        return
    if not stat.S_ISDIR(st.st_mode):
        raise Refused("tests", 0)


def logs_mount_point():
    """Directories /logs and /logs/verifier to mount a tmpfs on: made when
    missing; anything else there is refused, as for /tests."""
    for d in ("/logs", "/logs/verifier"):
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            os.mkdir(d, 0o755)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise Refused("tests", 0)


def remember_statement_ranges():
    """pytest formats a failure's traceback by parsing the failing module
    again and walking its whole syntax tree for every entry of it: with nine
    failing tests of a 130-line module, that was 40% of the run. Within one
    run, parse each source once and walk each tree once: pytest's own
    search then walks, for each line, just the statements it counts (see
    `flat_statements`); the ranges, and so the reports, are pytest's own. A
    pytest without these functions is left as it is."""
    try:
        from _pytest._code import code, source
        range_of, startend = source.getstatementrange_ast, source.get_statement_startend2
    except (ImportError, AttributeError):
        return
    if getattr(range_of, "endless", False) or code.getstatementrange_ast is not range_of:
        return
    # pytest 9 remembers each tree's statements itself.
    walks_once = hasattr(source, "_statement_linenos")
    flatten = flat_statements if not walks_once and flattening_agrees(startend) else None
    trees, flats, ranges = {}, {}, {}

    def getstatementrange_ast(lineno, src, assertion=False, astnode=None):
        content = str(src) if astnode is None else None
        if content is not None:
            astnode = trees.get(content) or PARSED.get(content)
        result = range_of(lineno, src, assertion, astnode)
        if content is not None:
            trees[content] = result[0]
        return result

    def get_statement_startend2(lineno, node):
        key = (id(node), lineno)
        hit = ranges.get(key)
        if hit is None or hit[0] is not node:
            searched = node
            if flatten is not None:
                flat = flats.get(id(node))
                if flat is None or flat[0] is not node:
                    flat = flats[id(node)] = (node, flatten(node))
                searched = flat[1]
            hit = ranges[key] = (node, startend(lineno, searched))
        return hit[1]

    getstatementrange_ast.endless = True
    source.getstatementrange_ast = code.getstatementrange_ast = getstatementrange_ast
    source.get_statement_startend2 = get_statement_startend2


def flat_statements(tree):
    """A module of `pass` statements, one at each line pytest's statement
    search (get_statement_startend2) counts in `tree`: each statement and
    except handler, the decorators of a def or class, and the line before an
    else or finally part. The search over it finds what it finds over
    `tree`, walking a handful of nodes instead of every expression."""
    import ast
    lines = []
    for x in ast.walk(tree):
        if isinstance(x, (ast.stmt, ast.ExceptHandler)):
            if isinstance(x, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                lines.extend(d.lineno for d in x.decorator_list)
            lines.append(x.lineno)
            for name in ("finalbody", "orelse"):
                part = getattr(x, name, None)
                if part:
                    lines.append(part[0].lineno - 1)
    body = [ast.Pass(lineno=n, col_offset=0, end_lineno=n, end_col_offset=0) for n in lines]
    return ast.Module(body=body, type_ignores=[])


# Whether pytest's statement search finds the same over `flat_statements`
# as over the tree itself, on every line of PROBE (decided once).
FLATTENING = []
PROBE = """import os

@staticmethod
@property(
    None)
def f(x):
    try:
        y = 1
    except OSError as e:
        y = 2
    else:
        y = 3
    finally:
        y = 4
    for i in x:
        pass
    else:
        x = [
            1,
        ]
    while x:
        break
    if x:
        pass
    elif y:
        assert (y ==
                1)
    else:
        pass
    with open(x) as b:
        return y


class C(
        object):
    @staticmethod
    async def g(a, b):
        async for a in b:
            pass
        else:
            pass
        try:
            pass
        finally:
            # a comment
            pass
"""


def flattening_agrees(startend):
    """See FLATTENING."""
    if not FLATTENING:
        import ast
        try:
            tree = ast.parse(PROBE)
            flat = flat_statements(tree)
            lines = range(-1, PROBE.count("\n") + 3)
            FLATTENING.append(all(startend(n, tree) == startend(n, flat) for n in lines))
        except Exception:  # noqa: BLE001 - a search that fails here is left to itself
            FLATTENING.append(False)
    return FLATTENING[0]


def reuse_option_parsers():
    """pytest builds its argparse parser anew, with every option of every
    plugin, each time it parses the arguments (six times a run, a tenth of
    a warm one); build it again only when options were added since. Where
    pytest has no such method, nothing changes."""
    try:
        from _pytest.config.argparsing import Parser
        build = Parser._getparser
    except (ImportError, AttributeError):
        return
    if getattr(build, "endless", False):
        return

    def _getparser(self):
        try:
            key = tuple((id(g), len(g.options)) for g in self._groups + [self._anonymous])
        except (AttributeError, TypeError):  # another layout of pytest's Parser
            return build(self)
        built = self.__dict__.get("_endless_parser")
        if built is None or built[0] != key:
            built = self.__dict__["_endless_parser"] = (key, build(self))
        return built[1]

    _getparser.endless = True
    Parser._getparser = _getparser


def remember_plugin_fixtures():
    """At each session start pytest's fixture manager scans every attribute
    of every registered plugin for fixtures (about 2,000 attributes over 40
    plugins, a sixth of a warm run's CPU time). pytest's own plugin modules do not
    change: scan each once (in the zygote, before the runs fork) and give
    the manager, in its place, a module holding just that module's fixtures
    (the same objects under the same names), which it then scans and
    registers as its own. Plugin objects of pytest's own classes (its
    configuration, session, terminal reporter, ...) hold no fixtures: where
    neither the class (looked at again when its attributes change) nor the
    object has any, the manager gets an empty module in its place. Every
    other plugin and every test module is scanned by pytest itself; so is
    everything where the scan or its arguments are not as expected."""
    import types
    try:
        from _pytest import fixtures
        manager, marker_of, safe_getattr = (
            fixtures.FixtureManager, fixtures.getfixturemarker, fixtures.safe_getattr)
        parse = manager.parsefactories
    except (ImportError, AttributeError):
        return
    if getattr(parse, "endless", False):
        return
    holders, no_fixtures = {}, {}

    def holds_no_fixtures(plugin):
        tp = type(plugin)
        if (isinstance(plugin, type) or not getattr(tp, "__module__", "").startswith("_pytest.")
                or any("__slots__" in vars(c) for c in tp.__mro__)):
            return False
        names = dir(tp)
        if no_fixtures.get(tp) != names:
            if any(marker_of(safe_getattr(tp, name, None)) is not None for name in names):
                return False
            no_fixtures[tp] = names
        return all(marker_of(obj) is None for obj in vars(plugin).values())

    def holder_of(plugin):
        if not isinstance(plugin, types.ModuleType):
            return types.ModuleType(type(plugin).__name__) if holds_no_fixtures(plugin) else plugin
        if not plugin.__name__.startswith("_pytest."):
            return plugin
        holder = holders.get(plugin)
        if holder is None:
            holder = types.ModuleType(plugin.__name__, plugin.__doc__)
            for name in dir(plugin):
                obj = safe_getattr(plugin, name, None)
                if marker_of(obj) is not None:
                    setattr(holder, name, obj)
            holders[plugin] = holder
        return holder

    def parsefactories(self, *args, **kwargs):
        # Plugins come as holder=plugin (pytest 8.4 and later) or as
        # (plugin, nodeid); a collector node comes alone.
        if "holder" in kwargs:
            kwargs["holder"] = holder_of(kwargs["holder"])
        elif len(args) == 2:
            args = (holder_of(args[0]), args[1])
        return parse(self, *args, **kwargs)

    parsefactories.endless = True
    manager.parsefactories = parsefactories


def remember_entry_points():
    """pytest reads the entry points of every installed distribution twice
    a run (the plugins to load, the modules to rewrite): some 80 files
    opened and read. In the zygote, read each distribution's
    `entry_points.txt` once; the runs get that text from memory for the
    same files (the runtime's, read-only, at the same paths inside every
    sandbox). Any other file or distribution is read as before."""
    try:
        from importlib import metadata
        read = metadata.PathDistribution.read_text
        if getattr(read, "endless", False):
            return
        texts = {str(d._path): read(d, "entry_points.txt") for d in metadata.distributions()
                 if isinstance(d, metadata.PathDistribution)}
    except (ImportError, AttributeError, OSError):
        return

    def read_text(self, filename):
        if filename == "entry_points.txt":
            key = str(getattr(self, "_path", ""))
            if key in texts:
                return texts[key]
        return read(self, filename)

    read_text.endless = True
    metadata.PathDistribution.read_text = read_text


def excluded_plugins(args):
    """The plugins "-p no:NAME" blocks, read as pytest's consider_preparse
    (exclude_only) reads them: these are never registered."""
    out, i = [], 0
    while i < len(args):
        opt, i = args[i], i + 1
        if opt == "-p":
            if i >= len(args):
                break
            parg, i = args[i], i + 1
        elif opt.startswith("-p"):
            parg = opt[2:]
        else:
            continue
        parg = parg.strip()
        if parg.startswith("no:"):
            out.append(parg)
    return tuple(out)


def prebuild(args):
    """In the zygote: what every run repeats before it reads its own
    arguments. pytest.main builds a Config (get_config: the plugin manager,
    every default plugin imported and registered, their options added), a
    third of a warm run; build it once, for runs that block the same plugins
    as `args` (again when a request blocks others)."""
    if args is None or (PREBUILT and PREBUILT[0] == excluded_plugins(args)):
        return
    import _pytest.config
    del PREBUILT[:]
    reuse_option_parsers()
    try:
        config = _pytest.config.get_config(list(args))
        config._parser._getparser()  # built once here for the runs
        PREBUILT[:] = [excluded_plugins(args), config]
    except Exception:  # noqa: BLE001 - the runs then build their own, as cold ones do
        pass


def compile_ahead(sources):
    """In the zygote: rewrite the asserts of test modules and compile them,
    as pytest's import hook does (_rewrite_test, with the default ini), so
    that the samples of a task do not each pay for it. A module that does
    not compile is left to pytest, which reports it."""
    import ast
    import hashlib
    from _pytest.assertion.rewrite import rewrite_asserts
    for path, text in sources.items():
        source = text.encode()
        parse_ahead(source)
        key = (path, hashlib.sha256(source).digest())
        if key in COMPILED:
            COMPILED[key] = COMPILED.pop(key)  # the newest last
            continue
        try:
            tree = ast.parse(source, filename=path)
            rewrite_asserts(tree, source, path, None)
            COMPILED[key] = compile(tree, path, "exec", dont_inherit=True)
        except Exception:  # noqa: BLE001 - pytest reports it when it imports the file
            continue
        while len(COMPILED) > MAX_COMPILED:
            del COMPILED[next(iter(COMPILED))]


def parse_ahead(source):
    """In the zygote: parse test module `source` (bytes) as pytest does to
    format a traceback through it (getstatementrange_ast: the module's lines
    as linecache reads them, each stripped at its end, joined), once for all
    the runs, which find the tree by that text (`remember_statement_ranges`).
    A pytest that reads the lines otherwise just parses them itself."""
    import ast
    import io
    import tokenize
    import warnings
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        lines = io.TextIOWrapper(io.BytesIO(source), encoding, line_buffering=True).readlines()
        content = "\n".join(line.rstrip() for line in lines)
        if content in PARSED:
            PARSED[content] = PARSED.pop(content)  # the newest last
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            PARSED[content] = ast.parse(content, "source", "exec")
    except Exception:  # noqa: BLE001 - pytest parses (and reports) it itself
        return
    while len(PARSED) > MAX_PARSED:
        del PARSED[next(iter(PARSED))]


def adopt_prebuilt(args):
    """In a forked child: let pytest.main use what the zygote built. Its
    get_config returns the prebuilt Config (with this run's invocation
    arguments and directory) when the run blocks the same plugins, and its
    import hook takes a module compiled ahead when the file's bytes are the
    ones compiled. Anything else goes through pytest unchanged."""
    if not PREBUILT and not COMPILED:
        return  # the cold path: nothing was prepared
    import hashlib
    import pathlib
    import _pytest.config
    from _pytest.assertion import rewrite
    if PREBUILT and PREBUILT[0] == excluded_plugins(args):
        config, original = PREBUILT[1], _pytest.config.get_config
        del PREBUILT[:]

        def get_config(args=None, plugins=None):
            _pytest.config.get_config = original
            config.invocation_params = _pytest.config.Config.InvocationParams(
                args=args or (), plugins=plugins, dir=pathlib.Path.cwd())
            return config
        _pytest.config.get_config = get_config
    if COMPILED:
        rewrite_test = rewrite._rewrite_test

        def _rewrite_test(fn, config):
            source = fn.read_bytes()
            co = COMPILED.get((str(fn), hashlib.sha256(source).digest()))
            if co is None or (config is not None and config.getini("enable_assertion_pass_hook")):
                return rewrite_test(fn, config)
            return os.stat(fn), co
        rewrite._rewrite_test = _rewrite_test


def cold():
    add_runtime_site_dirs()
    payload = json.loads(sys.stdin.buffer.read())
    os._exit(run_tests(payload))


def prestarted():
    """Already in the sandbox as the task's user (but not yet a member of
    its PID namespace: the agent's `ps` does not list us while it works):
    import pytest and run it once in our scratch directory, build its
    configuration and compile the test modules ahead (the hints), then wait
    for the payload. The runner is forked into the PID namespace then; its
    pid goes to endless on the reply pipe, and it waits at the start of
    collection (the gate) until endless has moved it into the session's
    cgroups. We exit with its status."""
    add_runtime_site_dirs()
    stdin = sys.stdin.buffer
    hints = json.loads(stdin.readline() or b"{}")
    reply, gate = hints["fd_reply"], hints["fd_gate"]
    for fd in (reply, gate):  # nothing the tests start gets them
        os.set_inheritable(fd, False)
    try:
        import pytest  # noqa: F401 - imported now, while the agent works
        remember_plugin_fixtures()
        if hints.get("scratch"):
            warm_up(hints["scratch"])
        else:
            import_common_modules()
        prebuild(hints.get("prebuild"))
        compile_ahead(hints.get("compile") or {})
    except Exception:  # noqa: BLE001 - the run imports it again and reports
        pass
    payload = json.loads(stdin.read())
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(reply)
            try:  # the agent may have made it anew since we started
                os.chdir(hints.get("cwd") or "/")
            except OSError:
                os.chdir("/")
            rc = run_tests(payload, gate)
        except BaseException as e:  # noqa: B036 - report, as a cold run would
            rc = crashed(e)
        os._exit(rc)
    os.close(gate)
    os.write(reply, (json.dumps({"runner": pid}) + "\n").encode())
    os.close(reply)
    os._exit(exit_code_of(pid))


def crashed(e):
    """Say on stderr why the runner could not run the tests: exit code 125."""
    try:
        os.write(2, ("endless verifier: %r\n" % (e,)).encode())
    except OSError:
        pass
    return 125


def exit_code_of(pid):
    """Wait for child `pid`: its exit code, or 128 + the signal that
    killed it, as a shell reports it."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


# ---------------------------------------------------------------------------
# The zygote.

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
EINVAL = 22
SECCOMP_MODE_FILTER = 2
# SECBIT_NOROOT | _LOCKED | SECBIT_NO_SETUID_FIXUP | _LOCKED
SECURE_BITS = 0x1 | 0x2 | 0x4 | 0x8


class Refused(Exception):
    """A step of entering the sandbox failed: (what, errno)."""


def libc_calls():
    import ctypes
    libc = ctypes.CDLL("libc.so.6", use_errno=True)

    def call(name, *args):
        rc = getattr(libc, name)(*args)
        if rc < 0:
            raise Refused(name, ctypes.get_errno())
        return rc

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte),
                    ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    class CapHeader(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class CapData(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    def prctl(option, arg=0):
        return call("prctl", ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0),
                    ctypes.c_ulong(0), ctypes.c_ulong(0))

    def setns(fd, kind):
        call("setns", ctypes.c_int(fd), ctypes.c_int(kind))

    def unshare(kind):
        call("unshare", ctypes.c_int(kind))

    def mount(src, target, fstype, flags, data):
        enc = lambda s: None if s is None else s.encode()
        call("mount", enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))

    def set_fs_ids(uid, gid):
        # Only the file-system ids: capabilities other than the file
        # system's stay (setfsuid reports no error; the writes would).
        libc.setfsgid(ctypes.c_uint(gid))
        libc.setfsuid(ctypes.c_uint(uid))

    def keep_only_capabilities(keep):
        # Mirrors keep_only_capabilities in src/sandbox/verifier/plan.rs:
        # none kept, every one is dropped for good; else (root) the bounding
        # set is cut to `keep` too, as under Docker.
        if keep:
            for cap in range(64):
                if keep & (1 << cap):
                    continue
                try:
                    prctl(PR_CAPBSET_DROP, cap)
                except Refused as e:
                    if e.args[1] == EINVAL:  # past the kernel's last one
                        break
                    raise
        elif os.getuid() == 0:
            prctl(PR_SET_SECUREBITS, SECURE_BITS)
        header = CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
        data = (CapData * 2)()
        low, high = keep & 0xFFFFFFFF, keep >> 32
        data[0].effective = data[0].permitted = low
        data[1].effective = data[1].permitted = high
        call("capset", ctypes.byref(header), data)

    def load_seccomp(programs):
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        for raw in programs:
            n = len(raw) // 8
            buf = (SockFilter * n).from_buffer_copy(raw)
            prog = SockFprog(n, ctypes.cast(buf, ctypes.POINTER(SockFilter)))
            call("prctl", ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER),
                 ctypes.byref(prog), ctypes.c_ulong(0), ctypes.c_ulong(0))

    return {"prctl": prctl, "setns": setns, "unshare": unshare, "mount": mount,
            "set_fs_ids": set_fs_ids,
            "keep_only_capabilities": keep_only_capabilities, "load_seccomp": load_seccomp}


def import_common_modules():
    """pytest's default plugins and what tests commonly import, loaded
    once ahead, from the verifier's own interpreter."""
    import importlib
    import _pytest.config
    for name in _pytest.config.default_plugins:
        importlib.import_module("_pytest." + name)
    for name in ("subprocess", "pathlib", "re", "shutil", "glob", "hashlib", "csv",
                 "tempfile", "datetime", "stat", "difflib", "pprint", "textwrap", "json",
                 "gzip", "bz2", "lzma", "tarfile", "zipfile", "configparser", "tomllib",
                 "statistics", "sqlite3", "ast", "socket", "shlex", "fnmatch", "base64",
                 "struct", "uuid", "urllib.parse", "xml.etree.ElementTree",
                 "_pytest.junitxml", "_pytest.assertion.rewrite"):
        try:
            importlib.import_module(name)
        except ImportError:  # an optional module this Python was built without
            pass


def warm_up(dir_):
    """Run pytest once on a passing and a failing test, so that what a run
    imports or compiles lazily (assertion rewriting, reporting, JUnit, the
    tokenizer a multi-line statement of a traceback takes) is loaded."""
    import_common_modules()
    tests = os.path.join(dir_, "endless_warm_up")
    os.makedirs(tests, exist_ok=True)
    with open(os.path.join(tests, "test_endless_warm_up.py"), "w") as f:
        f.write("import os\n\ndef test_passes():\n    assert os.path.isdir('/')\n\n"
                "def test_fails():\n    assert [1, 2] == [\n        1, 3]\n")
    with open(os.path.join(dir_, "pytest.ini"), "w") as f:
        f.write("[pytest]\n")
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(1), os.dup(2)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        import pytest
        pytest.main(["-p", "no:cacheprovider", "--noconftest", "--color=no", "-q", "-rA",
                     "--rootdir=" + tests, "-c=" + os.path.join(dir_, "pytest.ini"),
                     "--junitxml=" + os.path.join(dir_, "junit.xml"), tests])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (devnull,) + saved:
            os.close(fd)
    for name in [m for m in sys.modules if "endless_warm_up" in m]:
        del sys.modules[name]
    try:  # decided once here, not in each run
        from _pytest._code import source
        flattening_agrees(source.get_statement_startend2)
    except (ImportError, AttributeError):
        pass
    # pytest put the scratch directory on sys.path: nothing may be imported
    # from there later (a pre-started verifier's stays writable by the tests).
    inside = lambda p: p == dir_ or p.startswith(dir_.rstrip("/") + "/")
    sys.path[:] = [p for p in sys.path if not inside(p)]
    for p in [p for p in sys.path_importer_cache if inside(p)]:
        del sys.path_importer_cache[p]


def enter(req, fds, calls):
    """In the forked child (still privileged): enter the session's namespaces
    and root, make a private mount namespace with a fresh tmpfs for the
    tests, hide an /etc/ld.so.preload. Mirrors VerifierPlan::apply in
    src/sandbox/local/verifier.rs, but for joining the session's cgroups:
    endless moves the test runner there (a cgroup v1 move costs 5-20 ms,
    which it overlaps with pytest's start), and the gate holds the tests
    until it has."""
    calls["prctl"](PR_SET_DUMPABLE, 0)
    calls["setns"](fds[req["fd_userns"]], CLONE_NEWUSER)
    for kind, key in ((CLONE_NEWNS, "fd_mnt"), (CLONE_NEWNET, "fd_net"),
                      (CLONE_NEWIPC, "fd_ipc"), (CLONE_NEWUTS, "fd_uts")):
        calls["setns"](fds[req[key]], kind)
    calls["setns"](fds[req["fd_pid"]], CLONE_NEWPID)
    if req.get("fd_inner_userns") is not None:
        calls["setns"](fds[req["fd_inner_userns"]], CLONE_NEWUSER)
    os.fchdir(fds[req["fd_root"]])
    os.chroot(".")
    calls["unshare"](CLONE_NEWNS)
    calls["mount"](None, "/", None, MS_REC | MS_PRIVATE, None)
    calls["mount"]("tmpfs", req["private_dir"], "tmpfs", MS_NOSUID | MS_NODEV, req["tmpfs_data"])
    try:
        st = os.lstat("/etc/ld.so.preload")
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise Refused("preload", 0)
        calls["mount"]("/dev/null", "/etc/ld.so.preload", None, MS_BIND, None)


def become_task_user(req, calls):
    """In the grandchild (a member of the sandbox's PID namespace): the
    task's user (without any capability, but root: Docker's default set,
    in the sandbox's user namespace only), its working directory, the
    sandbox's seccomp filter."""
    if req["set_groups"]:
        os.setgroups([])
    os.setresgid(req["gid"], req["gid"], req["gid"])
    os.setresuid(req["uid"], req["uid"], req["uid"])
    calls["keep_only_capabilities"](req.get("caps", 0))
    # Changing credentials resets both of these.
    calls["prctl"](PR_SET_DUMPABLE, 0)
    calls["prctl"](PR_SET_PDEATHSIG, 9)
    try:
        os.chdir(req["cwd"])
    except OSError:
        os.chdir("/")


def serve_one(req, fds, calls, seccomp, ctl):
    """The forked child's whole life: report our pid, enter, fork the test
    runner into the sandbox's PID namespace, report its exit status, then
    kill our process group (what the tests left running)."""
    import signal
    ctl.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setpgid(0, 0)
    reply = fds[req["fd_reply"]]

    def say(obj):
        os.write(reply, (json.dumps(obj) + "\n").encode())

    say({"pid": os.getpid()})
    try:
        enter(req, fds, calls)
    except Refused as e:
        say({"refused": e.args[0], "errno": e.args[1]})
        os._exit(0)
    except OSError as e:
        say({"refused": "enter", "errno": e.errno or 0})
        os._exit(0)
    stdin, out, fd3 = fds[req["fd_stdin"]], fds[req["fd_out"]], fds[req["fd_fd3"]]
    gate = fds[req["fd_gate"]]
    pid = os.fork()
    if pid == 0:
        try:
            with os.fdopen(os.dup(stdin), "rb") as f:
                payload = json.loads(f.read())
            seal_tests(payload, req, calls)
            become_task_user(req, calls)
            os.dup2(stdin, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.dup2(fd3, 3, inheritable=True)
            os.dup2(gate, 4, inheritable=False)
            gate = 4
            os.closerange(5, 65536)
            os.environ.clear()
            os.environ.update(dict(req["env"]))
            calls["load_seccomp"](seccomp)
            rc = run_tests(payload, gate)
        except BaseException as e:  # noqa: B036 - nothing may return to the zygote's loop
            rc = crashed(e)
        os._exit(rc)
    say({"runner": pid})
    for fd in fds:
        if fd != reply:
            os.close(fd)
    say({"exit": exit_code_of(pid)})
    os.close(reply)
    os.killpg(0, signal.SIGKILL)


def zygote():
    import signal
    import socket
    add_runtime_site_dirs()
    ctl = socket.socket(fileno=3)
    hello = json.loads(ctl.recv(1 << 20))
    seccomp = [bytes.fromhex(p) for p in hello["seccomp"]]
    calls = libc_calls()
    try:
        import pytest
        remember_plugin_fixtures()
        warm_up(hello["scratch"])
        remember_entry_points()
    except BaseException as e:  # noqa: B036
        ctl.send(json.dumps({"ready": False, "error": repr(e)}).encode())
        os._exit(1)
    import gc
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    ctl.send(json.dumps({"ready": True, "python": sys.version.split()[0],
                         "pytest": pytest.__version__}).encode())
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 16)
        except InterruptedError:
            continue
        if not msg:
            os._exit(0)
        req = json.loads(msg)
        prebuild(req.pop("prebuild", None))
        compile_ahead(req.pop("compile", None) or {})
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                serve_one(req, fds, calls, seccomp, ctl)
            finally:
                os._exit(125)
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    {"cold": cold, "zygote": zygote, "prestarted": prestarted}[sys.argv[1]]()
