//! What a kernel run produced, and NPB's way of printing it.

use std::fmt::Write as _;

use fastmp::Comm;

use crate::{Class, Kernel};

/// One verified quantity: the value a run computed beside the official one.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// What was compared, e.g. `"zeta"` or `"checksum 3 (re)"`.
    pub name: String,
    pub computed: f64,
    pub reference: f64,
    /// The largest relative error NPB accepts (0 for exact integer checks).
    pub tolerance: f64,
}

impl Check {
    /// A value that must be within `tolerance` of `reference`, relatively (NPB's `epsilon`).
    pub fn relative(name: impl Into<String>, computed: f64, reference: f64, tolerance: f64) -> Self {
        Check { name: name.into(), computed, reference, tolerance }
    }

    /// An integer that must equal `reference` exactly.
    pub fn exact(name: impl Into<String>, computed: i64, reference: i64) -> Self {
        Check { name: name.into(), computed: computed as f64, reference: reference as f64, tolerance: 0.0 }
    }

    /// The relative error NPB compares with the tolerance.
    pub fn error(&self) -> f64 {
        if self.reference == 0.0 {
            self.computed.abs()
        } else {
            ((self.computed - self.reference) / self.reference).abs()
        }
    }

    /// Whether the value verifies (a NaN never does).
    pub fn passed(&self) -> bool {
        if self.tolerance == 0.0 { self.computed == self.reference } else { self.error() <= self.tolerance }
    }
}

/// A kernel's result, the same on every rank of the job.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub kernel: Kernel,
    pub class: Class,
    pub np: usize,
    /// The device the job ran on (`Comm::device_name`).
    pub device: &'static str,
    /// The problem size as NPB prints it (`"256x256x128"`, `"8388608"`).
    pub size: String,
    pub iterations: usize,
    /// The timed section's wall time on the slowest rank (see [`job_seconds`]).
    pub seconds: f64,
    /// NPB's `Mop/s total` for the timed section.
    pub mops: f64,
    /// NPB's `Operation type` line (`"floating point"`, `"keys ranked"`, ...).
    pub operation: &'static str,
    /// The official values checked; the run verifies when there is at least one and all pass.
    pub checks: Vec<Check>,
}

impl Outcome {
    /// Whether every official value verified.
    pub fn verified(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(Check::passed)
    }

    /// NPB's closing report, with the verified values above it.
    pub fn report(&self) -> String {
        let mut out = String::new();
        let name = self.kernel.name().to_uppercase();
        for check in &self.checks {
            let _ = writeln!(
                out,
                " {:<22} computed {:>24.15e}  reference {:>24.15e}  error {:.3e}  {}",
                check.name,
                check.computed,
                check.reference,
                check.error(),
                if check.passed() { "ok" } else { "FAILED" }
            );
        }
        let verdict = if self.verified() { "SUCCESSFUL" } else { "UNSUCCESSFUL" };
        let lines: [(&str, String); 10] = [
            ("Class", self.class.to_string()),
            ("Size", self.size.clone()),
            ("Iterations", self.iterations.to_string()),
            ("Time in seconds", format!("{:.2}", self.seconds)),
            ("Total processes", self.np.to_string()),
            ("Mop/s total", format!("{:.2}", self.mops)),
            ("Mop/s/process", format!("{:.2}", self.mops / self.np as f64)),
            ("Operation type", self.operation.to_string()),
            ("Verification", verdict.to_string()),
            ("Device", self.device.to_string()),
        ];
        let _ = writeln!(out, "\n\n {name} Benchmark Completed.");
        for (label, value) in lines {
            let _ = writeln!(out, " {label:<16}= {value:>24}");
        }
        out
    }

    /// The one-line JSON summary of `--json`.
    pub fn json(&self) -> String {
        format!(
            r#"{{"kernel":"{}","class":"{}","np":{},"device":"{}","seconds":{},"mops":{},"verified":{}}}"#,
            self.kernel.name(),
            self.class,
            self.np,
            self.device,
            finite(self.seconds),
            finite(self.mops),
            self.verified()
        )
    }
}

/// JSON has no NaN or infinity: such a figure is `null`.
fn finite(x: f64) -> String {
    if x.is_finite() { format!("{x}") } else { "null".into() }
}

/// The job's time for a section every rank timed itself: the slowest rank's, as NPB reports
/// it. Collective over `world`.
pub fn job_seconds(world: &Comm, local_seconds: f64) -> fastmp::Result<f64> {
    let mut max = [0.0];
    world.allreduce(&[local_seconds], &mut max, fastmp::op::Max)?;
    Ok(max[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(checks: Vec<Check>) -> Outcome {
        Outcome {
            kernel: Kernel::Cg,
            class: Class::S,
            np: 2,
            device: "shm",
            size: "1400".into(),
            iterations: 15,
            seconds: 0.5,
            mops: 123.25,
            operation: "floating point",
            checks,
        }
    }

    #[test]
    fn verdict_needs_every_check_and_at_least_one() {
        assert!(!outcome(vec![]).verified());
        let good = Check::relative("zeta", 8.5971775078648, 8.5971775078648, 1e-10);
        let bad = Check::relative("zeta", 8.6, 8.5971775078648, 1e-10);
        let nan = Check::relative("zeta", f64::NAN, 8.5971775078648, 1e-10);
        assert!(outcome(vec![good.clone()]).verified());
        assert!(!outcome(vec![good.clone(), bad]).verified());
        assert!(!outcome(vec![nan]).verified());
        assert!(Check::exact("rank", 7, 7).passed() && !Check::exact("rank", 7, 8).passed());
    }

    #[test]
    fn report_and_json_say_the_same() {
        let o = outcome(vec![Check::relative("zeta", 1.0, 1.0, 1e-10)]);
        assert!(o.report().contains("Verification    =               SUCCESSFUL"));
        assert!(o.report().contains("Mop/s total     =                   123.25"));
        assert_eq!(
            o.json(),
            r#"{"kernel":"cg","class":"S","np":2,"device":"shm","seconds":0.5,"mops":123.25,"verified":true}"#
        );
        let mut nan = o.clone();
        nan.mops = f64::NAN;
        assert!(nan.json().contains(r#""mops":null"#));
    }
}
