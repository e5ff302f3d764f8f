//! `endless images stand-ins`: build the stand-ins of `standin` (Debian
//! roots with mmdebstrap from Debian's archive; uv's image from its PyPI
//! wheel), register each once under `localhost/stand-in/...`, and record
//! which references it serves, so that the resolver takes it for them.

use std::path::Path;

use serde::Serialize;

use super::base::{debian_rootfs_tar, register_layer};
use super::standin::{stand_in_for, Recipe, StandIn};
use super::{wheel, BaseSpec, ImageError, ImageRef, ImageStore};

/// What building one stand-in did.
#[derive(Debug, Clone, Serialize)]
pub struct StandInReport {
    /// The reference it serves.
    pub requested: String,
    /// The stand-in image.
    pub name: String,
    /// Whether it was built now (`false`: it was in the store already).
    pub built: bool,
    /// What differs from the real image.
    pub differs: Vec<String>,
}

/// Build (once) and record the stand-ins of `references`, reporting each
/// start to `say`. `mirror` is the Debian archive.
pub fn build_stand_ins(
    store: &ImageStore,
    references: &[String],
    mirror: &str,
    say: &dyn Fn(&str),
) -> Result<Vec<StandInReport>, ImageError> {
    let mut plans = Vec::new();
    for written in references {
        let reference = ImageRef::parse(written)?;
        let stand_in = stand_in_for(&reference)?.ok_or_else(|| ImageError::NoStandIn {
            reference: reference.canonical(),
            reason: "no stand-in is made for this image".into(),
            exist: super::standin::catalog_summary(),
        })?;
        plans.push(stand_in);
    }
    let mut out = Vec::new();
    for mut stand_in in plans {
        let built = build_one(store, &mut stand_in, mirror, say)?;
        store.record_stand_in(&stand_in)?;
        out.push(StandInReport {
            requested: stand_in.requested.clone(),
            name: stand_in.name.clone(),
            built,
            differs: stand_in.differs.clone(),
        });
    }
    Ok(out)
}

/// Build `stand_in`'s image unless it is stored; whether it was built.
fn build_one(
    store: &ImageStore,
    stand_in: &mut StandIn,
    mirror: &str,
    say: &dyn Fn(&str),
) -> Result<bool, ImageError> {
    let name = ImageRef::parse(&stand_in.name)?;
    // Stored and recorded with this recipe: nothing to do. Recorded with
    // another (an older endless's), it is built again.
    let recorded: Vec<StandIn> = store
        .stand_ins()
        .into_iter()
        .filter(|s| s.name == stand_in.name)
        .collect();
    if store.get(&name).is_some() && recorded.iter().all(|s| s.recipe == stand_in.recipe) {
        return Ok(false);
    }
    let tmp = store.temp_path("stand-in.tar")?;
    let result = match &stand_in.recipe {
        Recipe::Debian {
            suite,
            packages,
            hooks,
            env,
        } => {
            say(&format!(
                "building {} (Debian {suite} with {}) with mmdebstrap...",
                stand_in.name,
                packages.join(", ")
            ));
            let spec = BaseSpec {
                suite: suite.clone(),
                mirror: mirror.to_string(),
                packages: packages.clone(),
                variant: "minbase".into(),
                hooks: hooks.clone(),
            };
            debian_rootfs_tar(&spec, &tmp)
                .and_then(|()| register_layer(store, &stand_in.name, &tmp, env.clone()))
                .map(|_| ())
        }
        Recipe::Uv { version } => {
            say(&format!(
                "building {} from PyPI's uv {version} wheel...",
                stand_in.name
            ));
            build_uv(store, stand_in, version.clone(), &tmp)
        }
    };
    // trusted: our own temporary in the private image store
    let _ = std::fs::remove_file(&tmp);
    result?;
    // The other references it serves are served by the new build.
    for mut other in recorded {
        other.recipe = stand_in.recipe.clone();
        store.record_stand_in(&other)?;
    }
    Ok(true)
}

/// The uv image: `/uv` and `/uvx` out of the wheel, as one layer.
fn build_uv(
    store: &ImageStore,
    stand_in: &mut StandIn,
    version: String,
    tmp: &Path,
) -> Result<(), ImageError> {
    let wheel = wheel::fetch("uv", &version)?;
    if wheel.version != version {
        stand_in.differs.push(format!(
            "uv {} (PyPI's newest for {version})",
            wheel.version
        ));
        stand_in.name = format!("{}uv:{}", super::standin::STAND_IN_PREFIX, wheel.version);
        if store.get(&ImageRef::parse(&stand_in.name)?).is_some() {
            return Ok(());
        }
    }
    let members = wheel::zip_members(
        &wheel.bytes,
        |n| n.ends_with(".data/scripts/uv") || n.ends_with(".data/scripts/uvx"),
        512 << 20,
    )
    .map_err(|e| ImageError::Pypi(format!("{}: {e}", wheel.filename)))?;
    let mut builder = tar::Builder::new(
        // trusted: our own temporary in the private image store
        std::fs::File::create(tmp).map_err(ImageError::io("write the uv layer", tmp))?,
    );
    for want in ["uv", "uvx"] {
        let (_, data) = members
            .iter()
            .find(|(n, _)| n.rsplit('/').next() == Some(want))
            .ok_or_else(|| {
                ImageError::Pypi(format!("{} holds no scripts/{want}", wheel.filename))
            })?;
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o755);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, want, data.as_slice())
            .map_err(ImageError::io("write the uv layer", tmp))?;
    }
    builder
        .into_inner()
        .and_then(|f| f.sync_all())
        .map_err(ImageError::io("write the uv layer", tmp))?;
    let env = vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()];
    register_layer(store, &stand_in.name, tmp, env).map(|_| ())
}
