//! `endless images pull|list|rm`: the local store of container images that
//! tasks build `FROM` (see `src/images`).

use std::process::ExitCode;

use anyhow::Result;

use super::{print_json, Context};
use crate::cli::ImagesCommand;
use crate::images::{pull, ImageRef, ImageStore};
use crate::sandbox::local::image_store_dir;

/// `endless images ...`
pub fn run(ctx: &Context, cmd: ImagesCommand) -> Result<ExitCode> {
    let store = ImageStore::new(&image_store_dir(&ctx.paths.cache_dir.join("sandbox")));
    match cmd {
        ImagesCommand::Pull { references, json } => {
            let mut reports = Vec::new();
            for r in references {
                let reference = ImageRef::parse(&r)?;
                let report = pull(&store, &reference)?;
                if !json {
                    say!(
                        "{}  {}  {} layers ({} downloaded, {} bytes)",
                        report.reference,
                        report.manifest_digest,
                        report.layers,
                        report.downloaded,
                        report.bytes
                    );
                }
                reports.push(report);
            }
            if json {
                print_json(&reports)?;
            }
        }
        ImagesCommand::List { json } => {
            let images = store.list();
            if json {
                let rows: Vec<_> = images
                    .iter()
                    .map(|i| {
                        serde_json::json!({
                            "reference": i.reference,
                            "manifest_digest": i.manifest_digest,
                            "layers": i.layers.len(),
                            "size": i.size(),
                        })
                    })
                    .collect();
                print_json(&rows)?;
            } else if images.is_empty() {
                say!("no images; pull one with `endless images pull REF`");
            } else {
                for i in images {
                    say!(
                        "{}  {} layers  {:.1} MB  {}",
                        i.reference,
                        i.layers.len(),
                        i.size() as f64 / 1e6,
                        i.manifest_digest
                    );
                }
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
    }
    Ok(ExitCode::SUCCESS)
}
