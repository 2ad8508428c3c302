//! Misuse of the PGAS collectives is an `Err` on every rank (same arguments everywhere, the same
//! error everywhere), before any communication: after each refused call the arrays still work.
//! A rank that fails (returns an error or panics) while its peers are inside a collective makes
//! their calls fail with `PeerFailed` instead of hanging them. Both devices.

mod pgas_common;

use std::sync::Mutex;
use std::time::Duration;

use fastmp::op::Sum;
use fastmp::{Comm, DeviceKind, Error, Result};
use pgas_common::{Algorithm, Call, Collective, SharedArray, Sync, pgas, run, value};

const NP: usize = 4;
const B: usize = 6;

/// `r` is an error naming `call` (or, for a bad rank, `RankOutOfRange`); the local-guard misuse
/// may be reported as an RMA synchronisation error.
#[track_caller]
fn expect_err<T: std::fmt::Debug>(r: Result<T>, call: &str, what: &str) {
    match r {
        Err(Error::InvalidArgument(m) | Error::RmaSync(m)) => {
            assert!(m.contains(call), "{what}: the message {m:?} does not name `{call}`")
        }
        Err(Error::RankOutOfRange { .. }) if what.contains("root") => {}
        other => panic!("{what}: expected an argument error naming `{call}`, got {other:?}"),
    }
}

/// A correct broadcast still works (a refused call left no stray message or state behind).
fn still_works(dst: &SharedArray<u32>, src: &SharedArray<u32>, root: usize) -> Result<()> {
    let me = dst.comm().rank();
    for (i, v) in src.local()?.iter_mut().enumerate() {
        *v = value(root as u64, me, i);
    }
    pgas::broadcast(dst, src, root, B, Sync::ALL)?;
    let want: Vec<u32> = (0..B).map(|i| value(root as u64, root, i)).collect();
    assert_eq!(*dst.local()?, want, "rank {me}: a broadcast after refused calls");
    Ok(())
}

fn bad_arguments_are_errors_everywhere(dev: DeviceKind) {
    run(dev, NP, |world| {
        let src = world.shared_array::<u32>(B)?;
        let dst = world.shared_array::<u32>(B)?;
        let big = world.shared_array::<u32>(NP * B)?;
        let s = Sync::ALL;
        let np = NP;
        let mut round = 0;
        let mut check = |r: Result<()>, call: &str, what: &str| -> Result<()> {
            expect_err(r, call, what);
            round += 1;
            still_works(&dst, &src, round % NP)
        };

        // Roots out of range.
        check(pgas::broadcast(&dst, &src, np, 1, s), "broadcast", "root np")?;
        check(pgas::scatter(&dst, &big, np + 3, 1, s), "scatter", "root np+3")?;
        check(pgas::gather(&big, &src, usize::MAX, 1, s), "gather", "root usize::MAX")?;
        check(pgas::reduce(&dst, &src, np, 1, Sum, s), "reduce", "root np")?;

        // Lengths beyond a block (or the whole array for the reductions).
        check(pgas::broadcast(&dst, &src, 0, B + 1, s), "broadcast", "len > block")?;
        check(pgas::broadcast(&dst, &big, 0, B + 1, s), "broadcast", "len > dst block")?;
        check(pgas::broadcast(&big, &src, 0, B + 1, s), "broadcast", "len > src block")?;
        check(pgas::scatter(&dst, &src, 0, 2, s), "scatter", "np*len > src block")?;
        check(pgas::scatter(&dst, &big, 0, B + 1, s), "scatter", "len > dst block")?;
        check(pgas::gather(&dst, &src, 0, 2, s), "gather", "np*len > dst block")?;
        check(pgas::gather_all(&dst, &src, 2, s), "gather_all", "np*len > dst block")?;
        check(pgas::gather_all(&big, &src, B + 1, s), "gather_all", "len > src block")?;
        check(pgas::exchange(&big, &src, B, s), "exchange", "np*len > src block")?;
        check(pgas::exchange(&dst, &big, B, s), "exchange", "np*len > dst block")?;
        check(pgas::permute(&dst, &src, &[0, 1, 2, 3], B + 1, s), "permute", "len > block")?;
        check(pgas::reduce(&dst, &src, 0, np * B + 1, Sum, s), "reduce", "nelems > array")?;
        check(pgas::prefix_reduce(&big, &src, 0, Sum, s), "prefix_reduce", "block lengths differ")?;
        check(pgas::prefix_reduce(&dst, &src, np * B + 1, Sum, s), "prefix_reduce", "nelems > array")?;
        check(pgas::gather_all(&dst, &src, usize::MAX / 2, s), "gather_all", "np*len overflows")?;

        // Sync modes with two flags of one side (every call otherwise valid: one element fits).
        for bad in [
            Sync::IN_MYSYNC | Sync::IN_NOSYNC,
            Sync::OUT_ALLSYNC | Sync::OUT_NOSYNC,
            Sync::IN_ALLSYNC | Sync::IN_MYSYNC,
        ] {
            for coll in Collective::ALL {
                check(Call::of(coll, NP, 1, 1).invoke(&dst, &src, &Sum, bad), coll.name(), &format!("sync {bad}"))?;
            }
        }

        // The same array as source and destination (UPC's restrict).
        for coll in Collective::ALL {
            check(Call::of(coll, NP, 1, 2).invoke(&big, &big, &Sum, s), coll.name(), "src == dst")?;
        }

        // Not a permutation: a duplicate, a rank out of range, too short, too long.
        for perm in [vec![0, 1, 1, 3], vec![0, 1, 2, 4], vec![3, 2, 1], vec![0, 1, 2, 3, 4], vec![]] {
            check(pgas::permute(&dst, &src, &perm, 1, s), "permute", &format!("perm {perm:?}"))?;
        }

        // A call while this rank's local guard on either array is alive.
        {
            let _guard = dst.local()?;
            expect_err(pgas::broadcast(&dst, &src, 0, 1, s), "broadcast", "dst local guard alive");
        }
        {
            let _guard = src.local()?;
            expect_err(pgas::reduce(&dst, &src, 0, 1, Sum, s), "reduce", "src local guard alive");
        }
        still_works(&dst, &src, 1)?;

        // Forcing an algorithm the collective does not implement.
        for (coll, name) in [
            (Collective::Exchange, "binomial_pull"),
            (Collective::Reduce, "flat_pull_static"),
            (Collective::PrefixReduce, "ring_push"),
            (Collective::Broadcast, "ring_pull"),
            (Collective::Gather, "binomial_push_dynamic"),
        ] {
            let algorithm = Algorithm::from_name(name)?;
            assert!(!coll.supports(algorithm), "{name} is listed for {coll:?}");
            expect_err(dst.force_algorithm(coll, algorithm), coll.name(), name);
        }
        still_works(&dst, &src, 2)?;

        big.free()?;
        dst.free()?;
        src.free()
    })
    .unwrap();
}

/// Arrays over different groups of ranks: a sub-communicator's, and the world's ranks in
/// another order.
fn arrays_of_different_groups_are_errors(dev: DeviceKind) {
    run(dev, NP, |world| {
        let me = world.rank();
        let dst = world.shared_array::<u32>(NP * B)?;
        let half = world.split(Some(me as u32 % 2), me as i32)?.expect("a colour");
        let reversed = world.split(Some(0), (NP - me) as i32)?.expect("a colour");
        for (other, what) in
            [(half.shared_array::<u32>(NP * B)?, "half"), (reversed.shared_array::<u32>(NP * B)?, "reversed")]
        {
            for coll in Collective::ALL {
                let call = Call::of(coll, NP, 1, 0);
                expect_err(call.invoke(&dst, &other, &Sum, Sync::ALL), coll.name(), what);
                expect_err(call.invoke(&other, &dst, &Sum, Sync::ALL), coll.name(), what);
            }
            other.free()?;
        }
        dst.free()
    })
    .unwrap();
}

/// How a rank fails on purpose.
#[derive(Clone, Copy, Debug)]
enum Failure {
    Panic,
    Error,
}

/// Rank `failing` fails (after a pause, so the others are inside the call by then) instead of
/// making `call`; every other rank's call, or its barrier after it, must fail naming it, and
/// `run` must report it.
fn survivors_fail_instead_of_hanging(dev: DeviceKind, call: &Call, sync: Sync, failing: usize, failure: Failure) {
    let seen = Mutex::new(vec![None; NP]);
    let result = run(dev, NP, |world: Comm| {
        let me = world.rank();
        let src = world.shared_array::<u32>(NP * B)?;
        let dst = world.shared_array::<u32>(NP * B)?;
        src.barrier()?;
        let outcome = if me == failing {
            std::thread::sleep(Duration::from_millis(30));
            match failure {
                Failure::Panic => panic!("rank {me} fails on purpose"),
                Failure::Error => Err(Error::other(format!("rank {me} fails on purpose"))),
            }
        } else {
            call.invoke(&dst, &src, &Sum, sync).and_then(|()| dst.barrier())
        };
        seen.lock().unwrap()[me] = Some(match &outcome {
            Ok(()) => "succeeded".to_string(),
            Err(Error::PeerFailed { rank, .. }) if *rank == failing => "ok".to_string(),
            Err(e) if e.to_string().contains(&format!("rank {failing}")) => "ok".to_string(),
            Err(e) => format!("{e:?}"),
        });
        outcome
    });
    let what = format!("{dev:?} {call:?} {sync}, rank {failing} fails by {failure:?}");
    match result {
        Err(Error::RankFailed { rank, cause }) => {
            assert_eq!(rank, failing, "{what}: run blamed rank {rank} ({cause})");
            assert!(cause.contains("fails on purpose"), "{what}: cause {cause:?}");
        }
        other => panic!("{what}: run returned {other:?}, expected RankFailed"),
    }
    for (rank, seen) in seen.into_inner().unwrap().into_iter().enumerate().filter(|&(r, _)| r != failing) {
        assert_eq!(seen.as_deref(), Some("ok"), "{what}: survivor {rank}");
    }
}

fn a_rank_failing_mid_collective(dev: DeviceKind) {
    for (k, coll) in Collective::ALL.into_iter().enumerate() {
        // The failing rank is the root where there is one (its data never comes), rank 2
        // otherwise; the modes alternate between the barrier-based and the point-to-point ones.
        let call = Call::of(coll, NP, 2, 1);
        let failing = match call {
            Call::Broadcast { root, .. } | Call::Scatter { root, .. } | Call::Gather { root, .. } => root,
            Call::Reduce { root, .. } => root,
            _ => 2,
        };
        let (sync, failure) = if k % 2 == 0 { (Sync::ALL, Failure::Error) } else { (Sync::MY, Failure::Panic) };
        survivors_fail_instead_of_hanging(dev, &call, sync, failing, failure);
        let other = (failing + 1) % NP;
        survivors_fail_instead_of_hanging(dev, &call, Sync::IN_MYSYNC | Sync::OUT_MYSYNC, other, Failure::Error);
    }
}

mod shm {
    use fastmp::DeviceKind::Shm;
    #[test]
    fn bad_arguments_are_errors_everywhere() {
        super::bad_arguments_are_errors_everywhere(Shm)
    }
    #[test]
    fn arrays_of_different_groups_are_errors() {
        super::arrays_of_different_groups_are_errors(Shm)
    }
    #[test]
    fn a_rank_failing_mid_collective() {
        super::a_rank_failing_mid_collective(Shm)
    }
}

mod tcp {
    use fastmp::DeviceKind::Tcp;
    #[test]
    fn bad_arguments_are_errors_everywhere() {
        super::bad_arguments_are_errors_everywhere(Tcp)
    }
    #[test]
    fn arrays_of_different_groups_are_errors() {
        super::arrays_of_different_groups_are_errors(Tcp)
    }
    #[test]
    fn a_rank_failing_mid_collective() {
        super::a_rank_failing_mid_collective(Tcp)
    }
}

mod hybrid {
    use fastmp::DeviceKind::Hybrid;
    #[test]
    fn bad_arguments_are_errors_everywhere() {
        super::bad_arguments_are_errors_everywhere(Hybrid)
    }
    #[test]
    fn arrays_of_different_groups_are_errors() {
        super::arrays_of_different_groups_are_errors(Hybrid)
    }
    #[test]
    fn a_rank_failing_mid_collective() {
        super::a_rank_failing_mid_collective(Hybrid)
    }
}
