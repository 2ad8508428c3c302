//! IS's keys: NPB's sequence, each key the scaled mean of four uniform numbers, and the two
//! keys each iteration plants.

use crate::random;

/// The generator's seed for the first uniform number.
const SEED: f64 = 314_159_265.0;

/// Keys made per call of the generator: 4 × 1024 uniforms, 32 KiB, stay in the L1 cache.
const CHUNK_KEYS: usize = 1024;

/// Fills `keys` with keys `first..first + keys.len()` of the global sequence: key i is
/// ⌊max_key/4 · (u₄ᵢ₊₁ + u₄ᵢ₊₂ + u₄ᵢ₊₃ + u₄ᵢ₊₄)⌋, summed left to right as NPB does. A rank jumps
/// to its first uniform with [`random::pow`], so the sequence is the same for any rank count.
pub fn generate(keys: &mut [i32], first: u64, max_key: i32) {
    let scale = f64::from(max_key / 4);
    let mut seed = SEED;
    random::randlc(&mut seed, random::pow(random::A, 4 * first));
    let mut uniforms = [0.0; 4 * CHUNK_KEYS];
    for chunk in keys.chunks_mut(CHUNK_KEYS) {
        let uniforms = &mut uniforms[..4 * chunk.len()];
        random::vranlc(&mut seed, random::A, uniforms);
        for (key, u) in chunk.iter_mut().zip(uniforms.chunks_exact(4)) {
            *key = (scale * (u[0] + u[1] + u[2] + u[3])) as i32;
        }
    }
}

/// NPB's change before ranking at `iteration`: key `iteration` of the global sequence becomes
/// `iteration` and key `iteration + 10` becomes `max_key − iteration`. `keys` holds the global
/// keys from index `first`; keys held elsewhere are left to their ranks.
pub fn plant(keys: &mut [i32], first: u64, iteration: usize, iterations: usize, max_key: i32) {
    let planted = [(iteration, iteration as i32), (iteration + iterations, max_key - iteration as i32)];
    for (index, value) in planted {
        if let Some(key) = (index as u64).checked_sub(first).and_then(|i| keys.get_mut(i as usize)) {
            *key = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_of_the_sequence_join_into_the_whole() {
        let mut whole = vec![0; 5000];
        generate(&mut whole, 0, 1 << 11);
        let (mut left, mut right) = (vec![0; 1234], vec![0; 5000 - 1234]);
        generate(&mut left, 0, 1 << 11);
        generate(&mut right, 1234, 1 << 11);
        assert_eq!([left, right].concat(), whole);
        assert!(whole.iter().all(|&k| (0..1 << 11).contains(&k)));
        // The mean of four uniforms clusters around the middle of the range.
        let middle = whole.iter().filter(|&&k| (512..1536).contains(&k)).count();
        assert!(middle > 4000, "{middle}");
    }

    #[test]
    fn first_key_is_the_scaled_sum_of_the_first_four_uniforms() {
        let mut seed = SEED;
        let sum: f64 = (0..4).map(|_| random::randlc(&mut seed, random::A)).sum();
        let mut key = [0];
        generate(&mut key, 0, 1 << 19);
        assert_eq!(key[0], (f64::from(1 << 17) * sum) as i32);
    }

    #[test]
    fn planted_keys_land_only_on_their_holder() {
        let (mut low, mut high) = (vec![7; 8], vec![7; 8]);
        plant(&mut low, 0, 3, 10, 100);
        plant(&mut high, 8, 3, 10, 100);
        assert_eq!(low, [7, 7, 7, 3, 7, 7, 7, 7]);
        assert_eq!(high, [7, 7, 7, 7, 7, 97, 7, 7]);
    }
}
