//! The task families, grouped by theme. Each group exports `FAMILIES`.

use super::spec::Def;

mod archive;
mod config;
mod files;
mod git;
mod logs;
mod ml;
mod scripting;
mod sql;
mod stats;
mod tables;
mod text;

/// Every group, in a stable order.
pub(crate) const ALL: &[&[Def]] = &[
    files::FAMILIES,
    text::FAMILIES,
    logs::FAMILIES,
    tables::FAMILIES,
    sql::FAMILIES,
    git::FAMILIES,
    archive::FAMILIES,
    config::FAMILIES,
    scripting::FAMILIES,
    stats::FAMILIES,
    ml::FAMILIES,
];
