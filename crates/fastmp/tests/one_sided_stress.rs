//! Scale and randomised traffic for one-sided communication: a put/get ring on every job size
//! from 1 to 16 ranks under fence and lock_all, a fetch_and_op counter on 16 ranks, random
//! mixes of put/get/accumulate (each origin in its own slice of every target, checked against a
//! local model at every flush and at the end) across fence, PSCW and lock epochs, and windows
//! created and freed in a loop. Both devices; sizes kept small so the suite stays quick.

mod common;
mod one_sided_common;

use common::{Rng, device_suite, mix};
use fastmp::op::{NoOp, Replace, Sum};
use fastmp::window::{Assert, LockKind, Window};
use fastmp::{Comm, DeviceKind, Result};
use one_sided_common::run;

fn ring(world: &Comm) -> Result<()> {
    let (me, np) = (world.rank(), world.size());
    let (left, right) = ((me + np - 1) % np, (me + 1) % np);
    let win = world.win_allocate::<u64>(3)?;
    win.fence(Assert::NOPRECEDE)?;
    win.put(&[me as u64, np as u64], right, 0)?;
    win.fence(Assert::NONE)?;
    let mut got = [0u64; 2];
    win.get(&mut got, left, 0)?;
    assert_eq!(got, [((left + np - 1) % np) as u64, np as u64], "rank {me} of {np}: fence ring");
    win.fence(Assert::NOSUCCEED)?;
    assert_eq!(win.local()?[..2], [left as u64, np as u64]);
    win.lock_all(Assert::NONE)?;
    win.accumulate(&[me as u64 + 1], right, 2, Sum)?;
    win.flush(right)?;
    win.unlock_all()?;
    world.barrier()?;
    assert_eq!(win.local()?[2], left as u64 + 1, "rank {me} of {np}: lock_all ring");
    win.free()
}

fn ring_on_1_to_16_ranks(dev: DeviceKind) {
    for np in 1..=16 {
        run(dev, np, |world| ring(&world)).unwrap_or_else(|e| panic!("np {np}: {e}"));
    }
}

fn fetch_and_op_counter_on_16_ranks(dev: DeviceKind) {
    const N: usize = 8;
    run(dev, 16, |world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<u32>(1)?;
        win.lock(LockKind::Shared, np / 2, Assert::NONE)?;
        let mine: Vec<u32> = (0..N).map(|_| win.fetch_and_op(1, np / 2, 0, Sum)).collect::<Result<_>>()?;
        win.unlock(np / 2)?;
        let mut all = vec![0u32; N * np];
        world.allgather(&mine, &mut all)?;
        all.sort_unstable();
        assert_eq!(all, (0..(N * np) as u32).collect::<Vec<_>>());
        world.barrier()?;
        if me == np / 2 {
            assert_eq!(win.local()?[0], (N * np) as u32);
        }
        win.free()
    })
    .unwrap();
}

/// Elements per origin slice in each target part.
const SLICE: usize = 16;

/// How each round synchronises.
#[derive(Clone, Copy, Debug)]
enum Epoch {
    Fence,
    Pscw,
    LockAll,
    Lock,
}

/// One random operation of `origin` on its slice of `target`, applied to the model too; every
/// value read back is checked against the model. MPI orders only accumulate-family operations
/// of one origin to one location, so in active-target epochs puts are `Replace` accumulates and
/// gets are `NoOp` get-accumulates; in passive-target epochs (`passive`) plain puts and gets
/// are used, with a flush between.
fn random_op(
    win: &Window<'_, i64>,
    rng: &mut Rng,
    model: &mut [Vec<i64>],
    (origin, target): (usize, usize),
    passive: bool,
) -> Result<()> {
    let at = rng.range(0, SLICE - 1);
    let len = rng.range(1, SLICE - at);
    let disp = origin * SLICE + at;
    let data: Vec<i64> = (0..len).map(|_| rng.below(1000) as i64 - 500).collect();
    let slice = &mut model[target][at..at + len];
    let what = format!("rank {origin} at {target}:{disp}");
    match rng.below(5) {
        0 if passive => {
            win.put(&data, target, disp)?;
            win.flush(target)?;
            slice.copy_from_slice(&data);
        }
        0 => {
            win.accumulate(&data, target, disp, Replace)?;
            slice.copy_from_slice(&data);
        }
        1 => {
            win.accumulate(&data, target, disp, Sum)?;
            slice.iter_mut().zip(&data).for_each(|(m, d)| *m += d);
        }
        2 => {
            let mut old = vec![0i64; len];
            win.get_accumulate(&data, &mut old, target, disp, Replace)?;
            assert_eq!(old, slice, "{what}: get_accumulate's previous values");
            slice.copy_from_slice(&data);
        }
        3 => {
            let old = win.fetch_and_op(data[0], target, disp, Sum)?;
            assert_eq!(old, slice[0], "{what}: fetch_and_op's previous value");
            slice[0] += data[0];
        }
        _ => {
            let mut got = vec![0i64; len];
            if passive {
                win.flush(target)?;
                win.get(&mut got, target, disp)?;
            } else {
                win.get_accumulate(&[], &mut got, target, disp, NoOp)?;
            }
            assert_eq!(got, slice, "{what}: read back");
        }
    }
    Ok(())
}

fn random_ops_against_a_model(dev: DeviceKind) {
    const ROUNDS: usize = 8;
    const OPS: usize = 24;
    run(dev, 4, |world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<i64>(np * SLICE)?;
        // model[t] = what this rank's slice of rank t's part holds.
        let mut model = vec![vec![0i64; SLICE]; np];
        let everyone = world.group();
        for round in 0..ROUNDS {
            let sync = [Epoch::Fence, Epoch::Pscw, Epoch::LockAll, Epoch::Lock][round % 4];
            let mut rng = Rng::new(mix(&[me as u64, round as u64, 13]));
            match sync {
                Epoch::Fence => win.fence(Assert::NONE)?,
                Epoch::Pscw => {
                    win.post(&everyone, Assert::NONE)?;
                    win.start(&everyone, Assert::NONE)?;
                }
                Epoch::LockAll => win.lock_all(Assert::NONE)?,
                Epoch::Lock => {}
            }
            for _ in 0..OPS {
                let target = rng.below(np as u64) as usize;
                if let Epoch::Lock = sync {
                    win.lock(LockKind::Shared, target, Assert::NONE)?;
                }
                random_op(&win, &mut rng, &mut model, (me, target), matches!(sync, Epoch::Lock | Epoch::LockAll))?;
                if let Epoch::Lock = sync {
                    win.unlock(target)?;
                }
            }
            // Check every slice of this origin against the model, inside the epoch.
            if let Epoch::LockAll = sync {
                win.flush_all()?;
                for (t, want) in model.iter().enumerate() {
                    let mut got = vec![0i64; SLICE];
                    win.get(&mut got, t, me * SLICE)?;
                    assert_eq!(&got, want, "rank {me} round {round}: slice at {t} after flush_all");
                }
            }
            match sync {
                Epoch::Fence => win.fence(Assert::NOSUCCEED)?,
                Epoch::Pscw => {
                    win.complete()?;
                    win.wait()?;
                }
                Epoch::LockAll => win.unlock_all()?,
                Epoch::Lock => world.barrier()?,
            }
        }
        world.barrier()?;
        // Every origin's slice of this part, as each origin's model says.
        let mut models = vec![0i64; np * np * SLICE];
        world.allgather(&model.concat(), &mut models)?;
        let part = win.local()?;
        for o in 0..np {
            let want = &models[(o * np + me) * SLICE..][..SLICE];
            assert_eq!(&part[o * SLICE..][..SLICE], want, "rank {me}: slice of origin {o}");
        }
        drop(part);
        win.free()
    })
    .unwrap();
}

/// Windows of every creation kind made and freed in a loop, some alive at once.
fn windows_created_and_freed_in_a_loop(dev: DeviceKind) {
    run(dev, 3, |world| {
        let (me, np) = (world.rank(), world.size());
        let right = (me + 1) % np;
        let keep = world.win_allocate::<u8>(64)?;
        keep.lock_all(Assert::NONE)?;
        for i in 0..20usize {
            let win = world.win_allocate::<u32>(1 + i % 5)?;
            win.fence(Assert::NONE)?;
            win.put(&[i as u32], right, 0)?;
            keep.accumulate(&[1u8], right, i, Sum)?;
            win.fence(Assert::NOSUCCEED)?;
            assert_eq!(win.local()?[0], i as u32);
            win.free()?;
            let mut mem = vec![0u16; 2];
            world.win_create(&mut mem, |w| {
                w.fence(Assert::NONE)?;
                w.put(&[i as u16], right, 1)?;
                w.fence(Assert::NOSUCCEED)
            })?;
            assert_eq!(mem, [0, i as u16]);
        }
        keep.unlock_all()?;
        world.barrier()?;
        assert!(keep.local()?[..20].iter().all(|&x| x == 1));
        keep.free()
    })
    .unwrap();
}

device_suite! {
    both: [
        ring_on_1_to_16_ranks,
        fetch_and_op_counter_on_16_ranks,
        random_ops_against_a_model,
        windows_created_and_freed_in_a_loop,
    ],
    tcp_ignored: [],
}
