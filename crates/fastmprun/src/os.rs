//! The few POSIX calls std does not wrap: signal delivery to the supervisor, signalling
//! a rank's process group, and the child-side setup between fork and exec. All of the
//! crate's `unsafe` lives here.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::mpsc::{self, Receiver};

use libc::c_int;

/// Signals that make the launcher stop the job (forwarded to the ranks first).
const TERMINATION_SIGNALS: [c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Why the supervisor should look again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wakeup {
    /// SIGCHLD: some child changed state.
    ChildChanged,
    /// The launcher was asked to stop with this signal.
    Terminate(c_int),
}

/// Routes SIGINT/SIGTERM/SIGHUP/SIGCHLD to a channel instead of handlers.
///
/// The signals are blocked in the calling thread and taken with `sigwait` by a dedicated
/// thread, so no async-signal-safety concerns arise. Call this before creating any other
/// thread: threads inherit the mask, and a thread without it could receive the signal
/// and die of the default action. Children get a clean mask from [`prepare_child`].
pub fn watch_signals() -> io::Result<Receiver<Wakeup>> {
    let mut watched = TERMINATION_SIGNALS.to_vec();
    watched.push(libc::SIGCHLD);
    let set = signal_set(&watched)?;
    // SAFETY: `set` is an initialised sigset_t; a null pointer for the old mask is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    let (sender, receiver) = mpsc::channel();
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        loop {
            let mut signal: c_int = 0;
            // SAFETY: both pointers refer to live locals for the duration of the call.
            if unsafe { libc::sigwait(&set, &mut signal) } != 0 {
                continue;
            }
            let wakeup = if signal == libc::SIGCHLD { Wakeup::ChildChanged } else { Wakeup::Terminate(signal) };
            if sender.send(wakeup).is_err() {
                return;
            }
        }
    })?;
    Ok(receiver)
}

fn signal_set(signals: &[c_int]) -> io::Result<libc::sigset_t> {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the whole set before it is read or assumed init.
    let mut set = unsafe {
        if libc::sigemptyset(set.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        set.assume_init()
    };
    for &signal in signals {
        // SAFETY: `set` is initialised; an invalid signal number is reported, not UB.
        if unsafe { libc::sigaddset(&mut set, signal) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(set)
}

/// Sends `signal` to every process in the group `group` (a rank and whatever it forked).
/// A group that is already gone is not an error: there is nothing left to stop.
pub fn signal_group(group: u32, signal: c_int) {
    let Ok(group) = libc::pid_t::try_from(group) else {
        return;
    };
    if group <= 1 {
        return; // never the whole session or init
    }
    // SAFETY: kill has no memory-safety preconditions; a negative pid names a group.
    unsafe { libc::kill(-group, signal) };
}

/// Child-side setup run between fork and exec:
/// - unblock every signal: the launcher's blocked SIGINT/SIGTERM/SIGHUP/SIGCHLD would
///   otherwise be inherited through exec (std does not reset the mask here), and a rank
///   could then not be terminated by SIGTERM;
/// - give SIGINT/SIGTERM/SIGHUP their default action: the launcher takes these itself and
///   forwards them, so a rank must act on a forwarded one even where the launcher was started
///   with them ignored (a background job of a non-interactive shell ignores SIGINT, and a shell
///   cannot trap a signal ignored on entry);
/// - die with SIGKILL if the launcher dies, so even a SIGKILLed launcher leaves no orphans;
/// - `inherit` (rank 0's rendezvous listener) loses close-on-exec so the program gets it;
/// - a non-empty `cpus` becomes the child's CPU affinity (the CPUs it and its threads may use).
pub fn prepare_child(command: &mut Command, inherit: Option<RawFd>, cpus: &[usize]) -> io::Result<()> {
    let launcher = std::process::id();
    let nothing_blocked = signal_set(&[])?;
    let affinity = cpu_set(cpus)?;
    // SAFETY: the closure runs in the forked child before exec and only calls the
    // async-signal-safe functions sigprocmask, signal, prctl, getppid, fcntl and
    // sched_setaffinity; it allocates nothing and only reads values it owns.
    unsafe {
        command.pre_exec(move || {
            if let Some(set) = &affinity
                && libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), set) != 0
            {
                return Err(io::Error::last_os_error());
            }
            if libc::sigprocmask(libc::SIG_SETMASK, &nothing_blocked, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            for signal in TERMINATION_SIGNALS {
                if libc::signal(signal, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(io::Error::last_os_error());
                }
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            if u32::try_from(libc::getppid()) != Ok(launcher) {
                // The launcher died before prctl took effect.
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if let Some(fd) = inherit {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        })
    };
    Ok(())
}

/// The affinity mask of `cpus`, built before fork so the child only hands it to the kernel;
/// `None` for no CPUs (the child keeps the launcher's affinity).
fn cpu_set(cpus: &[usize]) -> io::Result<Option<libc::cpu_set_t>> {
    if cpus.is_empty() {
        return Ok(None);
    }
    // SAFETY: cpu_set_t is plain data and an all-zero value is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CPU {cpu} is beyond CPU_SETSIZE")));
        }
        // SAFETY: `cpu` is below CPU_SETSIZE (checked above), so the bit lies inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    Ok(Some(set))
}

/// `SIGKILL`-style name for the signals worth naming in a report.
fn signal_name(signal: c_int) -> Option<&'static str> {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        _ => return None,
    };
    Some(name)
}

/// `9 (SIGKILL)`, or just the number for signals without a name here.
pub fn describe_signal(signal: c_int) -> String {
    match signal_name(signal) {
        Some(name) => format!("{signal} ({name})"),
        None => signal.to_string(),
    }
}
