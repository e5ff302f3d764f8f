//! The views (one per top tab) and the help overlay.

pub mod detail;
mod detail_audit;
mod detail_env;
pub mod episodes;
pub mod episodes_order;
pub mod help;
pub mod help_groups;
pub mod inspector;
pub mod jobs;
pub mod live;
pub mod repair;
pub mod tasks;
pub mod training;
