//! Small data-analysis and ML-workflow tasks: reproducible splits, metrics from
//! predictions, feature scaling and picking the best run from experiment logs.

use rand_chacha::ChaCha8Rng;

use crate::procgen::data::{distinct, text};
use crate::procgen::pytest::Check;
use crate::procgen::spec::{Def, Spec};
use crate::procgen::util::home;
use crate::procgen::util::{py, python_step, Pick};

pub(crate) const FAMILIES: &[Def] = &[
    Def {
        name: "dataset-split",
        category: "ml-workflow",
        tools: &[],
        build: dataset_split,
    },
    Def {
        name: "classification-metrics",
        category: "ml-workflow",
        tools: &[],
        build: metrics,
    },
    Def {
        name: "feature-normalize",
        category: "ml-workflow",
        tools: &[],
        build: normalize,
    },
    Def {
        name: "best-experiment-run",
        category: "ml-workflow",
        tools: &[],
        build: best_run,
    },
];

fn dataset_split(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let dir = home(&format!(
        "ml/{}",
        rng.pick(&["iris", "churn", "housing", "spam"])
    ));
    let src = format!("{dir}/data.csv");
    let k = rng.pick(&[4i64, 5, 10]);
    let r = rng.int(0, k - 1);
    let with_val = c >= 3;
    let mut s = Spec {
        title: format!("Split {src} reproducibly by id"),
        goals: vec![
            format!("Split `{src}` into `{dir}/train.csv` and `{dir}/test.csv` deterministically: a row goes to the test set when its `id` modulo {k} equals {r}, otherwise to the training set."),
            format!("I need a reproducible train/test split of `{src}` (no randomness): rows with `id % {k} == {r}` are test rows, all others are training rows. Write `{dir}/train.csv` and `{dir}/test.csv`."),
        ],
        ..Default::default()
    };
    s.reqs
        .push("Both files keep the original header line and the original row order.".into());
    if with_val {
        s.reqs.push(format!("Additionally carve a validation set out of the training rows: those with `id % {k} == {}` go to `{dir}/val.csv` instead of `train.csv` (same header, same order).", (r + 1) % k));
    }
    let header = "id,f1,f2,f3,label";
    let mut rows = Vec::new();
    let (mut tr, mut te, mut va) = (
        vec![header.to_string()],
        vec![header.to_string()],
        vec![header.to_string()],
    );
    let mut ids: Vec<i64> = (1..=(20 + 8 * c as i64))
        .map(|i| i * rng.int(1, 3) + 100)
        .collect();
    ids.dedup();
    for id in ids {
        let row = format!(
            "{id},{:.3},{:.3},{},{}",
            rng.int(0, 9999) as f64 / 1000.0,
            rng.int(-5000, 5000) as f64 / 1000.0,
            rng.int(0, 50),
            rng.int(0, 1)
        );
        if id % k == r {
            te.push(row.clone());
        } else if with_val && id % k == (r + 1) % k {
            va.push(row.clone());
        } else {
            tr.push(row.clone());
        }
        rows.push(row);
    }
    let mut all = vec![header.to_string()];
    all.extend(rows);
    let body = text(&all);
    s.setup.file(&src, &body);
    s.initial.push(Check::Content(src.clone(), body.clone()));
    s.checks
        .push(Check::Content(format!("{dir}/train.csv"), text(&tr)));
    s.checks
        .push(Check::Content(format!("{dir}/test.csv"), text(&te)));
    s.checks.push(Check::Content(src.clone(), body));
    let mut prog = format!("NR == 1 {{ print > \"{dir}/train.csv\"; print > \"{dir}/test.csv\"; ");
    if with_val {
        prog.push_str(&format!("print > \"{dir}/val.csv\"; "));
        s.checks
            .push(Check::Content(format!("{dir}/val.csv"), text(&va)));
    }
    prog.push_str("next } ");
    prog.push_str(&format!(
        "$1 % {k} == {r} {{ print > \"{dir}/test.csv\"; next }} "
    ));
    if with_val {
        prog.push_str(&format!(
            "$1 % {k} == {} {{ print > \"{dir}/val.csv\"; next }} ",
            (r + 1) % k
        ));
    }
    prog.push_str(&format!("{{ print > \"{dir}/train.csv\" }}"));
    s.solve.push(format!("awk -F, '{prog}' {src}"));
    s.near_miss = Some(vec![format!(
        "awk -F, '{}' {src}",
        prog.replace(
            &format!("$1 % {k} == {r} "),
            &format!("$1 % {k} == {} ", (r + 2) % k)
        )
    )]);
    s
}

fn metrics(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let dir = home(&format!(
        "ml/{}",
        rng.pick(&["fraud-model", "spam-filter", "churn-v2", "defect-detector"])
    ));
    let src = format!("{dir}/predictions.csv");
    let out = format!("{dir}/metrics.json");
    let pos = rng.pick(&["1", "yes", "spam"]);
    let neg = match pos {
        "1" => "0",
        "yes" => "no",
        _ => "ham",
    };
    let n = 30 + 10 * c as usize;
    let mut rows = vec!["id,label,predicted".to_string()];
    let (mut tp, mut fp, mut fn_, mut tn) = (0f64, 0f64, 0f64, 0f64);
    for i in 0..n {
        let label_pos = rng.chance(0.4) || i == 0;
        let correct = rng.chance(0.75) || i < 2;
        let pred_pos = if correct { label_pos } else { !label_pos };
        let pred_pos = if i == 1 { !label_pos } else { pred_pos };
        match (label_pos, pred_pos) {
            (true, true) => tp += 1.0,
            (false, true) => fp += 1.0,
            (true, false) => fn_ += 1.0,
            (false, false) => tn += 1.0,
        }
        let l = if label_pos { pos } else { neg };
        let p = if pred_pos { pos } else { neg };
        rows.push(format!("{},{l},{p}", 1000 + i));
    }
    // Make sure precision and recall are defined.
    if tp == 0.0 {
        rows.push(format!("{},{pos},{pos}", 1000 + n));
        tp += 1.0;
    }
    let acc = (tp + tn) / (tp + tn + fp + fn_);
    let prec = tp / (tp + fp);
    let rec = tp / (tp + fn_);
    let f1 = 2.0 * prec * rec / (prec + rec);
    let mut keys: Vec<(&str, f64)> = vec![("accuracy", acc)];
    if c >= 2 {
        keys.push(("precision", prec));
        keys.push(("recall", rec));
    }
    if c >= 3 {
        keys.push(("f1", f1));
    }
    let mut s = Spec {
        title: format!("Evaluation metrics for {src}"),
        goals: vec![
            format!("`{src}` has the true `label` and the model's `predicted` class for each example. Compute the metrics below, treating `{pos}` as the positive class, and write them as a JSON object to `{out}`."),
            format!("Please evaluate the model output in `{src}` (positive class: `{pos}`) and store the metrics in `{out}` as JSON."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push(format!(
        "Keys: {}; values are numbers between 0 and 1 rounded to 4 decimals.",
        keys.iter()
            .map(|(k, _)| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if c >= 5 {
        s.reqs
            .push("Also include the integer counts `tp`, `fp`, `fn` and `tn`.".into());
        keys.push(("tp", tp));
        keys.push(("fp", fp));
        keys.push(("fn", fn_));
        keys.push(("tn", tn));
    }
    let body = text(&rows);
    s.setup.file(&src, &body);
    s.initial.push(Check::Content(src.clone(), body));
    s.checks.push(Check::JsonNumbers(
        out.clone(),
        keys.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        0.00006,
    ));
    let mut script = format!(
        "import csv, json\nrows = list(csv.DictReader(open({s})))\npos = {p}\ntp = sum(r['label'] == pos and r['predicted'] == pos for r in rows)\nfp = sum(r['label'] != pos and r['predicted'] == pos for r in rows)\nfn = sum(r['label'] == pos and r['predicted'] != pos for r in rows)\ntn = len(rows) - tp - fp - fn\nprec, rec = tp / (tp + fp), tp / (tp + fn)\nm = {{'accuracy': (tp + tn) / len(rows)}}\n",
        s = py(&src),
        p = py(pos)
    );
    if c >= 2 {
        script.push_str("m['precision'], m['recall'] = prec, rec\n");
    }
    if c >= 3 {
        script.push_str("m['f1'] = 2 * prec * rec / (prec + rec)\n");
    }
    script.push_str("m = {k: round(v, 4) for k, v in m.items()}\n");
    if c >= 5 {
        script.push_str("m.update(tp=tp, fp=fp, fn=fn, tn=tn)\n");
    }
    script.push_str(&format!(
        "json.dump(m, open({}, 'w'), indent=2)\n",
        py(&out)
    ));
    s.solve.push(python_step(None, &script));
    let bad = script.replace(
        "m = {'accuracy': (tp + tn) / len(rows)}",
        "m = {'accuracy': tp / len(rows)}",
    );
    s.near_miss = Some(vec![python_step(None, &bad)]);
    s
}

fn normalize(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let dir = home(&format!("ml/{}", rng.pick(&["housing", "sensors", "wine"])));
    let src = format!("{dir}/features.csv");
    let out = format!("{dir}/features_scaled.csv");
    let cols = ["rooms", "area", "age", "distance"];
    let ncols = (1 + c as usize / 2).min(3);
    let scaled: Vec<&str> = cols[..ncols].to_vec();
    let n = 10 + 3 * c as usize;
    let mut data: Vec<Vec<i64>> = Vec::new();
    for _ in 0..n {
        data.push(vec![
            rng.int(1, 9),
            rng.int(30, 400),
            rng.int(0, 120),
            rng.int(1, 5000),
        ]);
    }
    let mut s = Spec {
        title: format!("Min-max scale {} in {src}", scaled.join(", ")),
        goals: vec![
            format!("Min-max normalise the column(s) {} of `{src}` to the range [0, 1] and save the result as `{out}`.", scaled.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")),
            format!("Before training I need {} rescaled with min-max scaling (`(x - min) / (max - min)`). Read `{src}`, write `{out}`.", scaled.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(" and ")),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push("Same header, same row order; the other columns are copied unchanged; scaled values are written with exactly 4 decimals (e.g. `0.2500`).".into());
    let mut rows = vec![format!("id,{}", cols.join(","))];
    for (i, r) in data.iter().enumerate() {
        rows.push(format!(
            "{},{}",
            i + 1,
            r.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    let body = text(&rows);
    s.setup.file(&src, &body);
    s.initial.push(Check::Content(src.clone(), body));
    // Expected values as floats; strings for unscaled columns.
    let mut exp_rows: Vec<String> = Vec::new();
    let mins: Vec<i64> = (0..4)
        .map(|j| data.iter().map(|r| r[j]).min().unwrap_or(0))
        .collect();
    let maxs: Vec<i64> = (0..4)
        .map(|j| data.iter().map(|r| r[j]).max().unwrap_or(1))
        .collect();
    for (i, r) in data.iter().enumerate() {
        let mut cells = vec![format!("{}", i + 1)];
        for j in 0..4 {
            if j < ncols {
                let span = (maxs[j] - mins[j]).max(1) as f64;
                cells.push(format!("{:?}", (r[j] - mins[j]) as f64 / span));
            } else {
                cells.push(format!("{}", r[j]));
            }
        }
        exp_rows.push(format!("[{}]", cells.join(", ")));
    }
    s.checks.push(Check::Custom {
        name: "scaled_values".into(),
        describe: format!("`{out}` holds the min-max scaled columns {scaled:?} (4 decimals, ±0.0001) and the rest unchanged"),
        body: format!(
            "lines = [l for l in _read({o}).splitlines() if l.strip()]\nassert lines[0] == {h}, f'header changed: {{lines[0]!r}}'\nexpected = [{e}]\nassert len(lines) - 1 == len(expected), f'{{len(lines) - 1}} data rows, expected {{len(expected)}}'\nfor line, exp in zip(lines[1:], expected):\n    cells = line.split(',')\n    assert len(cells) == len(exp), f'wrong number of columns in {{line!r}}'\n    for j, (got, want) in enumerate(zip(cells, exp)):\n        if 1 <= j <= {nc}:\n            assert '.' in got and len(got.split('.')[1]) == 4, f'{{got!r}} should have exactly 4 decimals'\n            assert abs(float(got) - want) <= 0.00006, f'row {{cells[0]}}: {{got}} should be {{want:.4f}}'\n        else:\n            assert float(got) == float(want), f'row {{cells[0]}}: column {{j}} changed to {{got}}'",
            o = py(&out),
            h = py(&format!("id,{}", cols.join(","))),
            e = exp_rows.join(", "),
            nc = ncols
        ),
    });
    let script = format!(
        "import csv\nrows = list(csv.reader(open({s})))\nhead, body = rows[0], rows[1:]\nfor j in range(1, {nc} + 1):\n    vals = [float(r[j]) for r in body]\n    lo, hi = min(vals), max(vals)\n    for r in body:\n        r[j] = '%.4f' % ((float(r[j]) - lo) / (hi - lo))\nwith open({o}, 'w', newline='') as f:\n    csv.writer(f, lineterminator='\\n').writerows([head] + body)\n",
        s = py(&src),
        o = py(&out),
        nc = ncols
    );
    s.solve.push(python_step(None, &script));
    let bad = script.replace("(float(r[j]) - lo) / (hi - lo)", "float(r[j]) / hi");
    s.near_miss = Some(vec![python_step(None, &bad)]);
    s
}

fn best_run(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let root = home(&format!(
        "experiments/{}",
        rng.pick(&["resnet-sweep", "lr-search", "bert-finetune", "xgb-grid"])
    ));
    let out = home(rng.pick(&["best_run.txt", "experiments/best.txt", "winner.txt"]));
    let runs = distinct(rng, 3 + c as usize, |r| format!("run-{:02}", r.int(1, 40)));
    let metric_is_loss = c >= 4;
    let mut s = Spec {
        title: format!("Pick the best run in {root}"),
        goals: vec![
            format!("Each directory `{root}/run-XX/` has a `metrics.log` with one line per epoch. Find the run with the best {} over all epochs and write the answer to `{out}`.", if metric_is_loss { "(lowest) `val_loss`" } else { "(highest) `val_acc`" }),
            format!("Which run of my sweep in `{root}` did best? Look at {} in each `run-XX/metrics.log` (best epoch of each run) and put the answer in `{out}`.", if metric_is_loss { "the minimum `val_loss`" } else { "the maximum `val_acc`" }),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push("Write one line: the run directory name, a space, and the best value exactly as it appears in the log (e.g. `run-07 0.9132`).".into());
    let mut best: Option<(String, i64)> = None;
    let mut used: Vec<i64> = Vec::new();
    for run in &runs {
        let mut lines = Vec::new();
        let epochs = rng.int(3, 4 + c as i64);
        for e in 1..=epochs {
            let mut acc = rng.int(6000, 9800);
            while used.contains(&acc) {
                acc += 1;
            }
            used.push(acc);
            let loss = 10_000 - acc + 37;
            lines.push(format!(
                "epoch={e} train_loss=0.{:04} val_loss=0.{loss:04} val_acc=0.{acc:04} lr=0.001",
                rng.int(1000, 9000)
            ));
            let score = if metric_is_loss { -loss } else { acc };
            if best.as_ref().is_none_or(|b| score > b.1) {
                best = Some((run.clone(), score));
            }
        }
        s.setup
            .file(&format!("{root}/{run}/metrics.log"), &text(&lines));
        s.setup.file(
            &format!("{root}/{run}/config.json"),
            &format!(
                "{{\"lr\": 0.001, \"batch_size\": {}, \"seed\": {}}}\n",
                rng.pick(&[16, 32, 64]),
                rng.int(0, 9999)
            ),
        );
    }
    s.initial.push(Check::Dir(root.clone()));
    let (bname, bscore) = best.unwrap_or_default();
    let val = if metric_is_loss {
        format!("0.{:04}", -bscore)
    } else {
        format!("0.{bscore:04}")
    };
    s.checks
        .push(Check::Lines(out.clone(), vec![format!("{bname} {val}")]));
    let (key, order) = if metric_is_loss {
        ("val_loss", "-k2,2n")
    } else {
        ("val_acc", "-k2,2nr")
    };
    s.solve
        .push(format!("mkdir -p {}", crate::procgen::util::parent(&out)));
    s.solve.push(format!(
        "for f in {root}/run-*/metrics.log; do\n  run=$(basename \"$(dirname \"$f\")\")\n  grep -o '{key}=[0-9.]*' \"$f\" | cut -d= -f2 | sed \"s|^|$run |\"\ndone | sort {order} | head -n 1 > {out}"
    ));
    let wrong_order = if metric_is_loss { "-k2,2nr" } else { "-k2,2n" };
    s.near_miss = Some(vec![
        s.solve[0].clone(),
        s.solve[1].replace(order, wrong_order),
    ]);
    s
}
