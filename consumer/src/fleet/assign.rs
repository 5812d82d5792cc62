//! Which partitions a member should own: a pure function of the sorted live members, so every
//! member computes the same answer without talking to the others.

/// The partitions of `0..partitions` that `me` should own among `members` (any order, `me`
/// included or not): partition p goes to the member at `p mod m` of the m names sorted, so the
/// members' counts differ by at most one. Empty when `me` is not a member.
pub(crate) fn targets(members: &[String], me: &str, partitions: u32) -> Vec<u32> {
    let mut sorted: Vec<&str> = members.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let Some(index) = sorted.iter().position(|m| *m == me) else {
        return Vec::new();
    };
    let m = sorted.len() as u32;
    (0..partitions).filter(|p| p % m == index as u32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_partition_goes_to_exactly_one_member_and_counts_differ_by_at_most_one() {
        for m in 1..=10usize {
            for partitions in 1..=20u32 {
                let members: Vec<String> = (0..m).map(|i| format!("c-{}", (i * 7) % 11)).collect();
                let mut owners = vec![0u32; partitions as usize];
                let mut counts = Vec::new();
                for me in &members {
                    let mine = targets(&members, me, partitions);
                    counts.push(mine.len());
                    for p in mine {
                        owners[p as usize] += 1;
                    }
                }
                assert!(owners.iter().all(|&n| n == 1), "m={m} n={partitions}");
                let (lo, hi) = (counts.iter().min(), counts.iter().max());
                assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1));
            }
        }
    }

    #[test]
    fn order_of_the_list_does_not_matter_and_strangers_get_nothing() {
        let a = targets(&names(&["b", "a", "c"]), "b", 8);
        let b = targets(&names(&["c", "b", "a"]), "b", 8);
        assert_eq!(a, b);
        assert_eq!(a, vec![1, 4, 7]);
        assert!(targets(&names(&["a"]), "z", 8).is_empty());
        assert_eq!(targets(&names(&["a"]), "a", 3), vec![0, 1, 2]);
    }
}
