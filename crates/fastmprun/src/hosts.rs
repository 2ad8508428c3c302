//! Host lists (`--hosts a:2,b:2`, `--hostfile F`) and the rank → host assignment.
//! Ranks fill each host's slots in list order, as mpirun's default "by slot" mapping
//! does, so neighbouring ranks share a machine.

use std::path::Path;

use crate::cli::HostSource;

/// One host and how many ranks it may run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSlots {
    pub name: String,
    pub slots: usize,
}

/// Where one rank runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Spawned directly by the launcher.
    Local,
    /// Spawned through the agent on this host.
    Remote(String),
}

/// Reads the host list named on the command line.
pub fn load(source: &HostSource) -> Result<Vec<HostSlots>, String> {
    match source {
        HostSource::Spec(spec) => parse_spec(spec),
        HostSource::File(path) => parse_hostfile(path),
    }
}

/// Parses `a:2,b:2,c` (a missing count means one slot).
fn parse_spec(spec: &str) -> Result<Vec<HostSlots>, String> {
    spec.split(',')
        .map(|entry| parse_host_colon_slots(entry.trim()).map_err(|why| format!("--hosts `{spec}`: {why}")))
        .collect()
}

fn parse_hostfile(path: &Path) -> Result<Vec<HostSlots>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|error| format!("cannot read hostfile {}: {error}", path.display()))?;
    let mut hosts = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let content = line.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let host = parse_hostfile_line(content)
            .map_err(|why| format!("hostfile {} line {}: {why}", path.display(), index + 1))?;
        hosts.push(host);
    }
    if hosts.is_empty() {
        return Err(format!("hostfile {} lists no hosts", path.display()));
    }
    Ok(hosts)
}

/// One hostfile line: `host slots=K`, `host:K` or `host`.
fn parse_hostfile_line(content: &str) -> Result<HostSlots, String> {
    let mut words = content.split_whitespace();
    let first = words.next().unwrap_or("");
    let Some(setting) = words.next() else {
        return parse_host_colon_slots(first);
    };
    if let Some(extra) = words.next() {
        return Err(format!("unexpected `{extra}` (expected `host slots=N`)"));
    }
    let count = setting.strip_prefix("slots=").ok_or_else(|| format!("unexpected `{setting}` (expected `slots=N`)"))?;
    Ok(HostSlots { name: checked_name(first)?, slots: parse_slots(count)? })
}

fn parse_host_colon_slots(entry: &str) -> Result<HostSlots, String> {
    let (name, slots) = match entry.split_once(':') {
        Some((name, count)) => (name, parse_slots(count)?),
        None => (entry, 1),
    };
    Ok(HostSlots { name: checked_name(name)?, slots })
}

fn checked_name(name: &str) -> Result<String, String> {
    if name.is_empty() {
        return Err("empty host name".into());
    }
    if name.starts_with('-') || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        // A host name becomes an argument of the agent; never let it look like an option.
        return Err(format!("`{name}` is not a host name"));
    }
    Ok(name.to_string())
}

fn parse_slots(count: &str) -> Result<usize, String> {
    match count.parse::<usize>() {
        Ok(slots) if slots > 0 => Ok(slots),
        _ => Err(format!("slot count `{count}` is not a positive integer")),
    }
}

/// Assigns `np` ranks to hosts, filling each host's slots in order. More ranks than
/// slots is an error unless `oversubscribe`, in which case the assignment wraps around.
pub fn assign(
    hosts: &[HostSlots],
    np: usize,
    oversubscribe: bool,
    this_machine: &LocalNames,
) -> Result<Vec<Placement>, String> {
    let total: usize = hosts.iter().map(|host| host.slots).sum();
    if np > total && !oversubscribe {
        return Err(format!(
            "{np} ranks requested but the host list has only {total} slot{}; \
             add slots or pass --oversubscribe",
            if total == 1 { "" } else { "s" }
        ));
    }
    let slot_hosts = hosts.iter().flat_map(|host| std::iter::repeat_n(host.name.as_str(), host.slots));
    Ok(slot_hosts.cycle().take(np).map(|name| this_machine.placement_of(name)).collect())
}

/// The names under which this machine is spawned directly instead of through the agent.
#[derive(Debug)]
pub struct LocalNames {
    hostname: Option<String>,
}

impl LocalNames {
    /// Reads this machine's host name (Linux: `/proc/sys/kernel/hostname`); if it cannot be
    /// read, only `localhost` and loopback addresses count as local.
    pub fn detect() -> Self {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|name| name.trim().to_string())
            .filter(|name| !name.is_empty());
        LocalNames { hostname }
    }

    /// This machine's host name, as remote ranks should use to reach it.
    pub fn hostname(&self) -> Option<&str> {
        self.hostname.as_deref()
    }

    pub fn is_local(&self, name: &str) -> bool {
        if matches!(name, "localhost" | "127.0.0.1" | "::1") {
            return true;
        }
        let Some(hostname) = &self.hostname else {
            return false;
        };
        // `node1` and `node1.cluster.example` name the same machine.
        let short = |full: &str| full.split('.').next().unwrap_or(full).to_string();
        name == hostname || (!name.contains('.') && name == short(hostname))
    }

    fn placement_of(&self, name: &str) -> Placement {
        if self.is_local(name) { Placement::Local } else { Placement::Remote(name.to_string()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(hostname: &str) -> LocalNames {
        LocalNames { hostname: Some(hostname.into()) }
    }

    fn remote(name: &str) -> Placement {
        Placement::Remote(name.into())
    }

    #[test]
    fn spec_and_hostfile_lines() {
        let hosts = parse_spec("a:2, b ,c:3").unwrap_or_default();
        let slots: Vec<_> = hosts.iter().map(|h| (h.name.as_str(), h.slots)).collect();
        assert_eq!(slots, [("a", 2), ("b", 1), ("c", 3)]);
        assert!(parse_spec("a:0").is_err());
        assert!(parse_spec("a:2,,b").is_err());
        assert_eq!(parse_hostfile_line("n1 slots=4"), Ok(HostSlots { name: "n1".into(), slots: 4 }));
        assert!(parse_hostfile_line("n1 cores=4").is_err());
        assert!(parse_hostfile_line("n1 slots=4 extra").is_err());
        assert!(parse_hostfile_line("-oProxyCommand=x").is_err());
    }

    #[test]
    fn ranks_fill_slots_in_order() {
        let hosts = parse_spec("localhost:2,b:1,c:2").unwrap_or_default();
        let placement = assign(&hosts, 4, false, &names("here"));
        assert_eq!(placement, Ok(vec![Placement::Local, Placement::Local, remote("b"), remote("c")]));
        assert!(assign(&hosts, 6, false, &names("here")).is_err());
        let wrapped = assign(&hosts, 6, true, &names("here")).unwrap_or_default();
        assert_eq!(wrapped[5], Placement::Local);
    }

    #[test]
    fn this_machine_is_recognised() {
        let here = names("node1.cluster.example");
        assert!(here.is_local("node1"));
        assert!(here.is_local("node1.cluster.example"));
        assert!(here.is_local("127.0.0.1"));
        assert!(!here.is_local("node2"));
        assert!(!here.is_local("node1.other.example"));
    }
}
