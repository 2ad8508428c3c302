//! Nonblocking collectives (issue 5) against their blocking twins (the model:
//! `nonblocking_common`):
//! 1. each of the sixteen collectives at several process counts, sizes (0, 1, 5 and a rendezvous
//!    size) and roots, under the default tuning, every collective forced to the shared-memory
//!    slot algorithm (`native`), and forced to each of its point-to-point algorithms; also at
//!    tiny and huge eager limits;
//! 2. random rounds of several outstanding collectives on the world and a dup or a split of it,
//!    mixed with point-to-point traffic and completed in random order by every completion call
//!    (16 ranks on few cores too, and tcp with its progress thread); more outstanding
//!    collectives than the slots; blocking collectives issued among nonblocking ones; native
//!    bcasts in random arrival orders.
//!
//! Every job runs under the watchdog of `coll_common::job`, so a hang fails the test.

mod coll_common;
mod common;
mod nonblocking_common;

use std::time::Duration;

use coll_common::{Context, val};
use common::{Rng, device_suite, mix};
use fastmp::coll::{Algorithm, Collective};
use fastmp::{
    ANY_SOURCE, Comm, Config, DeviceKind, Error, Request, Result, Source, testall, testany, waitall, waitany,
};
use nonblocking_common::{
    BIG, Bufs, Case, Kind, P2P_TAG, P2P_VARIANTS, Red, SENTINEL, Tunings, blocking, compose, config, reference,
    run_config, run_job, same, shuffle, spin, start, twin_result,
};

// ---------------------------------------------------------------- 1. twins

/// How a single request is completed.
#[derive(Clone, Copy, Debug)]
enum Completion {
    Wait,
    TestLoop,
    Waitall,
    Waitany,
    Testany,
    Testall,
}

const COMPLETIONS: [Completion; 6] = [
    Completion::Wait,
    Completion::TestLoop,
    Completion::Waitall,
    Completion::Waitany,
    Completion::Testany,
    Completion::Testall,
];

fn complete(mut req: Request<'_>, how: Completion) -> Result<()> {
    let one = std::slice::from_mut(&mut req);
    match how {
        Completion::Wait => req.wait().map(drop),
        Completion::Waitall => waitall(one).map(drop),
        Completion::Waitany => match waitany(one)? {
            Some((0, _)) => Ok(()),
            other => Err(Error::other(format!("waitany on one active request gave {other:?}"))),
        },
        Completion::TestLoop => spin(|| Ok(req.test()?.is_some())),
        Completion::Testany => spin(|| Ok(testany(one)?.is_some())),
        Completion::Testall => spin(|| Ok(testall(one)?.is_some())),
    }
}

/// The cases of the twin sweep at `np` ranks: every collective, size, reduction and the roots
/// 0, the middle rank and the last.
fn twin_cases(np: usize) -> Vec<Case> {
    let mut roots = vec![np - 1, np / 2, 0];
    roots.dedup();
    let mut cases = Vec::new();
    for kind in Kind::ALL {
        let roots: &[usize] = if kind.is_rooted() { &roots } else { &[0] };
        let reds: &[Red] = if kind.reduces() { &[Red::Affine, Red::Sum] } else { &[Red::Sum] };
        for n in kind.sizes(np) {
            for &root in roots {
                for &red in reds {
                    cases.push(Case::new(kind, n, root, red, np as u64));
                }
            }
        }
    }
    cases
}

/// Every nonblocking collective gives its blocking twin's result, under `tunings` (for
/// [`Tunings::P2p`] each of the `P2P_VARIANTS` choices in turn), at the process counts of the
/// device, completed by each completion call in turn.
fn twins(dev: DeviceKind, tunings: Tunings) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[1, 2, 3, 4, 7, 8],
        _ => &[1, 3, 4],
    };
    for &np in nps {
        twins_on(config(dev, np), tunings);
    }
}

/// [`twins`] on the ranks of `config`.
fn twins_on(config: Config, tunings: Tunings) {
    let np = config.get_np();
    let variants = match tunings {
        Tunings::P2p => P2P_VARIANTS,
        _ => 1,
    };
    run_config(config, &format!("twins under {tunings:?} tuning"), move |world| {
        for k in 0..variants {
            let comm = world.with_tuning(tunings.tuning(k));
            for (i, case) in twin_cases(np).iter().enumerate() {
                let how = COMPLETIONS[i % COMPLETIONS.len()];
                let what = || format!("{case} (variant {k}) completed by {how:?} on rank {}", comm.rank());
                let want = twin_result(&comm, case)?;
                let mut got = case.bufs(np, comm.rank());
                comm.scope(|s| complete(start(s, case, &mut got)?, how)).ctx(what)?;
                same(&got, &want, what)?;
            }
        }
        Ok(())
    });
}

/// With a tiny eager limit every message but the smallest goes by rendezvous, and with a large
/// one even the rendezvous-sized cases go eagerly.
fn twins_at_other_eager_limits(dev: DeviceKind) {
    for eager_limit in [16, 1 << 20] {
        for tunings in [Tunings::Default, Tunings::P2p] {
            twins_on(config(dev, 3).eager_limit(eager_limit), tunings);
        }
    }
}

fn twins_default_tuning(dev: DeviceKind) {
    twins(dev, Tunings::Default);
}

fn twins_native(dev: DeviceKind) {
    twins(dev, Tunings::Native);
}

fn twins_point_to_point(dev: DeviceKind) {
    twins(dev, Tunings::P2p);
}

#[test]
fn the_affine_op_is_associative_and_not_commutative() {
    let (f, g, h) = (0x0003_0007, 0x0010_0101, 0xFFFE_1234);
    assert_eq!(compose(compose(f, g), h), compose(f, compose(g, h)));
    assert_ne!(compose(f, g), compose(g, f));
}

#[test]
fn the_point_to_point_variants_cover_every_algorithm() {
    for c in Collective::ALL {
        let p2p = c.algorithms().iter().filter(|&&a| !matches!(a, Algorithm::Native | Algorithm::Hierarchical)).count();
        assert!(p2p <= P2P_VARIANTS, "{c} has {p2p} point-to-point algorithms");
    }
}

// ---------------------------------------------------------------- 2. random interleavings

/// A random case at `np` ranks: mostly small, sometimes empty, sometimes past the eager limit.
fn random_case(rng: &mut Rng, np: usize, allow_big: bool) -> Case {
    let kind = *rng.pick(&Kind::ALL);
    let per_rank = if kind.per_rank() { np } else { 1 };
    let n = match rng.below(10) {
        0 => 0,
        9 if allow_big => rng.range(3000, 20_000) / per_rank,
        _ => rng.range(1, 40),
    };
    let red = if rng.chance(50) { Red::Affine } else { Red::Sum };
    Case::new(kind, n, rng.below(np as u64) as usize, red, rng.next_u64())
}

/// What rank `from` sends as its `j`-th message of a round.
fn message(seed: u64, from: usize, j: usize, len: usize) -> Vec<u32> {
    (0..len).map(|i| val(seed as u32, from * 16 + j, i)).collect()
}

/// Something started in a random round, for starting in a random order.
enum Start<'a> {
    /// Collective on communicator 0 (the world) or 1 (the second one).
    Coll(usize, &'a Case, &'a mut Bufs),
    Send(usize, &'a [u32]),
    Recv(usize, &'a mut [u32]),
}

/// Starts `comm_ops[c]` on communicator `c` (in that order) and the messages, interleaving the
/// three streams at random (differently on every rank), with tests in between; then completes
/// everything in a random order by random completion calls.
fn run_interleaved<'a>(
    comms: [&Comm; 2],
    comm_ops: [Vec<Start<'a>>; 2],
    messages: Vec<Start<'a>>,
    rng: &mut Rng,
) -> Result<()> {
    let (me, np) = (comms[0].rank(), comms[0].size());
    let (right, left) = ((me + 1) % np, (me + np - 1) % np);
    let mut streams = comm_ops.map(|ops| ops.into_iter());
    let mut messages = messages.into_iter();
    comms[0].scope(|s0| {
        comms[1].scope(|s1| {
            let mut reqs: Vec<Request<'_>> = Vec::new();
            let mut labels: Vec<String> = Vec::new();
            loop {
                let choice = rng.below(3) as usize;
                let next = if choice < 2 { streams[choice].next() } else { messages.next() };
                let Some(item) =
                    next.or_else(|| streams[0].next()).or_else(|| streams[1].next()).or_else(|| messages.next())
                else {
                    break;
                };
                let (req, label) = match item {
                    Start::Coll(0, case, bufs) => (start(s0, case, bufs), format!("{case} on world")),
                    Start::Coll(_, case, bufs) => (start(s1, case, bufs), format!("{case} on comm 1")),
                    Start::Send(j, buf) => (s0.isend(buf, right, P2P_TAG + j as i32), format!("isend {j}")),
                    Start::Recv(j, buf) => {
                        // Every message to this rank comes from `left`: half the receives name it.
                        let from = if j % 2 == 0 { Source::from(left) } else { ANY_SOURCE };
                        (s0.irecv(buf, from, P2P_TAG + j as i32), format!("irecv {j}"))
                    }
                };
                reqs.push(req.ctx(|| format!("starting {label}"))?);
                labels.push(label);
                if rng.chance(30)
                    && let Some((i, _)) = testany(&mut reqs)?
                {
                    drop(reqs.swap_remove(i));
                    labels.swap_remove(i);
                }
            }
            complete_randomly(reqs, labels, rng)
        })
    })
}

/// Completes every request, one way or another, in an order drawn from `rng`; a few sends and
/// collectives are dropped unwaited (the scopes' ends finish them).
fn complete_randomly(mut reqs: Vec<Request<'_>>, mut labels: Vec<String>, rng: &mut Rng) -> Result<()> {
    while !reqs.is_empty() {
        let i = rng.below(reqs.len() as u64) as usize;
        let done = match rng.below(14) {
            0..=3 => {
                let label = labels.swap_remove(i);
                reqs.swap_remove(i).wait().ctx(|| format!("wait for {label}"))?;
                continue;
            }
            4 | 5 => {
                spin(|| Ok(reqs[i].test().ctx(|| format!("test of {}", labels[i]))?.is_some()))?;
                Some(i)
            }
            6..=8 => waitany(&mut reqs).ctx(|| format!("waitany over {labels:?}"))?.map(|(j, _)| j),
            9 | 10 => {
                let mut found = None;
                spin(|| {
                    found = testany(&mut reqs).ctx(|| format!("testany over {labels:?}"))?.map(|(j, _)| j);
                    Ok(found.is_some())
                })?;
                found
            }
            // Dropped unwaited; not a receive, which the scope's end would cancel.
            11 if !labels[i].starts_with("irecv") => Some(i),
            11 => {
                spin(|| Ok(testall(&mut reqs[i..=i]).ctx(|| format!("testall of {}", labels[i]))?.is_some()))?;
                Some(i)
            }
            12 => {
                spin(|| Ok(testall(&mut reqs).ctx(|| format!("testall over {labels:?}"))?.is_some()))?;
                reqs.clear();
                labels.clear();
                continue;
            }
            _ => {
                waitall(&mut reqs).ctx(|| format!("waitall over {labels:?}"))?;
                reqs.clear();
                labels.clear();
                continue;
            }
        };
        let j = done.ok_or_else(|| Error::other(format!("no request of {labels:?} was active")))?;
        drop(reqs.swap_remove(j));
        labels.swap_remove(j);
    }
    Ok(())
}

/// The second communicator of the random rounds.
#[derive(Clone, Copy, Debug)]
enum Second {
    /// A dup of the world with every collective forced to a point-to-point algorithm.
    Dup,
    /// The world split into even and odd ranks (in reverse order), default tuning.
    Split,
}

/// Rounds of up to `max_ops` outstanding collectives of random kinds on the world (default
/// tuning) and a `second` communicator, plus up to three messages around a ring, all completed
/// in a random order; every result is checked against the blocking twins run afterwards in
/// issue order. The ranks of a communicator draw its collectives from the same seed, and each
/// rank draws its start interleaving and completion order from its own.
fn random_rounds(config: Config, rounds: u64, max_ops: usize, allow_big: bool, second: Second) {
    let np = config.get_np();
    run_config(config, &format!("random rounds of up to {max_ops} collectives, {second:?}"), move |world| {
        let me = world.rank();
        let left = (me + np - 1) % np;
        let (other, group) = match second {
            Second::Dup => (world.dup()?.with_tuning(Tunings::P2p.tuning(np)), 0),
            Second::Split => {
                let color = (me % 2) as u32;
                let split = world.split(Some(color), -(me as i32))?;
                (split.ok_or_else(|| Error::other("split gave no communicator"))?, u64::from(color) + 1)
            }
        };
        let comms = [&world, &other];
        for round in 0..rounds {
            let seed = mix(&[round, np as u64, max_ops as u64]);
            let mut shared = Rng::new(seed);
            let mut in_group = Rng::new(mix(&[seed, group]));
            let mut mine = Rng::new(mix(&[seed, me as u64, 1]));
            let ops: Vec<(usize, Case)> = (0..shared.range(1, max_ops))
                .map(|_| match shared.below(2) as usize {
                    0 => (0, random_case(&mut shared, np, allow_big)),
                    _ => (1, random_case(&mut in_group, other.size(), allow_big)),
                })
                .collect();
            let lens: Vec<usize> = (0..shared.range(0, 3))
                .map(|_| if shared.chance(20) && allow_big { shared.range(3000, 20_000) } else { shared.range(0, 30) })
                .collect();
            let mut bufs: Vec<Bufs> =
                ops.iter().map(|(c, case)| case.bufs(comms[*c].size(), comms[*c].rank())).collect();
            let out: Vec<Vec<u32>> = lens.iter().enumerate().map(|(j, &len)| message(seed, me, j, len)).collect();
            let mut inbox: Vec<Vec<u32>> = lens.iter().map(|&len| vec![SENTINEL; len]).collect();

            let mut comm_ops: [Vec<Start<'_>>; 2] = [Vec::new(), Vec::new()];
            for ((c, case), b) in ops.iter().zip(bufs.iter_mut()) {
                comm_ops[*c].push(Start::Coll(*c, case, b));
            }
            let mut messages: Vec<Start<'_>> = out.iter().enumerate().map(|(j, m)| Start::Send(j, m)).collect();
            messages.extend(inbox.iter_mut().enumerate().map(|(j, m)| Start::Recv(j, m)));
            shuffle(&mut messages, &mut mine);
            let plan = || {
                format!(
                    "round {round}: {:?}",
                    ops.iter().map(|(c, case)| format!("{case} on comm {c}")).collect::<Vec<_>>()
                )
            };
            run_interleaved(comms, comm_ops, messages, &mut mine).ctx(plan)?;

            for ((c, case), got) in ops.iter().zip(&bufs) {
                let want = twin_result(comms[*c], case)?;
                same(got, &want, || format!("{} on rank {me}: {case} on comm {c}", plan()))?;
            }
            for (j, got) in inbox.iter().enumerate() {
                if *got != message(seed, left, j, got.len()) {
                    return Err(Error::other(format!("{}: message {j} from rank {left} arrived wrong", plan())));
                }
            }
        }
        Ok(())
    });
}

fn random_interleavings(dev: DeviceKind) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[1, 2, 3, 4, 7],
        _ => &[2, 4],
    };
    let rounds = match dev {
        DeviceKind::Shm => 30,
        _ => 12,
    };
    for &np in nps {
        random_rounds(config(dev, np), rounds, 6, true, Second::Dup);
    }
}

/// Beyond the eight lanes of the shared-memory slots, on the world and a split of it.
fn random_interleavings_with_a_split(dev: DeviceKind) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[2, 5, 6],
        _ => &[4],
    };
    for &np in nps {
        random_rounds(config(dev, np), 20, 12, true, Second::Split);
    }
}

fn random_interleavings_on_16_ranks(dev: DeviceKind) {
    random_rounds(config(dev, 16), 6, 4, false, Second::Dup);
}

/// More collectives outstanding at once than the shared-memory device has slots (a bounded
/// number), under the slot and the default tunings, completed newest first: the ones waiting for
/// a slot must start as earlier ones finish, and the earliest must progress while the newest are
/// waited for.
fn many_outstanding_newest_first(dev: DeviceKind) {
    const OPS: usize = 80;
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[2, 4, 8],
        _ => &[3],
    };
    for &np in nps {
        run_job(dev, np, &format!("{OPS} outstanding collectives"), move |world| {
            let me = world.rank();
            for tunings in [Tunings::Native, Tunings::Default] {
                let comm = world.with_tuning(tunings.tuning(0));
                let mut shared = Rng::new(mix(&[np as u64, OPS as u64]));
                let cases: Vec<Case> = (0..OPS).map(|_| random_case(&mut shared, np, false)).collect();
                let mut bufs: Vec<Bufs> = cases.iter().map(|case| case.bufs(np, me)).collect();
                comm.scope(|s| {
                    let mut reqs = Vec::new();
                    for (case, b) in cases.iter().zip(bufs.iter_mut()) {
                        reqs.push(start(s, case, b).ctx(|| format!("starting {case}"))?);
                    }
                    while let Some(req) = reqs.pop() {
                        req.wait().ctx(|| format!("waiting for collective {}", reqs.len()))?;
                    }
                    Ok(())
                })
                .ctx(|| format!("{tunings:?} tuning"))?;
                for (case, got) in cases.iter().zip(&bufs) {
                    same(got, &twin_result(&comm, case)?, || format!("{case} under {tunings:?} on rank {me}"))?;
                }
            }
            Ok(())
        });
    }
}

/// Blocking collectives issued while nonblocking ones are outstanding, on the same communicator
/// (they match in issue order, as in MPI) and on a dup: the blocking calls must progress the
/// outstanding operations they depend on, and every result must be right.
fn blocking_calls_among_outstanding_ones(dev: DeviceKind) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[2, 3, 5],
        _ => &[3],
    };
    for &np in nps {
        run_job(dev, np, "blocking collectives among nonblocking ones", move |world| {
            let me = world.rank();
            for (k, tunings) in [Tunings::Default, Tunings::Native, Tunings::P2p].into_iter().enumerate() {
                let comm = world.with_tuning(tunings.tuning(k));
                let dup = comm.dup()?;
                for round in 0..10u64 {
                    let mut shared = Rng::new(mix(&[np as u64, k as u64, round, 77]));
                    let outstanding: Vec<Case> =
                        (0..shared.range(1, 4)).map(|_| random_case(&mut shared, np, true)).collect();
                    let between: Vec<(usize, Case)> = (0..shared.range(1, 3))
                        .map(|_| (shared.below(2) as usize, random_case(&mut shared, np, true)))
                        .collect();
                    let mut bufs: Vec<Bufs> = outstanding.iter().map(|case| case.bufs(np, me)).collect();
                    let mut between_got: Vec<Bufs> = between.iter().map(|(_, case)| case.bufs(np, me)).collect();
                    let what = || format!("{tunings:?} round {round}: {outstanding:?} then blocking {between:?}");
                    comm.scope(|s| {
                        let mut reqs = Vec::new();
                        for (case, b) in outstanding.iter().zip(bufs.iter_mut()) {
                            reqs.push(start(s, case, b)?);
                        }
                        for ((c, case), b) in between.iter().zip(between_got.iter_mut()) {
                            blocking(if *c == 0 { &comm } else { &dup }, case, b)?;
                        }
                        waitall(&mut reqs).map(drop)
                    })
                    .ctx(what)?;
                    for (case, got) in outstanding.iter().zip(&bufs) {
                        same(got, &twin_result(&comm, case)?, || {
                            format!("{}: nonblocking {case} on rank {me}", what())
                        })?;
                    }
                    for ((_, case), got) in between.iter().zip(&between_got) {
                        same(got, &reference(case, np, me), || format!("{}: blocking {case} on rank {me}", what()))?;
                    }
                }
            }
            Ok(())
        });
    }
}

/// Ranks arrive at native (slot) broadcasts in every order: each rank pauses for a random while
/// before starting and before waiting, so the root and the receivers take turns being first
/// (who copies then differs), blocking and nonblocking, and with several outstanding at once.
fn bcast_arrival_orders(dev: DeviceKind) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[2, 3, 4, 8],
        _ => &[3],
    };
    for &np in nps {
        run_job(dev, np, "bcasts in random arrival orders", move |world| {
            let me = world.rank();
            let comm = world.with_tuning(Tunings::Native.tuning(0));
            let mut mine = Rng::new(mix(&[np as u64, me as u64, 5]));
            let pause = |rng: &mut Rng| match rng.below(10) {
                0..=4 => {}
                5..=8 => (0..rng.range(1, 50)).for_each(|_| std::thread::yield_now()),
                _ => std::thread::sleep(Duration::from_micros(rng.range(50, 2000) as u64)),
            };
            for round in 0..60u64 {
                let mut shared = Rng::new(mix(&[np as u64, round, 6]));
                let cases: Vec<Case> = (0..shared.range(1, 3))
                    .map(|_| {
                        let n = *shared.pick(&[0, 1, 100, 2048, 2049, 8192, 16_384, BIG]);
                        Case::new(Kind::Bcast, n, shared.below(np as u64) as usize, Red::Sum, round)
                    })
                    .collect();
                let nonblocking = shared.chance(70);
                let mut bufs: Vec<Bufs> = cases.iter().map(|case| case.bufs(np, me)).collect();
                pause(&mut mine);
                if nonblocking {
                    comm.scope(|s| {
                        let mut reqs = Vec::new();
                        for (case, b) in cases.iter().zip(bufs.iter_mut()) {
                            reqs.push(start(s, case, b)?);
                            pause(&mut mine);
                        }
                        complete_randomly(reqs, vec![String::from("ibcast"); cases.len()], &mut mine)
                    })?;
                } else {
                    for (case, b) in cases.iter().zip(bufs.iter_mut()) {
                        blocking(&comm, case, b)?;
                        pause(&mut mine);
                    }
                }
                for (case, got) in cases.iter().zip(&bufs) {
                    let kind = if nonblocking { "ibcast" } else { "bcast" };
                    same(got, &reference(case, np, me), || format!("round {round}: {kind} {case} on rank {me}"))?;
                }
            }
            Ok(())
        });
    }
}

/// The random rounds and the point-to-point twins with the tcp device's progress thread on,
/// which then moves data concurrently with the ranks' own calls.
#[test]
fn tcp_with_the_progress_thread() {
    let with_thread = |np| config(DeviceKind::Tcp, np).progress_thread(true);
    for np in [2, 4] {
        random_rounds(with_thread(np), 12, 6, true, Second::Dup);
    }
    random_rounds(with_thread(5), 10, 12, true, Second::Split);
    twins_on(with_thread(3), Tunings::P2p);
}

device_suite!(
    both: [
        twins_default_tuning,
        twins_native,
        twins_point_to_point,
        twins_at_other_eager_limits,
        random_interleavings,
        random_interleavings_with_a_split,
        random_interleavings_on_16_ranks,
        many_outstanding_newest_first,
        bcast_arrival_orders,
        blocking_calls_among_outstanding_ones,
    ],
    tcp_ignored: [],
);
