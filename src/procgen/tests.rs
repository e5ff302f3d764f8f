//! Unit tests of the family registry and the generated bundles.

use super::*;

#[test]
fn smoke() {
    assert!(!families().is_empty());
}
