//! What stage 1 samples from: task categories, the six complexity levels and
//! scenarios (who asks and why). Built-in lists live in `assets/generate/`;
//! a workspace extends them with files of the same shape under
//! `<workspace>/generate/`.

use std::path::Path;

use rand::seq::IndexedRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::task::text::{parse_toml, read_text};
use crate::task::BundleError;

/// One complexity level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Level {
    /// The level number, 1 (single command) to 6; becomes `[task] complexity`.
    pub level: u8,
    /// Short name shown to the model (e.g. `single command`).
    pub name: String,
    /// What a task of this level takes, shown to the model.
    pub description: String,
}

/// The sampling space.
#[derive(Debug, Clone, PartialEq)]
pub struct Taxonomy {
    /// Task categories: built-in plus the workspace's `categories.toml`.
    pub categories: Vec<String>,
    /// Complexity levels: the workspace's `complexity.toml` replaces the built-in ones.
    pub levels: Vec<Level>,
    /// Scenarios (who asks and why): built-in plus the workspace's `scenarios.toml`.
    pub scenarios: Vec<String>,
}

/// One sampled point: what a candidate is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// The task category.
    pub category: String,
    /// The complexity level.
    pub level: Level,
    /// The scenario (who asks and why).
    pub scenario: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Categories {
    categories: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Scenarios {
    scenarios: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Levels {
    levels: Vec<Level>,
}

const CATEGORIES: &str = include_str!("../../assets/generate/categories.toml");
const SCENARIOS: &str = include_str!("../../assets/generate/scenarios.toml");
const COMPLEXITY: &str = include_str!("../../assets/generate/complexity.toml");

impl Taxonomy {
    /// The built-in lists extended by `<workspace>/generate/*.toml` if present.
    pub fn load(workspace: Option<&Path>) -> Result<Taxonomy, BundleError> {
        let builtin = Path::new("assets/generate");
        let mut categories =
            parse_toml::<Categories>(&builtin.join("categories.toml"), CATEGORIES)?.categories;
        let mut scenarios =
            parse_toml::<Scenarios>(&builtin.join("scenarios.toml"), SCENARIOS)?.scenarios;
        let mut levels = parse_toml::<Levels>(&builtin.join("complexity.toml"), COMPLEXITY)?.levels;
        if let Some(ws) = workspace {
            let dir = ws.join("generate");
            let extra = |name: &str| -> Result<Option<String>, BundleError> {
                let p = dir.join(name);
                if p.is_file() {
                    read_text(&p).map(Some)
                } else {
                    Ok(None)
                }
            };
            if let Some(t) = extra("categories.toml")? {
                categories
                    .extend(parse_toml::<Categories>(&dir.join("categories.toml"), &t)?.categories);
            }
            if let Some(t) = extra("scenarios.toml")? {
                scenarios
                    .extend(parse_toml::<Scenarios>(&dir.join("scenarios.toml"), &t)?.scenarios);
            }
            if let Some(t) = extra("complexity.toml")? {
                levels = parse_toml::<Levels>(&dir.join("complexity.toml"), &t)?.levels;
            }
        }
        categories.dedup();
        scenarios.dedup();
        if categories.is_empty() || scenarios.is_empty() || levels.is_empty() {
            return Err(BundleError::invalid(
                "generate",
                None,
                "categories, scenarios and complexity levels must each have at least one entry",
            ));
        }
        Ok(Taxonomy {
            categories,
            levels,
            scenarios,
        })
    }

    /// Sample category x complexity x scenario uniformly.
    pub fn sample(&self, rng: &mut impl Rng) -> Spec {
        Spec {
            category: self.categories.choose(rng).cloned().unwrap_or_default(),
            level: self
                .levels
                .choose(rng)
                .cloned()
                .unwrap_or_else(|| self.levels[0].clone()),
            scenario: self.scenarios.choose(rng).cloned().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn builtin_lists_are_rich_and_extensible() {
        let t = Taxonomy::load(None).unwrap();
        assert!(t.categories.len() >= 61, "{}", t.categories.len());
        assert!(t.scenarios.len() >= 54, "{}", t.scenarios.len());
        assert_eq!(t.levels.len(), 6);
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("generate")).unwrap();
        std::fs::write(
            ws.path().join("generate/categories.toml"),
            "categories = [\"kubernetes manifests (offline)\"]\n",
        )
        .unwrap();
        let t2 = Taxonomy::load(Some(ws.path())).unwrap();
        assert_eq!(t2.categories.len(), t.categories.len() + 1);
        std::fs::write(
            ws.path().join("generate/scenarios.toml"),
            "scenario = [\"typo\"]\n",
        )
        .unwrap();
        let err = Taxonomy::load(Some(ws.path())).unwrap_err().to_string();
        assert!(
            err.contains("scenarios.toml") && err.contains("scenario"),
            "{err}"
        );
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let a = t.sample(&mut rng);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        assert_eq!(a, t.sample(&mut rng));
    }
}
