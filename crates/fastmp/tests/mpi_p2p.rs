//! Point-to-point on the mpi device. Run under `mpirun` by `scripts/mpi-device.sh` (np 2 and 4,
//! `--test-threads=1` so every process runs the same tests in the same order): each test joins
//! the MPI job with `Config::from_env()` and asserts on its own rank's results.

#![cfg(feature = "mpi")]

use fastmp::{Comm, Config, Result};

/// Runs `f` as this process's rank of a fresh job on the mpi device.
fn job<R: Send>(f: impl Fn(Comm) -> Result<R> + Sync) -> R {
    let config = Config::from_env().expect("launch environment");
    assert_eq!(config.get_device().to_string_lossy(), "mpi", "run under mpirun -x FASTMP_DEVICE=mpi");
    let mut results = config.run(f).expect("job");
    assert_eq!(results.len(), 1, "one rank per process");
    results.pop().unwrap()
}

trait DeviceName {
    fn to_string_lossy(&self) -> String;
}

impl DeviceName for fastmp::DeviceKind {
    fn to_string_lossy(&self) -> String {
        format!("{self:?}").to_lowercase()
    }
}

#[test]
fn blocking_ring() {
    let got = job(|world| {
        let (rank, size) = (world.rank(), world.size());
        assert_eq!(world.device_name(), "mpi");
        let next = (rank + 1) % size;
        let prev = (rank + size - 1) % size;
        let mut got = [0u64; 3];
        if rank == 0 {
            world.send(&[rank as u64, 10, 20], next, 7)?;
            world.recv(&mut got, prev, 7)?;
        } else {
            world.recv(&mut got, prev, 7)?;
            world.send(&[rank as u64, 10, 20], next, 7)?;
        }
        Ok((prev, got))
    });
    assert_eq!(got.1, [got.0 as u64, 10, 20]);
}
