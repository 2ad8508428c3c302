//! `--device mpi`: the job is the system MPI's, so fastmprun hands over to its `mpirun`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::cli::{BindTo, HostSource, Options};

/// Replaces this process with `mpirun` running the program with `FASTMP_DEVICE=mpi`; returns
/// only if that fails, with the reason.
pub fn exec_mpirun(options: &Options) -> String {
    let mpirun = std::env::var_os("MPIRUN").unwrap_or_else(|| "mpirun".into());
    let hydra = is_hydra(&mpirun);
    let error = Command::new(&mpirun).args(mpirun_args(options, hydra, is_root(), cores())).exec();
    format!("cannot run `{}` for --device mpi (set MPIRUN or install an MPI): {error}", mpirun.to_string_lossy())
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
fn mpirun_args(options: &Options, hydra: bool, root: bool, cores: usize) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["-np".into(), options.np.to_string().into()];
    if hydra {
        args.extend(["-genv".into(), "FASTMP_DEVICE".into(), "mpi".into()]);
    } else {
        args.extend(["-x".into(), "FASTMP_DEVICE=mpi".into()]);
        if root {
            args.push("--allow-run-as-root".into());
        }
        if options.oversubscribe || (options.hosts.is_none() && options.np > cores) {
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
            words(mpirun_args(&o, false, true, 2)),
            "-np 4 -x FASTMP_DEVICE=mpi --allow-run-as-root --oversubscribe --bind-to core prog -x 1"
        );
        let o = options("fastmprun -np 2 --device mpi --hosts a:1,b:1 prog");
        assert_eq!(words(mpirun_args(&o, false, false, 8)), "-np 2 -x FASTMP_DEVICE=mpi --host a:1,b:1 prog");
    }

    #[test]
    fn hydra_command_line() {
        let o = options("fastmprun -np 3 --device mpi prog");
        assert_eq!(words(mpirun_args(&o, true, true, 2)), "-np 3 -genv FASTMP_DEVICE mpi prog");
    }
}
