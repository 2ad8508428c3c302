//! Reading the output of `fastmp-testprog ring`.

/// The job-wide checksum of a `ring` run of job `name`, after checking that each of the `size`
/// ranks printed it in `stdout` (with the output tag `tag(rank)` in front).
pub fn ring_checksum(name: &str, stdout: &str, size: usize, tag: impl Fn(usize) -> String) -> String {
    let mut checksums: Vec<String> = (0..size)
        .map(|rank| {
            let prefix = format!("{}rank {rank} of {size} ok ", tag(rank));
            let line = stdout.lines().find(|line| line.starts_with(&prefix));
            let line = line.unwrap_or_else(|| panic!("{name}: no `{prefix}...` line in\n{stdout}"));
            line[prefix.len()..].to_string()
        })
        .collect();
    checksums.dedup();
    assert_eq!(checksums.len(), 1, "{name}: ranks disagree on the checksum: {checksums:?}");
    checksums.remove(0)
}
