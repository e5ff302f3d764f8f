//! The sealed verifier environment of a task whose tests need more than the
//! built-in runtime has (`[verifier] python`, `packages`, `apt`; see
//! [`VerifierEnvSpec`]).
//!
//! It is built once per task image and spec, as one more build step on top
//! of the task's own image (so it is cached like build steps, and has the
//! network as build steps have): the step installs the Debian packages, finds
//! the image's Python (or installs Debian's), `pip install --target`s the
//! pinned packages from PyPI, and copies into one directory, at their
//! paths, what that interpreter needs (its binary, its standard library
//! and site directories, the shared libraries it and every extension
//! module load, the image's dynamic loader), with absolute symbolic links
//! made relative or removed. The directory then moves into the task image's directory, under
//! `verifier-envs/<name>`. The agent's sessions never see it: only the
//! verifier, in its private mount namespace, has those directories
//! attached, read-only, at [`INSIDE`] (inside its private read-only tmpfs,
//! see `sandbox/verifier/plan.rs`), outside the episode's overlay.
//!
//! The verifier starts that interpreter as it starts the runtime's: through
//! the environment's execute-only loader copy with `--inhibit-cache` and the
//! environment's own library directories, `-I -S -B`, with only the
//! environment's site directory added, so no file the agent can change takes
//! part (see `verify/run.rs`). Such runs are always cold (the pre-warmed
//! verifier is the built-in runtime's).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::fsutil::{EntryKind, UntrustedDir};
use crate::images::ProgressFn;
use crate::sandbox::image::Image;
use crate::sandbox::isolate::layout;
use crate::sandbox::isolate::layout::VERIFIER_ENVS as IMAGE_DIR;
use crate::sandbox::local::{HostIdentity, LocalBackend};
use crate::sandbox::verifier::plan::ENVS_INSIDE as INSIDE;
use crate::sandbox::SandboxError;
use crate::task::envdef::{EnvDefinition, Step};
use crate::task::formats::VerifierEnvSpec;
use crate::task::Task;

/// Where the build step writes the environment (in the derived image).
const BUILD_OUT: &str = "/opt/endless-verifier-env";

/// The build step's script, in the derived build's context.
const SCRIPT: &str = "endless-verifier-env.sh";

/// The interpreter copy inside an environment.
const PYTHON: &str = "usr/local/bin/endless-python3";

/// The name of the environment of `spec` (a directory under [`INSIDE`]):
/// a digest of the spec and of the script that builds it (a new script
/// builds new environments).
pub fn env_name(spec: &VerifierEnvSpec) -> String {
    let mut h = Sha256::new();
    h.update(b"endless-verifier-env-v1\0");
    h.update(spec.key_text().as_bytes());
    h.update(b"\0");
    h.update(build_script(spec).as_bytes());
    hex::encode(&h.finalize()[..12])
}

/// The argv prefix that starts the Python of environment `spec` inside a
/// session (its loader, library directories and interpreter).
pub fn env_python(spec: &VerifierEnvSpec) -> Vec<String> {
    let base = format!("{INSIDE}/{}", env_name(spec));
    let triple = format!("{}-linux-gnu", std::env::consts::ARCH);
    let libs = [
        format!("{base}/usr/local/lib"),
        format!("{base}/usr/lib/{triple}"),
        format!("{base}/usr/lib"),
        format!("{base}/lib/{triple}"),
        format!("{base}/lib"),
        format!("{base}/lib64"),
    ];
    vec![
        format!("{base}/ld.so"),
        "--inhibit-cache".into(),
        "--library-path".into(),
        libs.join(":"),
        format!("{base}/{PYTHON}"),
    ]
}

/// The site directory of environment `spec` inside a session.
pub fn env_site(spec: &VerifierEnvSpec) -> String {
    format!("{INSIDE}/{}/site", env_name(spec))
}

/// The build step's script for `spec` (bash, run as root with network).
fn build_script(spec: &VerifierEnvSpec) -> String {
    let q = super::steps::sq;
    let packages: Vec<String> = spec.packages.iter().map(|p| q(&p.requirement())).collect();
    let apt: Vec<String> = spec.apt.iter().map(|a| q(a)).collect();
    // Searched besides PyPI (`uvx --index`).
    let indexes: String = spec
        .indexes
        .iter()
        .map(|u| format!(" --extra-index-url {}", q(u)))
        .collect();
    format!(
        r#"#!/bin/bash
# Written by endless: builds a task's sealed verifier environment.
set -euo pipefail
OUT={out}
ASKED={asked}
APT=({apt})
PACKAGES=({packages})
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
rm -rf "$OUT"
mkdir -p "$OUT/site"
usable() {{ [ ${{#PACKAGES[@]}} -eq 0 ] || "$1" -m pip --version >/dev/null 2>&1; }}
pick() {{
  for p in ${{ASKED:+python$ASKED}} python3 python /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && usable "$(command -v "$p")"; then command -v "$p"; return 0; fi
  done
  return 1
}}
PY=$(pick || true)
EXTRA=()
if [ -z "$PY" ]; then EXTRA=(python3 python3-pip); fi
if [ ${{#APT[@]}} -gt 0 ] || [ ${{#EXTRA[@]}} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "endless: the verifier environment needs apt-get to install ${{APT[*]}} ${{EXTRA[*]}}" >&2
    exit 1
  fi
  apt-get update
  apt-get install -y --no-install-recommends "${{APT[@]}}" "${{EXTRA[@]}}"
fi
PY=$(pick || true)
if [ -z "$PY" ]; then
  echo "endless: no Python with pip in the image, and Debian's could not be installed" >&2
  exit 1
fi
GOT=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
echo "$GOT" > "$OUT/python-version"
if [ -n "$ASKED" ] && [ "$ASKED" != "$GOT" ]; then
  echo "the tests asked for Python $ASKED; the verifier environment has Python $GOT (the image's, the nearest available)" > "$OUT/note"
fi
if [ ${{#PACKAGES[@]}} -gt 0 ]; then
  HELP=$("$PY" -m pip install --help 2>/dev/null || true)
  BSP=()
  if grep -q -- --break-system-packages <<<"$HELP"; then BSP=(--break-system-packages); fi
  # Builds from source in an isolated environment with setuptools from
  # PyPI: without it, an older pip builds a project lacking pyproject.toml
  # with whatever `setuptools` it can find, and a namespace-only
  # site-packages/setuptools directory left in the image passes for one
  # (`cannot import name 'setup' from 'setuptools'`).
  PEP517=()
  if grep -q -- --use-pep517 <<<"$HELP"; then PEP517=(--use-pep517); fi
  "$PY" -m pip install "${{BSP[@]}}" "${{PEP517[@]}}"{indexes} --no-warn-script-location --target "$OUT/site" "${{PACKAGES[@]}}"
fi
# The interpreter, its standard library and site directories, at their paths.
mkdir -p "$OUT/usr/local/bin"
cp "$(readlink -f "$PY")" "$OUT/{python}"
"$PY" -I -c 'import os, sys; print("\n".join(p for p in sys.path if p.startswith("/") and os.path.isdir(p)))' |
while IFS= read -r d; do
  if [ -e "$OUT$d" ]; then continue; fi
  mkdir -p "$OUT$(dirname "$d")"
  cp -dR --preserve=mode,timestamps "$d" "$OUT$d"
done
# Absolute links would lead out of the environment, into the agent's files.
find "$OUT" -type l -lname '/*' -print0 | while IFS= read -r -d '' l; do
  t=$(readlink "$l")
  if [ -e "$OUT$t" ]; then
    ln -sfn "$(realpath -ms --relative-to="$(dirname "$l")" "$OUT$t")" "$l"
  else
    rm -f "$l"
  fi
done
# The shared libraries the interpreter and every extension module load.
{{ readlink -f "$PY"; find "$OUT" -type f -name '*.so*'; }} |
while IFS= read -r f; do ldd "$f" 2>/dev/null || true; done |
awk '$2 == "=>" && $3 ~ /^\// {{ print $3 }} $1 ~ /^\// {{ print $1 }}' | sort -u |
while IFS= read -r lib; do
  case "$lib" in "$OUT"/*) continue ;; esac
  mkdir -p "$OUT$(dirname "$lib")"
  cp -L "$lib" "$OUT$lib"
done
LD=""
for l in /lib64/ld-linux-x86-64.so.2 /lib/ld-linux-aarch64.so.1; do
  if [ -e "$l" ]; then LD=$(readlink -f "$l"); break; fi
done
if [ -z "$LD" ]; then echo "endless: no dynamic loader found in the image" >&2; exit 1; fi
cp "$LD" "$OUT/ld.so"
echo "endless: verifier environment ready (Python $GOT, $(du -sh "$OUT" | cut -f1))"
"#,
        out = BUILD_OUT,
        asked = q(spec.python.as_deref().unwrap_or("")),
        apt = apt.join(" "),
        packages = packages.join(" "),
        python = PYTHON,
    )
}

/// The task and definition whose image is `task`'s plus the build step of
/// `spec`'s environment (as root).
fn derived(task: &Task, def: &EnvDefinition, spec: &VerifierEnvSpec) -> (Task, EnvDefinition) {
    let mut task = task.clone();
    task.meta.verifier.python = None;
    task.meta.verifier.packages.clear();
    task.meta.verifier.apt.clear();
    task.environment
        .insert(SCRIPT, build_script(spec).into_bytes(), true);
    let mut def = def.clone();
    def.lines.resize(def.steps.len(), 0);
    def.steps.push(Step::User("root".into()));
    def.steps.push(Step::Script(SCRIPT.into()));
    def.lines.extend([0, 0]);
    (task, def)
}

impl LocalBackend {
    /// Make sure `image` (of `task`, built from `def`) holds the verifier
    /// environment `task` asks for, building it if needed (see the module
    /// docs); whether it was built now. Nothing to do for a task that asks
    /// for none.
    pub(super) fn ensure_verifier_env(
        &self,
        task: &Task,
        def: &EnvDefinition,
        image: &Image,
        progress: ProgressFn<'_>,
    ) -> Result<bool, SandboxError> {
        let spec = VerifierEnvSpec::from_section(&task.meta.verifier, Path::new("task.toml"))
            .map_err(|e| SandboxError::Start(e.to_string()))?;
        if spec.is_empty() {
            return Ok(false);
        }
        let envs = image.path.join(IMAGE_DIR);
        let name = env_name(&spec);
        let dest = envs.join(&name);
        if is_complete_at(&image.path, &name) {
            return Ok(false);
        }
        // trusted: the image's own directory of environments, made by endless
        std::fs::create_dir_all(&envs).map_err(SandboxError::io("create directory", &envs))?;
        // trusted: the image's own directory of environments, made by endless
        std::fs::set_permissions(&envs, std::fs::Permissions::from_mode(0o755))
            .map_err(SandboxError::io("chmod directory", &envs))?;
        // Beside the image (the store's directory is private already; a lock
        // in `envs` would make it private too, out of the verifier's reach).
        let _lock = super::stepcache::lock(
            &self
                .layout
                .images()
                .join(format!("{}.verifier-env-{name}.lock", image.hash)),
        )?;
        if is_complete_at(&image.path, &name) {
            return Ok(false);
        }
        let (dtask, ddef) = derived(task, def, &spec);
        let built = self.build_image_from(&dtask, &ddef, progress)?;
        // What the step left is the task's (its `cp` may be the task's own):
        // reached beneath the derived image's root, never through a link.
        let root = built.path.join("root");
        let out_rel = Path::new(BUILD_OUT.trim_start_matches('/'));
        let shown = root.join(out_rel);
        let incomplete = || {
            SandboxError::Start(format!(
                "the verifier environment's build left no complete environment in {}",
                shown.display()
            ))
        };
        let root_dir = UntrustedDir::open(&root).map_err(SandboxError::io("open", &root))?;
        let out = root_dir.subdir(out_rel).map_err(|_| incomplete())?;
        if !is_complete(&out) {
            return Err(incomplete());
        }
        self.seal_loader(&out)?;
        drop(out);
        if dest.exists() {
            layout::remove_tree(&dest);
        }
        let envs_dir = UntrustedDir::open(&envs).map_err(SandboxError::io("open", &envs))?;
        root_dir
            .rename(out_rel, &envs_dir, &name)
            .map_err(SandboxError::io("store the verifier environment", &dest))?;
        // The derived image served its purpose (its step stays cached).
        layout::remove_tree(&built.path);
        self.share_verifier_env(&image.hash, &name);
        Ok(true)
    }

    /// Make the environment's loader execute-only and owned as the
    /// built-in runtime's is, so that the verifier is not dumpable. The
    /// loader is changed through its descriptor, and only when it is a
    /// regular file of the environment (a link is refused, never followed).
    fn seal_loader(&self, env: &UntrustedDir) -> Result<(), SandboxError> {
        let owner = match self.identity {
            HostIdentity::Mapped(_) => (0, 0),
            HostIdentity::Rootless(uid, gid) => (uid, gid),
        };
        let ld = Path::new("ld.so");
        env.set_owner_and_mode(ld, owner.0, owner.1, 0o111)
            .map_err(SandboxError::io(
                "seal the loader copy",
                &env.path().join(ld),
            ))
    }
}

/// Whether `env` is a whole environment: its loader and interpreter are
/// regular files and its site directory a directory, none of them a link.
fn is_complete(env: &UntrustedDir) -> bool {
    let is = |rel: &str, kind: EntryKind| env.kind(Path::new(rel)).ok().flatten() == Some(kind);
    is("ld.so", EntryKind::File) && is(PYTHON, EntryKind::File) && is("site", EntryKind::Dir)
}

/// Whether the image at `image_dir` holds the whole environment `name`.
pub(super) fn is_complete_at(image_dir: &Path, name: &str) -> bool {
    UntrustedDir::open(&image_dir.join(IMAGE_DIR))
        .and_then(|envs| envs.subdir(Path::new(name)))
        .is_ok_and(|env| is_complete(&env))
}

/// The longest note an environment may record.
const MAX_NOTE_BYTES: u64 = 4096;

/// The note an environment recorded (its Python differs from the asked
/// one), for the image at `image_dir`. The note is the build step's
/// output: it is read only when it is a short regular file of the
/// environment, never through a link.
pub fn env_note(image_dir: &Path, spec: &VerifierEnvSpec) -> Option<String> {
    let env = UntrustedDir::open(&env_dir(image_dir, spec)).ok()?;
    let bytes = env.read_regular(Path::new("note"), MAX_NOTE_BYTES).ok()?;
    Some(String::from_utf8_lossy(&bytes).trim().to_string()).filter(|s| !s.is_empty())
}

/// Where the environment of `spec` lives on the host, for the image at
/// `image_dir`.
pub fn env_dir(image_dir: &Path, spec: &VerifierEnvSpec) -> PathBuf {
    image_dir.join(IMAGE_DIR).join(env_name(spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::VerifierSection;

    fn spec(packages: &[&str]) -> VerifierEnvSpec {
        let v = VerifierSection {
            python: Some("3.13".into()),
            packages: packages.iter().map(|s| s.to_string()).collect(),
            apt: vec!["jq".into()],
            ..VerifierSection::default()
        };
        VerifierEnvSpec::from_section(&v, Path::new("task.toml")).unwrap()
    }

    #[test]
    fn names_follow_the_spec_and_the_argv_stays_inside_the_environment() {
        let a = spec(&["numpy==2.3.3", "pytest==8.4.1"]);
        let b = spec(&["numpy==2.3.2", "pytest==8.4.1"]);
        assert_ne!(env_name(&a), env_name(&b));
        assert_eq!(env_name(&a), env_name(&a.clone()));
        let base = format!("{INSIDE}/{}", env_name(&a));
        let argv = env_python(&a);
        assert_eq!(argv[0], format!("{base}/ld.so"));
        assert_eq!(argv[1], "--inhibit-cache");
        assert!(argv[3].split(':').all(|d| d.starts_with(&base)), "{argv:?}");
        assert_eq!(argv[4], format!("{base}/{PYTHON}"));
        assert_eq!(env_site(&a), format!("{base}/site"));
    }

    #[test]
    fn environments_appear_inside_the_verifiers_private_directory() {
        assert_eq!(
            INSIDE,
            format!("{}/envs", crate::sandbox::local::EXCHANGE_INSIDE)
        );
    }

    #[test]
    fn the_build_script_quotes_what_it_installs() {
        let s = build_script(&spec(&["numpy==2.3.3", "pytest==8.4.1"]));
        assert!(
            s.contains("PACKAGES=('numpy==2.3.3' 'pytest==8.4.1')"),
            "{s}"
        );
        assert!(s.contains("APT=('jq')"), "{s}");
        assert!(s.contains("ASKED='3.13'"), "{s}");
        assert!(s.contains("--target \"$OUT/site\""), "{s}");
        assert!(!s.contains("--extra-index-url"), "{s}");
        let mut with_index = spec(&["torch==2.7.0"]);
        with_index.indexes = vec!["https://download.pytorch.org/whl/cpu".into()];
        let s = build_script(&with_index);
        assert!(
            s.contains(" --extra-index-url 'https://download.pytorch.org/whl/cpu' "),
            "{s}"
        );
    }
}
