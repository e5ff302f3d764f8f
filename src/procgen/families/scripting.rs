//! Shell scripting automation: scripts that the tests run on fresh data, and
//! environment variables in shell start-up files.

use rand_chacha::ChaCha8Rng;

use crate::procgen::data::{self, PROJECTS};
use crate::procgen::pytest::Check;
use crate::procgen::spec::{Def, Spec};
use crate::procgen::util::home;
use crate::procgen::util::{py, Pick};

pub(crate) const FAMILIES: &[Def] = &[
    Def {
        name: "script-extension-report",
        category: "shell-scripting",
        tools: &[],
        build: ext_report,
    },
    Def {
        name: "script-rotate-backups",
        category: "shell-scripting",
        tools: &[],
        build: rotate_backups,
    },
    Def {
        name: "bashrc-environment",
        category: "dotenv",
        tools: &[],
        build: bashrc_env,
    },
];

fn ext_report(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let name = rng.pick(&["extcount", "filetypes", "count_ext"]);
    let script = home(&format!("bin/{name}.sh"));
    let strict = c >= 3;
    let mut s = Spec {
        title: format!("Write {script}: count files per extension"),
        goals: vec![
            format!("Write a bash script `{script}` that takes one directory as its argument and prints, for the regular files directly inside it, how many there are per extension."),
            format!("I'd like a reusable helper: `{script} DIR` should report the number of files per file extension in DIR (not recursive)."),
        ],
        ..Default::default()
    };
    s.reqs.push("Output: one line per extension, `<extension> <count>`, sorted by extension in byte order; the extension is the text after the last dot, without the dot.".into());
    s.reqs
        .push("Ignore subdirectories and files without a dot in their name.".into());
    s.reqs
        .push("The script must be executable and start with a `#!/bin/bash` line.".into());
    if strict {
        s.reqs.push("If it is not given exactly one argument that is an existing directory, it prints a usage message to stderr and exits with status 2.".into());
    }
    // Hidden test data, different per seed.
    let exts = rng.sample(&["txt", "csv", "log", "py", "md", "json"], 3);
    let mut files = Vec::new();
    let mut counts: Vec<(String, usize)> = Vec::new();
    for (i, e) in exts.iter().enumerate() {
        let n = 1 + (i + rng.int(0, 2) as usize) % 4;
        for k in 0..n {
            files.push(format!("f{i}_{k}.{e}"));
        }
        counts.push((e.to_string(), n));
    }
    counts.sort();
    // A sample directory to try the script on (different files per seed).
    let sample = home("samples");
    for k in 0..(3 + c as usize) {
        let f = format!(
            "{sample}/{}_{k}.{}",
            rng.pick(data::NOUNS),
            rng.pick(&["txt", "csv", "log", "md"])
        );
        s.setup.file(&f, &format!("{}\n", data::prose(rng, 1)));
    }
    s.reqs.push(format!("You can try it on `{sample}`."));
    let expected: Vec<String> = counts.iter().map(|(e, n)| format!("{e} {n}")).collect();
    let files_py: Vec<String> = files.iter().map(|f| py(f)).collect();
    let exp_py: Vec<String> = expected.iter().map(|e| py(e)).collect();
    s.initial.push(Check::Absent(script.clone()));
    s.checks.push(Check::Custom {
        name: "script_is_executable".into(),
        describe: format!("`{script}` exists, is executable and starts with `#!/bin/bash`"),
        body: format!(
            "path = {p}\nassert os.path.isfile(path), f'{{path}} is missing'\nassert os.access(path, os.X_OK), f'{{path}} is not executable'\nassert _read(path).startswith('#!/bin/bash'), 'the first line must be #!/bin/bash'",
            p = py(&script)
        ),
    });
    s.checks.push(Check::Custom {
        name: "script_counts".into(),
        describe: format!("running `{script}` on a directory with {files:?} (plus a sub-directory and a dot-less file) prints {expected:?}"),
        body: format!(
            "import tempfile\nwith tempfile.TemporaryDirectory() as d:\n    for f in [{f}]:\n        open(os.path.join(d, f), 'w').close()\n    os.makedirs(os.path.join(d, 'sub.dir'))\n    open(os.path.join(d, 'sub.dir', 'x.zzz'), 'w').close()\n    open(os.path.join(d, 'README'), 'w').close()\n    res = subprocess.run([{p}, d], capture_output=True, text=True, timeout=30)\nassert res.returncode == 0, f'the script failed: {{res.stderr}}'\ngot = [l.strip() for l in res.stdout.splitlines() if l.strip()]\nassert got == [{e}], f'unexpected output: {{got}}'",
            f = files_py.join(", "),
            p = py(&script),
            e = exp_py.join(", ")
        ),
    });
    if strict {
        s.checks.push(Check::Custom {
            name: "script_usage".into(),
            describe: "without an argument, or with a missing directory, the script exits 2 with a message on stderr".into(),
            body: format!(
                "for args in ([], ['/nonexistent/dir']):\n    res = subprocess.run([{p}] + args, capture_output=True, text=True, timeout=30)\n    assert res.returncode == 2, f'exit status {{res.returncode}} for arguments {{args}}, expected 2'\n    assert res.stderr.strip(), f'no usage message on stderr for arguments {{args}}'",
                p = py(&script)
            ),
        });
    }
    let guard = if strict {
        "if [ $# -ne 1 ] || [ ! -d \"$1\" ]; then\n  echo \"usage: $(basename \"$0\") DIR\" >&2\n  exit 2\nfi\n"
    } else {
        ""
    };
    let body = format!(
        "#!/bin/bash\n{guard}find \"$1\" -maxdepth 1 -type f -name '*.*' -printf '%f\\n' | sed 's/.*\\.//' | LC_ALL=C sort | uniq -c | awk '{{print $2\" \"$1}}'\n"
    );
    s.solve.push(format!(
        "mkdir -p /home/user/bin\ncat > {script} <<'SH'\n{body}SH"
    ));
    s.solve.push(format!("chmod +x {script}"));
    let bad = body.replace("-maxdepth 1 ", "");
    s.near_miss = Some(vec![format!(
        "mkdir -p /home/user/bin\ncat > {script} <<'SH'\n{bad}SH\nchmod +x {script}"
    )]);
    s
}

fn rotate_backups(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let script = home(&format!(
        "bin/{}.sh",
        rng.pick(&["rotate_backups", "prune_backups", "keep_latest"])
    ));
    let prefix = rng.pick(PROJECTS);
    let report = c >= 3;
    let mut s = Spec {
        title: format!("Write {script}: keep only the newest N backups"),
        goals: vec![
            format!("Write an executable bash script `{script}` taking two arguments, `DIR` and `N`: in DIR, backups are named `<name>-YYYY-MM-DD.tar.gz`; keep the N newest (by the date in the name) and delete the rest."),
            format!("I need `{script} DIR N`: it deletes all but the N most recent `*-YYYY-MM-DD.tar.gz` backups in DIR, judging age by the date in the file name (not the modification time)."),
        ],
        ..Default::default()
    };
    s.reqs
        .push("Files in DIR that don't match `*-YYYY-MM-DD.tar.gz` must never be touched.".into());
    if report {
        s.reqs.push("The script prints the name (not the path) of each file it deletes, one per line, oldest first.".into());
    }
    s.reqs.push("Then use it once on the real directory: keep the 3 newest backups in `/home/user/backups`.".into());
    let mut days: Vec<i64> = Vec::new();
    while days.len() < 6 + c as usize {
        let d = rng.int(0, 360);
        if !days.contains(&d) {
            days.push(d);
        }
    }
    let mut sorted = days.clone();
    sorted.sort();
    let keep_real: Vec<i64> = sorted.iter().rev().take(3).copied().collect();
    for d in &days {
        let p = home(&format!("backups/{prefix}-{}.tar.gz", data::date_of(*d)));
        // Modification times deliberately disagree with the dates in the names.
        s.setup
            .file(&p, &format!("backup of {}\n", data::date_of(*d)));
        s.setup
            .mtime(&p, &format!("2024-06-{:02} 12:00:00", 1 + (360 - d) % 28));
        s.initial.push(Check::File(p.clone()));
        if keep_real.contains(d) {
            s.checks.push(Check::File(p));
        } else {
            s.checks.push(Check::Absent(p));
        }
    }
    let notes = home("backups/NOTES.txt");
    s.setup.file(&notes, "Backups are pruned weekly.\n");
    s.checks.push(Check::File(notes));
    // Hidden run on fresh data.
    let test_days = [
        data::date_of(rng.int(0, 60)),
        data::date_of(rng.int(61, 120)),
        data::date_of(rng.int(121, 200)),
        data::date_of(rng.int(201, 300)),
    ];
    let names: Vec<String> = test_days.iter().map(|d| format!("db-{d}.tar.gz")).collect();
    let names_py: Vec<String> = names.iter().map(|n| py(n)).collect();
    let report_check = if report {
        format!("\nassert [l.strip() for l in res.stdout.splitlines() if l.strip()] == [{}, {}], f'printed {{res.stdout!r}}, expected the two deleted names oldest first'", py(&names[0]), py(&names[1]))
    } else {
        String::new()
    };
    s.checks.push(Check::Custom {
        name: "script_prunes".into(),
        describe: format!("`{script} DIR 2` on {names:?} (+ notes.txt) keeps the two newest and notes.txt"),
        body: format!(
            "import tempfile\npath = {p}\nassert os.access(path, os.X_OK), f'{{path}} is missing or not executable'\nwith tempfile.TemporaryDirectory() as d:\n    names = [{n}]\n    for i, f in enumerate(reversed(names)):\n        open(os.path.join(d, f), 'w').close()\n    open(os.path.join(d, 'notes.txt'), 'w').close()\n    res = subprocess.run([path, d, '2'], capture_output=True, text=True, timeout=30)\n    left = sorted(os.listdir(d))\nassert res.returncode == 0, f'the script failed: {{res.stderr}}'\nassert left == sorted(names[2:] + ['notes.txt']), f'left behind: {{left}}'{r}",
            p = py(&script),
            n = names_py.join(", "),
            r = report_check
        ),
    });
    let body = "#!/bin/bash\nset -eu\ndir=$1; n=$2\nls \"$dir\" | grep -E -- '-[0-9]{4}-[0-9]{2}-[0-9]{2}\\.tar\\.gz$' | sed -E 's/^(.*)-([0-9-]{10})\\.tar\\.gz$/\\2 &/' | LC_ALL=C sort | awk '{print $2}' | head -n -\"$n\" | while read -r f; do\n  rm -f -- \"$dir/$f\"\n  echo \"$f\"\ndone\n";
    s.solve.push(format!(
        "mkdir -p /home/user/bin\ncat > {script} <<'SH'\n{body}SH\nchmod +x {script}"
    ));
    s.solve.push(format!("{script} /home/user/backups 3"));
    s
}

fn bashrc_env(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let rc = home(".bashrc");
    let tool = rng.pick(&["gradle", "maven", "flutter", "go", "node"]);
    let ver = format!("{}.{}", rng.int(1, 9), rng.int(0, 20));
    let tool_home = home(&format!("tools/{tool}-{ver}"));
    let var = format!("{}_HOME", tool.to_uppercase());
    let mut vars: Vec<(String, String)> = vec![(var.clone(), tool_home.clone())];
    if c >= 2 {
        vars.push(("EDITOR".into(), rng.pick(&["vim", "nano"]).into()));
    }
    if c >= 4 {
        vars.push((
            "PROJECT_ENV".into(),
            rng.pick(&["staging", "dev", "qa"]).into(),
        ));
    }
    let add_path = c >= 3;
    let mut s = Spec {
        title: format!("Set up {var} in ~/.bashrc"),
        goals: vec![
            format!("I installed {tool} {ver} in `{tool_home}`. Make new bash shells pick up the settings below by adding them to `{rc}`."),
            format!("Please configure my shell environment in `{rc}` so that every new shell (and programs started from it) sees these settings."),
        ],
        ..Default::default()
    };
    for (k, v) in &vars {
        s.reqs.push(format!(
            "Environment variable `{k}` = `{v}`, exported to child processes."
        ));
    }
    if add_path {
        s.reqs.push(format!(
            "`{tool_home}/bin` must be at the front of `PATH` (keep the rest of PATH)."
        ));
    }
    s.reqs.push("Keep what is already in `.bashrc`.".into());
    let existing =
        "# ~/.bashrc: executed by bash for non-login shells.\nalias ll='ls -alF'\nHISTSIZE=5000\n"
            .to_string();
    s.setup.file(&rc, &existing);
    s.setup.file(
        &format!("{tool_home}/bin/{tool}"),
        &format!("#!/bin/bash\necho {tool} {ver}\n"),
    );
    s.setup.raw(format!("chmod 755 {tool_home}/bin/{tool}"));
    s.initial.push(Check::Content(rc.clone(), existing));
    s.checks
        .push(Check::Contains(rc.clone(), "alias ll='ls -alF'".into()));
    let names: Vec<String> = vars.iter().map(|(k, _)| py(k)).collect();
    let vals: Vec<String> = vars.iter().map(|(_, v)| py(v)).collect();
    let mut body = format!(
        "code = 'import json, os; print(json.dumps({{k: os.environ.get(k) for k in [{n}] + [\"PATH\"]}}))'\nres = subprocess.run(['bash', '-c', 'source ~/.bashrc >/dev/null 2>&1; exec python3 -c \"$0\"', code], capture_output=True, text=True, timeout=30, env={{'HOME': '/home/user', 'PATH': '/usr/local/bin:/usr/bin:/bin'}})\nassert res.returncode == 0, f'sourcing .bashrc failed: {{res.stderr}}'\nenv = json.loads(res.stdout)\nfor k, v in zip([{n}], [{v}]):\n    assert env[k] == v, f'{{k}} is {{env[k]!r}} in a child process, expected {{v!r}} (is it exported?)'\n",
        n = names.join(", "),
        v = vals.join(", ")
    );
    if add_path {
        body.push_str(&format!(
            "parts = env['PATH'].split(':')\nassert parts[0] == {b}, f'PATH starts with {{parts[0]!r}}, expected {b}'\nassert '/usr/bin' in parts, 'the rest of PATH was lost'\n",
            b = py(&format!("{tool_home}/bin"))
        ));
    }
    s.checks.push(Check::Custom {
        name: "exported_in_new_shell".into(),
        describe: format!(
            "a new shell sourcing `{rc}` exports {vars:?}{}",
            if add_path {
                " and has the tool's bin first in PATH"
            } else {
                ""
            }
        ),
        body,
    });
    let mut lines: Vec<String> = vars
        .iter()
        .map(|(k, v)| format!("export {k}={v}"))
        .collect();
    if add_path {
        lines.push(format!("export PATH=\"${var}/bin:$PATH\""));
    }
    s.solve
        .push(format!("cat >> {rc} <<'RC'\n{}\nRC", lines.join("\n")));
    let mut nm = lines.clone();
    nm[0] = nm[0].replacen("export ", "", 1);
    s.near_miss = Some(vec![format!("cat >> {rc} <<'RC'\n{}\nRC", nm.join("\n"))]);
    s
}
