//! Who owns, on the host, what a build step leaves (issue 48): the step
//! layers are the one place sandbox files reach the host's disk. As root,
//! and for an operator with a subordinate range, every inside id, root's
//! included, is an id of the unprivileged range: never the operator's own
//! (seen from the owner namespace the operator's id is 0, as host root's is
//! from the host), nor any other host account's; a set-id bit a step set
//! is stripped either way. Without a range, only root exists inside, and
//! it is the operator.

use std::os::unix::fs::MetadataExt;

use endless::sandbox::local::HostIdentity;

#[allow(unused_imports)]
use super::*;

/// Files named `name` under `dir` (links not followed).
fn find(dir: &Path, name: &str) -> Vec<std::fs::Metadata> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_name() == name)
        .filter_map(|e| e.path().symlink_metadata().ok())
        .collect()
}

#[test]
fn files_a_build_step_makes_are_owned_outside_by_the_range() {
    both(
        "range_owners::files_a_build_step_makes_are_owned_outside_by_the_range",
        |b| {
            let nonce = format!("{}-{}", std::process::id(), host_uid());
            let (by_root, by_user) = (format!("root-{nonce}"), format!("user-{nonce}"));
            let mapped = match b.identity() {
                HostIdentity::Mapped(m) => Some(m),
                HostIdentity::Rootless(..) => None,
            };
            let setup = match mapped {
                Some(_) => format!(
                    "mkdir -p /srv/o && echo x > /srv/o/{by_root} && echo y > /srv/o/{by_user} \
                     && chown 1000:1000 /srv/o/{by_user} && chmod 6755 /srv/o/{by_user}\n"
                ),
                None => format!("mkdir -p /srv/o && echo x > /srv/o/{by_root}\n"),
            };
            let t = task(&format!("atk-owners-{nonce}"), "root", &setup);
            let image = b.prepare(&t).unwrap();
            let cache = std::env::temp_dir().join(format!("endless-attacks-{}", host_uid()));
            let root_files = find(&cache.join("local"), &by_root);
            assert!(!root_files.is_empty(), "no step layer holds {by_root}");
            match mapped {
                Some(m) => {
                    for meta in &root_files {
                        assert_eq!(meta.uid(), m.host(0), "{by_root} of a root build step");
                        assert_ne!(meta.uid(), uid(), "{by_root} is the operator's own");
                    }
                    let user_files = find(&cache.join("local"), &by_user);
                    assert!(!user_files.is_empty(), "no step layer holds {by_user}");
                    for meta in &user_files {
                        assert_eq!(meta.uid(), m.host(1000), "{by_user}");
                        assert_eq!(meta.mode() & 0o6000, 0, "set-id bits left on {by_user}");
                    }
                }
                None => {
                    for meta in &root_files {
                        assert_eq!(meta.uid(), uid(), "{by_root} of a rootless build step");
                    }
                }
            }
            let mut s = b.start(&image, &SessionOptions::default()).unwrap();
            let out = run(&mut s, &format!("stat -c %u /srv/o/{by_root}"));
            assert_eq!(out.trim(), "0", "{out}");
            if mapped.is_some() {
                let out = run(&mut s, &format!("stat -c %u:%a /srv/o/{by_user}"));
                assert_eq!(out.trim(), "1000:755", "{out}");
            }
            s.close();
        },
    );
}
