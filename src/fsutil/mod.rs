//! Small filesystem helpers: atomic writes of files and whole directories,
//! opening untrusted paths beneath a directory, private cache directories.

mod atomic;
mod beneath;

pub use atomic::{replace_dir_atomic, write_atomic, AtomicDir};
pub use beneath::{
    create_private_dir, is_escape, open_beneath, open_dir, without_setid, SETID_BITS,
};
