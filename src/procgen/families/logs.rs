//! Log analysis over timestamped, levelled application logs.

use rand_chacha::ChaCha8Rng;

use crate::procgen::data::{self, text, LogLine, SERVICES};
use crate::procgen::pytest::Check;
use crate::procgen::spec::{Def, Spec};
use crate::procgen::util::home;
use crate::procgen::util::{sq, Pick};

pub(crate) const FAMILIES: &[Def] = &[
    Def {
        name: "log-error-count",
        category: "log-analysis",
        tools: &[],
        build: error_count,
    },
    Def {
        name: "log-time-window",
        category: "log-analysis",
        tools: &[],
        build: time_window,
    },
    Def {
        name: "log-level-filter",
        category: "log-analysis",
        tools: &[],
        build: level_filter,
    },
];

/// Write `lines` to `path` in setup and assert it initially.
fn put_log(s: &mut Spec, path: &str, lines: &[LogLine]) -> String {
    let rendered: Vec<String> = lines.iter().map(LogLine::render).collect();
    let body = text(&rendered);
    s.setup.file(path, &body);
    s.initial.push(Check::Content(path.into(), body.clone()));
    body
}

fn error_count(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let dir = home(rng.pick(&["logs", "var/log/app", "incident/logs"]));
    let out = home(rng.pick(&[
        "error_counts.txt",
        "errors_by_service.txt",
        "incident/error_summary.txt",
    ]));
    let services = rng.sample(SERVICES, 3 + c as usize / 2);
    let level = if c >= 5 { "WARN" } else { "ERROR" };
    let files: Vec<String> = if c >= 3 {
        vec![format!("{dir}/app.log"), format!("{dir}/app.log.1")]
    } else {
        vec![format!("{dir}/app.log")]
    };
    let mut s = Spec {
        title: format!("Count {level} lines per service in {dir}"),
        goals: vec![
            format!("Count the `{level}` lines per service in {} and write the result to `{out}`.", files.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(" and ")),
            format!("Which services logged the most `[{level}]` entries? Tally them across {} into `{out}`.", files.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(" plus ")),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push("Log lines look like `2024-03-01 10:00:00 [ERROR] api: message`; the service is the word before the colon.".into());
    s.reqs.push("One line per service that has at least one such entry, formatted `<service> <count>`, highest count first, ties broken alphabetically.".into());
    let mut counts: Vec<(String, i64)> = services.iter().map(|x| (x.to_string(), 0)).collect();
    for (i, f) in files.iter().enumerate() {
        let mut lines = data::log_lines(rng, 20 + 8 * c as usize, 100 + i as i64, &services);
        // Every file has at least one matching line, so skipping a file is caught.
        lines[2].level = level.into();
        lines[2].msg = data::message(rng, level);
        for l in &lines {
            if l.level == level {
                if let Some(e) = counts.iter_mut().find(|e| e.0 == l.service) {
                    e.1 += 1;
                }
            }
        }
        put_log(&mut s, f, &lines);
    }
    let mut ranked: Vec<(String, i64)> = counts.into_iter().filter(|e| e.1 > 0).collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let expected: Vec<String> = ranked.iter().map(|(sv, n)| format!("{sv} {n}")).collect();
    s.checks.push(Check::Lines(out.clone(), expected));
    let fl: Vec<String> = files.iter().map(|f| sq(f)).collect();
    s.solve.push(format!(
        "mkdir -p {}",
        sq(crate::procgen::util::parent(&out))
    ));
    s.solve.push(format!(
        "cat {} | awk '$3 == \"[{level}]\" {{ sub(/:$/, \"\", $4); n[$4]++ }} END {{ for (k in n) print k, n[k] }}' | LC_ALL=C sort -k2,2nr -k1,1 > {out}",
        fl.join(" ")
    ));
    s.near_miss = Some(vec![
        s.solve[0].clone(),
        format!(
            "cat {} | awk '$3 == \"[{level}]\" {{ sub(/:$/, \"\", $4); n[$4]++ }} END {{ for (k in n) print k, n[k] }}' | LC_ALL=C sort -k2,2nr -k1,1 > {out}",
            sq(&files[0])
        ),
    ]);
    if files.len() == 1 {
        // One file: the near miss miscounts by sorting ascending instead.
        s.near_miss = Some(vec![
            s.solve[0].clone(),
            format!(
                "awk '$3 == \"[{level}]\" {{ sub(/:$/, \"\", $4); n[$4]++ }} END {{ for (k in n) print k, n[k] + 1 }}' {} | LC_ALL=C sort -k2,2nr -k1,1 > {out}",
                fl[0]
            ),
        ]);
    }
    s
}

fn time_window(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let log = home(rng.pick(&["logs/service.log", "logs/api.log", "app/logs/server.log"]));
    let out = home(rng.pick(&[
        "incident_window.log",
        "outage_excerpt.log",
        "logs/window.log",
    ]));
    let services = rng.sample(SERVICES, 3);
    let lines = data::log_lines(rng, 30 + 10 * c as usize, 150, &services);
    let n = lines.len();
    let a = rng.int(3, (n / 3) as i64) as usize;
    let b = rng.int((n / 2) as i64, (n - 4) as i64) as usize;
    let (start, end) = (lines[a].ts.clone(), lines[b].ts.clone());
    let level_only = c >= 3;
    let mut s = Spec {
        title: format!("Extract log lines between {start} and {end}"),
        goals: vec![
            format!("The outage lasted from `{start}` to `{end}`. Copy every line of `{log}` with a timestamp in that window (both ends included) to `{out}`."),
            format!("Please cut the part of `{log}` between `{start}` and `{end}` (inclusive) out into `{out}`, keeping the original order."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    if level_only {
        s.reqs
            .push("Only keep lines at level `WARN` or `ERROR`.".into());
    }
    s.reqs
        .push("Lines must be copied verbatim; the original log stays as it is.".into());
    let body = put_log(&mut s, &log, &lines);
    let expected: Vec<String> = lines[a..=b]
        .iter()
        .filter(|l| !level_only || l.level == "WARN" || l.level == "ERROR")
        .map(LogLine::render)
        .collect();
    s.checks.push(Check::Content(log.clone(), body));
    s.checks.push(Check::Lines(out.clone(), expected));
    let lv = if level_only {
        " && ($3 == \"[WARN]\" || $3 == \"[ERROR]\")"
    } else {
        ""
    };
    s.solve.push(format!(
        "mkdir -p {}",
        sq(crate::procgen::util::parent(&out))
    ));
    s.solve.push(format!(
        "awk -v a={} -v b={} '{{ t = $1 \" \" $2 }} t >= a && t <= b{lv}' {log} > {out}",
        sq(&start),
        sq(&end)
    ));
    s.near_miss = Some(vec![
        s.solve[0].clone(),
        format!(
            "awk -v a={} -v b={} '{{ t = $1 \" \" $2 }} t > a && t <= b{lv}' {log} > {out}",
            sq(&start),
            sq(&end)
        ),
    ]);
    if level_only && lines[a].level != "WARN" && lines[a].level != "ERROR" {
        // Exclusive start would not differ: drop the level filter instead.
        s.near_miss = Some(vec![
            s.solve[0].clone(),
            format!(
                "awk -v a={} -v b={} '{{ t = $1 \" \" $2 }} t >= a && t <= b' {log} > {out}",
                sq(&start),
                sq(&end)
            ),
        ]);
    }
    s
}

fn level_filter(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let log = home(rng.pick(&["logs/combined.log", "logs/app.log", "srv/logs/all.log"]));
    let services = rng.sample(SERVICES, 4);
    let target = services[0];
    let out = home(&format!("reports/{target}_problems.log"));
    let mut lines = data::log_lines(rng, 30 + 10 * c as usize, 210, &services);
    // Guarantee at least one match.
    lines[5].service = target.into();
    lines[5].level = "ERROR".into();
    lines[5].msg = data::message(rng, "ERROR");
    lines[8].service = target.into();
    lines[8].level = "WARN".into();
    lines[8].msg = data::message(rng, "WARN");
    let with_count = c >= 3;
    let mut s = Spec {
        title: format!("Extract WARN/ERROR lines of {target} from {log}"),
        goals: vec![
            format!("Pull every `WARN` and `ERROR` line emitted by the `{target}` service out of `{log}` into `{out}`, in their original order."),
            format!("I only care about problems in `{target}`: copy its `[WARN]` and `[ERROR]` lines from `{log}` to `{out}` (keep the order, lines verbatim)."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs
        .push("Create the `reports` directory if it does not exist.".into());
    put_log(&mut s, &log, &lines);
    let hits: Vec<String> = lines
        .iter()
        .filter(|l| l.service == target && (l.level == "WARN" || l.level == "ERROR"))
        .map(LogLine::render)
        .collect();
    s.solve.push(format!("mkdir -p {}", home("reports")));
    s.solve.push(format!(
        "grep -E '\\[(WARN|ERROR)\\] {target}: ' {log} > {out}"
    ));
    if with_count {
        let cnt = home(&format!("reports/{target}_error_count.txt"));
        let n = lines
            .iter()
            .filter(|l| l.service == target && l.level == "ERROR")
            .count();
        s.reqs.push(format!(
            "Also write just the number of `ERROR` lines (not WARN) of `{target}` to `{cnt}`."
        ));
        s.checks.push(Check::Number(cnt.clone(), n as f64, 0.0));
        s.solve
            .push(format!("grep -c '\\[ERROR\\] {target}: ' {log} > {cnt}"));
    }
    s.checks.push(Check::Lines(out.clone(), hits));
    s.near_miss = Some(vec![
        s.solve[0].clone(),
        format!("grep -E '\\[ERROR\\] {target}: ' {log} > {out}"),
    ]);
    if with_count {
        let mut v = s.near_miss.take().unwrap_or_default();
        v.push(s.solve[2].clone());
        // A near miss must fail even when there are no WARN lines: count one too many.
        v[1] = format!("grep -E '\\[(WARN|ERROR)\\] {target}: ' {log} > {out}");
        v[2] = v[2].replace(
            "grep -c '\\[ERROR\\]",
            "grep -c -E '\\[(WARN|ERROR|INFO)\\]",
        );
        s.near_miss = Some(v);
    }
    s
}
