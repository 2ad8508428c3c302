//! Forwarding of the processes' stdout/stderr to the launcher's, one whole line per
//! write, so lines from different ranks never mix mid-line.
//!
//! Each pipe gets its own thread: a rank blocked on a full pipe would otherwise stall,
//! and a blocking read per pipe needs no polling. The threads keep draining even if
//! the launcher's own output is gone (EPIPE), so ranks never block on output.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::Child;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::{Duration, Instant};

use crate::spawn::Label;

/// Longest piece forwarded as one write; a longer line is split so that a rank printing
/// without newlines cannot grow the launcher's memory without bound.
const MAX_LINE: u64 = 64 * 1024;

#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn write_line(self, line: &[u8]) -> io::Result<()> {
        match self {
            Stream::Stdout => write_locked(&mut io::stdout().lock(), line),
            Stream::Stderr => write_locked(&mut io::stderr().lock(), line),
        }
    }
}

fn write_locked(sink: &mut impl Write, line: &[u8]) -> io::Result<()> {
    sink.write_all(line)?;
    sink.flush()
}

/// The forwarding threads of a job.
pub struct Forwarders {
    tag_output: bool,
    started: usize,
    finished_sender: Sender<()>,
    finished: Receiver<()>,
}

impl Forwarders {
    pub fn new(tag_output: bool) -> Self {
        let (finished_sender, finished) = mpsc::channel();
        Forwarders { tag_output, started: 0, finished_sender, finished }
    }

    /// Takes `child`'s stdout and stderr pipes and starts forwarding them.
    pub fn attach(&mut self, child: &mut Child, label: Label) -> io::Result<()> {
        let tag: Option<Arc<[u8]>> = self.tag_output.then(|| label.tag().into_bytes().into());
        if let Some(stdout) = child.stdout.take() {
            self.start(stdout, Stream::Stdout, tag.clone(), label)?;
        }
        if let Some(stderr) = child.stderr.take() {
            self.start(stderr, Stream::Stderr, tag, label)?;
        }
        Ok(())
    }

    fn start(
        &mut self,
        source: impl Read + Send + 'static,
        stream: Stream,
        tag: Option<Arc<[u8]>>,
        label: Label,
    ) -> io::Result<()> {
        let finished = self.finished_sender.clone();
        thread::Builder::new().name(format!("output {label}")).spawn(move || {
            pump(source, stream, tag.as_deref());
            // The receiver may be gone if the launcher stopped waiting; that is fine.
            let _ = finished.send(());
        })?;
        self.started += 1;
        Ok(())
    }

    /// Waits until every pipe reached end-of-file, or until `patience` runs out (a
    /// process that escaped its group can hold a pipe open forever). Returns whether
    /// all output was forwarded.
    pub fn finish(self, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        for _ in 0..self.started {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.finished.recv_timeout(left).is_err() {
                return false;
            }
        }
        true
    }
}

/// Copies `source` to `stream` line by line until end-of-file.
fn pump(source: impl Read, stream: Stream, tag: Option<&[u8]>) {
    let mut reader = BufReader::new(source);
    let mut line = Vec::new();
    let mut sink_open = true;
    loop {
        line.clear();
        line.extend_from_slice(tag.unwrap_or_default());
        match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if tag.is_some() && line.last() != Some(&b'\n') {
            // A tagged line must end so the next rank's tag starts a line of its own.
            line.push(b'\n');
        }
        if sink_open {
            sink_open = stream.write_line(&line).is_ok();
        }
    }
}
