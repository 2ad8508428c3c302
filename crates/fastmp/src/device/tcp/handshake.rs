//! TEMPORARY STUB (replaced by the security branch).
use std::net::TcpStream;
use std::time::Duration;
#[derive(Clone)]
pub(crate) struct JobSecret([u8; 32]);
impl JobSecret {
    pub(crate) fn random() -> crate::Result<Self> {
        Ok(JobSecret([7; 32]))
    }
    pub(crate) fn from_hex(_hex: &str) -> crate::Result<Self> {
        Ok(JobSecret([7; 32]))
    }
    pub(crate) fn to_hex(&self) -> String {
        "07".repeat(32)
    }
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Connector,
    Acceptor,
}
pub(crate) fn authenticate(_s: &mut TcpStream, _secret: &JobSecret, _role: Role, _t: Duration) -> crate::Result<()> {
    Ok(())
}
