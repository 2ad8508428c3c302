//! IS's classes: how many keys, their range, and the official partial-verification data.

use crate::Class;

/// Keys whose rank NPB checks at every iteration.
pub const TEST_KEYS: usize = 5;

/// One class of IS.
#[derive(Debug)]
pub struct Problem {
    /// log2 of the number of keys.
    pub log2_keys: u32,
    /// log2 of the key range: keys lie in [0, 2^log2_max_key).
    pub log2_max_key: u32,
    /// The test keys, by their index in the global key sequence.
    pub test_keys: [TestKey; TEST_KEYS],
}

/// A key whose rank is checked: where it sits in the global sequence and the rank NPB expects.
///
/// The rank moves with the iteration because each iteration overwrites two keys with a very
/// small and a very large one (see [`super::keys::plant`]). NPB tabulates the result as
/// `rank + drift · (iteration − lag)`.
#[derive(Debug, Clone, Copy)]
pub struct TestKey {
    pub index: u64,
    rank: i64,
    drift: i64,
    lag: i64,
}

impl TestKey {
    /// The rank NPB expects for this key at `iteration` (counted from 1).
    pub fn expected_rank(&self, iteration: usize) -> i64 {
        self.rank + self.drift * (iteration as i64 - self.lag)
    }
}

impl Problem {
    pub fn of(class: Class) -> Problem {
        // NPB's tables: indices, ranks, and for each key whether its rank rises (+1) or falls
        // (-1) with the iteration, and from which iteration.
        let (log2_keys, log2_max_key, index, rank, drift, lag) = match class {
            Class::S => (
                16,
                11,
                [48427, 17148, 23627, 62548, 4431],
                [0, 18, 346, 64917, 65463],
                [1, 1, 1, -1, -1],
                [0; TEST_KEYS],
            ),
            Class::W => (
                20,
                16,
                [357773, 934767, 875723, 898999, 404505],
                [1249, 11698, 1039987, 1043896, 1048018],
                [1, 1, -1, -1, -1],
                [2, 2, 0, 0, 0],
            ),
            Class::A => (
                23,
                19,
                [2112377, 662041, 5336171, 3642833, 4250760],
                [104, 17523, 123928, 8288932, 8388264],
                [1, 1, 1, -1, -1],
                [1; TEST_KEYS],
            ),
            Class::B => (
                25,
                21,
                [41869, 812306, 5102857, 18232239, 26860214],
                [33422937, 10244, 59149, 33135281, 99],
                [-1, 1, 1, -1, 1],
                [0; TEST_KEYS],
            ),
            Class::C => (
                27,
                23,
                [44172927, 72999161, 74326391, 129606274, 21736814],
                [61147, 882988, 266290, 133997595, 133525895],
                [1, 1, 1, -1, -1],
                [0; TEST_KEYS],
            ),
        };
        let test_keys =
            std::array::from_fn(|i| TestKey { index: index[i], rank: rank[i], drift: drift[i], lag: lag[i] });
        Problem { log2_keys, log2_max_key, test_keys }
    }

    /// The number of keys, over all ranks.
    pub fn total_keys(&self) -> u64 {
        1 << self.log2_keys
    }

    /// One more than the largest key.
    pub fn max_key(&self) -> i32 {
        1 << self.log2_max_key
    }
}
