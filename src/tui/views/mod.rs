//! The views (one per top tab) and the help overlay.

pub mod detail;
pub mod episodes;
pub mod help;
pub mod inspector;
pub mod jobs;
pub mod live;
pub mod tasks;
pub mod training;
