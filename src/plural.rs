//! Counted nouns for messages: `count(1, "task")` is "1 task",
//! `count(2, "task")` "2 tasks", so that no message says "1 tasks".

/// `n` and `noun`, the noun in the plural unless `n` is 1: `s` added, `es`
/// after s, x, z, ch and sh, and a `y` after a consonant made `ies`.
pub fn count(n: usize, noun: &str) -> String {
    format!("{n} {}", noun_for(n, noun))
}

/// `noun` as it goes with the number `n` (the noun alone, for messages
/// that put words between the number and the noun).
pub fn noun_for(n: usize, noun: &str) -> String {
    if n == 1 {
        return noun.to_string();
    }
    let consonant_y = noun.ends_with('y')
        && noun
            .chars()
            .rev()
            .nth(1)
            .is_some_and(|c| !"aeiou".contains(c));
    if consonant_y {
        format!("{}ies", &noun[..noun.len() - 1])
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|e| noun.ends_with(e))
    {
        format!("{noun}es")
    } else {
        format!("{noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::{count, noun_for};

    #[test]
    fn one_is_singular_and_every_other_number_plural() {
        assert_eq!(count(1, "task"), "1 task");
        assert_eq!(count(0, "task"), "0 tasks");
        assert_eq!(count(2, "episode"), "2 episodes");
        assert_eq!(count(3, "family"), "3 families");
        assert_eq!(count(1, "family"), "1 family");
        assert_eq!(count(2, "key"), "2 keys");
        assert_eq!(count(2, "match"), "2 matches");
        assert_eq!(count(2, "pass"), "2 passes");
        assert_eq!(noun_for(1, "run"), "run");
        assert_eq!(noun_for(7, "run"), "runs");
    }
}
