//! Job-wide facts MPI programs ask for: a clock (MPI_Wtime, MPI_Wtick) and the processor name
//! (MPI_Get_processor_name).

/// Seconds elapsed since an arbitrary point in the past, from a monotonic clock (MPI_Wtime).
///
/// The clock is the system's `CLOCK_MONOTONIC`, so values never go backwards, are unaffected by
/// changes of the wall-clock time, and are comparable between all ranks of one node (thread
/// ranks or processes); across nodes only differences are meaningful. Resolution: [`wtick`].
///
/// ```
/// let start = fastmp::wtime();
/// let later = fastmp::wtime();
/// assert!(later >= start);
/// ```
pub fn wtime() -> f64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `now`; CLOCK_MONOTONIC always exists on the
    // platforms fastmp supports.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
}

/// The resolution of [`wtime`] in seconds (MPI_Wtick).
///
/// ```
/// assert!(fastmp::wtick() > 0.0 && fastmp::wtick() <= 0.001);
/// ```
pub fn wtick() -> f64 {
    let mut resolution = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_getres writes one timespec into `resolution`.
    let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC, &mut resolution) };
    let seconds = resolution.tv_sec as f64 + resolution.tv_nsec as f64 * 1e-9;
    // A clock that cannot say is at least as fine as a nanosecond count.
    if rc != 0 || seconds <= 0.0 { 1e-9 } else { seconds }
}

/// The name of the machine this rank runs on: its host name (MPI_Get_processor_name). Thread
/// ranks of one process all get the same name.
///
/// ```
/// assert!(!fastmp::processor_name().is_empty());
/// ```
pub fn processor_name() -> String {
    let mut name = [0u8; 256];
    // SAFETY: gethostname writes at most `name.len()` bytes into `name`.
    let rc = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) };
    let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    if rc != 0 || len == 0 {
        return "localhost".into();
    }
    String::from_utf8_lossy(&name[..len]).into_owned()
}
