//! Attacks on the image store: archives, layouts and layers that try to make
//! `endless` read or write outside them, or keep privileges on the host.
//!
//! These scenarios need no sandbox session, but run through [`both`] all
//! the same, so that each runs as root and again as uid 65534 (where the
//! "operator's private files" are that user's own 0600 files).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

use endless::images::{load, ImageConfig, ImageError, ImageStore, StoredImage, StoredLayer};
use endless::sandbox::local::build_record;
use sha2::{Digest, Sha256};

#[allow(unused_imports)]
use super::*;

/// Something unique to this run, to find (or not) in the store.
fn nonce() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    format!("CANARY-{}-{}", std::process::id(), t.as_nanos())
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// An entry of a hand-made tar.
enum E {
    File(Vec<u8>, u32),
    Dir(u32),
    Link(String),
}

fn tar_of(entries: &[(&str, E)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, e) in entries {
        let mut h = tar::Header::new_gnu();
        match e {
            E::File(body, mode) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*mode);
                h.set_size(body.len() as u64);
                b.append_data(&mut h, path, &body[..]).unwrap();
            }
            E::Dir(mode) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(*mode);
                h.set_size(0);
                b.append_data(&mut h, path, &[][..]).unwrap();
            }
            E::Link(target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                b.append_link(&mut h, path, target).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

fn file(body: impl AsRef<[u8]>) -> E {
    E::File(body.as_ref().to_vec(), 0o644)
}

fn link(target: impl Into<String>) -> E {
    E::Link(target.into())
}

/// Write `bytes` at `path` with `mode`.
fn write_mode(path: &Path, bytes: &[u8], mode: u32) {
    std::fs::write(path, bytes).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Whether any file under `dir` holds `needle`.
fn holds(dir: &Path, needle: &str) -> bool {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| std::fs::read(e.path()).ok())
        .any(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
}

fn mode_of(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// The owners layers are unpacked for, as the backend does.
fn owner_base(b: &LocalBackend) -> endless::images::LayerOwners {
    b.layer_owners()
}

/// The operator's private files: a 0700 directory holding a 0600 layer
/// (one file, `secret.txt`, holding `canary`), a 0600 config, and an OCI
/// layout of a private image made of them (0700 `blobs`).
struct Private {
    dir: PathBuf,
    layer: Vec<u8>,
    /// Digest of the private image's manifest.
    manifest: String,
}

fn private_files(base: &Path, canary: &str) -> Private {
    let dir = base.join("private");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let layer = tar_of(&[("secret.txt", file(canary))]);
    let config = format!(r#"{{"config":{{"Env":["TOKEN={canary}"]}}}}"#);
    write_mode(&dir.join("layer.tar"), &layer, 0o600);
    write_mode(&dir.join("config.json"), config.as_bytes(), 0o600);
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::set_permissions(dir.join("blobs"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let manifest = format!(
        r#"{{"schemaVersion":2,"config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:{}","size":{}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:{}","size":{}}}]}}"#,
        sha256(config.as_bytes()),
        config.len(),
        sha256(&layer),
        layer.len()
    );
    for bytes in [config.as_bytes(), &layer[..], manifest.as_bytes()] {
        write_mode(&blobs.join(sha256(bytes)), bytes, 0o600);
    }
    Private {
        dir,
        layer,
        manifest: sha256(manifest.as_bytes()),
    }
}

fn docker_manifest(config: &str, layers: &[&str]) -> String {
    let layers: Vec<String> = layers.iter().map(|l| format!("\"{l}\"")).collect();
    format!(
        r#"[{{"Config":"{config}","RepoTags":["atk/loaded:1"],"Layers":[{}]}}]"#,
        layers.join(",")
    )
}

/// Breach 4: `images load` of an archive whose entries reach the operator's
/// files through symlinks (absolute, or climbing out with `..`) is refused,
/// naming the archive and the entry, and nothing of those files reaches the
/// store; an archive's own links between its files still load.
#[test]
fn a_loaded_archive_cannot_read_host_files_through_symlinks() {
    both(
        "image_store::a_loaded_archive_cannot_read_host_files_through_symlinks",
        |_b| {
            let d = tempfile::tempdir().unwrap();
            let canary = nonce();
            let private = private_files(d.path(), &canary);
            let abs = private.dir.to_str().unwrap().to_string();
            let store_root = d.path().join("store");
            let store = ImageStore::new(&store_root);
            let config = br#"{"config":{"Env":["A=1"]}}"#;
            let harmless = tar_of(&[("hello.txt", file("hello"))]);
            let cases = [
                // A layer's directory is an absolute link to a private one.
                (
                    "absolute-dir",
                    tar_of(&[
                        (
                            "manifest.json",
                            file(docker_manifest("config.json", &["lay/layer.tar"])),
                        ),
                        ("config.json", file(config)),
                        ("lay", link(abs.clone())),
                    ]),
                    "lay/layer.tar",
                ),
                // The config's directory climbs out of the unpacked archive
                // (<store>/tmp/<load>/../../.. is the directory beside the store).
                (
                    "dotdot-dir",
                    tar_of(&[
                        (
                            "manifest.json",
                            file(docker_manifest("cfg/config.json", &["layer.tar"])),
                        ),
                        ("cfg", link("../../../private")),
                        ("layer.tar", file(&harmless)),
                    ]),
                    "cfg/config.json",
                ),
                // The manifest itself is a link to a private file.
                (
                    "manifest-link",
                    tar_of(&[("manifest.json", link(format!("{abs}/config.json")))]),
                    "manifest.json",
                ),
                // An OCI layout whose blobs are a private layout's.
                (
                    "oci-blobs",
                    tar_of(&[
                        (
                            "index.json",
                            file(format!(
                                r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{}","size":1,"annotations":{{"org.opencontainers.image.ref.name":"atk/stolen:1"}}}}]}}"#,
                                private.manifest
                            )),
                        ),
                        ("oci-layout", file(r#"{"imageLayoutVersion":"1.0.0"}"#)),
                        ("blobs", link(format!("{abs}/blobs"))),
                    ]),
                    "blobs/sha256/",
                ),
            ];
            for (what, bytes, entry) in cases {
                let archive = d.path().join(format!("{what}.tar"));
                std::fs::write(&archive, bytes).unwrap();
                let e = load(&store, &archive, None).unwrap_err();
                match &e {
                    ImageError::HostileEntry {
                        layer, entry: got, ..
                    } => {
                        assert!(got.starts_with(entry), "{what}: {e}");
                        assert!(layer.ends_with(&format!("{what}.tar")), "{what}: {e}");
                    }
                    other => panic!("{what}: not refused as hostile: {other}"),
                }
                assert!(e.to_string().contains(entry), "{what}: {e}");
            }
            // The same as a layout directory (not a tar).
            let layout = d.path().join("layout");
            std::fs::create_dir(&layout).unwrap();
            std::fs::write(
                layout.join("manifest.json"),
                docker_manifest("config.json", &["lay/layer.tar"]),
            )
            .unwrap();
            std::fs::write(layout.join("config.json"), config).unwrap();
            std::os::unix::fs::symlink(&private.dir, layout.join("lay")).unwrap();
            let e = load(&store, &layout, None).unwrap_err();
            assert!(
                matches!(&e, ImageError::HostileEntry { entry, .. } if entry == "lay/layer.tar"),
                "{e}"
            );
            assert!(store.list().is_empty(), "{:?}", store.list());
            assert!(
                !holds(&store_root, &canary),
                "the private files reached the store"
            );
            assert!(!store.has_blob(&format!("sha256:{}", sha256(&private.layer))));
            // Links between an archive's own files (older `docker save`
            // shares layers so) still load.
            let shared = tar_of(&[
                (
                    "manifest.json",
                    file(docker_manifest(
                        "config.json",
                        &["a/layer.tar", "b/layer.tar"],
                    )),
                ),
                ("config.json", file(config)),
                ("a/layer.tar", file(&harmless)),
                ("b/layer.tar", link("../a/layer.tar")),
            ]);
            let archive = d.path().join("shared.tar");
            std::fs::write(&archive, shared).unwrap();
            let loaded = load(&store, &archive, None).unwrap();
            assert_eq!(loaded.len(), 1);
            assert_eq!(loaded[0].layers, 2);
        },
    );
}

/// Store the layer `bytes` and describe an image made of it.
fn image_of(store: &ImageStore, bytes: &[u8]) -> StoredImage {
    let tmp = store.temp_path("atk").unwrap();
    std::fs::write(&tmp, bytes).unwrap();
    let digest = format!("sha256:{}", sha256(bytes));
    store.put_blob(&tmp, &digest, "atk").unwrap();
    StoredImage {
        reference: "docker.io/atk/layer:1".into(),
        manifest_digest: digest.clone(),
        layers: vec![StoredLayer {
            digest,
            media_type: "application/vnd.oci.image.layer.v1.tar".into(),
            size: bytes.len() as u64,
        }],
        config: ImageConfig::default(),
    }
}

/// Gap 2: a whiteout naming its own directory or its parent (`.wh..`,
/// `.wh...`) is refused, naming the layer and the entry, and a pull in
/// progress beside it in the store's temporary directory survives.
#[test]
fn a_whiteout_of_the_layer_or_its_parent_is_refused() {
    both(
        "image_store::a_whiteout_of_the_layer_or_its_parent_is_refused",
        |b| {
            let d = tempfile::tempdir().unwrap();
            let store = ImageStore::new(&d.path().join("store"));
            // Another pull, unpacking beside this one.
            let sibling = store.temp_path("layer-other").unwrap();
            std::fs::create_dir_all(sibling.join("etc")).unwrap();
            std::fs::write(sibling.join("etc/in-progress"), "x").unwrap();
            for name in [".wh..", ".wh...", ".wh.", "etc/.wh...", "etc/.wh.."] {
                let layer = tar_of(&[("etc/keep", file("k")), (name, file(""))]);
                let image = image_of(&store, &layer);
                let digest = image.layers[0].digest.clone();
                let e = store.layer_dirs(&image, owner_base(b)).unwrap_err();
                match &e {
                    ImageError::HostileEntry { layer, entry, .. } => {
                        assert_eq!((layer.as_str(), entry.as_str()), (digest.as_str(), name));
                    }
                    other => panic!("{name}: not refused as hostile: {other}"),
                }
                assert!(e.to_string().contains(name), "{e}");
                assert!(
                    sibling.join("etc/in-progress").is_file(),
                    "{name}: a pull in progress was destroyed"
                );
                let unpacked = std::fs::read_dir(d.path().join("store/layers"))
                    .map(|rd| rd.count())
                    .unwrap_or(0);
                assert_eq!(unpacked, 0, "{name}: a refused layer was kept");
            }
        },
    );
}

/// Any set-user-id or set-group-id bit under `dir`, as `path mode` lines.
fn setid_files(dir: &Path) -> Vec<String> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| !e.path_is_symlink())
        .filter_map(|e| {
            let mode = e.metadata().ok()?.mode() & 0o7777;
            (mode & 0o6000 != 0).then(|| format!("{} {mode:o}", e.path().display()))
        })
        .collect()
}

/// Gap 1, image layers: set-id bits of a layer's files and directories do
/// not reach the unpacked layer in the host's cache (the sticky bit does),
/// and the store's directories are 0700.
#[test]
fn set_id_bits_of_image_layers_do_not_reach_the_host_cache() {
    both(
        "image_store::set_id_bits_of_image_layers_do_not_reach_the_host_cache",
        |b| {
            let d = tempfile::tempdir().unwrap();
            let root = d.path().join("store");
            let store = ImageStore::new(&root);
            let layer = tar_of(&[
                ("usr/", E::Dir(0o755)),
                ("usr/bin/", E::Dir(0o755)),
                ("usr/bin/su", E::File(b"#!/bin/sh\nid\n".to_vec(), 0o4755)),
                ("usr/bin/wall", E::File(b"#!/bin/sh\n".to_vec(), 0o2755)),
                ("usr/bin/both", E::File(b"#!/bin/sh\n".to_vec(), 0o6711)),
                ("srv/", E::Dir(0o755)),
                ("srv/shared/", E::Dir(0o2775)),
                ("tmp/", E::Dir(0o1777)),
            ]);
            let mut image = image_of(&store, &layer);
            image.reference = format!("docker.io/atk/setid:{}", std::process::id());
            store.register(&image).unwrap();
            let dirs = store.layer_dirs(&image, owner_base(b)).unwrap();
            let top = &dirs[0];
            assert!(top.join("usr/bin/su").is_file());
            assert_eq!(setid_files(top), Vec::<String>::new());
            assert_eq!(mode_of(&top.join("usr/bin/su")), 0o755);
            assert_eq!(mode_of(&top.join("usr/bin/both")), 0o711);
            assert_eq!(mode_of(&top.join("srv/shared")), 0o775);
            assert_eq!(mode_of(&top.join("tmp")), 0o1777, "the sticky bit stays");
            for dir in ["", "blobs", "blobs/sha256", "layers", "refs", "tmp"] {
                let p = root.join(dir);
                assert_eq!(mode_of(&p), 0o700, "{} is not private", p.display());
            }
        },
    );
}

/// Gap 1, build steps: a step that makes a set-id program and directory
/// leaves neither bit in the step cache nor in the built image, and the
/// cache's directories are 0700.
#[test]
fn a_build_step_cannot_leave_set_id_programs_in_the_step_cache() {
    both(
        "image_store::a_build_step_cannot_leave_set_id_programs_in_the_step_cache",
        |b| {
            let tag = nonce().to_lowercase();
            let setup = format!(
                "set -e\ncp /bin/true /opt/suid-{tag}\nchmod u+s,g+s /opt/suid-{tag}\n\
                 mkdir -p /srv/sgid-{tag}\nchmod 2775 /srv/sgid-{tag}\n\
                 stat -c %a /opt/suid-{tag} /srv/sgid-{tag}\n"
            );
            let t = task(&format!("atk-setid-{tag}"), "root", &setup);
            let image = b.prepare(&t).unwrap();
            let cache = std::env::temp_dir()
                .join(format!("endless-attacks-{}", host_uid()))
                .join("local");
            let keys: Vec<String> = build_record(&image).into_iter().map(|s| s.key).collect();
            assert!(!keys.is_empty());
            let mut places: Vec<PathBuf> =
                keys.iter().map(|k| cache.join("steps").join(k)).collect();
            places.push(image.path.clone());
            let mut seen = 0;
            for place in &places {
                for e in walkdir::WalkDir::new(place).into_iter().flatten() {
                    let name = e.file_name().to_string_lossy();
                    if name == format!("suid-{tag}") || name == format!("sgid-{tag}") {
                        seen += 1;
                    }
                }
                assert_eq!(setid_files(place), Vec::<String>::new());
            }
            // In the step's layer; the image stacks it (copies nothing).
            assert!(
                seen >= 2,
                "the step's files were not found in the cache ({seen})"
            );
            for dir in [cache.clone(), cache.join("steps"), cache.join("images")] {
                assert_eq!(mode_of(&dir), 0o700, "{} is not private", dir.display());
            }
            // This run's image and the step layers only it has (from the
            // step that named the nonce on) go: no other build uses them.
            let unique = places
                .iter()
                .position(|p| {
                    walkdir::WalkDir::new(p)
                        .into_iter()
                        .flatten()
                        .any(|e| e.file_name().to_string_lossy() == format!("suid-{tag}"))
                })
                .unwrap();
            for place in &places[unique..] {
                let _ = std::fs::remove_dir_all(place);
            }
        },
    );
}
