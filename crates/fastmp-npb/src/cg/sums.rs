//! Long floating-point sums, in four lanes: the sparse product's rows and the dot products.

/// `a·b`, in four running sums.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut sum = Lanes::default();
    let (a_quads, b_quads) = (a.chunks_exact(4), b.chunks_exact(4));
    let (a_tail, b_tail) = (a_quads.remainder(), b_quads.remainder());
    for (a, b) in a_quads.zip(b_quads) {
        sum.add([a[0] * b[0], a[1] * b[1], a[2] * b[2], a[3] * b[3]]);
    }
    for (a, b) in a_tail.iter().zip(b_tail) {
        sum.add_one(a * b);
    }
    sum.total()
}

/// A sum kept in four lanes, so that a long sum is not one chain of dependent additions, each
/// waiting for the one before; the same terms in the same order give the same total.
#[derive(Default)]
pub struct Lanes([f64; 4]);

impl Lanes {
    #[inline]
    pub fn add(&mut self, terms: [f64; 4]) {
        for (sum, term) in self.0.iter_mut().zip(terms) {
            *sum += term;
        }
    }

    #[inline]
    pub fn add_one(&mut self, term: f64) {
        self.0[0] += term;
    }

    pub fn total(&self) -> f64 {
        (self.0[0] + self.0[1]) + (self.0[2] + self.0[3])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_sums_every_term_body_and_tail() {
        for n in [0, 1, 3, 4, 7, 8, 13] {
            let a: Vec<f64> = (0..n).map(|i| i as f64 + 1.0).collect();
            let b: Vec<f64> = (0..n).map(|i| 0.5 * i as f64).collect();
            let expected: f64 = (0..n).map(|i| (i as f64 + 1.0) * 0.5 * i as f64).sum();
            assert_eq!(dot(&a, &b), expected, "n = {n}");
        }
    }
}
