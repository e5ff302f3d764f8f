//! Small filesystem helpers: atomic writes of files and whole directories,
//! opening untrusted paths beneath a directory, changing files in trees a
//! task or another user may have shaped, private cache directories.

mod atomic;
mod beneath;
mod untrusted_dir;

pub use atomic::{replace_dir_atomic, write_atomic, AtomicDir};
pub use beneath::{
    create_private_dir, is_escape, open_beneath, open_dir, without_setid, SETID_BITS,
};
pub use untrusted_dir::{EntryKind, UntrustedDir};
