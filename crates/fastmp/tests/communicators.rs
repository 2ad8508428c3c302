//! Communicators, groups, Cartesian topologies and algorithm selection: group set algebra
//! through `world.group()`, dup / split / create (with point-to-point and collectives on the
//! results, sources reported in the new numbering), Cartesian grids, and tuning from JSON, from
//! `Config::tuning` and (in a child process, so no other test sees the variables) from the
//! environment.

mod coll_common;

use std::process::Command;

use coll_common::{Context, job, run_ok};
use fastmp::coll::{Algorithm, Collective, Rule, Tuning};
use fastmp::op::Sum;
use fastmp::{ANY_SOURCE, ANY_TAG, Comm, Config, Error, GroupOrdering, PROC_NULL, dims_create};

/// World ranks of every member of `comm`, in `comm`'s order.
fn world_ranks(comm: &Comm, world: &Comm) -> Vec<usize> {
    let all: Vec<usize> = (0..comm.size()).collect();
    comm.group()
        .translate_ranks(&all, &world.group())
        .unwrap()
        .into_iter()
        .map(|r| r.expect("member of world"))
        .collect()
}

// ---------------------------------------------------------------- groups

#[test]
fn group_set_algebra_through_the_world_group() {
    run_ok(6, "groups", |world| {
        let me = world.rank();
        let w = world.group();
        assert_eq!((w.size(), w.rank()), (6, Some(me)));
        assert_eq!(w.compare(&world.group()), GroupOrdering::Identical);

        let a = w.incl(&[5, 1, 3])?;
        let b = w.incl(&[3, 4])?;
        assert_eq!(a.size(), 3);
        assert_eq!(a.rank(), [None, Some(1), None, Some(2), None, Some(0)][me]);
        assert_eq!(b.rank(), [None, None, None, Some(0), Some(1), None][me]);

        let union = a.union(&b)?;
        assert_eq!(union.translate_ranks(&[0, 1, 2, 3], &w)?, [Some(5), Some(1), Some(3), Some(4)]);
        let inter = a.intersection(&b)?;
        assert_eq!(inter.translate_ranks(&[0], &w)?, [Some(3)]);
        assert_eq!(inter.size(), 1);
        let diff = a.difference(&b)?;
        assert_eq!(diff.translate_ranks(&[0, 1], &w)?, [Some(5), Some(1)]);
        assert_eq!(b.difference(&b)?.size(), 0);
        assert_eq!(b.difference(&b)?.rank(), None);

        let excl = w.excl(&[0, 5, 2])?;
        assert_eq!(excl.translate_ranks(&[0, 1, 2], &w)?, [Some(1), Some(3), Some(4)]);
        assert_eq!(excl.rank(), [None, Some(0), None, Some(1), Some(2), None][me]);

        assert_eq!(a.translate_ranks(&[0, 1, 2], &b)?, [None, None, Some(0)]);
        assert_eq!(w.translate_ranks(&[3, 4], &b)?, [Some(0), Some(1)]);

        assert_eq!(a.compare(&a.clone()), GroupOrdering::Identical);
        assert_eq!(a.compare(&w.incl(&[5, 1, 3])?), GroupOrdering::Identical);
        assert_eq!(a.compare(&w.incl(&[1, 3, 5])?), GroupOrdering::Similar);
        assert_eq!(a.compare(&b), GroupOrdering::Unequal);
        assert_eq!(a.compare(&union), GroupOrdering::Unequal);
        assert_eq!(w.compare(&w.excl(&[])?), GroupOrdering::Identical);

        assert!(matches!(w.incl(&[6]), Err(Error::RankOutOfRange { rank: 6, size: 6 })));
        assert!(matches!(a.incl(&[3]), Err(Error::RankOutOfRange { rank: 3, size: 3 })));
        assert!(matches!(w.incl(&[1, 1]), Err(Error::InvalidArgument(_))));
        assert!(matches!(w.excl(&[2, 2]), Err(Error::InvalidArgument(_))));
        assert!(matches!(a.translate_ranks(&[3], &w), Err(Error::RankOutOfRange { rank: 3, size: 3 })));
        Ok(())
    });
}

// ---------------------------------------------------------------- dup

#[test]
fn dup_keeps_ranks_and_separates_traffic() {
    run_ok(3, "dup", |world| {
        let me = world.rank();
        let dup = world.dup()?;
        assert_eq!((dup.size(), dup.rank()), (3, me));
        assert_eq!(dup.group().compare(&world.group()), GroupOrdering::Identical);
        let dup2 = dup.dup()?;
        if me == 0 {
            // Same destination and tag on three communicators, in this order.
            dup.send(&[1u32], 1, 5)?;
            dup2.send(&[2u32], 1, 5)?;
            world.send(&[3u32], 1, 5)?;
        } else if me == 1 {
            // Received in the opposite order: each receive only sees its communicator's message.
            let mut v = [0u32];
            let st = world.recv(&mut v, ANY_SOURCE, ANY_TAG)?;
            assert_eq!((v[0], st.source, st.tag), (3, 0, 5));
            dup2.recv(&mut v, 0, 5)?;
            assert_eq!(v[0], 2);
            dup.recv(&mut v, ANY_SOURCE, 5)?;
            assert_eq!(v[0], 1);
        }
        // Collectives on the duplicates still work and agree.
        let mut sum = [0u64];
        dup2.allreduce(&[me as u64 + 1], &mut sum, Sum)?;
        assert_eq!(sum[0], 6);
        dup.free();
        Ok(())
    });
}

// ---------------------------------------------------------------- split

#[test]
fn split_by_color_and_key() {
    for np in [1, 2, 5, 7] {
        run_ok(np, "split", move |world| {
            let me = world.rank();
            // Three colors; keys reverse the order inside each color; rank 1 opts out.
            let color = if me == 1 { None } else { Some((me % 3) as u32) };
            let sub = world.split(color, -(me as i32))?;
            if me == 1 {
                assert!(sub.is_none(), "a rank without a color got a communicator");
            } else {
                let sub = sub.expect("a rank with a color gets a communicator");
                let want: Vec<usize> = (0..np).rev().filter(|&r| r != 1 && r % 3 == me % 3).collect();
                assert_eq!(world_ranks(&sub, &world), want, "members in key order");
                assert_eq!(sub.rank(), want.iter().position(|&r| r == me).unwrap());
                // Members agree on their membership through a collective on the new communicator.
                let mut sum = [0u64];
                sub.allreduce(&[me as u64], &mut sum, Sum)?;
                assert_eq!(sum[0], want.iter().map(|&r| r as u64).sum::<u64>());
            }
            // Equal keys keep the parent's order; a split of a split works too.
            let halves = world.split(Some((me % 2) as u32), 0)?.expect("every rank has a color");
            assert_eq!(halves.rank(), me / 2);
            let quarter = halves.split(Some((halves.rank() % 2) as u32), 7)?.expect("every rank has a color");
            let want: Vec<usize> = (0..np).filter(|&r| r % 2 == me % 2 && (r / 2) % 2 == (me / 2) % 2).collect();
            assert_eq!(world_ranks(&quarter, &world), want);
            Ok(())
        });
    }
}

#[test]
fn point_to_point_on_sub_communicators_uses_their_numbering() {
    run_ok(6, "p2p on a split", |world| {
        let me = world.rank();
        // Odd world ranks in reverse order: world 5, 3, 1 are sub ranks 0, 1, 2.
        let sub = world.split((me % 2 == 1).then_some(0), -(me as i32))?;
        let Some(sub) = sub else { return Ok(()) };
        let (r, n) = (sub.rank(), sub.size());
        assert_eq!((r, n), ((5 - me) / 2, 3));
        let (right, left) = ((r + 1) % n, (r + n - 1) % n);
        let mut got = [0u64; 2];
        let st = sub.sendrecv(&[r as u64, me as u64], right, 11, &mut got, left, 11)?;
        assert_eq!((st.source, st.tag), (left, 11), "status in the sub-communicator's numbering");
        assert_eq!(got, [left as u64, (5 - 2 * left) as u64]);
        // Wildcard source: the status still names the sender's sub rank.
        sub.send(&[r as u32], right, 12)?;
        let mut v = [0u32];
        let st = sub.recv(&mut v, ANY_SOURCE, ANY_TAG)?;
        assert_eq!((st.source, st.tag, v[0]), (left, 12, left as u32));
        // Ranks outside the communicator are rejected.
        assert!(matches!(sub.send(&[0u8], 3, 0), Err(Error::RankOutOfRange { rank: 3, size: 3 })));
        Ok(())
    });
}

// ---------------------------------------------------------------- create

#[test]
fn create_from_a_group() {
    run_ok(5, "create", |world| {
        let me = world.rank();
        let group = world.group().incl(&[4, 0, 2])?;
        let comm = world.create(&group)?;
        match [Some(1), None, Some(2), None, Some(0)][me] {
            Some(rank) => {
                let comm = comm.expect("a member gets the communicator");
                assert_eq!((comm.rank(), comm.size()), (rank, 3));
                assert_eq!(comm.group().compare(&group), GroupOrdering::Identical);
                let mut all = [0u32; 3];
                comm.allgather(&[me as u32], &mut all)?;
                assert_eq!(all, [4, 0, 2]);
            }
            None => assert!(comm.is_none(), "a non-member got a communicator"),
        }
        // A group with a process outside the communicator is an error on every rank.
        let evens = world.split(Some((me % 2) as u32), 0)?.expect("every rank has a color");
        let err = evens.create(&world.group().incl(&[0, 1])?).map(|c| c.is_some());
        let outsider = if me % 2 == 0 { 1 } else { 0 };
        match err {
            Err(Error::InvalidArgument(msg)) => {
                assert!(
                    msg.contains(&format!("create: process {outsider} of the group is not in the communicator")),
                    "{msg}"
                )
            }
            other => panic!("create with an outsider: {other:?}"),
        }
        // An empty group gives nobody a communicator.
        assert!(world.create(&world.group().incl(&[])?)?.is_none());
        Ok(())
    });
}

// ---------------------------------------------------------------- Cartesian topology

#[test]
fn dims_create_balances() {
    assert_eq!(dims_create(12, &[0, 0]).unwrap(), [4, 3]);
    assert_eq!(dims_create(6, &[0, 0, 0]).unwrap(), [3, 2, 1]);
    assert_eq!(dims_create(7, &[0, 0]).unwrap(), [7, 1]);
    assert_eq!(dims_create(16, &[0, 0]).unwrap(), [4, 4]);
    assert_eq!(dims_create(1, &[0, 0, 0]).unwrap(), [1, 1, 1]);
    assert_eq!(dims_create(24, &[0, 0, 0]).unwrap().iter().product::<usize>(), 24);
    assert!(matches!(dims_create(0, &[0, 0]), Err(Error::InvalidArgument(_))));
    assert!(matches!(dims_create(4, &[]), Err(Error::InvalidArgument(_))));
}

#[test]
fn cartesian_grid() {
    run_ok(7, "cartesian", |world| {
        let me = world.rank();
        // A 2x3 grid on 7 ranks: rank 6 is left out.
        let grid = world.cart_create(&[2, 3], &[false, true], false)?;
        let Some(grid) = grid else {
            assert_eq!(me, 6);
            return Ok(());
        };
        assert_eq!((grid.size(), grid.rank(), grid.dims(), grid.periods()), (6, me, &[2, 3][..], &[false, true][..]));
        let coords = grid.coords(me)?;
        assert_eq!(coords, [me / 3, me % 3], "row-major coordinates");
        assert_eq!(grid.rank_of(&[coords[0] as isize, coords[1] as isize])?, me);
        assert_eq!(grid.rank_of(&[1, -1])?, 5, "periodic dimension wraps");
        assert_eq!(grid.rank_of(&[0, 4])?, 1);
        assert!(matches!(grid.rank_of(&[2, 0]), Err(Error::InvalidArgument(_))), "off the non-periodic edge");
        assert!(matches!(grid.rank_of(&[0]), Err(Error::InvalidArgument(_))));
        assert!(matches!(grid.coords(6), Err(Error::RankOutOfRange { rank: 6, size: 6 })));

        // Non-periodic rows: the edges have no neighbour.
        let (up, down) = grid.shift(0, 1)?;
        assert_eq!(up, if me >= 3 { me - 3 } else { PROC_NULL });
        assert_eq!(down, if me < 3 { me + 3 } else { PROC_NULL });
        // Periodic columns wrap.
        let row = me / 3 * 3;
        let (from, to) = grid.shift(1, 1)?;
        assert_eq!((from, to), (row + (me + 2) % 3, row + (me + 1) % 3));
        let (from, to) = grid.shift(1, -2)?;
        assert_eq!((from, to), (row + (me + 2) % 3, row + (me + 1) % 3));
        assert!(grid.shift(2, 1).is_err());

        // A halo exchange along the periodic dimension.
        let (from, to) = grid.shift(1, 1)?;
        let mut got = [0u32];
        grid.sendrecv(&[me as u32], to, 3, &mut got, from, 3)?;
        assert_eq!(got[0] as usize, from);

        let rows = grid.sub(&[false, true])?;
        assert_eq!((rows.size(), rows.rank(), rows.dims(), rows.periods()), (3, me % 3, &[3][..], &[true][..]));
        let mut sum = [0u64];
        rows.allreduce(&[me as u64], &mut sum, Sum)?;
        assert_eq!(sum[0], (3 * row + 3) as u64);
        let cols = grid.sub(&[true, false])?;
        assert_eq!((cols.size(), cols.rank(), cols.dims()), (2, me / 3, &[2][..]));
        assert_eq!(grid.sub(&[true, true])?.size(), 6);
        assert!(grid.sub(&[true]).is_err());
        Ok(())
    });
    run_ok(4, "cartesian errors", |world| {
        assert!(matches!(world.cart_create(&[2, 3], &[false, false], false), Err(Error::InvalidArgument(_))));
        assert!(matches!(world.cart_create(&[2, 2], &[false], false), Err(Error::InvalidArgument(_))));
        assert!(matches!(world.cart_create(&[0, 2], &[false, false], false), Err(Error::InvalidArgument(_))));
        let ring = world.cart_create(&[4], &[true], false)?.expect("all ranks fit");
        let (from, to) = ring.shift(0, 1)?;
        assert_eq!((from, to), ((world.rank() + 3) % 4, (world.rank() + 1) % 4));
        Ok(())
    });
}

#[test]
fn cartesian_shift_by_extreme_displacements() {
    // Displacements near isize::MIN / isize::MAX: periodic dimensions wrap (mod the extent),
    // non-periodic ones have no neighbour; the arithmetic must not overflow (a panic is a bug).
    run_ok(6, "cartesian extreme shifts", |world| {
        let grid = world.cart_create(&[2, 3], &[true, false], false)?.expect("all ranks fit");
        let me = grid.rank();
        let coords = grid.coords(me)?;
        for disp in [isize::MAX, isize::MIN, isize::MIN + 1, isize::MAX - 1] {
            let shifted = |by: isize| {
                let row = (coords[0] as isize + by.rem_euclid(2)).rem_euclid(2) as usize;
                row * 3 + coords[1]
            };
            let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| grid.shift(0, disp)));
            let want = (shifted(disp.wrapping_neg()), shifted(disp));
            // -isize::MIN does not exist, but it is even like isize::MIN: same neighbours.
            let want = if disp == isize::MIN { (shifted(disp), shifted(disp)) } else { want };
            assert!(matches!(&got, Ok(Ok(w)) if *w == want), "shift(0, {disp}) on rank {me}: {got:?}, want {want:?}");
            let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| grid.shift(1, disp)));
            assert!(matches!(&got, Ok(Ok((PROC_NULL, PROC_NULL)))), "shift(1, {disp}) on rank {me}: {got:?}");
        }
        Ok(())
    });
}

// ---------------------------------------------------------------- tuning

#[test]
fn tuning_from_json_and_config() {
    let json = r#"{
        "bcast": [{"max_np": 2, "algorithm": "bft"}, {"max_bytes": 1024, "algorithm": "bt"}, {"algorithm": "mst"}],
        "allreduce": [{"algorithm": "rabenseifner"}]
    }"#;
    let tuning = Tuning::from_json(json).unwrap();
    assert_eq!(tuning.select(Collective::Bcast, 2, 1 << 20), Algorithm::Bft);
    assert_eq!(tuning.select(Collective::Bcast, 4, 1024), Algorithm::Bt);
    assert_eq!(tuning.select(Collective::Bcast, 4, 1025), Algorithm::Mst);
    assert_eq!(tuning.select(Collective::Allreduce, 3, 8), Algorithm::Rabenseifner);
    assert_eq!(
        tuning.rules(Collective::Scan),
        Tuning::defaults().rules(Collective::Scan),
        "unnamed collectives keep defaults"
    );
    assert_eq!(tuning.rules(Collective::Allreduce), &vec![Rule::always(Algorithm::Rabenseifner)]);
    assert_eq!(Tuning::from_json(&tuning.to_json()).unwrap(), tuning);
    let bad = Tuning::from_json(r#"{"scan": [{"algorithm": "bkt"}]}"#).unwrap_err();
    assert!(bad.to_string().contains("scan has no algorithm \"bkt\""), "{bad}");
    assert!(Tuning::from_json(r#"{"bcast": [{"max_bytes": 4, "algorithm": "bt"}]}"#).is_err(), "last rule bounded");

    let expected = tuning.clone();
    let results = job(Config::new().np(4).tuning(tuning), "tuning via Config", move |world| {
        // The job tells the table whether its ranks have cores of their own.
        let expected = expected.clone().with_cores(world.tuning().cores().expect("the job's cores fact"));
        assert_eq!(world.tuning(), &expected);
        assert_eq!(world.algorithm_for(Collective::Bcast, 100, true), Algorithm::Bt);
        assert_eq!(world.algorithm_for(Collective::Bcast, 5000, true), Algorithm::Mst);
        assert_eq!(world.algorithm_for(Collective::Allreduce, 64, true), Algorithm::Rabenseifner);
        // Rabenseifner combines out of rank order: a non-commutative op falls back.
        let fallback = world.algorithm_for(Collective::Allreduce, 64, false);
        assert!(fallback != Algorithm::Rabenseifner && Collective::Allreduce.algorithms().contains(&fallback));
        // Derived communicators inherit the table; with_tuning replaces it.
        assert_eq!(world.dup()?.tuning(), &expected);
        let half = world.split(Some((world.rank() % 2) as u32), 0)?.expect("every rank has a color");
        assert_eq!(half.tuning(), &expected);
        let forced = world.with_tuning(Tuning::defaults().force(Collective::Bcast, Algorithm::Fat)?);
        assert_eq!(forced.algorithm_for(Collective::Bcast, 100, true), Algorithm::Fat);
        let mut data = [world.rank() as u16; 9];
        forced.bcast(&mut data, 3)?;
        world.bcast(&mut data, 2).ctx(|| "bcast with the configured rules".into())?;
        assert_eq!(data, [3; 9]);
        Ok(world.rank())
    });
    assert_eq!(results.unwrap(), [0, 1, 2, 3]);
}

/// Marks the child process of [`tuning_from_environment`] and says what it should check.
const CHILD_VAR: &str = "FASTMP_TEST_ENV_CHILD";

/// Runs [`env_child`] in a child process (this test binary) with `vars` set; returns whether it
/// passed and its output.
fn run_child(mode: &str, vars: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary path"));
    cmd.args(["--ignored", "--exact", "env_child", "--nocapture", "--test-threads=1"]).env(CHILD_VAR, mode);
    // Nothing from this environment's own FASTMP_* settings leaks into the child.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("FASTMP_") {
            cmd.env_remove(key);
        }
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("start the child test process");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success() && text.contains("1 passed"), text)
}

#[test]
fn tuning_from_environment() {
    let dir = std::env::temp_dir().join(format!("fastmp-tuning-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tuning.json");
    std::fs::write(&file, r#"{"allreduce": [{"algorithm": "bkt"}], "bcast": [{"algorithm": "bt"}]}"#).unwrap();
    let file = file.to_str().unwrap();

    // The file sets allreduce and bcast; the variable overrides the file's bcast.
    let (ok, out) = run_child("valid", &[("FASTMP_TUNING_FILE", file), ("FASTMP_BCAST_ALGORITHM", "Binomial")]);
    assert!(ok, "child with valid variables failed:\n{out}");
    let (ok, out) = run_child("valid-mst", &[("FASTMP_TUNING_FILE", file), ("FASTMP_BCAST_ALGORITHM", "mst")]);
    assert!(ok, "child with FASTMP_BCAST_ALGORITHM=mst failed:\n{out}");
    // One variable per collective, each naming the collective's first algorithm (in capitals).
    let vars: Vec<(String, String)> = Collective::ALL
        .iter()
        .map(|c| {
            (
                format!("FASTMP_{}_ALGORITHM", c.name().to_ascii_uppercase()),
                c.algorithms()[0].name().to_ascii_uppercase(),
            )
        })
        .collect();
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (ok, out) = run_child("every-collective", &vars);
    assert!(ok, "child with a variable for every collective failed:\n{out}");
    let (ok, out) = run_child("invalid", &[("FASTMP_SCAN_ALGORITHM", "magic")]);
    assert!(ok, "child with an unknown algorithm failed:\n{out}");
    let (ok, out) = run_child("missing-file", &[("FASTMP_TUNING_FILE", "/nonexistent/fastmp-tuning.json")]);
    assert!(ok, "child with a missing tuning file failed:\n{out}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The child side of [`tuning_from_environment`]; does nothing unless started by it.
#[test]
#[ignore = "run by tuning_from_environment in a child process with its own environment"]
fn env_child() {
    let Ok(mode) = std::env::var(CHILD_VAR) else { return };
    match mode.as_str() {
        "valid" | "valid-mst" => {
            let bcast = if mode == "valid" { Algorithm::Bt } else { Algorithm::Mst };
            let ranks = fastmp::run(3, move |world| {
                assert_eq!(world.algorithm_for(Collective::Bcast, 1 << 20, true), bcast);
                assert_eq!(world.algorithm_for(Collective::Allreduce, 8, true), Algorithm::Bkt);
                assert_eq!(world.tuning().rules(Collective::Scan), Tuning::defaults().rules(Collective::Scan));
                let cores = world.tuning().cores().expect("the job's cores fact");
                assert_eq!(Tuning::from_env()?.with_cores(cores), *world.tuning());
                // An explicit table wins over the environment.
                Ok(world.rank())
            })
            .unwrap();
            assert_eq!(ranks, [0, 1, 2]);
            let explicit = Config::new()
                .np(2)
                .tuning(Tuning::defaults())
                .run(|world| Ok(world.algorithm_for(Collective::Bcast, 1 << 20, true)));
            assert_eq!(explicit.unwrap()[0], Tuning::defaults().select(Collective::Bcast, 2, 1 << 20));
        }
        "every-collective" => {
            fastmp::run(5, |world| {
                for coll in Collective::ALL {
                    assert_eq!(world.algorithm_for(coll, 100, true), coll.algorithms()[0], "{coll}");
                }
                // The selected algorithms work.
                let mut data = [world.rank() as u32; 3];
                world.bcast(&mut data, 4)?;
                let mut sum = [0u32; 3];
                world.allreduce(&data, &mut sum, Sum)?;
                assert_eq!(sum, [20; 3]);
                world.barrier()
            })
            .unwrap();
        }
        "invalid" => {
            let err = fastmp::run(2, |_| Ok(())).unwrap_err();
            assert!(err.to_string().contains("FASTMP_SCAN_ALGORITHM"), "{err}");
            assert!(matches!(Tuning::from_env(), Err(Error::InvalidArgument(_))));
        }
        "missing-file" => {
            let err = fastmp::run(2, |_| Ok(())).unwrap_err();
            assert!(err.to_string().contains("FASTMP_TUNING_FILE"), "{err}");
        }
        other => panic!("unknown child mode {other}"),
    }
}

#[test]
fn create_with_groups_that_differ_between_ranks_is_an_error_everywhere() {
    // Ranks 1 and 2 both think they are rank 1 of a two-rank communicator with rank 0; sharing
    // a context and slot between them would let native collectives free buffers in use.
    let outcome = fastmp::run(3, |world| {
        let partner = if world.rank() == 2 { 2 } else { 1 };
        let group = world.group().incl(&[0, partner])?;
        match world.create(&group) {
            Err(Error::InvalidArgument(msg)) if msg.contains("different groups") => Ok(()),
            other => Err(Error::other(format!(
                "rank {}: expected a group mismatch error, got {:?}",
                world.rank(),
                other.map(|c| c.map(|c| c.size()))
            ))),
        }
    });
    assert!(outcome.is_ok(), "{outcome:?}");
}
