// The tcp device (added by the lead) uses the handshake; until then nothing in-tree calls it.
#[allow(dead_code)]
pub(crate) mod handshake;
