//! Strided transfers and checked receives allocate nothing once warm: the packing staging buffer
//! is the rank's, reused by every call (shm and tcp).

use fastmp::layout::Vector;
use fastmp::{Comm, Config, DeviceKind, Result};

mod alloc_counter;
use alloc_counter::allocations;

/// `rounds` column ping-pongs of `rows` elements plus a checked receive of flags each way.
fn strided_ping_pong(world: &Comm, rounds: usize, matrix: &mut [f64], rows: usize) -> Result<()> {
    let column = Vector { count: rows, blocklength: 1, stride: rows };
    let peer = 1 - world.rank();
    let mut flags = [false; 3];
    for _ in 0..rounds {
        if world.rank() == 0 {
            world.send_strided(matrix, &column, peer, 1)?;
            world.recv_strided(matrix, &column, peer, 1)?;
            world.send(&[true, false, true], peer, 2)?;
            assert!(world.recv_value::<bool>(peer, 3)?.0);
        } else {
            world.recv_strided(matrix, &column, peer, 1)?;
            world.send_strided(matrix, &column, peer, 1)?;
            world.recv_checked(&mut flags, peer, 2)?;
            world.send_value(&true, peer, 3)?;
        }
    }
    Ok(())
}

/// Allocations of each rank during 200 round trips after a warm-up.
fn strided_allocations(dev: DeviceKind, rows: usize) -> Vec<u64> {
    Config::new()
        .device(dev)
        .np(2)
        .run(|world| {
            let mut matrix: Vec<f64> = (0..rows * rows).map(|k| k as f64).collect();
            // Warm-up. The shm ring gives its slots spill buffers at the first spilled eager payload
            // that waits in it, which a posted receive avoids, so one message too long to continue
            // in the ring's lines (over 104 B) is left waiting each way.
            world.send(&[0u8; 256], 1 - world.rank(), 4)?;
            world.barrier()?;
            world.recv_checked(&mut [0u8; 256], 1 - world.rank(), 4)?;
            strided_ping_pong(&world, 70, &mut matrix, rows)?;
            let before = allocations();
            strided_ping_pong(&world, 200, &mut matrix, rows)?;
            Ok(allocations() - before)
        })
        .unwrap()
}

#[test]
fn shm_strided_transfers_allocate_nothing() {
    // Eager (2 KiB packed) and rendezvous (16 KiB packed) columns.
    for rows in [256, 2048] {
        assert_eq!(strided_allocations(DeviceKind::Shm, rows), [0, 0], "{rows}-element column");
    }
}

#[test]
fn tcp_strided_transfers_allocate_nothing() {
    assert_eq!(strided_allocations(DeviceKind::Tcp, 256), [0, 0], "256-element column");
}
