//! NPB FT: a 3-D diffusion equation solved spectrally with complex FFTs.
//!
//! A field of random complex numbers on an nx × ny × nz grid (module `field`) is transformed
//! forward once. Iteration t then takes the spectrum at time t (every coefficient times
//! e^{-4απ²|k̄|²t}, module `evolution`), transforms it back, and sums 1024 given points of the
//! result: NPB's checksum, verified against the official value of every iteration.
//!
//! **Decomposition.** Slabs (module `slabs`): in space each rank holds nz/np whole z-planes, in
//! frequency ny/np whole y-rows of every plane, so np must be a power of two no larger than
//! ny or nz. A rank holds three or four arrays of its share of the grid (16 bytes a point):
//! class B takes 1.5 GiB on one rank, class C 6 GiB on one rank and 8 GiB in all on more.
//!
//! **Communication.** Each 3-D transform (module `fft3d`) is one global transpose, an
//! `alltoallv` of equal blocks between the x-y transforms and the z transform (a rank's own
//! block stays where it is); each checksum is a two-element `allreduce`; the time is one
//! `allreduce` at the end.

mod evolution;
mod fft3d;
mod field;
mod slabs;

use fastmp::Comm;
use num_complex::Complex64;

use self::evolution::Evolution;
use self::fft3d::{Fft3d, Transit};
use self::slabs::Slabs;
use crate::report::job_seconds;
use crate::{Check, Class, Kernel, Outcome};

/// NPB's tolerance on the relative error of each checksum.
const TOLERANCE: f64 = 1e-12;

/// A class's grid, iterations and official checksums (real, imaginary), one per iteration.
struct Problem {
    dims: [usize; 3],
    checksums: &'static [(f64, f64)],
}

impl Problem {
    fn of(class: Class) -> Self {
        let (dims, checksums) = match class {
            Class::S => ([64, 64, 64], CHECKSUMS_S),
            Class::W => ([128, 128, 32], CHECKSUMS_W),
            Class::A => ([256, 256, 128], CHECKSUMS_A),
            Class::B => ([512, 256, 256], CHECKSUMS_B),
            Class::C => ([512, 512, 512], CHECKSUMS_C),
        };
        Problem { dims, checksums }
    }

    fn iterations(&self) -> usize {
        self.checksums.len()
    }

    /// NPB's operation count of the whole timed section, in millions.
    fn mega_ops(&self) -> f64 {
        let n = self.dims.iter().product::<usize>() as f64;
        let ln = n.ln();
        1e-6 * n * (14.8157 + 7.19641 * ln + (5.23518 + 7.21113 * ln) * self.iterations() as f64)
    }
}

/// Whether FT runs `class` on `np` ranks: a power of two that leaves every rank at least
/// one z-plane and one y-row.
pub fn check(class: Class, np: usize) -> Result<(), String> {
    crate::power_of_two(np)?;
    let [_, ny, nz] = Problem::of(class).dims;
    let most = ny.min(nz);
    if np > most {
        return Err(format!("cuts its {ny} y-rows and {nz} z-planes into slabs, so at most {most} ranks, got {np}"));
    }
    Ok(())
}

/// Runs FT (collective over `world`). As in NPB, the setup and first transform run once
/// untimed, so that every page is touched, then everything is timed: the setup again, the
/// forward transform and the iterations.
pub(crate) fn run(world: &Comm, class: Class) -> fastmp::Result<Outcome> {
    let problem = Problem::of(class);
    let mut solver = Solver::new(world, problem.dims);
    solver.start(world)?;
    world.barrier()?;
    let start = fastmp::wtime();
    let mut evolution = solver.start(world)?;
    let mut sums = Vec::with_capacity(problem.iterations());
    for t in 1..=problem.iterations() {
        evolution.set_time(t);
        sums.push(solver.step(world, &evolution)?);
    }
    let seconds = job_seconds(world, fastmp::wtime() - start)?;
    let checks = sums
        .iter()
        .zip(problem.checksums)
        .enumerate()
        .flat_map(|(i, (sum, &(re, im)))| {
            [
                Check::relative(format!("checksum {} (re)", i + 1), sum.re, re, TOLERANCE),
                Check::relative(format!("checksum {} (im)", i + 1), sum.im, im, TOLERANCE),
            ]
        })
        .collect();
    let [nx, ny, nz] = problem.dims;
    Ok(Outcome {
        kernel: Kernel::Ft,
        class,
        np: world.size(),
        device: world.device_name(),
        size: format!("{nx}x{ny}x{nz}"),
        iterations: problem.iterations(),
        seconds,
        mops: problem.mega_ops() / seconds,
        operation: "floating point",
        checks,
    })
}

/// One rank's field, spectrum and transform.
struct Solver {
    slabs: Slabs,
    fft: Fft3d,
    transit: Transit,
    /// The initial field, then each iteration's result.
    space: Vec<Complex64>,
    /// The initial field's spectrum.
    frequency: Vec<Complex64>,
}

impl Solver {
    fn new(world: &Comm, dims: [usize; 3]) -> Self {
        let slabs = Slabs::new(dims, world.size(), world.rank());
        Solver {
            slabs,
            fft: Fft3d::new(slabs),
            transit: Transit::new(&slabs),
            space: vec![Complex64::default(); slabs.local_len()],
            frequency: vec![Complex64::default(); slabs.local_len()],
        }
    }

    /// NPB's setup: the evolution's factors at time 0, the initial field and its forward
    /// transform.
    fn start(&mut self, world: &Comm) -> fastmp::Result<Evolution> {
        let evolution = Evolution::new(&self.slabs);
        field::initial(&self.slabs, &mut self.space);
        self.fft.forward(world, &self.space, &mut self.transit, &mut self.frequency)?;
        Ok(evolution)
    }

    /// One iteration: the spectrum at the evolution's time, transformed back, and the result's
    /// checksum (the same on every rank).
    fn step(&mut self, world: &Comm, evolution: &Evolution) -> fastmp::Result<Complex64> {
        self.fft.inverse(world, &self.frequency, &mut self.transit, &mut self.space, |y, x, line, out| {
            evolution.apply(y, x, line, out)
        })?;
        let local = field::checksum(&self.slabs, &self.space);
        let mut sum = [0.0; 2];
        world.allreduce(&[local.re, local.im], &mut sum, fastmp::op::Sum)?;
        Ok(Complex64::new(sum[0], sum[1]))
    }
}

const CHECKSUMS_S: &[(f64, f64)] = &[
    (5.546087004964e+02, 4.845363331978e+02),
    (5.546385409189e+02, 4.865304269511e+02),
    (5.546148406171e+02, 4.883910722336e+02),
    (5.545423607415e+02, 4.901273169046e+02),
    (5.544255039624e+02, 4.917475857993e+02),
    (5.542683411902e+02, 4.932597244941e+02),
];

const CHECKSUMS_W: &[(f64, f64)] = &[
    (5.673612178944e+02, 5.293246849175e+02),
    (5.631436885271e+02, 5.282149986629e+02),
    (5.594024089970e+02, 5.270996558037e+02),
    (5.560698047020e+02, 5.260027904925e+02),
    (5.530898991250e+02, 5.249400845633e+02),
    (5.504159734538e+02, 5.239212247086e+02),
];

const CHECKSUMS_A: &[(f64, f64)] = &[
    (5.046735008193e+02, 5.114047905510e+02),
    (5.059412319734e+02, 5.098809666433e+02),
    (5.069376896287e+02, 5.098144042213e+02),
    (5.077892868474e+02, 5.101336130759e+02),
    (5.085233095391e+02, 5.104914655194e+02),
    (5.091487099959e+02, 5.107917842803e+02),
];

const CHECKSUMS_B: &[(f64, f64)] = &[
    (5.177643571579e+02, 5.077803458597e+02),
    (5.154521291263e+02, 5.088249431599e+02),
    (5.146409228649e+02, 5.096208912659e+02),
    (5.142378756213e+02, 5.101023387619e+02),
    (5.139626667737e+02, 5.103976610617e+02),
    (5.137423460082e+02, 5.105948019802e+02),
    (5.135547056878e+02, 5.107404165783e+02),
    (5.133910925466e+02, 5.108576573661e+02),
    (5.132470705390e+02, 5.109577278523e+02),
    (5.131197729984e+02, 5.110460304483e+02),
    (5.130070319283e+02, 5.111252433800e+02),
    (5.129070537032e+02, 5.111968077718e+02),
    (5.128182883502e+02, 5.112616233064e+02),
    (5.127393733383e+02, 5.113203605551e+02),
    (5.126691062020e+02, 5.113735928093e+02),
    (5.126064276004e+02, 5.114218460548e+02),
    (5.125504076570e+02, 5.114656139760e+02),
    (5.125002331720e+02, 5.115053595966e+02),
    (5.124551951846e+02, 5.115415130407e+02),
    (5.124146770029e+02, 5.115744692211e+02),
];

const CHECKSUMS_C: &[(f64, f64)] = &[
    (5.195078707457e+02, 5.149019699238e+02),
    (5.155422171134e+02, 5.127578201997e+02),
    (5.144678022222e+02, 5.122251847514e+02),
    (5.140150594328e+02, 5.121090289018e+02),
    (5.137550426810e+02, 5.121143685824e+02),
    (5.135811056728e+02, 5.121496764568e+02),
    (5.134569343165e+02, 5.121870921893e+02),
    (5.133651975661e+02, 5.122193250322e+02),
    (5.132955192805e+02, 5.122454735794e+02),
    (5.132410471738e+02, 5.122663649603e+02),
    (5.131971141679e+02, 5.122830879827e+02),
    (5.131605205716e+02, 5.122965869718e+02),
    (5.131290734194e+02, 5.123075927445e+02),
    (5.131012720314e+02, 5.123166486553e+02),
    (5.130760908195e+02, 5.123241541685e+02),
    (5.130528295923e+02, 5.123304037599e+02),
    (5.130310107773e+02, 5.123356167976e+02),
    (5.130103090133e+02, 5.123399592211e+02),
    (5.129905029333e+02, 5.123435588985e+02),
    (5.129714421109e+02, 5.123465164008e+02),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_counts_must_be_powers_of_two_that_fit_the_slabs() {
        assert!(check(Class::S, 4).is_ok() && check(Class::W, 32).is_ok() && check(Class::A, 128).is_ok());
        assert!(check(Class::S, 3).unwrap_err().contains("power-of-two"));
        let why = check(Class::W, 64).unwrap_err();
        assert!(why.contains("at most 32 ranks, got 64"), "{why}");
    }

    #[test]
    fn operation_count_is_npbs() {
        // NPB FT class A reports 2.32 s as 3076.68 Mop/s.
        let mops = Problem::of(Class::A).mega_ops() / 2.32;
        assert!((mops - 3076.68).abs() < 2.0, "{mops}");
    }
}
