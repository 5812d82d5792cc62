//! Lanes: how one batch is split so that different partition keys run concurrently while
//! the entries of one key run one after another, in stream order.
//!
//! Pure functions, no Redis: the consumer feeds them a batch and runs each lane as a unit.

use std::collections::HashMap;

/// What a lane needs to know of an item: its partition key, if any.
pub(crate) trait Keyed {
    /// The partition key; `None` makes the item a lane of its own.
    fn lane_key(&self) -> Option<&str>;
}

/// Splits `items` (in stream order) into lanes: one per partition key holding that key's
/// items in their original order, and one per item without a key. Lanes come in the order of
/// their first item, so a batch with concurrency 1 runs in stream order.
pub(crate) fn group<T: Keyed>(items: Vec<T>) -> Vec<Vec<T>> {
    let mut lanes: Vec<Vec<T>> = Vec::new();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for item in items {
        match item.lane_key() {
            None => lanes.push(vec![item]),
            Some(key) => match by_key.get(key) {
                Some(&lane) => lanes[lane].push(item),
                None => {
                    by_key.insert(key.to_string(), lanes.len());
                    lanes.push(vec![item]);
                }
            },
        }
    }
    lanes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Item(u32, Option<&'static str>);

    impl Keyed for Item {
        fn lane_key(&self) -> Option<&str> {
            self.1
        }
    }

    #[test]
    fn one_lane_per_key_in_stream_order_and_one_per_unkeyed_item() {
        let items = vec![
            Item(1, Some("a")),
            Item(2, None),
            Item(3, Some("b")),
            Item(4, Some("a")),
            Item(5, None),
            Item(6, Some("b")),
            Item(7, Some("a")),
        ];
        let lanes = group(items);
        let ids: Vec<Vec<u32>> = lanes
            .iter()
            .map(|l| l.iter().map(|i| i.0).collect())
            .collect();
        assert_eq!(ids, vec![vec![1, 4, 7], vec![2], vec![3, 6], vec![5]]);
    }

    #[test]
    fn nothing_in_nothing_out() {
        assert!(group(Vec::<Item>::new()).is_empty());
    }

    #[test]
    fn every_item_once_and_each_key_in_one_lane_in_order() {
        // A cheap exhaustive-ish check over patterns of 3 keys and unkeyed items.
        let keys = [Some("a"), Some("b"), Some("c"), None];
        for pattern in 0..4u32.pow(6) {
            let items: Vec<Item> = (0..6)
                .map(|i| Item(i, keys[(pattern / 4u32.pow(i) % 4) as usize]))
                .collect();
            let lanes = group(items);
            let total: usize = lanes.iter().map(Vec::len).sum();
            assert_eq!(total, 6);
            for lane in &lanes {
                assert!(lane.windows(2).all(|w| w[0].0 < w[1].0), "{lane:?}");
                let key = lane[0].1;
                assert!(lane.iter().all(|i| i.1 == key));
                if key.is_none() {
                    assert_eq!(lane.len(), 1);
                }
            }
            let keyed: Vec<_> = lanes.iter().filter_map(|l| l[0].1).collect();
            let mut dedup = keyed.clone();
            dedup.sort();
            dedup.dedup();
            assert_eq!(keyed.len(), dedup.len(), "a key split over two lanes");
        }
    }
}
