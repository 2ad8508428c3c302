//! The tcp device: ranks are processes (or threads) connected by a full mesh of TCP sockets.

pub(crate) mod frame;
