//! FT's time step in frequency: every coefficient decays by e^{-4απ²(k̄x² + k̄y² + k̄z²)}, the
//! heat equation's factor for one unit of time, k̄ being the signed frequency (0, 1, ..,
//! n/2 - 1, -n/2, .., -1).
//!
//! The factor is a product of one factor per axis, so three short tables replace NPB's table
//! of one factor per grid point (the products agree with NPB's to a few ulps, far inside the
//! verification tolerance), and the step reads no memory beyond the spectrum itself.

use std::f64::consts::PI;

use num_complex::Complex64;

use super::slabs::Slabs;

/// NPB's diffusion constant α.
const ALPHA: f64 = 1e-6;

/// The per-axis factors of one time step.
pub(crate) struct Evolution {
    x: Vec<f64>,
    y: Vec<f64>,
    z: Vec<f64>,
}

impl Evolution {
    pub fn new(slabs: &Slabs) -> Self {
        Evolution { x: axis(slabs.nx), y: axis(slabs.ny), z: axis(slabs.nz) }
    }

    /// Advances the z-line at (y, x) of the spectrum by one time step.
    #[inline]
    pub fn step(&self, y: usize, x: usize, line: &mut [Complex64]) {
        let xy = self.x[x] * self.y[y];
        for (value, &z) in line.iter_mut().zip(&self.z) {
            *value *= xy * z;
        }
    }
}

/// e^{-4απ² k̄²} for every frequency index of an axis of `n` points.
fn axis(n: usize) -> Vec<f64> {
    (0..n)
        .map(|k| {
            let signed = if k < n / 2 { k as f64 } else { k as f64 - n as f64 };
            (-4.0 * ALPHA * PI * PI * signed * signed).exp()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_multiplies_by_the_exponential_of_the_signed_frequencies() {
        let slabs = Slabs::new([8, 4, 16], 1, 0);
        let evolution = Evolution::new(&slabs);
        let mut line = vec![Complex64::new(1.0, -2.0); 16];
        evolution.step(3, 6, &mut line);
        for (k, value) in line.iter().enumerate() {
            let kz = if k < 8 { k as f64 } else { k as f64 - 16.0 };
            // x index 6 of 8 is frequency -2, y index 3 of 4 is -1.
            let factor = (-4.0 * ALPHA * PI * PI * (4.0 + 1.0 + kz * kz)).exp();
            let expected = Complex64::new(1.0, -2.0) * factor;
            assert!((value - expected).norm() <= 4.0 * f64::EPSILON * expected.norm(), "k {k}");
        }
        assert_eq!(axis(8)[4], (-4.0 * ALPHA * PI * PI * 16.0).exp(), "index n/2 is frequency -n/2");
        assert_eq!(axis(8)[1], axis(8)[7], "frequencies 1 and -1 decay alike");
    }
}
