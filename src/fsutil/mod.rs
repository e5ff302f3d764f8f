//! Small filesystem helpers: atomic writes and safe reads bounded to a root.

mod atomic;
mod safe_read;

pub use atomic::{replace_dir_atomic, write_atomic, AtomicDir};
pub use safe_read::{read_tree_bounded, ReadLimits, SafeReadError};
