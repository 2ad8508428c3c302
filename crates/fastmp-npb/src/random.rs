//! NPB's pseudorandom generator: the linear congruential sequence x_{k+1} = a·x_k mod 2^46 with
//! a = 5^13, returned as x_k·2^-46 in (0, 1).
//!
//! The NPB reports define it in double-precision arithmetic (splitting operands into 23-bit
//! halves so every product is exact). Since a and x are integers below 2^46 and the modulus is
//! a power of two, the low 46 bits of the wrapping 64-bit product are the same integer, so the
//! generator here runs on integers and yields bit-identical numbers, faster.

/// The multiplier 5^13 every kernel uses.
pub const A: f64 = 1_220_703_125.0;

const MASK: u64 = (1 << 46) - 1;
const R46: f64 = 1.0 / (1u64 << 46) as f64;

fn to_int(x: f64) -> u64 {
    debug_assert!(x >= 0.0 && x < (1u64 << 46) as f64 && x.fract() == 0.0, "NPB seed must be an integer below 2^46");
    x as u64
}

/// NPB's `randlc`: advances the seed `x` to a·x mod 2^46 and returns the new value · 2^-46.
#[inline]
pub fn randlc(x: &mut f64, a: f64) -> f64 {
    let next = to_int(*x).wrapping_mul(to_int(a)) & MASK;
    *x = next as f64;
    next as f64 * R46
}

/// NPB's `vranlc`: fills `out` with the next `out.len()` numbers of the sequence from `x`,
/// leaving `x` at the last one.
pub fn vranlc(x: &mut f64, a: f64, out: &mut [f64]) {
    let a = to_int(a);
    let mut seed = to_int(*x);
    for r in out.iter_mut() {
        seed = seed.wrapping_mul(a) & MASK;
        *r = seed as f64 * R46;
    }
    *x = seed as f64;
}

/// a^n mod 2^46, so a rank can jump to the n-th element of a sequence: the seed after n steps
/// from `x` is `x · pow(a, n)` (one `randlc`).
pub fn pow(a: f64, mut n: u64) -> f64 {
    let mut base = to_int(a);
    let mut result = 1u64;
    while n > 0 {
        if n & 1 == 1 {
            result = result.wrapping_mul(base) & MASK;
        }
        base = base.wrapping_mul(base) & MASK;
        n >>= 1;
    }
    result as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reports' double-precision definition, written out, to compare against.
    fn randlc_by_halves(x: &mut f64, a: f64) -> f64 {
        let r23 = 0.5f64.powi(23);
        let t23 = 2.0f64.powi(23);
        let r46 = r23 * r23;
        let t46 = t23 * t23;
        let a1 = (r23 * a).trunc();
        let a2 = a - t23 * a1;
        let x1 = (r23 * *x).trunc();
        let x2 = *x - t23 * x1;
        let t1 = a1 * x2 + a2 * x1;
        let t2 = (r23 * t1).trunc();
        let z = t1 - t23 * t2;
        let t3 = t23 * z + a2 * x2;
        let t4 = (r46 * t3).trunc();
        *x = t3 - t46 * t4;
        r46 * *x
    }

    #[test]
    fn integer_generator_matches_the_double_precision_definition() {
        let (mut x, mut y) = (314_159_265.0, 314_159_265.0);
        for _ in 0..100_000 {
            assert_eq!(randlc(&mut x, A).to_bits(), randlc_by_halves(&mut y, A).to_bits());
        }
        assert_eq!(x, y);
    }

    #[test]
    fn vranlc_continues_the_sequence_and_pow_jumps_along_it() {
        let mut x = 271_828_183.0;
        let mut out = [0.0; 1000];
        vranlc(&mut x, A, &mut out);
        let mut y = 271_828_183.0;
        for &r in &out {
            assert_eq!(randlc(&mut y, A), r);
        }
        assert_eq!(x, y);
        let mut jumped = 271_828_183.0;
        randlc(&mut jumped, pow(A, 1000));
        assert_eq!(jumped, x);
        assert!(out.iter().all(|&r| r > 0.0 && r < 1.0));
    }
}
