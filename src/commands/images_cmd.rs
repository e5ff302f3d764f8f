//! `endless images pull|list|rm|load|build-base|prune`: the local store of container
//! images that tasks build `FROM` (see `src/images`).

use std::process::ExitCode;

use anyhow::{Context as _, Result};

use super::print_json;
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
                            "tasks": users.get(&i.reference).cloned().unwrap_or_default(),
                        })
                    })
                    .collect();
                print_json(&rows)?;
            } else if images.is_empty() {
                say!("no images; pull one with `endless images pull REF` or load one with `endless images load FILE`");
            } else {
                for i in images {
                    let n = users.get(&i.reference).map_or(0, Vec::len);
                    say!(
                        "{}  {} layers  {:.1} MB  {} task{}  {}",
                        i.reference,
                        i.layers.len(),
                        i.size() as f64 / 1e6,
                        n,
                        if n == 1 { "" } else { "s" },
                        i.manifest_digest
                    );
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
        ImagesCommand::Prune { json } => {
            let report = store.prune()?;
            let steps = crate::sandbox::local::prune_steps(&ctx.paths.cache_dir.join("sandbox"))?;
            if json {
                let mut value = serde_json::to_value(&report)?;
                if let Some(map) = value.as_object_mut() {
                    map.insert("step_layers".into(), steps.layers.into());
                    map.insert("step_bytes".into(), steps.bytes.into());
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
