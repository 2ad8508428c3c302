//! `--device mpi` and `--device hybrid --interprocess mpi`: the job is the system MPI's, so
//! fastmprun hands over to its `mpirun`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::cli::{BindTo, HostSource, Options};

/// Replaces this process with `mpirun` running the program with `FASTMP_DEVICE=mpi`, or, given
/// the threads per process of a hybrid job, with one MPI process per hybrid process over MPI;
/// returns only if that fails, with the reason.
pub fn exec_mpirun(options: &Options, hybrid_threads: Option<usize>) -> String {
    let mpirun = std::env::var_os("MPIRUN").unwrap_or_else(|| "mpirun".into());
    let hydra = is_hydra(&mpirun);
    let args = mpirun_args(options, hybrid_threads, hydra, is_root(), cores());
    let error = Command::new(&mpirun).args(args).exec();
    format!("cannot run `{}` (set MPIRUN or install an MPI): {error}", mpirun.to_string_lossy())
}

/// MPICH's launcher (hydra) spells options differently from Open MPI's.
fn is_hydra(mpirun: &OsString) -> bool {
    Command::new(mpirun)
        .arg("--version")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("HYDRA"))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// mpirun's command line for `options` (Open MPI's spelling, or hydra's).
fn mpirun_args(
    options: &Options,
    hybrid_threads: Option<usize>,
    hydra: bool,
    root: bool,
    cores: usize,
) -> Vec<OsString> {
    let processes = hybrid_threads.map_or(options.np, |t| options.np.div_ceil(t.max(1)));
    let env: Vec<(&str, String)> = match hybrid_threads {
        None => vec![("FASTMP_DEVICE", "mpi".into())],
        Some(t) => vec![
            ("FASTMP_DEVICE", "hybrid".into()),
            ("FASTMP_INTERPROCESS", "mpi".into()),
            ("FASTMP_THREADS_PER_PROCESS", t.to_string()),
            ("FASTMP_NP", options.np.to_string()),
        ],
    };
    let mut args: Vec<OsString> = vec!["-np".into(), processes.to_string().into()];
    if hydra {
        for (name, value) in env {
            args.extend(["-genv".into(), name.into(), value.into()]);
        }
    } else {
        for (name, value) in env {
            args.extend(["-x".into(), format!("{name}={value}").into()]);
        }
        if root {
            args.push("--allow-run-as-root".into());
        }
        if options.oversubscribe || (options.hosts.is_none() && processes > cores) {
            args.push("--oversubscribe".into());
        }
        if options.tag_output {
            args.push("--tag-output".into());
        }
        if let Some(timeout) = options.timeout {
            args.extend(["--timeout".into(), timeout.as_secs().max(1).to_string().into()]);
        }
        if let Some(bind) = options.bind_to {
            let to = match bind {
                BindTo::Core => "core",
                BindTo::None => "none",
            };
            args.extend(["--bind-to".into(), to.into()]);
        }
    }
    match &options.hosts {
        Some(HostSource::Spec(hosts)) => args.extend(["--host".into(), hosts.into()]),
        Some(HostSource::File(path)) => args.extend(["--hostfile".into(), path.into()]),
        None => {}
    }
    args.push(options.program.clone());
    args.extend(options.args.iter().cloned());
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(line: &str) -> Options {
        let argv = line.split_whitespace().map(OsString::from).collect();
        match crate::cli::parse(argv, None) {
            Ok(options) => options,
            Err(_) => panic!("bad test command line {line}"),
        }
    }

    fn words(args: Vec<OsString>) -> String {
        args.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn open_mpi_command_line() {
        let o = options("fastmprun -np 4 --device mpi --bind-to core prog -x 1");
        assert_eq!(
            words(mpirun_args(&o, None, false, true, 2)),
            "-np 4 -x FASTMP_DEVICE=mpi --allow-run-as-root --oversubscribe --bind-to core prog -x 1"
        );
        let o = options("fastmprun -np 2 --device mpi --hosts a:1,b:1 prog");
        assert_eq!(words(mpirun_args(&o, None, false, false, 8)), "-np 2 -x FASTMP_DEVICE=mpi --host a:1,b:1 prog");
    }

    #[test]
    fn hybrid_over_mpi_runs_one_mpi_process_per_hybrid_process() {
        let o = options("fastmprun -np 5 --device hybrid --interprocess mpi --threads-per-process 2 prog");
        assert_eq!(
            words(mpirun_args(&o, Some(2), false, false, 8)),
            "-np 3 -x FASTMP_DEVICE=hybrid -x FASTMP_INTERPROCESS=mpi -x FASTMP_THREADS_PER_PROCESS=2 -x FASTMP_NP=5 prog"
        );
        assert_eq!(
            words(mpirun_args(&o, Some(2), true, false, 8)),
            "-np 3 -genv FASTMP_DEVICE hybrid -genv FASTMP_INTERPROCESS mpi -genv FASTMP_THREADS_PER_PROCESS 2 \
             -genv FASTMP_NP 5 prog"
        );
    }

    #[test]
    fn hydra_command_line() {
        let o = options("fastmprun -np 3 --device mpi prog");
        assert_eq!(words(mpirun_args(&o, None, true, true, 2)), "-np 3 -genv FASTMP_DEVICE mpi prog");
    }
}
