//! INI / YAML / TOML config editing, cron entries and dotenv files.

use rand_chacha::ChaCha8Rng;

use crate::procgen::data::{self, distinct, text, PROJECTS};
use crate::procgen::pytest::Check;
use crate::procgen::spec::{Def, Spec};
use crate::procgen::util::home;
use crate::procgen::util::{py, python_step, sq, Pick};

pub(crate) const FAMILIES: &[Def] = &[
    Def {
        name: "ini-set-values",
        category: "config-editing",
        tools: &[],
        build: ini_set,
    },
    Def {
        name: "yaml-edit-values",
        category: "config-editing",
        tools: &[],
        build: yaml_edit,
    },
    Def {
        name: "toml-edit-values",
        category: "config-editing",
        tools: &[],
        build: toml_edit,
    },
    Def {
        name: "cron-schedule",
        category: "cron",
        tools: &[],
        build: cron_schedule,
    },
    Def {
        name: "dotenv-merge",
        category: "dotenv",
        tools: &[],
        build: dotenv_merge,
    },
];

/// A config as ordered sections of ordered `(key, value)` pairs.
type Sections = Vec<(String, Vec<(String, String)>)>;

fn config_sections(rng: &mut ChaCha8Rng) -> Sections {
    let host = data::host(rng);
    vec![
        (
            "server".into(),
            vec![
                ("host".into(), "0.0.0.0".into()),
                ("port".into(), rng.int(8000, 8999).to_string()),
                ("workers".into(), rng.int(2, 8).to_string()),
            ],
        ),
        (
            "database".into(),
            vec![
                ("host".into(), host),
                ("port".into(), rng.int(5400, 5499).to_string()),
                ("name".into(), rng.pick(PROJECTS).to_string()),
                ("pool_size".into(), rng.int(5, 20).to_string()),
            ],
        ),
        (
            "logging".into(),
            vec![
                ("level".into(), "info".into()),
                ("file".into(), "/var/log/app/app.log".into()),
            ],
        ),
    ]
}

/// Pick `n` edits `(section, key, new value)`; with `add`, the last one is a new key.
fn pick_edits(
    rng: &mut ChaCha8Rng,
    secs: &Sections,
    n: usize,
    add: bool,
) -> Vec<(String, String, String)> {
    let mut edits: Vec<(String, String, String)> = Vec::new();
    let candidates: Vec<(String, String, String)> = vec![
        (
            "database".into(),
            "port".into(),
            rng.int(6000, 6999).to_string(),
        ),
        (
            "server".into(),
            "workers".into(),
            rng.int(10, 32).to_string(),
        ),
        (
            "logging".into(),
            "level".into(),
            rng.pick(&["debug", "warning", "error"]).to_string(),
        ),
        (
            "database".into(),
            "pool_size".into(),
            rng.int(30, 60).to_string(),
        ),
        (
            "server".into(),
            "port".into(),
            rng.int(9000, 9999).to_string(),
        ),
    ];
    // The `port` key exists in two sections: the first edit always targets one of them.
    edits.push(candidates[0].clone());
    for cnd in candidates.iter().skip(1) {
        if edits.len() >= n {
            break;
        }
        if rng.chance(0.7) {
            edits.push(cnd.clone());
        }
    }
    if add {
        edits.push((
            "logging".into(),
            "rotate_days".into(),
            rng.int(3, 30).to_string(),
        ));
    }
    let _ = secs;
    edits
}

fn apply(secs: &Sections, edits: &[(String, String, String)]) -> Sections {
    let mut out = secs.clone();
    for (sec, k, v) in edits {
        if let Some((_, kv)) = out.iter_mut().find(|(s, _)| s == sec) {
            match kv.iter_mut().find(|(key, _)| key == k) {
                Some(e) => e.1 = v.clone(),
                None => kv.push((k.clone(), v.clone())),
            }
        }
    }
    out
}

fn edit_reqs(s: &mut Spec, edits: &[(String, String, String)], sep: &str) {
    for (sec, k, v) in edits {
        s.reqs.push(format!(
            "In section `{sec}`, set `{k}` to `{v}` (`{k}{sep}{v}`)."
        ));
    }
    s.reqs
        .push("Every other key and value must keep its current value.".into());
}

/// Python dict literal (JSON) of the expected sections, all values as strings.
fn json_sections(secs: &Sections) -> String {
    let parts: Vec<String> = secs
        .iter()
        .map(|(s, kv)| {
            let inner: Vec<String> = kv
                .iter()
                .map(|(k, v)| format!("{}: {}", py(k), py(v)))
                .collect();
            format!("{}: {{{}}}", py(s), inner.join(", "))
        })
        .collect();
    format!("{{{}}}", parts.join(", "))
}

fn ini_set(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let app = rng.pick(PROJECTS);
    let path = home(&format!(".config/{app}/settings.ini"));
    let secs = config_sections(rng);
    let edits = pick_edits(rng, &secs, 1 + c as usize / 2, c >= 3);
    let mut s = Spec {
        title: format!("Update settings in {path}"),
        goals: vec![
            format!("Please update the INI file `{path}` as listed below."),
            format!("`{app}` reads its configuration from `{path}`. Change these settings for me:"),
        ],
        output: Some(path.clone()),
        ..Default::default()
    };
    edit_reqs(&mut s, &edits, " = ");
    let render = |secs: &Sections| {
        let mut t = format!("; {app} configuration\n");
        for (sname, kv) in secs {
            t.push_str(&format!("\n[{sname}]\n"));
            for (k, v) in kv {
                t.push_str(&format!("{k} = {v}\n"));
            }
        }
        t
    };
    let body = render(&secs);
    s.setup.file(&path, &body);
    s.initial.push(Check::Content(path.clone(), body));
    let expected = apply(&secs, &edits);
    s.checks.push(Check::Custom {
        name: "ini_values".into(),
        describe: format!("`{path}` parses (configparser) to {}", json_sections(&expected)),
        body: format!(
            "import configparser\ncp = configparser.ConfigParser(interpolation=None)\ntry:\n    cp.read_string(_read({p}))\nexcept configparser.Error as e:\n    pytest.fail(f'not valid INI: {{e}}')\ngot = {{s: dict(cp[s]) for s in cp.sections()}}\nexpected = json.loads({j})\nassert got == expected, f'settings differ: got {{got}}, expected {{expected}}'",
            p = py(&path),
            j = py(&json_sections(&expected))
        ),
    });
    let script = |edits: &[(String, String, String)]| {
        let mut script = format!(
            "import configparser\ncp = configparser.ConfigParser(interpolation=None)\ncp.read({})\n",
            py(&path)
        );
        for (sec, k, v) in edits {
            script.push_str(&format!("cp[{}][{}] = {}\n", py(sec), py(k), py(v)));
        }
        script.push_str(&format!(
            "with open({}, 'w') as f:\n    cp.write(f)\n",
            py(&path)
        ));
        python_step(None, &script)
    };
    s.solve.push(script(&edits));
    let mut bad = edits.clone();
    bad[0].0 = "server".into();
    s.near_miss = Some(vec![script(&bad)]);
    s
}

/// Render sections as two-level YAML or TOML.
fn render_nested(secs: &Sections, yaml: bool, header: &str) -> String {
    let mut t = format!("# {header}\n");
    for (sname, kv) in secs {
        if yaml {
            t.push_str(&format!("{sname}:\n"));
        } else {
            t.push_str(&format!("\n[{sname}]\n"));
        }
        for (k, v) in kv {
            let is_num = v.parse::<i64>().is_ok();
            let val = if is_num || yaml {
                v.clone()
            } else {
                format!("\"{v}\"")
            };
            if yaml {
                t.push_str(&format!("  {k}: {val}\n"));
            } else {
                t.push_str(&format!("{k} = {val}\n"));
            }
        }
    }
    t
}

/// A sed program editing `key` inside `[section]`/`section:` only.
fn sed_edit(yaml: bool, sec: &str, k: &str, v: &str, add: bool) -> String {
    let is_num = v.parse::<i64>().is_ok();
    if yaml {
        if add {
            // Added keys always belong to the last section: append at the end.
            let _ = sec;
            format!("$a\\  {k}: {v}")
        } else {
            format!("/^{sec}:/,/^[^ ]/ s/^  {k}: .*/  {k}: {v}/")
        }
    } else {
        let val = if is_num {
            v.to_string()
        } else {
            format!("\"{v}\"")
        };
        if add {
            format!("/^\\[{sec}\\]/a {k} = {val}")
        } else {
            format!("/^\\[{sec}\\]/,/^\\[/ s/^{k} = .*/{k} = {val}/")
        }
    }
}

fn nested_edit(rng: &mut ChaCha8Rng, c: u8, yaml: bool) -> Spec {
    let app = rng.pick(PROJECTS);
    let path = if yaml {
        home(&format!("{app}/config.yaml"))
    } else {
        home(&format!("{app}/config.toml"))
    };
    let secs = config_sections(rng);
    let edits = pick_edits(rng, &secs, 1 + c as usize / 2, c >= 3);
    let fmt = if yaml { "YAML" } else { "TOML" };
    let mut s = Spec {
        title: format!("Edit {fmt} settings in {path}"),
        goals: vec![
            format!("Update the {fmt} config `{path}` as follows."),
            format!("The service `{app}` needs new settings in `{path}` ({fmt}). Please edit it:"),
        ],
        output: Some(path.clone()),
        ..Default::default()
    };
    edit_reqs(&mut s, &edits, if yaml { ": " } else { " = " });
    if yaml {
        s.reqs.push("Keep the file's layout: two-space indentation, one `key: value` per line, comments kept.".into());
    } else {
        s.reqs
            .push("Numbers stay TOML integers and text stays quoted strings.".into());
    }
    let header = format!("{app} service configuration");
    let body = render_nested(&secs, yaml, &header);
    s.setup.file(&path, &body);
    s.initial.push(Check::Content(path.clone(), body));
    let expected = apply(&secs, &edits);
    if yaml {
        s.checks.push(Check::Content(
            path.clone(),
            render_nested(&expected, true, &header),
        ));
    } else {
        s.checks.push(Check::Custom {
            name: "toml_values".into(),
            describe: format!("`{path}` parses (tomllib) to {} (numbers as integers)", json_sections(&expected)),
            body: format!(
                "import tomllib\ntry:\n    data = tomllib.loads(_read({p}))\nexcept tomllib.TOMLDecodeError as e:\n    pytest.fail(f'not valid TOML: {{e}}')\nexpected = json.loads({j})\nfor sec, kv in expected.items():\n    for k, v in kv.items():\n        if v.lstrip('-').isdigit():\n            kv[k] = int(v)\nassert data == expected, f'settings differ: got {{data}}, expected {{expected}}'",
                p = py(&path),
                j = py(&json_sections(&expected))
            ),
        });
    }
    let prog = |ed: &[(String, String, String)]| -> String {
        let parts: Vec<String> = ed
            .iter()
            .map(|(sec, k, v)| {
                let add = !secs
                    .iter()
                    .any(|(s, kv)| s == sec && kv.iter().any(|(key, _)| key == k));
                format!("-e {}", sq(&sed_edit(yaml, sec, k, v, add)))
            })
            .collect();
        format!("sed -i {} {}", parts.join(" "), sq(&path))
    };
    s.solve.push(prog(&edits));
    let mut bad = edits.clone();
    bad[0].0 = "server".into();
    s.near_miss = Some(vec![prog(&bad)]);
    s
}

fn yaml_edit(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    nested_edit(rng, c, true)
}

fn toml_edit(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    nested_edit(rng, c, false)
}

const CRON_EXPANDER: &str = r#"def _expand(field, lo, hi):
    out = set()
    for part in field.split(','):
        step = 1
        if '/' in part:
            part, s = part.split('/')
            step = int(s)
        if part == '*':
            a, b = lo, hi
        elif '-' in part:
            a, b = (int(x) for x in part.split('-'))
        else:
            a = b = int(part)
            if step != 1:
                b = hi
        out.update(range(a, b + 1, step))
    if hi == 7 and 7 in out:
        out.discard(7)
        out.add(0)
    return frozenset(out)


def _entries(path):
    got = []
    for line in _read(path).splitlines():
        line = line.strip()
        if not line or line.startswith('#') or '=' in line.split()[0]:
            continue
        f = line.split(None, 5)
        assert len(f) == 6, f'malformed cron line: {line!r}'
        try:
            key = tuple(_expand(x, lo, hi) for x, (lo, hi) in zip(f[:5], [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]))
        except ValueError:
            pytest.fail(f'cannot parse schedule in {line!r}')
        got.append((key, f[5].strip()))
    return got
"#;

fn cron_schedule(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let path = home("crontab.txt");
    let user_bin = home("bin");
    let existing = vec![
        (
            "*/10 * * * *".to_string(),
            format!("{user_bin}/healthcheck.sh"),
        ),
        (
            format!("0 {} * * *", rng.int(1, 5)),
            format!("{user_bin}/rotate_logs.sh"),
        ),
    ];
    let jobs: Vec<(String, String, String)> = {
        let h = rng.int(0, 23);
        let m = rng.pick(&[0i64, 15, 30, 45]);
        let dow = rng.int(1, 5);
        let every = rng.pick(&[5i64, 15, 20, 30]);
        let day = rng.int(1, 28);
        let names = distinct(rng, 4, |r| {
            r.pick(&[
                "backup",
                "sync_reports",
                "cleanup_tmp",
                "send_digest",
                "refresh_cache",
                "export_db",
            ])
            .to_string()
        });
        vec![
            (
                format!("every day at {h:02}:{m:02}"),
                format!("{m} {h} * * *"),
                format!("{user_bin}/{}.sh", names[0]),
            ),
            (
                format!("every {every} minutes"),
                format!("*/{every} * * * *"),
                format!("{user_bin}/{}.sh", names[1]),
            ),
            (
                format!(
                    "every {} at {:02}:00",
                    [
                        "Sunday",
                        "Monday",
                        "Tuesday",
                        "Wednesday",
                        "Thursday",
                        "Friday",
                        "Saturday"
                    ][dow as usize],
                    h
                ),
                format!("0 {h} * * {dow}"),
                format!("{user_bin}/{}.sh", names[2]),
            ),
            (
                format!("at 06:30 on day {day} of every month"),
                format!("30 6 {day} * *"),
                format!("{user_bin}/{}.sh", names[3]),
            ),
        ]
    };
    let n_new = (1 + c as usize / 2).min(jobs.len());
    let remove = c >= 3;
    let mut s = Spec {
        title: "Schedule jobs in ~/crontab.txt".into(),
        goals: vec![
            format!("I keep my crontab in `{path}` (I install it myself later). Add entries for the jobs below, in standard 5-field cron syntax."),
            format!("Please extend the cron table in `{path}` with these schedules (one crontab line per job, standard `m h dom mon dow command` format)."),
        ],
        output: Some(path.clone()),
        ..Default::default()
    };
    for (when, _, cmd) in jobs.iter().take(n_new) {
        s.reqs.push(format!("Run `{cmd}` {when}."));
    }
    if remove {
        s.reqs.push(format!(
            "Remove the entry that runs `{}`; keep the other existing entries.",
            existing[0].1
        ));
    } else {
        s.reqs.push("Keep the existing entries.".into());
    }
    let mut body = "# crontab for user\nMAILTO=\"\"\n".to_string();
    for (sch, cmd) in &existing {
        body.push_str(&format!("{sch} {cmd}\n"));
    }
    s.setup.file(&path, &body);
    s.initial.push(Check::Content(path.clone(), body));
    let mut expected: Vec<(String, String)> =
        existing.iter().skip(usize::from(remove)).cloned().collect();
    expected.extend(
        jobs.iter()
            .take(n_new)
            .map(|(_, sch, cmd)| (sch.clone(), cmd.clone())),
    );
    let exp_py: Vec<String> = expected
        .iter()
        .map(|(sch, cmd)| format!("({}, {})", py(sch), py(cmd)))
        .collect();
    let body_py = format!(
        "{CRON_EXPANDER}\ngot = _entries({p})\nexpected = [(tuple(_expand(x, lo, hi) for x, (lo, hi) in zip(s.split(), [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)])), cmd) for s, cmd in [{e}]]\nassert sorted(map(repr, got)) == sorted(map(repr, expected)), f'cron entries differ: expected exactly {{[e for e in [{e}]]}}'",
        p = py(&path),
        e = exp_py.join(", ")
    );
    s.checks.push(Check::Custom {
        name: "cron_entries".into(),
        describe: format!(
            "`{path}` has exactly these entries (equivalent schedules accepted): {:?}",
            expected
        ),
        body: body_py,
    });
    let mut steps = Vec::new();
    if remove {
        steps.push(format!("sed -i '\\|{}$|d' {path}", existing[0].1));
    }
    let lines: Vec<String> = jobs
        .iter()
        .take(n_new)
        .map(|(_, sch, cmd)| format!("{sch} {cmd}"))
        .collect();
    steps.push(format!("cat >> {path} <<'CRON'\n{}CRON", text(&lines)));
    s.solve = steps;
    let mut nm = s.solve.clone();
    let last = nm.len() - 1;
    nm[last] = nm[last]
        .replacen("* * *", "* * 1", 1)
        .replacen(" * * *\n", " * * 1\n", 1);
    if nm[last] == s.solve[last] {
        nm[last] = nm[last].replacen("*/", "*/1", 1);
    }
    s.near_miss = Some(nm);
    s
}

fn dotenv_merge(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let app = home(&format!("apps/{}", rng.pick(PROJECTS)));
    let example = format!("{app}/.env.example");
    let env = format!("{app}/.env");
    let all: Vec<(String, String)> = vec![
        ("APP_ENV".into(), "development".into()),
        ("APP_PORT".into(), rng.int(3000, 3999).to_string()),
        (
            "DATABASE_URL".into(),
            format!("postgres://app@{}:5432/app", data::host(rng)),
        ),
        (
            "REDIS_URL".into(),
            format!("redis://{}:6379/0", data::host(rng)),
        ),
        ("LOG_LEVEL".into(), "info".into()),
        ("CACHE_TTL".into(), rng.int(60, 3600).to_string()),
        ("FEATURE_SIGNUP".into(), "false".into()),
        (
            "SMTP_HOST".into(),
            format!("mail.{}.example.com", rng.pick(PROJECTS)),
        ),
    ];
    let keep = 3 + rng.int(0, 1) as usize;
    let mut current: Vec<(String, String)> = all.iter().take(keep).cloned().collect();
    current[0].1 = "production".into();
    current[1].1 = rng.int(8000, 8999).to_string();
    current.push((
        "SECRET_KEY".into(),
        format!(
            "{:x}{:x}",
            rng.int(1 << 40, 1 << 50),
            rng.int(1 << 40, 1 << 50)
        ),
    ));
    let set_key = if c >= 3 {
        Some((
            "LOG_LEVEL".to_string(),
            rng.pick(&["debug", "warning"]).to_string(),
        ))
    } else {
        None
    };
    let mut s = Spec {
        title: format!("Fill in missing variables in {env}"),
        goals: vec![
            format!("`{env}` is missing some variables that `{example}` defines. Add every key from the example that is not in `.env` yet, with the example's default value."),
            format!("Sync my dotenv file: every variable listed in `{example}` must exist in `{env}`. Missing ones get the default from the example; existing values in `.env` must not change."),
        ],
        output: Some(env.clone()),
        ..Default::default()
    };
    s.reqs.push("Use plain `KEY=value` lines (no `export`, no quotes). Keys only in `.env` (like `SECRET_KEY`) stay.".into());
    if let Some((k, v)) = &set_key {
        s.reqs
            .push(format!("Finally set `{k}` to `{v}`, whatever it was."));
    }
    let ex_body = format!(
        "# Copy to .env and adjust\n{}",
        text(
            &all.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
        )
    );
    let env_body = text(
        &current
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>(),
    );
    s.setup.file(&example, &ex_body);
    s.setup.file(&env, &env_body);
    s.initial.push(Check::Content(example.clone(), ex_body));
    s.initial.push(Check::Content(env.clone(), env_body));
    let mut expected = current.clone();
    for (k, v) in &all {
        if !expected.iter().any(|(e, _)| e == k) {
            expected.push((k.clone(), v.clone()));
        }
    }
    if let Some((k, v)) = &set_key {
        if let Some(e) = expected.iter_mut().find(|(e, _)| e == k) {
            e.1 = v.clone();
        }
    }
    let exp_json: Vec<String> = expected
        .iter()
        .map(|(k, v)| format!("{}: {}", py(k), py(v)))
        .collect();
    s.checks.push(Check::Custom {
        name: "dotenv_values".into(),
        describe: format!("`{env}` defines exactly {{{}}}", exp_json.join(", ")),
        body: format!(
            "got = {{}}\nfor line in _read({p}).splitlines():\n    line = line.strip()\n    if not line or line.startswith('#'):\n        continue\n    assert '=' in line, f'not a KEY=value line: {{line!r}}'\n    k, v = line.split('=', 1)\n    assert k not in got, f'{{k}} is defined twice'\n    got[k.strip()] = v.strip()\nexpected = json.loads({j})\nassert got == expected, f'variables differ: got {{got}}, expected {{expected}}'",
            p = py(&env),
            j = py(&format!("{{{}}}", exp_json.join(", ")))
        ),
    });
    s.solve.push(format!(
        "grep -E '^[A-Z_]+=' {example} | while IFS='=' read -r k v; do\n  grep -q \"^$k=\" {env} || echo \"$k=$v\" >> {env}\ndone"
    ));
    if let Some((k, v)) = &set_key {
        s.solve.push(format!("sed -i 's|^{k}=.*|{k}={v}|' {env}"));
    }
    let mut nm = s.solve.clone();
    nm[0] = format!("grep -E '^[A-Z_]+=' {example} > {env}");
    s.near_miss = Some(nm);
    s
}
