//! Hot paths of the task layer: reading a bundle in each format and parsing
//! environment definitions. Run with `cargo bench --bench formats`.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly
#![allow(missing_docs)] // criterion_group! generates undocumented functions

use criterion::{criterion_group, criterion_main, Criterion};
use endless::bench::import::{sample_task, write_corpus};
use endless::task::envdef;
use endless::task::formats::Format;
use endless::task::EnvKind;
use endless::task::ReadLimits;

fn read_formats(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    write_corpus(dir.path(), 4).unwrap();
    let limits = ReadLimits::default();
    let mut group = c.benchmark_group("read_bundle");
    for (i, name) in ["native", "reference", "harbor", "tb1"].iter().enumerate() {
        let path = dir.path().join(format!("task-{i:05}"));
        let format = Format::detect(&path).unwrap();
        group.bench_function(*name, |b| b.iter(|| format.read(&path, &limits).unwrap()));
    }
    group.finish();
}

fn parse_definitions(c: &mut Criterion) {
    let dockerfile = "FROM ubuntu:24.04\nARG D=/app\nENV A=1 B=\"two words\"\nWORKDIR $D\nCOPY data/ ${D}/data/\nRUN apt-get update && \\\n    echo hi\nUSER user\n";
    let task = sample_task(0);
    let def = envdef::parse_task(&task).unwrap();
    let rendered = envdef::render_apptainer(&def, "user", &["setup.sh"]);
    c.bench_function("parse_dockerfile", |b| {
        b.iter(|| envdef::parse(EnvKind::Dockerfile, dockerfile))
    });
    c.bench_function("parse_apptainer_def", |b| {
        b.iter(|| envdef::parse(EnvKind::ApptainerDef, &rendered).unwrap())
    });
}

criterion_group!(benches, read_formats, parse_definitions);
criterion_main!(benches);
