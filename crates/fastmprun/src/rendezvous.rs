//! The job's secret and rank 0's rendezvous address.
//!
//! For an all-local job the launcher binds the rendezvous listener itself and hands it to
//! rank 0 as an inherited descriptor: the port is known before any rank starts, and no
//! other process can grab it in between (no bind race, no retry loop in the ranks).
//! With remote hosts rank 0 must bind on its own machine, so the launcher can only pick
//! an address for it.

use std::net::TcpListener;

/// Random bytes in the job secret; it travels as twice as many lowercase hex digits.
const SECRET_BYTES: usize = 32;

/// Range of ports picked for a remote rank 0 when `--rendezvous` does not give one:
/// above the usual service ports, below the Linux ephemeral range.
const REMOTE_PORTS: std::ops::Range<u16> = 20000..60000;

/// A fresh secret from the OS random source, as 64 lowercase hex digits.
pub fn job_secret() -> Result<String, String> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes).map_err(|error| format!("no random job secret: {error}"))?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// Where the ranks meet.
#[derive(Debug)]
pub struct Rendezvous {
    /// `host:port` every rank gets as `FASTMP_RENDEZVOUS`.
    pub address: String,
    /// The bound, listening socket rank 0 inherits (local jobs only).
    pub listener: Option<TcpListener>,
}

/// Binds the listener for an all-local job: on `requested` (HOST:PORT, port 0 meaning
/// any) or on an ephemeral loopback port.
pub fn bind_local(requested: Option<&str>) -> Result<Rendezvous, String> {
    let requested = requested.unwrap_or("127.0.0.1:0");
    let cannot = |error: std::io::Error| format!("cannot listen on {requested} for the rendezvous: {error}");
    let bound = TcpListener::bind(requested).map_err(cannot)?;
    // std duplicates onto a descriptor >= 3: had the launcher been started with a closed
    // stdin/stdout/stderr, the listener could otherwise sit on 0-2, which the child's
    // stdio setup overwrites before exec.
    let listener = bound.try_clone().map_err(cannot)?;
    drop(bound);
    let address =
        listener.local_addr().map_err(|error| format!("rendezvous listener has no address: {error}"))?.to_string();
    Ok(Rendezvous { address, listener: Some(listener) })
}

/// Picks the address a remote job's rank 0 will bind: `requested` if given, else
/// `rank0_host` (None: unknown) with a random port.
pub fn choose_remote(requested: Option<&str>, rank0_host: Option<&str>) -> Result<Rendezvous, String> {
    let address = match (requested, rank0_host) {
        (Some(address), _) if address.ends_with(":0") => {
            return Err(format!("--rendezvous {address}: a job with remote hosts needs a fixed port"));
        }
        (Some(address), _) => address.to_string(),
        (None, Some(host)) => format!("{host}:{}", random_port()?),
        (None, None) => {
            return Err("rank 0 runs here but this machine's host name is unknown; \
                        pass --rendezvous HOST:PORT"
                .into());
        }
    };
    Ok(Rendezvous { address, listener: None })
}

fn random_port() -> Result<u16, String> {
    let random = getrandom::u32().map_err(|error| format!("no random port: {error}"))?;
    let span = u32::from(REMOTE_PORTS.end - REMOTE_PORTS.start);
    let offset = u16::try_from(random % span).unwrap_or(0);
    Ok(REMOTE_PORTS.start + offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_is_64_lowercase_hex_digits() {
        let secret = job_secret().unwrap_or_default();
        assert_eq!(secret.len(), 2 * SECRET_BYTES);
        assert!(secret.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
    }

    #[test]
    fn remote_address_uses_rank0_host_and_a_port_in_range() {
        let chosen = choose_remote(None, Some("nodeA")).map(|r| r.address);
        let address = chosen.unwrap_or_default();
        let port: u16 = address.strip_prefix("nodeA:").and_then(|port| port.parse().ok()).unwrap_or(0);
        assert!(REMOTE_PORTS.contains(&port), "{address}");
        assert!(choose_remote(Some("h:0"), Some("nodeA")).is_err());
    }
}
