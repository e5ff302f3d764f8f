//! `endless images pull|list|rm|load|build-base|stand-ins|prune`: the local store of container
//! images that tasks build `FROM` (see `src/images`).

use std::process::ExitCode;

use anyhow::{Context as _, Result};

use super::json::print_json;
use super::progress::{BarStyle, JobBar};
use crate::cli::ImagesCommand;
use crate::images::{load, ImageRef};
use crate::jobs::JobContext;
use crate::workbench::{image_store, image_users, pull_images, Context};

/// Run one `endless images` subcommand.
pub fn run(ctx: &Context, cmd: ImagesCommand) -> Result<ExitCode> {
    let store = image_store(ctx);
    match cmd {
        ImagesCommand::Pull { references, json } => {
            // Layers and bytes on a bar (drawn only on a terminal).
            let (job, events) = JobContext::standalone("pull");
            let bar = JobBar::start(
                events,
                BarStyle {
                    template: "{spinner} {bar:30} {wide_msg}",
                    stage_as_message: true,
                    print_logs: false,
                },
            );
            let reports = pull_images(ctx, &references, &job);
            bar.finish_and_clear();
            let reports = reports?;
            if json {
                print_json(&reports)?;
            } else {
                for report in &reports {
                    say!(
                        "{}  {}  {} layers ({} downloaded, {} bytes)",
                        report.reference,
                        report.manifest_digest,
                        report.layers,
                        report.downloaded,
                        report.bytes
                    );
                }
            }
        }
        ImagesCommand::List { json } => {
            let images = store.list();
            // Layers used by more than one image are shared; the rest unique.
            let mut uses: std::collections::HashMap<&str, usize> = Default::default();
            for i in &images {
                for l in &i.layers {
                    *uses.entry(l.digest.as_str()).or_default() += 1;
                }
            }
            let stand_ins = store.stand_ins();
            let serves = |i: &crate::images::StoredImage| -> Vec<String> {
                stand_ins
                    .iter()
                    .filter(|s| s.name == i.reference)
                    .map(|s| s.requested.clone())
                    .collect()
            };
            let split = |i: &crate::images::StoredImage| {
                i.layers.iter().fold((0u64, 0u64), |(shared, unique), l| {
                    if uses.get(l.digest.as_str()).copied().unwrap_or(0) > 1 {
                        (shared + l.size, unique)
                    } else {
                        (shared, unique + l.size)
                    }
                })
            };
            // Which tasks use each image; a missing or unreadable workspace
            // only leaves the column empty.
            let users = image_users(ctx).unwrap_or_default();
            if json {
                let rows: Vec<_> = images
                    .iter()
                    .map(|i| {
                        serde_json::json!({
                            "reference": i.reference,
                            "manifest_digest": i.manifest_digest,
                            "layers": i.layers.len(),
                            "size": i.size(),
                            "bytes_shared": split(i).0,
                            "bytes_unique": split(i).1,
                            "stand_in_for": serves(i),
                            "last_use": chrono::DateTime::<chrono::Utc>::from(store.last_use(&i.reference)).to_rfc3339(),
                            "tasks": users.get(&i.reference).cloned().unwrap_or_default(),
                        })
                    })
                    .collect();
                print_json(&rows)?;
            } else if images.is_empty() {
                say!("no images; pull one with `endless images pull REF` or load one with `endless images load FILE`");
            } else {
                for i in &images {
                    let n = users.get(&i.reference).map_or(0, Vec::len);
                    let (shared, unique) = split(i);
                    say!(
                        "{}  {} layers  {:.1} MB ({:.1} MB unique, {:.1} MB shared)  {} task{}  {}",
                        i.reference,
                        i.layers.len(),
                        i.size() as f64 / 1e6,
                        unique as f64 / 1e6,
                        shared as f64 / 1e6,
                        n,
                        if n == 1 { "" } else { "s" },
                        i.manifest_digest
                    );
                    let served = serves(i);
                    if !served.is_empty() {
                        say!("    stand-in for {}", served.join(", "));
                    }
                }
                say!("store: {:.1} MB on disk", store.disk_usage() as f64 / 1e6);
            }
        }
        ImagesCommand::Rm { references } => {
            for r in references {
                let reference = ImageRef::parse(&r)?;
                if !store.remove(&reference)? {
                    anyhow::bail!("image {} is not in the local store", reference.canonical());
                }
            }
        }
        ImagesCommand::Load { file, tag, json } => {
            let reports = load(&store, &file, tag.as_deref())
                .with_context(|| format!("loading {}", file.display()))?;
            if json {
                print_json(&reports)?;
            } else {
                for r in reports {
                    say!(
                        "{}  {}  {} layers",
                        r.reference,
                        r.manifest_digest,
                        r.layers
                    );
                }
            }
        }
        ImagesCommand::BuildBase {
            name,
            suite,
            mirror,
            packages,
            variant,
            json,
        } => {
            let spec = crate::images::BaseSpec {
                suite,
                mirror,
                packages,
                variant,
                hooks: Vec::new(),
            };
            if !json {
                say_err!(
                    "building {} ({}) from {} with mmdebstrap...",
                    spec.suite,
                    spec.variant,
                    spec.mirror
                );
            }
            let report = crate::images::build_base(&store, &name, &spec)?;
            if json {
                print_json(&report)?;
            } else {
                say!("{}  {}  1 layer", report.reference, report.manifest_digest);
            }
        }
        ImagesCommand::StandIns { only, mirror, json } => {
            let references = if only.is_empty() {
                stand_in_defaults(ctx)
            } else {
                only
            };
            let say = |line: &str| {
                if !json {
                    say_err!("{line}");
                }
            };
            let reports = crate::images::build_stand_ins(&store, &references, &mirror, &say)?;
            if json {
                print_json(&reports)?;
            } else {
                for r in reports {
                    say!(
                        "{}  ->  {}  ({}){}",
                        r.requested,
                        r.name,
                        if r.built { "built" } else { "cached" },
                        if r.differs.is_empty() {
                            String::new()
                        } else {
                            format!("\n    differs: {}", r.differs.join("; "))
                        }
                    );
                }
            }
        }
        ImagesCommand::Prune { keep_recent, json } => {
            let cache_dir = ctx.paths.cache_dir.join("sandbox");
            let evicted = match keep_recent {
                Some(n) => Some(crate::sandbox::local::prune_keep_recent(
                    &cache_dir, &store, n,
                )?),
                None => match ctx.config.images.max_store_gb.filter(|g| *g > 0.0) {
                    Some(gb) => Some(crate::sandbox::local::enforce_cap(
                        &cache_dir,
                        &store,
                        (gb * 1e9) as u64,
                        &[],
                    )?),
                    None => None,
                },
            };
            if let (Some(e), false) = (&evicted, json) {
                say!(
                    "evicted {} built task images and {} stored images, least recently used first; the cache takes {:.1} MB",
                    e.built_images,
                    e.stored_images,
                    e.bytes_after as f64 / 1e6
                );
            }
            let report = store.prune()?;
            let steps = crate::sandbox::local::prune_steps(&ctx.paths.cache_dir.join("sandbox"))?;
            if json {
                let mut value = serde_json::to_value(&report)?;
                if let Some(map) = value.as_object_mut() {
                    map.insert("step_layers".into(), steps.layers.into());
                    map.insert("step_bytes".into(), steps.bytes.into());
                    if let Some(e) = &evicted {
                        map.insert("evicted".into(), serde_json::to_value(e)?);
                    }
                }
                print_json(&value)?;
            } else {
                say!(
                    "removed {} blobs, {} unpacked layers and {} leftovers ({:.1} MB); {} cached build steps no image uses ({:.1} MB)",
                    report.blobs,
                    report.layers,
                    report.temporaries,
                    report.bytes as f64 / 1e6,
                    steps.layers,
                    steps.bytes as f64 / 1e6
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The references `images stand-ins` builds without `--only`: the bases of
/// the workspace's tasks that have stand-ins and are not stored, else
/// a common set.
fn stand_in_defaults(ctx: &Context) -> Vec<String> {
    let store = image_store(ctx);
    let wanted: Vec<String> = image_users(ctx)
        .unwrap_or_default()
        .into_keys()
        .filter(|r| {
            ImageRef::parse(r).is_ok_and(|r| {
                store.get(&r).is_none() && matches!(crate::images::stand_in_for(&r), Ok(Some(_)))
            })
        })
        .collect();
    if wanted.is_empty() {
        crate::images::default_set()
            .into_iter()
            .map(String::from)
            .collect()
    } else {
        wanted
    }
}
