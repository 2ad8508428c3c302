//! Small messages allocate nothing on the hot path: after warm-up, a ping-pong of eager messages
//! (blocking and nonblocking) performs zero heap allocations on either rank thread, on the shm
//! and tcp devices.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct CountingAlloc;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a thread-local `Cell` without
// destructor, so touching it cannot allocate or recurse.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn allocations() -> u64 {
    ALLOCS.with(|c| c.get())
}

fn ping_pong(world: &fastmp::Comm, rounds: usize, out: &[u8], inc: &mut [u8]) -> fastmp::Result<()> {
    let peer = 1 - world.rank();
    for _ in 0..rounds {
        if world.rank() == 0 {
            world.send(out, peer, 1)?;
            world.recv(inc, peer, 1)?;
        } else {
            world.recv(inc, peer, 1)?;
            world.send(out, peer, 1)?;
        }
        assert!(inc.iter().all(|&b| b == peer as u8));
        // Nonblocking variant; `waitall` on a slice allocates its status vector, so complete the
        // requests one by one here.
        world.scope(|s| {
            let r = s.irecv(&mut *inc, peer, 2)?;
            let w = s.isend(out, peer, 2)?;
            w.wait()?;
            r.wait().map(drop)
        })?;
    }
    Ok(())
}

/// Allocations per size during 500 round trips after a warm-up, per rank.
fn allocations_per_size(config: fastmp::Config, sizes: &[usize]) -> Vec<Vec<(usize, u64)>> {
    config
        .run(|world| {
            let mut per_size = Vec::new();
            for &size in sizes {
                let out = vec![world.rank() as u8; size];
                let mut inc = vec![0u8; size];
                ping_pong(&world, 50, &out, &mut inc)?; // warm-up: pools and spill buffers fill here
                let before = allocations();
                ping_pong(&world, 500, &out, &mut inc)?;
                per_size.push((size, allocations() - before));
            }
            Ok(per_size)
        })
        .unwrap()
}

fn assert_no_allocations(counts: &[Vec<(usize, u64)>]) {
    for (rank, per_size) in counts.iter().enumerate() {
        for &(size, n) in per_size {
            assert_eq!(n, 0, "rank {rank}: {n} allocations during 500 round trips of {size} bytes");
        }
    }
}

#[test]
fn eager_messages_do_not_allocate_after_warm_up() {
    assert_no_allocations(&allocations_per_size(fastmp::Config::new().np(2), &[0, 8, 24, 25, 1024, 4096]));
}

/// On tcp the rank thread receives directly from its sockets; rendezvous sizes are included
/// because their requests and queues are recycled too.
#[test]
fn tcp_messages_do_not_allocate_after_warm_up() {
    let config = fastmp::Config::new().device(fastmp::DeviceKind::Tcp).np(2);
    assert_no_allocations(&allocations_per_size(config, &[0, 8, 1024, 8192, 65536]));
}
