//! `fastmp-bench halo_persistent`: a halo exchange with both ring neighbours (at np 2 the one
//! peer is both), done with persistent requests (`send_init`/`recv_init` once, then
//! `startall` + `waitall` per iteration) and, alternately, with the same exchange started anew
//! every iteration (`Comm::scope` + `irecv`/`isend` + `waitall`), the per-iteration pattern that
//! persistent requests replace (MPI_Start vs MPI_Isend/MPI_Irecv). Each size runs [`ROUNDS`]
//! alternating rounds of both; the table shows each variant's median round (the mean over ranks
//! of the per-exchange time) and their ratio.

use fastmp::{Comm, PersistentRequest, Result, startall, waitall};

use crate::coll::{Iterations, measure_with};
use crate::report::{Cell, Reporter};
use crate::support::{Sizes, median};

/// Rounds per size, each timing both variants (which goes first alternates).
const ROUNDS: usize = 7;

/// Tags: a message to the right neighbour, and one to the left (distinct at np 2).
const TO_RIGHT: i32 = 1;
const TO_LEFT: i32 = 2;

fn neighbours(world: &Comm) -> (usize, usize) {
    let (np, me) = (world.size(), world.rank());
    ((me + np - 1) % np, (me + 1) % np)
}

/// The four persistent requests of one rank: receives from both sides, sends to both.
fn persistent(world: &Comm, size: usize) -> Result<Vec<PersistentRequest<u8>>> {
    let (left, right) = neighbours(world);
    Ok(vec![
        world.recv_init(vec![0u8; size], left, TO_RIGHT)?,
        world.recv_init(vec![0u8; size], right, TO_LEFT)?,
        world.send_init(vec![1u8; size], right, TO_RIGHT)?,
        world.send_init(vec![1u8; size], left, TO_LEFT)?,
    ])
}

/// The buffers of the per-iteration exchange (as many as the persistent requests own).
struct Buffers {
    from_left: Vec<u8>,
    from_right: Vec<u8>,
    to_right: Vec<u8>,
    to_left: Vec<u8>,
}

/// One exchange started from scratch on borrowed buffers.
fn exchange(world: &Comm, b: &mut Buffers) -> Result<()> {
    let (left, right) = neighbours(world);
    world.scope(|s| {
        let mut reqs = [
            s.irecv(&mut b.from_left, left, TO_RIGHT)?,
            s.irecv(&mut b.from_right, right, TO_LEFT)?,
            s.isend(&b.to_right, right, TO_RIGHT)?,
            s.isend(&b.to_left, left, TO_LEFT)?,
        ];
        waitall(&mut reqs).map(drop)
    })
}

pub fn bench(world: &Comm, sizes: &Sizes, iterations: Iterations, out: &Reporter) -> Result<()> {
    out.header(
        "Halo Exchange Latency Test, persistent vs per-iteration requests",
        &[
            "# Each rank exchanges `size` bytes with both ring neighbours per iteration".to_string(),
            format!("# Medians of {ROUNDS} alternating rounds; Ratio = Persistent / Isend-Irecv"),
        ],
        &["Persistent(us)", "Isend-Irecv(us)", "Ratio"],
    );
    for size in sizes.iter() {
        let mut reqs = persistent(world, size)?;
        let mut bufs = Buffers {
            from_left: vec![0u8; size],
            from_right: vec![0u8; size],
            to_right: vec![1u8; size],
            to_left: vec![1u8; size],
        };
        let (mut per_start, mut per_iteration) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            let mut persistent_round = || {
                measure_with(world, size, iterations, true, || {
                    startall(&mut reqs)?;
                    waitall(&mut reqs).map(drop)
                })
            };
            let mut per_iteration_round = || measure_with(world, size, iterations, true, || exchange(world, &mut bufs));
            // Alternating which goes first cancels what the order does (caches, frequency).
            let (p, i) = if round % 2 == 0 {
                let p = persistent_round()?;
                (p, per_iteration_round()?)
            } else {
                let i = per_iteration_round()?;
                (persistent_round()?, i)
            };
            if let (Some(p), Some(i)) = (p, i) {
                per_start.push(p.avg_us);
                per_iteration.push(i.avg_us);
            }
        }
        if reqs[0].buf()?.iter().chain(&bufs.from_right).any(|&b| b != 1) {
            return Err(fastmp::Error::other(format!("halo_persistent at {size} B: wrong data received")));
        }
        if per_start.is_empty() {
            continue;
        }
        let (p, i) = (median(per_start), median(per_iteration));
        out.row_cells(
            size,
            &[
                ("persistent_us", Cell::Num(p)),
                ("isend_irecv_us", Cell::Num(i)),
                ("ratio", Cell::Num(if i > 0.0 { p / i } else { 0.0 })),
            ],
        );
    }
    Ok(())
}
