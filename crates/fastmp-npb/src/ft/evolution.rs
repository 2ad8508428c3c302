//! FT's time evolution in frequency: at time t every coefficient of the initial spectrum has
//! decayed by e^{-4απ²(k̄x² + k̄y² + k̄z²)t}, the heat equation's factor, k̄ being the signed
//! frequency (0, 1, .., n/2 - 1, -n/2, .., -1).
//!
//! The factor is a product of one factor per axis, so three short tables replace NPB's table
//! of one factor per grid point, and the spectrum at time t is computed from the initial one
//! as the specification writes it, rather than by NPB's repeated multiplication by one step's
//! factor: the initial spectrum is only read, and nothing but it is read per point. (Both agree
//! to a few ulps, far inside the verification tolerance.)

use std::f64::consts::PI;

use num_complex::Complex64;

use super::slabs::Slabs;

/// NPB's diffusion constant α.
const ALPHA: f64 = 1e-6;

/// The per-axis factors at one time.
pub(crate) struct Evolution {
    /// -4απ²k̄² per axis, the exponent of one unit of time.
    rates: [Vec<f64>; 3],
    /// The factors at the current time, per axis (x, y, z).
    factors: [Vec<f64>; 3],
}

impl Evolution {
    /// The factors at time 0.
    pub fn new(slabs: &Slabs) -> Self {
        let rates = [slabs.nx, slabs.ny, slabs.nz].map(rates);
        let factors = rates.clone().map(|axis| axis.iter().map(|_| 1.0).collect());
        Evolution { rates, factors }
    }

    /// Moves the factors to time `t`.
    pub fn set_time(&mut self, t: usize) {
        for (factors, rates) in self.factors.iter_mut().zip(&self.rates) {
            for (factor, &rate) in factors.iter_mut().zip(rates) {
                *factor = (rate * t as f64).exp();
            }
        }
    }

    /// The z-line at (y, x) of the spectrum at the current time, from the initial `line`.
    #[inline]
    pub fn apply(&self, y: usize, x: usize, line: &[Complex64], out: &mut [Complex64]) {
        let [fx, fy, fz] = &self.factors;
        let xy = fx[x] * fy[y];
        for ((out, &value), &z) in out.iter_mut().zip(line).zip(fz) {
            *out = value * (xy * z);
        }
    }
}

/// -4απ²k̄² for every frequency index of an axis of `n` points.
fn rates(n: usize) -> Vec<f64> {
    (0..n)
        .map(|k| {
            let signed = if k < n / 2 { k as f64 } else { k as f64 - n as f64 };
            -4.0 * ALPHA * PI * PI * signed * signed
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_factor_is_the_exponential_of_the_signed_frequencies_times_time() {
        let slabs = Slabs::new([8, 4, 16], 1, 0);
        let mut evolution = Evolution::new(&slabs);
        let line = vec![Complex64::new(1.0, -2.0); 16];
        let mut out = vec![Complex64::default(); 16];
        evolution.apply(3, 6, &line, &mut out);
        assert_eq!(out, line, "time 0 changes nothing");
        evolution.set_time(5);
        evolution.apply(3, 6, &line, &mut out);
        for (k, value) in out.iter().enumerate() {
            let kz = if k < 8 { k as f64 } else { k as f64 - 16.0 };
            // x index 6 of 8 is frequency -2, y index 3 of 4 is -1.
            let factor = (-4.0 * ALPHA * PI * PI * (4.0 + 1.0 + kz * kz) * 5.0).exp();
            let expected = line[k] * factor;
            assert!((value - expected).norm() <= 4.0 * f64::EPSILON * expected.norm(), "k {k}");
        }
        assert_eq!(rates(8)[4], -4.0 * ALPHA * PI * PI * 16.0, "index n/2 is frequency -n/2");
        assert_eq!(rates(8)[1], rates(8)[7], "frequencies 1 and -1 decay alike");
    }
}
