//! Small filesystem helpers: atomic writes of files and whole directories.

mod atomic;

pub use atomic::{replace_dir_atomic, write_atomic, AtomicDir};
