//! Selection per device: a job starts with its device's default table, and a rule whose
//! algorithm the call cannot run (`native` without device support, a commutative-only one with
//! a non-commutative operation) hands the call to the next rule that applies, not straight to
//! the fallback.

mod coll_common;

use coll_common::job;
use fastmp::coll::{Algorithm, Collective, Cores, Rule, Tuning};
use fastmp::op::{Sum, UserOp};
use fastmp::{Config, DeviceKind};

#[test]
fn a_job_starts_with_its_devices_table() {
    for device in [DeviceKind::Shm, DeviceKind::Tcp] {
        let what = format!("default tuning on {device:?}");
        job(Config::new().device(device).np(2), &what, move |world| {
            let cores = world.tuning().cores().expect("a job tells its table about its cores");
            assert_eq!(*world.tuning(), Tuning::from_env_for(device)?.with_cores(cores), "{device:?}");
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    assert_ne!(Tuning::defaults_for(DeviceKind::Tcp), Tuning::defaults_for(DeviceKind::Shm));
}

#[test]
fn a_job_knows_whether_its_thread_ranks_have_cores_of_their_own() {
    let cpus = fastmp::affinity::allowed_cpus().len();
    let cores_of = |config: Config| {
        let what = format!("cores at np {}", config.get_np());
        let mut ranks =
            job(config, &what, |world| Ok(world.tuning().cores())).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(ranks.windows(2).all(|w| w[0] == w[1]), "every rank sees the same fact");
        ranks.swap_remove(0)
    };
    assert_eq!(cores_of(Config::new().np(1)), Some(Cores::Dedicated));
    assert_eq!(cores_of(Config::new().np(cpus + 1).pin(fastmp::Pin::None)), Some(Cores::Shared));
    let given = Tuning::defaults().with_cores(Cores::Shared);
    assert_eq!(cores_of(Config::new().np(1).tuning(given)), Some(Cores::Shared), "a table that says is kept");
    let replaced = job(Config::new().np(1), "with_tuning", |world| {
        let forced = world.with_tuning(Tuning::defaults().force(Collective::Bcast, Algorithm::Bt)?);
        Ok(forced.tuning().cores())
    });
    assert_eq!(
        replaced.expect("with_tuning job"),
        [Some(Cores::Dedicated)],
        "a new table takes the communicator's fact"
    );
}

#[test]
fn an_unusable_rule_hands_the_call_to_the_next_rule() {
    let rule = |max_np, max_bytes, algorithm| Rule { max_np, max_bytes, locality: None, cores: None, algorithm };
    let mut tuning = Tuning::defaults_for(DeviceKind::Tcp);
    tuning
        .set_rules(
            Collective::Allreduce,
            vec![
                rule(Some(4), None, Algorithm::Native),
                rule(Some(4), Some(4096), Algorithm::Bkt),
                rule(Some(4), None, Algorithm::Rabenseifner),
                rule(None, Some(4096), Algorithm::Nbft),
                Rule::always(Algorithm::Native),
            ],
        )
        .unwrap();
    for device in [DeviceKind::Shm, DeviceKind::Tcp] {
        let what = format!("next rule on {device:?}");
        let config = Config::new().device(device).np(3).tuning(tuning.clone());
        job(config, &what, move |world| {
            let coll = Collective::Allreduce;
            if device == DeviceKind::Shm {
                assert_eq!(world.algorithm_for(coll, 64, true), Algorithm::Native);
            } else {
                assert_eq!(world.algorithm_for(coll, 64, true), Algorithm::Bkt);
                assert_eq!(world.algorithm_for(coll, 1 << 20, true), Algorithm::Rabenseifner);
            }
            // Non-commutative: bkt and rabenseifner pass to nbft (np <= 4 rules end there).
            let expect = if device == DeviceKind::Shm { Algorithm::Native } else { Algorithm::Nbft };
            assert_eq!(world.algorithm_for(coll, 64, false), expect);
            if device == DeviceKind::Tcp {
                assert_eq!(world.algorithm_for(coll, 1 << 20, false), coll.fallback(), "no usable rule applies");
            }
            // The chosen algorithms run.
            let first = |input: &[u32], inout: &mut [u32]| inout.copy_from_slice(input);
            let keep_lowest = UserOp::non_commutative(first);
            let mine = [world.rank() as u32 + 1; 16];
            let mut out = [0u32; 16];
            world.allreduce(&mine, &mut out, Sum)?;
            assert_eq!(out, [6; 16]);
            world.allreduce(&mine, &mut out, &keep_lowest)?;
            assert_eq!(out, [1; 16], "rank order kept");
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
}
