//! Which tasks of the workspace build on which base image (for `endless
//! images list` and the TUI), with the `[images]` aliases applied.

use std::collections::BTreeMap;

use anyhow::Result;

use super::Context;
use crate::images::Resolver;
use crate::task::envdef::parse_task;

/// Canonical image reference -> ids of the workspace's tasks that build on
/// it (tasks on the host base, or whose definition does not parse, are left out).
pub fn image_users(ctx: &Context) -> Result<BTreeMap<String, Vec<String>>> {
    let ws = ctx.workspace()?;
    let resolver = Resolver::new(ctx.config.images.clone());
    let mut users: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for id in ws.task_ids()? {
        let Ok(task) = ws.load_task(&id) else {
            continue;
        };
        let Ok(def) = parse_task(&task) else {
            continue;
        };
        if let Some(image) = resolver.target_of(def.base.as_deref()) {
            users.entry(image).or_default().push(id);
        }
    }
    Ok(users)
}
