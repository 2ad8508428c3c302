//! Class S of every kernel verifies against NPB's official values on thread ranks (shm, np 1, 2
//! and 4) and on the tcp device (np 2, loopback); unsupported classes and rank counts are clear
//! errors before any communication.

#[path = "../../fastmp/tests/watchdog/mod.rs"]
mod watchdog;

use fastmp::{Config, DeviceKind};
use fastmp_npb::{Class, Kernel, Outcome};

fn run(kernel: Kernel, class: Class, device: DeviceKind, np: usize) -> fastmp::Result<Vec<Outcome>> {
    let _guard = watchdog::watchdog(format!("{kernel} class {class} on {np} {device:?} ranks"));
    Config::new().device(device).np(np).run(move |world| kernel.run(&world, class))
}

/// Runs class S on shm at np 1, 2, 4 and on tcp at np 2 (np 1 where the kernel needs a
/// square count); every rank must report the same verified outcome.
fn class_s_verifies(kernel: Kernel) {
    let jobs = [(DeviceKind::Shm, 1), (DeviceKind::Shm, 2), (DeviceKind::Shm, 4), (DeviceKind::Tcp, 2)];
    for (device, np) in jobs {
        let outcomes = run(kernel, Class::S, device, np).unwrap_or_else(|e| panic!("{kernel} S, {np} {device:?}: {e}"));
        assert_eq!(outcomes.len(), np);
        let first = &outcomes[0];
        assert!(first.verified(), "{kernel} S on {np} {device:?} ranks did not verify:\n{}", first.report());
        assert_eq!((first.kernel, first.class, first.np), (kernel, Class::S, np));
        assert!(first.seconds > 0.0 && first.mops > 0.0, "{}", first.report());
        assert!(outcomes.iter().all(|o| o == first), "ranks disagree on the outcome of {kernel} S");
    }
}

#[test]
fn ep_class_s_verifies() {
    class_s_verifies(Kernel::Ep);
}

#[test]
fn is_class_s_verifies() {
    class_s_verifies(Kernel::Is);
}

#[test]
fn cg_class_s_verifies() {
    class_s_verifies(Kernel::Cg);
}

#[test]
fn mg_class_s_verifies() {
    class_s_verifies(Kernel::Mg);
}

#[test]
fn ft_class_s_verifies() {
    class_s_verifies(Kernel::Ft);
}

#[test]
fn kernels_that_halve_the_problem_refuse_three_ranks_on_every_rank() {
    for kernel in [Kernel::Cg, Kernel::Is, Kernel::Mg, Kernel::Ft] {
        let why = kernel.check(Class::S, 3).expect_err("3 ranks");
        assert!(why.contains("power-of-two"), "{kernel}: {why}");
        match run(kernel, Class::S, DeviceKind::Shm, 3) {
            Err(e) => assert!(e.to_string().contains("power-of-two"), "{kernel}: {e}"),
            Ok(_) => panic!("{kernel} ran on 3 ranks"),
        }
    }
}

#[test]
fn every_kernel_refuses_no_ranks() {
    for kernel in Kernel::ALL {
        assert!(kernel.check(Class::S, 0).is_err(), "{kernel}");
    }
}
