//! Host files: atomic writes of files and whole directories, private cache
//! directories, and the one way endless touches files under a directory
//! it does not fully trust.
//!
//! # Untrusted trees
//!
//! A tree is untrusted when a task, an agent, a build step or another user
//! may have shaped what lies in it: image and step directories (what build
//! steps left, unpacked image layers, loaded archives), verifier
//! environments, task bundles being imported, job directories of other
//! tools (Harbor), and the workspaces of other nodes being merged. Endless
//! often runs as host root, so a symbolic link planted there would turn a
//! read, write, `chown`, `chmod` or rename of endless into one on any host
//! file. Every such operation starts from the tree's directory descriptor
//! (the path of the tree itself is the caller's and is followed as given)
//! and resolves names below it in one of three ways:
//!
//! | operation | API | resolution | why |
//! |---|---|---|---|
//! | read a file an archive or index names | [`open_dir`], [`open_beneath`] | `openat2(RESOLVE_BENEATH \| RESOLVE_NO_MAGICLINKS)`: links followed while they stay beneath | image archives link shared layers to each other |
//! | read, write, `chown`, `chmod`, rename, remove, hard-link twins ([`link_identical`]) | [`UntrustedDir`] | `openat2(RESOLVE_BENEATH \| RESOLVE_NO_SYMLINKS)`, `fchown`/`fchmod` on the opened file, `renameat` from an `O_EXCL` temporary | a link in a tree endless writes into is never one endless made |
//! | read a whole bundle or job directory | [`dirfd`], used by `crate::task::BundleDir` | one name at a time with `openat(O_NOFOLLOW)`, links read with `readlinkat` and followed only while they stay inside | bundles link files to each other; a swap mid-read is refused |
//!
//! Without `openat2` (before Linux 5.6, or a seccomp filter refusing it)
//! the first two fall back to a component-by-component `O_NOFOLLOW` walk
//! that follows no link at all. Path-based `std::fs` calls on these trees
//! are allowed only with a `// trusted: why` comment (a fresh temporary of
//! our own, a tree no one else can write while we walk it); the test
//! `tests/untrusted_fs.rs` finds those that lack one.
//!
//! This module uses nothing of the crate.

mod atomic;
mod beneath;
pub mod dirfd;
mod shared_files;
mod untrusted_dir;

pub use atomic::{replace_dir_atomic, write_atomic, AtomicDir};
pub use beneath::{
    create_private_dir, is_escape, open_beneath, open_dir, without_setid, SETID_BITS,
};
pub use dirfd::EntryKind;
pub use shared_files::{link_identical, Shared};
pub use untrusted_dir::UntrustedDir;
