//! One ranking of all keys, as a bucket sort over the ranks, and the full verification of the
//! last one.
//!
//! Keys fall into buckets by their high bits. Each rank counts its keys per bucket; one
//! allreduce sums the counts (and carries the test keys' values along). From the totals every
//! rank derives the same split of the buckets into contiguous ranges, one per rank, holding
//! nearly equal numbers of keys. A rank groups its keys by the rank owning their bucket, an
//! alltoall tells every rank how many keys it will receive from each, and an alltoallv moves
//! them. Each rank then counts its keys per value over its range and turns the counts into
//! running sums: a key's rank is the running sum below its value plus the keys of the lower
//! ranks.
//!
//! Keys that stay on their rank are not sent to itself: the rank counts them where they were
//! grouped (on one rank, in place).

use fastmp::Comm;
use fastmp::op::Sum;

use super::problem::{Problem, TEST_KEYS};

/// Buckets the key range is cut into (fewer when the range is smaller).
const MAX_BUCKETS: usize = 1024;

/// A rank's buffers for ranking, reused by every iteration so none allocates once warm.
pub struct Ranker {
    np: usize,
    me: usize,
    /// A key's bucket is `key >> shift`.
    shift: u32,
    buckets: usize,
    /// This rank's keys per bucket, then the test keys' values it holds (0 where it holds
    /// none): the allreduce's input.
    census: Vec<u32>,
    /// `census` summed over the ranks.
    totals: Vec<u32>,
    /// Rank `r` owns buckets `bounds[r]..bounds[r + 1]`.
    bounds: Vec<usize>,
    /// This rank's keys grouped by owner, rank 0's first.
    grouped: Vec<i32>,
    /// The keys half grouped, between two splitting passes (on four ranks or more).
    half_grouped: Vec<i32>,
    /// The group of `grouped` this rank owns itself: never sent.
    kept: std::ops::Range<usize>,
    /// Keys for each rank (none for this one: they are `kept`).
    send_counts: Vec<usize>,
    send_displs: Vec<usize>,
    recv_counts: Vec<usize>,
    recv_displs: Vec<usize>,
    /// The keys other ranks sent here.
    received: Vec<i32>,
    /// For each value `lowest + i` of this rank's range, how many of its keys are ≤ it.
    running: Vec<u32>,
    /// The smallest value in this rank's range.
    lowest: i32,
    /// Keys owned by lower ranks: all smaller than `lowest`.
    lesser: u64,
}

impl Ranker {
    /// Buffers for `my_keys` keys per rank, this rank being `me` of `np`.
    pub fn new(problem: &Problem, np: usize, me: usize, my_keys: usize) -> Ranker {
        let log2_buckets = problem.log2_max_key.min(MAX_BUCKETS.ilog2());
        let buckets = 1 << log2_buckets;
        let census_len = buckets + TEST_KEYS;
        Ranker {
            np,
            me,
            shift: problem.log2_max_key - log2_buckets,
            buckets,
            census: vec![0; census_len],
            totals: vec![0; census_len],
            bounds: vec![0; np + 1],
            grouped: vec![0; if np > 1 { my_keys } else { 0 }],
            half_grouped: vec![0; if np > 2 { my_keys } else { 0 }],
            kept: 0..0,
            send_counts: vec![0; np],
            send_displs: vec![0; np],
            recv_counts: vec![0; np],
            recv_displs: vec![0; np],
            received: Vec::new(),
            running: Vec::new(),
            lowest: 0,
            lesser: 0,
        }
    }

    /// Ranks the keys of all ranks (collective); `keys` are this rank's. `held_tests` are the
    /// values of the test keys this rank holds, 0 for those it does not; the result is every
    /// test key's value.
    pub fn rank(
        &mut self,
        world: &Comm,
        keys: &[i32],
        held_tests: [u32; TEST_KEYS],
    ) -> fastmp::Result<[u32; TEST_KEYS]> {
        self.take_census(keys, held_tests);
        world.allreduce(&self.census, &mut self.totals, Sum)?;
        self.split_buckets();
        if self.np > 1 {
            self.group_by_owner(keys);
            self.exchange(world)?;
        }
        self.count_values(keys);
        Ok(std::array::from_fn(|i| self.totals[self.buckets + i]))
    }

    /// The global rank of `value` (the number of keys smaller than it) when it lies in this
    /// rank's range; after [`Ranker::rank`].
    pub fn rank_of(&self, value: i32) -> Option<u64> {
        let offset = usize::try_from(value.checked_sub(self.lowest)?).ok()?;
        if offset >= self.running.len() {
            return None;
        }
        let below = if offset == 0 { 0 } else { self.running[offset - 1] };
        Some(self.lesser + u64::from(below))
    }

    /// The number of keys this rank ranked at the last [`Ranker::rank`].
    pub fn ranked_here(&self) -> u64 {
        self.running.last().map_or(0, |&n| u64::from(n))
    }

    /// Counts this rank's keys per bucket into the census, the test keys' values behind them.
    fn take_census(&mut self, keys: &[i32], held_tests: [u32; TEST_KEYS]) {
        let (per_bucket, tests) = self.census.split_at_mut(self.buckets);
        per_bucket.fill(0);
        // Keys lie in [0, max_key), so the mask only spares the bounds check.
        let mask = self.buckets - 1;
        for &key in keys {
            per_bucket[(key >> self.shift) as usize & mask] += 1;
        }
        tests.copy_from_slice(&held_tests);
    }

    /// Gives each rank the contiguous buckets whose first key falls in its share of the
    /// keys: bucket b goes to rank ⌊(keys in buckets before b) · np / total⌋. Every rank
    /// computes the same split from the same totals.
    fn split_buckets(&mut self) {
        let totals = &self.totals[..self.buckets];
        let total: u64 = totals.iter().map(|&n| u64::from(n)).sum();
        let np = self.np as u64;
        let mut before = 0u64;
        let mut next_rank = 1;
        for (bucket, &count) in totals.iter().enumerate() {
            while next_rank < self.np && before * np >= next_rank as u64 * total {
                self.bounds[next_rank] = bucket;
                next_rank += 1;
            }
            before += u64::from(count);
        }
        self.bounds[next_rank..].fill(self.buckets);
        self.bounds[0] = 0;
        let mine = self.bounds[self.me]..self.bounds[self.me + 1];
        self.lesser = totals[..mine.start].iter().map(|&n| u64::from(n)).sum();
        self.lowest = (mine.start << self.shift) as i32;
        let range = (mine.end - mine.start) << self.shift;
        self.running.clear();
        self.running.resize(range, 0);
    }

    /// Groups this rank's keys by the rank owning their bucket, and counts them per owner.
    ///
    /// Owners hold contiguous key ranges, so grouping is a partition by value: log2(np)
    /// passes, each splitting every group of owners in two at the value where its upper half
    /// begins. A pass streams its input into two cursors, which beats scattering keys to
    /// `np` (or per bucket) cursors kept in memory, as each of those writes waits for the
    /// last one through the same cursor or misses the cache.
    fn group_by_owner(&mut self, keys: &[i32]) {
        let mut offset = 0;
        for rank in 0..self.np {
            let owned = self.bounds[rank]..self.bounds[rank + 1];
            let count = self.census[owned].iter().sum::<u32>() as usize;
            self.send_counts[rank] = count;
            self.send_displs[rank] = offset;
            offset += count;
        }
        let start_of = |rank: usize| if rank < self.np { self.send_displs[rank] } else { offset };
        let passes = self.np.ilog2();
        // The last pass must write `grouped`: passes alternate between the two buffers.
        let (mut from, mut to) = (&mut self.half_grouped, &mut self.grouped);
        if passes.is_multiple_of(2) {
            std::mem::swap(&mut from, &mut to);
        }
        for pass in 0..passes {
            let owners_per_group = self.np >> pass;
            for first in (0..self.np).step_by(owners_per_group) {
                let (middle, end) = (first + owners_per_group / 2, first + owners_per_group);
                let group = start_of(first)..start_of(end);
                let input = if pass == 0 { keys } else { &from[group.clone()] };
                let split_value = (self.bounds[middle] << self.shift) as i32;
                split(input, &mut to[group], split_value, start_of(middle) - start_of(first));
            }
            std::mem::swap(&mut from, &mut to);
        }
        let displ = self.send_displs[self.me];
        self.kept = displ..displ + self.send_counts[self.me];
        self.send_counts[self.me] = 0;
    }

    /// Tells every rank how many keys it gets from this one, then sends every other rank its
    /// group and receives this rank's groups.
    fn exchange(&mut self, world: &Comm) -> fastmp::Result<()> {
        world.alltoall(&self.send_counts, &mut self.recv_counts)?;
        let mut offset = 0;
        for (displ, &count) in self.recv_displs.iter_mut().zip(&self.recv_counts) {
            *displ = offset;
            offset += count;
        }
        self.received.resize(offset, 0);
        world.alltoallv(
            &self.grouped,
            &self.send_counts,
            &self.send_displs,
            &mut self.received,
            &self.recv_counts,
            &self.recv_displs,
        )
    }

    /// The keys this rank ranks: those it kept (all its keys on one rank), and those
    /// received.
    fn ranked_keys<'a>(&'a self, keys: &'a [i32]) -> [&'a [i32]; 2] {
        if self.np == 1 { [keys, &[]] } else { [&self.grouped[self.kept.clone()], &self.received] }
    }

    /// Counts this rank's keys per value, then turns the counts into running sums.
    fn count_values(&mut self, keys: &[i32]) {
        let mut running = std::mem::take(&mut self.running);
        let lowest = self.lowest;
        for part in self.ranked_keys(keys) {
            for &key in part {
                running[(key - lowest) as usize] += 1;
            }
        }
        let mut sum = 0;
        for count in running.iter_mut() {
            sum += *count;
            *count = sum;
        }
        self.running = running;
    }

    /// NPB's full verification of the last ranking (collective; consumes the running sums):
    /// places every key of this rank at its rank, then counts the neighbours out of order,
    /// here and across the boundary with the nearest lower rank that has keys. Returns the
    /// count over all ranks.
    pub fn keys_out_of_order(&mut self, world: &Comm, keys: &[i32]) -> fastmp::Result<u64> {
        let mut sorted = vec![0; self.ranked_here() as usize];
        let mut running = std::mem::take(&mut self.running);
        for part in self.ranked_keys(keys) {
            for &key in part {
                let slot = &mut running[(key - self.lowest) as usize];
                *slot -= 1;
                sorted[*slot as usize] = key;
            }
        }
        let mut out_of_order = sorted.windows(2).filter(|pair| pair[0] > pair[1]).count() as u64;

        // Every rank's (key count, first key, last key), to check the boundaries.
        let ends =
            [sorted.len() as i64, sorted.first().map_or(0, |&k| k.into()), sorted.last().map_or(0, |&k| k.into())];
        let mut all_ends = vec![0i64; 3 * self.np];
        world.allgather(&ends, &mut all_ends)?;
        let below = all_ends[..3 * self.me].chunks_exact(3).rev().find(|e| e[0] > 0);
        if let (Some(below), Some(&first)) = (below, sorted.first()) {
            out_of_order += u64::from(below[2] > i64::from(first));
        }
        let mut total = [0u64];
        world.allreduce(&[out_of_order], &mut total, Sum)?;
        Ok(total[0])
    }
}

/// Copies `input` to `output`, the keys below `split_value` first (the first `below` slots)
/// and the others after them, each side in input order. No branch depends on a key.
fn split(input: &[i32], output: &mut [i32], split_value: i32, below: usize) {
    debug_assert_eq!(input.len(), output.len());
    let (mut low, mut high) = (0, below);
    for &key in input {
        let is_high = key >= split_value;
        output[std::hint::select_unpredictable(is_high, high, low)] = key;
        high += usize::from(is_high);
        low += usize::from(!is_high);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Class;

    fn ranker_with_totals(np: usize, totals: &[u32]) -> Ranker {
        let mut ranker = Ranker::new(&Problem::of(Class::S), np, 0, 0);
        ranker.buckets = totals.len();
        ranker.totals = totals.to_vec();
        ranker.split_buckets();
        ranker
    }

    #[test]
    fn buckets_split_into_contiguous_balanced_ranges() {
        let ranker = ranker_with_totals(4, &[10, 10, 10, 10, 10, 10, 10, 10]);
        assert_eq!(ranker.bounds, [0, 2, 4, 6, 8]);
        // A heavy bucket goes whole to the rank where it starts; the ranks whose shares it
        // swallows get nothing.
        let ranker = ranker_with_totals(4, &[1, 100, 1, 1]);
        assert_eq!(ranker.bounds, [0, 2, 2, 2, 4]);
        let ranker = ranker_with_totals(1, &[3, 0, 5]);
        assert_eq!(ranker.bounds, [0, 3]);
    }

    #[test]
    fn split_keeps_each_side_in_order() {
        let input = [5, 1, 9, 3, 7, 3, 8];
        let mut output = [0; 7];
        split(&input, &mut output, 5, 3);
        assert_eq!(output, [1, 3, 3, 5, 9, 7, 8]);
    }

    #[test]
    fn one_rank_ranks_keys_by_counting() {
        fastmp::run(1, |world| {
            let problem = Problem::of(Class::S);
            let keys = [5, 3, 3, 2047, 0, 9];
            let mut ranker = Ranker::new(&problem, 1, 0, keys.len());
            let tests = ranker.rank(&world, &keys, [3, 0, 9, 0, 1])?;
            assert_eq!(tests, [3, 0, 9, 0, 1]);
            let ranks: Vec<_> = [0, 3, 4, 5, 9, 10, 2047].iter().map(|&v| ranker.rank_of(v)).collect();
            assert_eq!(ranks, [0, 1, 3, 3, 4, 5, 5].map(Some));
            assert_eq!((ranker.rank_of(-1), ranker.rank_of(2048)), (None, None));
            assert_eq!(ranker.ranked_here(), 6);
            assert_eq!(ranker.keys_out_of_order(&world, &keys)?, 0);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn ranks_split_the_keys_and_agree_on_global_ranks() {
        // Rank r holds keys r, r + 4, r + 8, ... below 2048: every value once.
        let outcomes = fastmp::run(4, |world| {
            let keys: Vec<i32> = (world.rank() as i32..2048).step_by(4).collect();
            let mut ranker = Ranker::new(&Problem::of(Class::S), 4, world.rank(), keys.len());
            ranker.rank(&world, &keys, [0; TEST_KEYS])?;
            let ranks: Vec<_> = [0, 700, 1500, 2047].iter().map(|&v| ranker.rank_of(v)).collect();
            Ok((ranks, ranker.ranked_here(), ranker.keys_out_of_order(&world, &keys)?))
        })
        .unwrap();
        let mut found = [None; 4];
        let mut ranked = 0;
        for (ranks, here, out_of_order) in outcomes {
            assert_eq!(out_of_order, 0);
            ranked += here;
            assert!(here > 400, "{here} keys: unbalanced");
            for (f, r) in found.iter_mut().zip(ranks) {
                if r.is_some() {
                    assert!(f.is_none(), "two ranks rank one value");
                    *f = r;
                }
            }
        }
        assert_eq!(ranked, 2048);
        assert_eq!(found, [0, 700, 1500, 2047].map(Some));
    }
}
