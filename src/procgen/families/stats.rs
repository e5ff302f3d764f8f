//! Arithmetic and statistics over data files.

use rand_chacha::ChaCha8Rng;

use crate::procgen::data::{self, distinct, text, CITIES};
use crate::procgen::pytest::Check;
use crate::procgen::spec::{Def, Spec};
use crate::procgen::util::home;
use crate::procgen::util::{py, python_step, Pick};

pub(crate) const FAMILIES: &[Def] = &[
    Def {
        name: "column-statistics",
        category: "statistics",
        tools: &[],
        build: column_stats,
    },
    Def {
        name: "group-means",
        category: "statistics",
        tools: &[],
        build: group_means,
    },
    Def {
        name: "latency-percentiles",
        category: "statistics",
        tools: &[],
        build: percentiles,
    },
];

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn stdev(v: &[f64]) -> f64 {
    let m = mean(v);
    let n = v.len();
    if n < 2 {
        return 0.0;
    }
    (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64).sqrt()
}

fn column_stats(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let src = home(rng.pick(&[
        "lab/measurements.csv",
        "data/sensor_log.csv",
        "experiments/readings.csv",
    ]));
    let out = home(rng.pick(&["stats.json", "lab/summary.json", "column_stats.json"]));
    let col = rng.pick(&["temperature", "pressure", "voltage", "humidity"]);
    let n = 12 + 3 * c as usize;
    let base = rng.int(10, 200) as f64;
    let vals: Vec<f64> = (0..n)
        .map(|_| base + rng.int(-500, 500) as f64 / 10.0)
        .collect();
    let mut keys: Vec<(&str, f64, &str)> = vec![
        ("count", n as f64, "number of rows"),
        (
            "min",
            vals.iter().cloned().fold(f64::INFINITY, f64::min),
            "smallest value",
        ),
        (
            "max",
            vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
            "largest value",
        ),
    ];
    if c >= 2 {
        keys.push(("mean", mean(&vals), "arithmetic mean"));
    }
    if c >= 3 {
        keys.push((
            "median",
            median(&vals),
            "median (mean of the two middle values for an even count)",
        ));
    }
    if c >= 4 {
        keys.push((
            "stdev",
            stdev(&vals),
            "sample standard deviation (divide by n-1)",
        ));
    }
    let mut s = Spec {
        title: format!("Summary statistics of {col} in {src}"),
        goals: vec![
            format!("Compute summary statistics of the `{col}` column of `{src}` and save them as a JSON object in `{out}`."),
            format!("I need a few numbers about `{col}` in `{src}`: write them to `{out}` as one JSON object."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    for (k, _, d) in &keys {
        s.reqs.push(format!("key `{k}`: the {d}"));
    }
    s.reqs
        .push("Round every value to 2 decimal places (`count` is an integer).".into());
    let mut rows = vec![format!("timestamp,station,{col}")];
    for (i, v) in vals.iter().enumerate() {
        rows.push(format!(
            "{},{},{v:.1}",
            data::timestamp(86_400 * 30 + 900 * i as i64),
            rng.pick(CITIES)
        ));
    }
    let body = text(&rows);
    s.setup.file(&src, &body);
    s.initial.push(Check::Content(src.clone(), body));
    s.checks.push(Check::JsonNumbers(
        out.clone(),
        keys.iter().map(|(k, v, _)| (k.to_string(), *v)).collect(),
        0.0051,
    ));
    let mut script = format!("import csv, json, statistics\nv = [float(r[{c}]) for r in csv.DictReader(open({s}))]\nout = {{'count': len(v), 'min': round(min(v), 2), 'max': round(max(v), 2)}}\n", c = py(col), s = py(&src));
    if c >= 2 {
        script.push_str("out['mean'] = round(statistics.mean(v), 2)\n");
    }
    if c >= 3 {
        script.push_str("out['median'] = round(statistics.median(v), 2)\n");
    }
    if c >= 4 {
        script.push_str("out['stdev'] = round(statistics.stdev(v), 2)\n");
    }
    script.push_str(&format!(
        "json.dump(out, open({}, 'w'), indent=2)\n",
        py(&out)
    ));
    s.solve.push(python_step(Some(&out), &script));
    let bad = script.replace("'min': round(min(v), 2)", "'min': round(sorted(v)[1], 2)");
    s.near_miss = Some(vec![python_step(Some(&out), &bad)]);
    s
}

/// Check body: a `key,number` CSV with a header, compared with tolerance.
fn csv_numbers_check(path: &str, header: &str, expected: &[(String, f64)], tol: f64) -> Check {
    let exp: Vec<String> = expected
        .iter()
        .map(|(k, v)| format!("({}, {v:?})", py(k)))
        .collect();
    Check::Custom {
        name: "csv_numbers".into(),
        describe: format!("`{path}` has header `{header}` and rows {expected:?} (±{tol}), in this order"),
        body: format!(
            "lines = [l for l in _read({p}).splitlines() if l.strip()]\nassert lines and lines[0].strip() == {h}, f'the header should be {h}'\nexpected = [{e}]\nrows = [l.split(',') for l in lines[1:]]\nassert [r[0] for r in rows] == [k for k, _ in expected], f'rows/order differ: {{[r[0] for r in rows]}}'\nfor r, (k, v) in zip(rows, expected):\n    assert len(r) == 2, f'malformed row {{r}}'\n    assert abs(float(r[1]) - v) <= {tol:?}, f'{{k}}: {{r[1]}} differs from {{v}}'\n    assert len(r[1].split('.')[-1]) == 2 and '.' in r[1], f'{{k}}: {{r[1]}} should have exactly two decimals'",
            p = py(path),
            h = py(header),
            e = exp.join(", ")
        ),
    }
}

fn group_means(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let src = home(rng.pick(&["survey/responses.csv", "hr/ratings.csv", "data/scores.csv"]));
    let out = home(rng.pick(&["group_means.csv", "survey/means.csv", "mean_by_team.csv"]));
    let groups = distinct(rng, 2 + c as usize / 2, |r| {
        r.pick(&["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"])
            .to_string()
    });
    let mut s = Spec {
        title: format!("Mean score per team in {src}"),
        goals: vec![
            format!("Compute the average `score` of each `team` in `{src}` and write `{out}`."),
            format!("What's the mean score per team? Use `{src}` and save the result to `{out}`."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push("CSV with header `team,mean_score`, one row per team, teams sorted alphabetically, means with exactly two decimals.".into());
    let drop_invalid = c >= 3;
    if drop_invalid {
        s.reqs
            .push("Some rows have `NA` instead of a score: skip those rows entirely.".into());
    }
    let mut rows = vec!["respondent,team,score".to_string()];
    let mut acc: Vec<(String, Vec<f64>)> = groups.iter().map(|g| (g.clone(), Vec::new())).collect();
    for i in 0..(10 + 4 * c as usize) {
        let gi = i % groups.len();
        if drop_invalid && i % 7 == 3 {
            rows.push(format!("r{:03},{},NA", i + 1, groups[gi]));
            continue;
        }
        let v = rng.int(10, 100) as f64;
        acc[gi].1.push(v);
        rows.push(format!("r{:03},{},{v}", i + 1, groups[gi]));
    }
    acc.sort_by(|a, b| a.0.cmp(&b.0));
    let body = text(&rows);
    s.setup.file(&src, &body);
    s.initial.push(Check::Content(src.clone(), body));
    let expected: Vec<(String, f64)> = acc.iter().map(|(g, v)| (g.clone(), mean(v))).collect();
    s.checks.push(csv_numbers_check(
        &out,
        "team,mean_score",
        &expected,
        0.0051,
    ));
    let skip = if drop_invalid { " && $3 != \"NA\"" } else { "" };
    s.solve
        .push(format!("mkdir -p {}", crate::procgen::util::parent(&out)));
    s.solve.push(format!(
        "{{ echo 'team,mean_score'; awk -F, 'NR > 1{skip} {{ s[$2] += $3; n[$2]++ }} END {{ for (g in s) printf \"%s,%.2f\\n\", g, s[g] / n[g] }}' {src} | LC_ALL=C sort; }} > {out}"
    ));
    s.near_miss = Some(vec![s.solve[0].clone(), format!(
        "{{ echo 'team,mean_score'; awk -F, 'NR > 1 {{ s[$2] += $3; n[$2]++ }} END {{ for (g in s) printf \"%s,%.2f\\n\", g, s[g] / (n[g] + 1) }}' {src} | LC_ALL=C sort; }} > {out}"
    )]);
    s
}

fn percentiles(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let log = home(rng.pick(&["logs/requests.log", "perf/latency.log", "api/timings.log"]));
    let out = home(rng.pick(&["latency_report.txt", "perf/percentiles.txt", "p_report.txt"]));
    let n = 20 + 10 * c as usize;
    let mut lat: Vec<i64> = (0..n).map(|_| rng.int(5, 400)).collect();
    let mut lines = Vec::new();
    for (i, l) in lat.iter().enumerate() {
        lines.push(format!(
            "{} GET /api/{} status=200 latency_ms={l}",
            data::timestamp(86_400 * 77 + 13 * i as i64),
            rng.pick(&["users", "orders", "search", "items"])
        ));
    }
    lat.sort();
    let ps: Vec<u32> = match c {
        1 | 2 => vec![50, 90],
        3 | 4 => vec![50, 90, 95],
        _ => vec![50, 90, 95, 99],
    };
    // Nearest-rank percentile: the ceil(p/100 * n)-th smallest value.
    let rank = |p: u32| -> i64 {
        let k = (p as usize * n).div_ceil(100).max(1);
        lat[k - 1]
    };
    let mut s = Spec {
        title: format!("Latency percentiles from {log}"),
        goals: vec![
            format!("Each line of `{log}` ends with `latency_ms=<integer>`. Compute the latency percentiles listed below and write them to `{out}`."),
            format!("For the performance review I need latency percentiles from `{log}` written to `{out}`."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push(format!("Percentiles: {}. Use the nearest-rank method: the p-th percentile is the k-th smallest value with k = ceil(p/100 x n), n = number of lines.", ps.iter().map(|p| format!("p{p}")).collect::<Vec<_>>().join(", ")));
    s.reqs.push(
        "One line per percentile in that order, formatted `p<p> <value>` (e.g. `p50 123`).".into(),
    );
    let body = text(&lines);
    s.setup.file(&log, &body);
    s.initial.push(Check::Content(log.clone(), body));
    let expected: Vec<String> = ps.iter().map(|p| format!("p{p} {}", rank(*p))).collect();
    s.checks.push(Check::Lines(out.clone(), expected));
    let list = ps
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    s.solve
        .push(format!("mkdir -p {}", crate::procgen::util::parent(&out)));
    let prog = |sort: &str| {
        format!(
            "vals=$(sed -E 's/.*latency_ms=([0-9]+)$/\\1/' {log} | {sort})\nn=$(printf '%s\\n' \"$vals\" | wc -l)\n: > {out}\nfor p in {list}; do\n  k=$(( (p * n + 99) / 100 ))\n  echo \"p$p $(printf '%s\\n' \"$vals\" | sed -n \"${{k}}p\")\" >> {out}\ndone"
        )
    };
    s.solve.push(prog("sort -n"));
    s.near_miss = Some(vec![s.solve[0].clone(), prog("sort")]);
    s
}
