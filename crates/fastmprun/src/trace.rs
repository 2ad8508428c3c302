//! Traces of launched jobs: each rank process writes `FASTMP_TRACE.<rank>.json`; the launcher
//! merges them into the one file `FASTMP_TRACE` names once every rank has exited.

use std::path::PathBuf;

/// Merges the ranks' trace files if the job was traced (`FASTMP_TRACE` set), saying on stderr
/// what could not be merged (ranks that failed before writing theirs, remote hosts' files).
pub(crate) fn merge_after_job(np: usize) {
    let Some(path) = std::env::var_os(fastmp::TRACE_VAR).filter(|p| !p.is_empty()).map(PathBuf::from) else {
        return;
    };
    if let Err(error) = fastmp::merge_trace_files(&path, np) {
        eprintln!("fastmprun: {error}");
    }
}
