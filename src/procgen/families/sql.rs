//! SQLite through the `sqlite3` command-line shell.

use rand_chacha::ChaCha8Rng;

use crate::procgen::data::{self, distinct, text, PRODUCTS};
use crate::procgen::pytest::Check;
use crate::procgen::spec::{Def, Spec};
use crate::procgen::util::home;
use crate::procgen::util::{sq, Pick};

pub(crate) const FAMILIES: &[Def] = &[
    Def {
        name: "sqlite-report",
        category: "sqlite",
        tools: &[],
        build: sqlite_report,
    },
    Def {
        name: "sqlite-archive-rows",
        category: "sqlite",
        tools: &[],
        build: sqlite_update,
    },
    Def {
        name: "csv-into-sqlite",
        category: "sqlite",
        tools: &[],
        build: csv_import,
    },
];

/// An order row: id, customer, product, qty, unit price (cents-free integers), date, status.
struct Order {
    id: i64,
    customer: String,
    product: String,
    qty: i64,
    price: i64,
    date: String,
    status: &'static str,
}

fn orders(rng: &mut ChaCha8Rng, n: usize, customers: &[String]) -> Vec<Order> {
    (0..n)
        .map(|i| Order {
            id: 1 + i as i64,
            customer: rng.pick(customers),
            product: rng.pick(PRODUCTS).to_string(),
            qty: rng.int(1, 9),
            price: rng.int(5, 300),
            date: data::date_of(rng.int(0, 330)),
            status: rng.pick(&["open", "shipped", "shipped", "cancelled"]),
        })
        .collect()
}

/// Setup lines creating `db` with an `orders` table holding `rows`.
fn create_orders_db(s: &mut Spec, db: &str, rows: &[Order]) {
    let mut sql = String::from("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, product TEXT NOT NULL, qty INTEGER NOT NULL, unit_price INTEGER NOT NULL, order_date TEXT NOT NULL, status TEXT NOT NULL);\n");
    for o in rows {
        sql.push_str(&format!(
            "INSERT INTO orders VALUES ({}, '{}', '{}', {}, {}, '{}', '{}');\n",
            o.id, o.customer, o.product, o.qty, o.price, o.date, o.status
        ));
    }
    s.setup
        .raw(format!("mkdir -p {}", sq(crate::procgen::util::parent(db))));
    s.setup.raw(format!("sqlite3 {} <<'SQL'\n{sql}SQL", sq(db)));
    s.initial.push(Check::Sqlite(
        db.into(),
        "SELECT COUNT(*) FROM orders".into(),
        vec![vec![rows.len().to_string()]],
    ));
}

fn sqlite_report(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let db = home(rng.pick(&["shop/shop.db", "data/sales.sqlite", "db/orders.db"]));
    let out = home(rng.pick(&[
        "customer_revenue.csv",
        "reports/revenue.csv",
        "top_customers.csv",
    ]));
    let customers = distinct(rng, 3 + c as usize / 2, data::user);
    let rows = orders(rng, 12 + 4 * c as usize, &customers);
    let skip = c >= 3;
    let mut s = Spec {
        title: format!("Revenue per customer from {db}"),
        goals: vec![
            format!("The SQLite database `{db}` has an `orders` table. Produce `{out}`: total revenue (qty x unit_price) per customer."),
            format!("Use the sqlite3 CLI on `{db}` to compute each customer's revenue (sum of `qty * unit_price` over their `orders`) and save it as CSV in `{out}`."),
        ],
        output: Some(out.clone()),
        ..Default::default()
    };
    if skip {
        s.reqs
            .push("Exclude orders with status `cancelled`.".into());
    }
    s.reqs.push("CSV with header `customer,revenue`; highest revenue first, ties by customer name; no quoting.".into());
    s.reqs.push("Do not modify the database.".into());
    let mut tot: Vec<(String, i64)> = Vec::new();
    for o in &rows {
        if skip && o.status == "cancelled" {
            continue;
        }
        match tot.iter_mut().find(|t| t.0 == o.customer) {
            Some(t) => t.1 += o.qty * o.price,
            None => tot.push((o.customer.clone(), o.qty * o.price)),
        }
    }
    tot.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    create_orders_db(&mut s, &db, &rows);
    let mut expected = vec!["customer,revenue".to_string()];
    expected.extend(tot.iter().map(|(c, v)| format!("{c},{v}")));
    s.checks.push(Check::Lines(out.clone(), expected));
    s.checks.push(Check::Sqlite(
        db.clone(),
        "SELECT COUNT(*) FROM orders".into(),
        vec![vec![rows.len().to_string()]],
    ));
    let wh = if skip {
        " WHERE status != 'cancelled'"
    } else {
        ""
    };
    let q = |w: &str| {
        format!("SELECT customer, SUM(qty * unit_price) AS revenue FROM orders{w} GROUP BY customer ORDER BY revenue DESC, customer;")
    };
    s.solve.push(format!(
        "mkdir -p {}",
        sq(crate::procgen::util::parent(&out))
    ));
    s.solve
        .push(format!("sqlite3 -header -csv {db} {} > {out}", sq(&q(wh))));
    let nm = if skip {
        q("")
    } else {
        q("").replace("SUM(qty * unit_price)", "SUM(unit_price)")
    };
    s.near_miss = Some(vec![
        s.solve[0].clone(),
        format!("sqlite3 -header -csv {db} {} > {out}", sq(&nm)),
    ]);
    s
}

fn sqlite_update(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let db = home(rng.pick(&["shop/shop.db", "data/orders.sqlite", "crm/crm.db"]));
    let customers = distinct(rng, 4, data::user);
    let mut rows = orders(rng, 12 + 3 * c as usize, &customers);
    // One open order after any cutoff, so archiving everything is caught.
    rows[0].date = data::date_of(320);
    rows[0].status = "open";
    let cutoff = data::date_of(rng.int(100, 220));
    let delete = c >= 3;
    let mut s = Spec {
        title: format!("Archive orders before {cutoff} in {db}"),
        goals: vec![
            format!("In the SQLite database `{db}`, set `status` to `archived` for every order in `orders` whose `order_date` is before `{cutoff}` (and that is not `cancelled`)."),
            format!("Housekeeping on `{db}`: orders dated earlier than `{cutoff}` should get status `archived` - except cancelled ones, which keep their status."),
        ],
        ..Default::default()
    };
    if delete {
        s.reqs
            .push("Then delete every `cancelled` order, whatever its date.".into());
    }
    s.reqs
        .push("Leave all other rows and columns unchanged.".into());
    create_orders_db(&mut s, &db, &rows);
    let mut expected: Vec<Vec<String>> = Vec::new();
    for o in &rows {
        if delete && o.status == "cancelled" {
            continue;
        }
        let st = if o.date.as_str() < cutoff.as_str() && o.status != "cancelled" {
            "archived"
        } else {
            o.status
        };
        expected.push(vec![o.id.to_string(), st.to_string()]);
    }
    s.checks.push(Check::Sqlite(
        db.clone(),
        "SELECT id, status FROM orders ORDER BY id".into(),
        expected,
    ));
    let sum: i64 = rows
        .iter()
        .filter(|o| !(delete && o.status == "cancelled"))
        .map(|o| o.qty * o.price)
        .sum();
    s.checks.push(Check::Sqlite(
        db.clone(),
        "SELECT SUM(qty * unit_price) FROM orders".into(),
        vec![vec![sum.to_string()]],
    ));
    s.initial.push(Check::Sqlite(
        db.clone(),
        "SELECT COUNT(*) FROM orders WHERE status = 'archived'".into(),
        vec![vec!["0".into()]],
    ));
    s.solve.push(format!(
        "sqlite3 {db} \"UPDATE orders SET status = 'archived' WHERE order_date < '{cutoff}' AND status != 'cancelled';\""
    ));
    if delete {
        s.solve.push(format!(
            "sqlite3 {db} \"DELETE FROM orders WHERE status = 'cancelled';\""
        ));
    }
    s.near_miss = Some(vec![format!(
        "sqlite3 {db} \"UPDATE orders SET status = 'archived' WHERE status != 'cancelled';\""
    )]);
    s
}

fn csv_import(rng: &mut ChaCha8Rng, c: u8) -> Spec {
    let csv = home(rng.pick(&[
        "imports/readings.csv",
        "lab/measurements.csv",
        "sensors/readings.csv",
    ]));
    let db = home(rng.pick(&["lab/lab.db", "sensors.db", "data/readings.sqlite"]));
    let table = rng.pick(&["readings", "measurements", "samples"]);
    let sensors = distinct(rng, 3 + c as usize / 2, |r| {
        format!(
            "{}-{}",
            r.pick(&["temp", "hum", "press", "flow"]),
            r.int(1, 40)
        )
    });
    let mut s = Spec {
        title: format!("Load {csv} into SQLite table {table}"),
        goals: vec![
            format!("Create the SQLite database `{db}` with a table `{table}` holding all the rows of `{csv}` (the header line gives the column names)."),
            format!("Import `{csv}` into a new table `{table}` in `{db}` using the sqlite3 shell; the CSV header must become the column names, not a data row."),
        ],
        ..Default::default()
    };
    s.reqs.push(format!("Columns: `sensor` TEXT, `ts` TEXT, `value` INTEGER, in that order. Every CSV data row becomes exactly one row of `{table}`."));
    let n = 8 + 4 * c as usize;
    let mut rows = vec!["sensor,ts,value".to_string()];
    let mut sums: Vec<(String, i64, i64)> = sensors.iter().map(|x| (x.clone(), 0, 0)).collect();
    for i in 0..n {
        let si = rng.int(0, sensors.len() as i64 - 1) as usize;
        let v = rng.int(-20, 120);
        sums[si].1 += v;
        sums[si].2 += 1;
        rows.push(format!(
            "{},{},{v}",
            sensors[si],
            data::timestamp(86_400 * 50 + 600 * i as i64).replace(' ', "T")
        ));
    }
    let body = text(&rows);
    s.setup.file(&csv, &body);
    s.initial.push(Check::Content(csv.clone(), body));
    s.initial.push(Check::Absent(db.clone()));
    s.checks.push(Check::Sqlite(
        db.clone(),
        format!("SELECT COUNT(*) FROM {table}"),
        vec![vec![n.to_string()]],
    ));
    let mut per: Vec<Vec<String>> = sums
        .iter()
        .filter(|x| x.2 > 0)
        .map(|(k, v, _)| vec![k.clone(), v.to_string()])
        .collect();
    per.sort();
    s.checks.push(Check::Sqlite(
        db.clone(),
        format!("SELECT sensor, SUM(value) FROM {table} GROUP BY sensor ORDER BY sensor"),
        per,
    ));
    s.checks.push(Check::Sqlite(
        db.clone(),
        format!("SELECT name FROM pragma_table_info('{table}') ORDER BY cid"),
        vec![
            vec!["sensor".into()],
            vec!["ts".into()],
            vec!["value".into()],
        ],
    ));
    if c >= 3 {
        let idx = format!("idx_{table}_sensor");
        s.reqs.push(format!(
            "Add an index named `{idx}` on the `sensor` column."
        ));
        s.checks.push(Check::Sqlite(
            db.clone(),
            format!("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = '{idx}'"),
            vec![vec!["1".into()]],
        ));
    }
    s.solve.push(format!(
        "mkdir -p {}",
        sq(crate::procgen::util::parent(&db))
    ));
    s.solve.push(format!(
        "sqlite3 {db} \"CREATE TABLE {table} (sensor TEXT, ts TEXT, value INTEGER);\" \".import --csv --skip 1 {csv} {table}\""
    ));
    if c >= 3 {
        s.solve.push(format!(
            "sqlite3 {db} \"CREATE INDEX idx_{table}_sensor ON {table}(sensor);\""
        ));
    }
    s.near_miss = Some(vec![
        s.solve[0].clone(),
        format!("sqlite3 {db} \"CREATE TABLE {table} (sensor TEXT, ts TEXT, value INTEGER);\" \".import --csv {csv} {table}\""),
    ]);
    if c >= 3 {
        let mut v = s.near_miss.take().unwrap_or_default();
        v.push(s.solve[2].clone());
        s.near_miss = Some(v);
    }
    s
}
