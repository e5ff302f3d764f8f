//! stub

use crate::procgen::Def;

pub(crate) const FAMILIES: &[Def] = &[];
