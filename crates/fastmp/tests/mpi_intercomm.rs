//! Intercommunicators on the mpi device, under `mpirun` (`scripts/mpi-device.sh`, np 2 and 4):
//! the checks of `common/intercomm_checks.rs` (shared with `comms_intercomm.rs`, which runs them
//! on shm and tcp) at whatever size the launcher gives.

#![cfg(feature = "mpi")]

#[path = "common/intercomm_checks.rs"]
mod intercomm_checks;

use fastmp::{Comm, Config, DeviceKind, Result};

/// Runs `f` as this process's rank of a fresh job on the mpi device.
fn job(f: impl Fn(Comm) -> Result<()> + Sync) {
    let config = Config::from_env().expect("launch environment");
    assert_eq!(config.get_device(), DeviceKind::Mpi, "run under mpirun -x FASTMP_DEVICE=mpi");
    config.run(f).expect("job");
}

#[test]
fn halves_of_the_world_talk_point_to_point() {
    job(intercomm_checks::halves_of_the_world_talk_point_to_point);
}

#[test]
fn collectives_move_data_between_the_groups() {
    job(intercomm_checks::collectives_move_data_between_the_groups);
}

#[test]
fn merge_orders_the_low_group_first() {
    job(intercomm_checks::merge_orders_the_low_group_first);
}

#[test]
fn intercomm_create_errors_reach_every_rank() {
    job(intercomm_checks::intercomm_create_errors_reach_every_rank);
}
