//! CSV and JSON data manipulation.

use rand_chacha::ChaCha8Rng;

use crate::procgen::data::{self, distinct, text, CITIES, DEPARTMENTS, PRODUCTS};
use crate::procgen::pytest::Check;
use crate::procgen::spec::{Def, Spec};
use crate::procgen::util::home;
use crate::procgen::util::{py, python_step, sq, Pick};

pub(crate) const FAMILIES: &[Def] = &[
    Def {
        name: "csv-filter-columns",
        category: "csv-json",
        tools: &[],
        build: csv_filter,
    },
    Def {
        name: "csv-to-json",
        category: "csv-json",
        tools: &[],
        build: csv_to_json,
    },
    Def {
        name: "json-nested-summary",
        category: "csv-json",
        tools: &[],
        build: json_summary,
    },
    Def {
        name: "jq-select-users",
        category: "csv-json",
        tools: &["jq"],
        build: jq_select,
    },
];

/// One employee row.
struct Emp {
    id: i64,
    name: String,
    dept: String,
    city: String,
    salary: i64,
}

fn employees(rng: &mut ChaCha8Rng, n: usize, depts: &[&str]) -> Vec<Emp> {
    let names = distinct(rng, n, |r| {
        format!("{} {}", cap(r.pick(data::FIRST)), cap(r.pick(data::LAST)))
    });
    let mut salaries: Vec<i64> = Vec::new();
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            // Distinct salaries keep any sort by salary unambiguous.
            let mut sal = rng.int(38, 160) * 1000;
            while salaries.contains(&sal) {
                sal += 500;
            }
            salaries.push(sal);
            Emp {
                id: 100 + i as i64,
                name,
                dept: rng.pick(depts).to_string(),
                city: rng.pick(CITIES).to_string(),
                salary: sal,
            }
        })
        .collect()
}

fn cap(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

fn csv_filter(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let src = home(rng.pick(&["hr/employees.csv", "data/staff.csv", "exports/people.csv"]));
    let depts = rng.sample(DEPARTMENTS, 3);
    let emps = employees(rng, 10 + 3 * c as usize, &depts);
    let dept = emps[0].dept.clone();
    let out = home(&format!("{dept}_salaries.csv"));
    let sorted = c >= 3;
    let mut s = Spec {
        title: format!("Extract {dept} names and salaries from {src}"),
        goals: vec![
            format!("From `{src}`, make `{out}` with only the employees in the `{dept}` department and only the columns `name` and `salary` (in that order)."),
            format!("I need a small CSV for the {dept} budget review: the `name` and `salary` columns of every `{dept}` row in `{src}`, saved as `{out}`."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push(
        "Keep a header line `name,salary`; fields are comma-separated with no quoting.".into(),
    );
    if sorted {
        s.reqs
            .push("Sort the rows by salary, highest first.".into());
    } else {
        s.reqs.push("Keep the rows in their original order.".into());
    }
    let mut rows = vec!["id,name,department,city,salary".to_string()];
    rows.extend(
        emps.iter()
            .map(|e| format!("{},{},{},{},{}", e.id, e.name, e.dept, e.city, e.salary)),
    );
    let body = text(&rows);
    s.setup.file(&src, &body);
    s.initial.push(Check::Content(src.clone(), body));
    let mut sel: Vec<&Emp> = emps.iter().filter(|e| e.dept == dept).collect();
    if sorted {
        sel.sort_by_key(|e| std::cmp::Reverse(e.salary));
    }
    let mut expected = vec!["name,salary".to_string()];
    expected.extend(sel.iter().map(|e| format!("{},{}", e.name, e.salary)));
    s.checks.push(Check::Lines(out.clone(), expected));
    let sort = if sorted { " | sort -t, -k2,2nr" } else { "" };
    s.solve.push(format!(
        "{{ echo 'name,salary'; awk -F, -v d={} 'NR > 1 && $3 == d {{ print $2 \",\" $5 }}' {src}{sort}; }} > {out}",
        sq(&dept)
    ));
    s.near_miss = Some(vec![format!(
        "{{ echo 'name,salary'; awk -F, -v d={} 'NR > 1 && $3 == d {{ print $2 \",\" $4 }}' {src}{sort}; }} > {out}",
        sq(&dept)
    )]);
    s
}

fn csv_to_json(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let src = home(rng.pick(&[
        "catalog/products.csv",
        "shop/inventory.csv",
        "data/items.csv",
    ]));
    let out = home(rng.pick(&["catalog/products.json", "inventory.json", "data/items.json"]));
    let names = distinct(rng, 4 + 2 * c as usize, |r| {
        format!("{}-{}", r.pick(PRODUCTS), r.int(100, 999))
    });
    let only_stock = c >= 3;
    let mut s = Spec {
        title: format!("Convert {src} to JSON"),
        goals: vec![
            format!("Convert `{src}` into a JSON array of objects at `{out}`, one object per row, keys taken from the header."),
            format!("Our frontend wants `{src}` as JSON: write `{out}` containing a list with one object per CSV row."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    s.reqs.push(
        "Types matter: `id` and `stock` are integers, `price` is a number, `name` is a string."
            .into(),
    );
    if only_stock {
        s.reqs.push("Leave out products whose `stock` is 0.".into());
    }
    s.reqs.push("Keep the row order of the CSV.".into());
    let mut rows = vec!["id,name,price,stock".to_string()];
    let mut objs = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let price = format!(
            "{}.{}",
            rng.int(1, 400),
            rng.pick(&["5", "25", "99", "0", "75"])
        );
        let stock = if rng.chance(0.3) { 0 } else { rng.int(1, 250) };
        let id = 1 + i as i64;
        rows.push(format!("{id},{n},{price},{stock}"));
        if !only_stock || stock > 0 {
            objs.push(format!(
                "{{\"id\": {id}, \"name\": {}, \"price\": {price}, \"stock\": {stock}}}",
                py(n)
            ));
        }
    }
    let body = text(&rows);
    s.setup.file(&src, &body);
    s.initial.push(Check::Content(src.clone(), body));
    s.checks
        .push(Check::Json(out.clone(), format!("[{}]", objs.join(", "))));
    let filt = if only_stock {
        "    if int(r['stock']) == 0:\n        continue\n"
    } else {
        ""
    };
    let script = format!(
        "import csv, json\nrows = []\nfor r in csv.DictReader(open({s})):\n{filt}    rows.append({{'id': int(r['id']), 'name': r['name'], 'price': float(r['price']), 'stock': int(r['stock'])}})\njson.dump(rows, open({o}, 'w'), indent=2)\n",
        s = py(&src),
        o = py(&out)
    );
    s.solve.push(python_step(Some(&out), &script));
    s.near_miss = Some(vec![python_step(
        Some(&out),
        &script.replace("'stock': int(r['stock'])", "'stock': r['stock']"),
    )]);
    s
}

fn json_summary(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let src = home(rng.pick(&[
        "orders/orders.json",
        "exports/orders.json",
        "shop/orders.json",
    ]));
    let out = home(rng.pick(&[
        "customer_totals.json",
        "orders/summary.json",
        "revenue_by_customer.json",
    ]));
    let customers = distinct(rng, 3 + c as usize / 2, data::user);
    let mut s = Spec {
        title: format!("Summarise revenue per customer from {src}"),
        goals: vec![
            format!("`{src}` holds a list of orders, each with a `customer` and a list of `items` (`qty`, `unit_price`). Write `{out}`: a JSON object mapping each customer to their total spend (sum of qty x unit_price over all their orders)."),
            format!("Please compute how much each customer spent according to `{src}` and save it as a JSON object `{{customer: total}}` in `{out}`."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    let skip_cancelled = c >= 3;
    if skip_cancelled {
        s.reqs
            .push("Ignore orders whose `status` is `cancelled`.".into());
    }
    s.reqs
        .push("Totals are integers (all prices are whole numbers).".into());
    let mut totals: Vec<(String, i64)> = customers.iter().map(|c| (c.clone(), 0)).collect();
    let mut orders = Vec::new();
    for i in 0..(5 + 2 * c as usize) {
        let ci = i % customers.len();
        let status = rng.pick(&["shipped", "shipped", "delivered", "cancelled"]);
        let mut items = Vec::new();
        let mut sum = 0;
        for _ in 0..rng.int(1, 3) {
            let (q, p) = (rng.int(1, 5), rng.int(3, 120));
            sum += q * p;
            items.push(format!(
                "{{\"sku\": \"{}\", \"qty\": {q}, \"unit_price\": {p}}}",
                rng.pick(PRODUCTS)
            ));
        }
        if !skip_cancelled || status != "cancelled" {
            totals[ci].1 += sum;
        }
        orders.push(format!(
            "  {{\"order_id\": {}, \"customer\": {}, \"status\": \"{status}\", \"items\": [{}]}}",
            5000 + i,
            py(&customers[ci]),
            items.join(", ")
        ));
    }
    let body = format!("[\n{}\n]\n", orders.join(",\n"));
    s.setup.file(&src, &body);
    s.initial.push(Check::Content(src.clone(), body));
    let obj: Vec<String> = totals
        .iter()
        .map(|(k, v)| format!("{}: {v}", py(k)))
        .collect();
    s.checks
        .push(Check::Json(out.clone(), format!("{{{}}}", obj.join(", "))));
    let cond = if skip_cancelled {
        "    if o.get('status') == 'cancelled':\n        continue\n"
    } else {
        ""
    };
    let script = format!(
        "import json\ntotals = {{}}\nfor o in json.load(open({s})):\n    totals.setdefault(o['customer'], 0)\n{cond}    totals[o['customer']] += sum(i['qty'] * i['unit_price'] for i in o['items'])\njson.dump(totals, open({o}, 'w'), indent=2, sort_keys=True)\n",
        s = py(&src),
        o = py(&out)
    );
    s.solve.push(python_step(Some(&out), &script));
    s.near_miss = Some(vec![python_step(
        Some(&out),
        &script.replace("i['qty'] * i['unit_price']", "i['unit_price']"),
    )]);
    s
}

fn jq_select(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let src = home(rng.pick(&[
        "admin/users.json",
        "exports/accounts.json",
        "iam/users.json",
    ]));
    let roles = ["admin", "developer", "viewer", "auditor"];
    let role = rng.pick(&roles);
    let out = home(&format!("active_{role}s.txt"));
    let users = distinct(rng, 6 + 2 * c as usize, data::user);
    let mut s = Spec {
        title: format!("List active {role} accounts from {src}"),
        goals: vec![
            format!("Using `{src}` (an array of user objects), list the `username` of every user with role `{role}` whose `active` flag is true. Write them to `{out}`, sorted, one per line."),
            format!("Which {role}s are still active? Extract their usernames from `{src}` (jq is installed) into `{out}`, one per line, alphabetically sorted."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    let mut objs = Vec::new();
    let mut hits = Vec::new();
    for (i, u) in users.iter().enumerate() {
        let r = if i == 0 { role } else { rng.pick(&roles) };
        let active = i == 0 || rng.chance(0.6);
        if r == role && active {
            hits.push(u.clone());
        }
        let extra = if c >= 4 {
            format!(
                ", \"profile\": {{\"city\": \"{}\", \"mfa\": {}}}",
                rng.pick(CITIES),
                rng.chance(0.5)
            )
        } else {
            String::new()
        };
        objs.push(format!(
            "  {{\"username\": {}, \"role\": \"{r}\", \"active\": {active}, \"uid\": {}{extra}}}",
            py(u),
            2000 + i
        ));
    }
    // Inactive decoy in the same role, so forgetting the flag is caught.
    let decoy = format!("{}.old", users[0]);
    objs.push(format!(
        "  {{\"username\": {}, \"role\": \"{role}\", \"active\": false, \"uid\": 1999}}",
        py(&decoy)
    ));
    let body = format!("[\n{}\n]\n", objs.join(",\n"));
    s.setup.file(&src, &body);
    s.initial.push(Check::Content(src.clone(), body));
    hits.sort();
    s.checks.push(Check::Lines(out.clone(), hits));
    s.solve.push(format!(
        "jq -r '.[] | select(.role == \"{role}\" and .active) | .username' {src} | LC_ALL=C sort > {out}"
    ));
    s.near_miss = Some(vec![format!(
        "jq -r '.[] | select(.role == \"{role}\") | .username' {src} | LC_ALL=C sort > {out}"
    )]);
    s
}
