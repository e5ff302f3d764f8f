//! Run the sandbox benchmark: `cargo run --release --example sandbox_bench [RUNS]`.
//! (`endless bench sandbox` runs the same code.)

fn main() {
    let runs = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::Builder::new()
        .prefix("endless-bench-")
        .tempdir_in("/var/tmp")
        .expect("temp dir");
    let report = endless::bench::sandbox::bench(runs, dir.path());
    println!("{report}");
    println!(
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
}
