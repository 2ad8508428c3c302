//! Two network namespaces joined by a veth pair: two "hosts" on one machine, for the tests that
//! run a job across hosts (`--agent "ip netns exec"`). Needs root and iproute2.

use std::process::{Command, Stdio};

/// Two network namespaces joined by a veth pair; deleted again on drop.
pub struct NamespacePair {
    pub names: [String; 2],
}

/// Addresses of the two ends of the veth pair.
pub const NAMESPACE_ADDRESSES: [&str; 2] = ["10.77.0.1", "10.77.0.2"];

fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip").args(args).stdin(Stdio::null()).output();
    match output {
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim())),
        Err(e) => Err(format!("ip {}: {e}", args.join(" "))),
    }
}

impl NamespacePair {
    /// `None` (with the reason) where namespaces cannot be made: not root, or no iproute2.
    pub fn create() -> Result<Self, String> {
        let tag = std::process::id();
        let names = [format!("fmpA{tag}"), format!("fmpB{tag}")];
        ip(&["netns", "add", &names[0]])?;
        // From here on the guard deletes whatever exists.
        let pair = NamespacePair { names };
        ip(&["netns", "add", &pair.names[1]])?;
        let ends = [format!("fmpva{tag}"), format!("fmpvb{tag}")];
        ip(&["link", "add", &ends[0], "type", "veth", "peer", "name", &ends[1]])?;
        for ((name, end), address) in pair.names.iter().zip(&ends).zip(NAMESPACE_ADDRESSES) {
            ip(&["link", "set", end, "netns", name])?;
            ip(&["-n", name, "addr", "add", &format!("{address}/24"), "dev", end])?;
            ip(&["-n", name, "link", "set", end, "up"])?;
            ip(&["-n", name, "link", "set", "lo", "up"])?;
        }
        Ok(pair)
    }
}

impl Drop for NamespacePair {
    fn drop(&mut self) {
        // Deleting a namespace also deletes the veth end inside it, and with it the pair.
        for name in &self.names {
            let _ = ip(&["netns", "del", name]);
        }
    }
}
