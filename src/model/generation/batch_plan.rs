//! Which prompts of a batch sample together.
//!
//! A dense model samples prompts of different lengths as one batch padded on
//! the left to the longest, and every row holds keys and values for every
//! position of the batch. One long prompt (an observation of 50,000
//! characters fills SmolLM2's 8,192-position window) then costs every row its
//! length: 16 rows × 8,192 positions × 46 KB is 6 GB of cache, made twice
//! while the batch is joined. [`plan_groups`] splits such a batch into groups
//! of similar lengths whose padded caches fit a byte budget; the groups are
//! sampled one after another.

/// Default budget of one padded batch's key/value cache (bytes).
pub const DEFAULT_KV_BUDGET: usize = 2 << 30;

/// Groups of indices into `prompts` whose padded caches, `rows × (longest
/// prompt + reply) × bytes_per_position`, fit `budget`. When the whole
/// batch fits it is one group in its own order (so sampling is unchanged);
/// otherwise the prompts go longest first, identical prompts side by side
/// (they share one prompt pass), and a prompt too long for the budget alone
/// is a group of its own.
pub fn plan_groups(
    prompts: &[Vec<u32>],
    reply: usize,
    bytes_per_position: usize,
    budget: usize,
) -> Vec<Vec<usize>> {
    let cost = |rows: usize, width: usize| {
        rows.saturating_mul(width.saturating_add(reply))
            .saturating_mul(bytes_per_position)
    };
    let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
    if cost(prompts.len(), width) <= budget {
        return vec![(0..prompts.len()).collect()];
    }
    let mut order: Vec<usize> = (0..prompts.len()).collect();
    order.sort_by(|&a, &b| (prompts[b].len(), &prompts[a]).cmp(&(prompts[a].len(), &prompts[b])));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for i in order {
        match groups.last_mut() {
            // The group's first prompt is its longest.
            Some(g) if cost(g.len() + 1, prompts[g[0]].len()) <= budget => g.push(i),
            _ => groups.push(vec![i]),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompts(lens: &[usize]) -> Vec<Vec<u32>> {
        lens.iter()
            .enumerate()
            .map(|(i, &n)| vec![i as u32; n])
            .collect()
    }

    #[test]
    fn a_batch_that_fits_stays_whole_and_in_order() {
        let p = prompts(&[5, 100, 7]);
        assert_eq!(plan_groups(&p, 10, 1, 3 * 110), vec![vec![0, 1, 2]]);
    }

    #[test]
    fn one_long_prompt_no_longer_pads_the_short_ones() {
        // 4 rows of width 1000 would cost 4040; the long one goes alone.
        let p = prompts(&[10, 1000, 12, 9]);
        let groups = plan_groups(&p, 10, 1, 1100);
        assert_eq!(groups, vec![vec![1], vec![2, 0, 3]]);
        for g in &groups {
            let w = g.iter().map(|&i| p[i].len()).max().unwrap();
            assert!(g.len() * (w + 10) <= 1100 || g.len() == 1);
        }
    }

    #[test]
    fn every_prompt_is_in_exactly_one_group_and_identical_ones_stay_together() {
        let mut p = prompts(&[300, 20, 300, 50, 20, 700]);
        p[2] = p[0].clone();
        p[4] = p[1].clone();
        let groups = plan_groups(&p, 0, 1, 620);
        let mut all: Vec<usize> = groups.iter().flatten().copied().collect();
        all.sort();
        assert_eq!(all, (0..6).collect::<Vec<_>>());
        let group_of = |i: usize| groups.iter().position(|g| g.contains(&i));
        assert_eq!(group_of(0), group_of(2));
        assert_eq!(group_of(1), group_of(4));
        // A prompt over the budget alone still gets sampled.
        assert!(groups.contains(&vec![5]));
    }
}
