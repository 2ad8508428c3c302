//! Completing sets of requests (MPI_Waitall, _Waitany, _Waitsome and their tests), written once
//! for every request kind: scope requests ([`crate::Request`], [`crate::RecvRequest`]) and
//! owned-buffer ones ([`crate::OwnedRequest`], [`crate::PersistentRequest`]).

use std::rc::Rc;

use crate::device::Device;
use crate::error::Result;
use crate::trace::{self, Event, Kind};

pub(crate) mod sealed {
    use std::rc::Rc;

    use crate::device::Device;
    use crate::error::Result;

    /// What the set operations need from a request; not implementable outside the crate.
    pub trait Completion {
        /// What completing the request hands back.
        type Output;
        /// The device to block on while the request is active (`None`: nothing to wait for).
        fn device(&self) -> Option<Rc<dyn Device>>;
        /// Whether the request has a result to deliver (finished, or still in flight).
        fn is_active(&self) -> bool;
        /// Progresses the request; `true` once its result is ready to [`Completion::take`].
        fn poll(&mut self) -> bool;
        /// As [`Completion::poll`], from a wait on this request alone: a nonblocking
        /// collective may then finish in place (see `Engine::progress_waited`).
        fn poll_waited(&mut self) -> bool {
            self.poll()
        }
        /// Whether the ready result is an error.
        fn failed(&self) -> bool;
        /// Takes the result (the request becomes inactive). Only after `poll` returned `true`,
        /// or on an inactive request.
        fn take(&mut self) -> Result<Self::Output>;
        /// What a wait on the request waits for, as far as the request knows (a trace's
        /// `wait` event): a collective, or once received, the message's sender and tag.
        fn waits_on(&self) -> Option<crate::trace::Event> {
            None
        }
    }
}

/// A request the set operations ([`waitall`], [`waitany`], [`wait_some`], [`testany`],
/// [`testall`], [`test_some`]) complete: [`crate::Request`] (output: its `Status`),
/// [`crate::RecvRequest`] (the received buffer and its `Status`), [`crate::OwnedRequest`] (the
/// buffer back and the `Status`) and [`crate::PersistentRequest`] (its `Status`; the request
/// stays usable). Implemented by those types only.
pub trait Completable: sealed::Completion {}

impl<R: sealed::Completion> Completable for R {}

/// A reference completes like the request it points to, so requests kept in separate variables
/// or fields can be completed together (`waitall(&mut [&mut recv, &mut send])`).
impl<R: sealed::Completion> sealed::Completion for &mut R {
    type Output = R::Output;

    fn device(&self) -> Option<Rc<dyn Device>> {
        (**self).device()
    }

    fn is_active(&self) -> bool {
        (**self).is_active()
    }

    fn poll(&mut self) -> bool {
        (**self).poll()
    }

    fn poll_waited(&mut self) -> bool {
        (**self).poll_waited()
    }

    fn failed(&self) -> bool {
        (**self).failed()
    }

    fn take(&mut self) -> Result<R::Output> {
        (**self).take()
    }

    fn waits_on(&self) -> Option<crate::trace::Event> {
        (**self).waits_on()
    }
}

/// Blocks until `req` has a result and takes it.
pub(crate) fn wait_one<R: Completable>(req: &mut R) -> Result<R::Output> {
    if req.is_active()
        && !req.poll_waited()
        && let Some(dev) = req.device()
    {
        let started = trace::start();
        let before = started.and_then(|_| req.waits_on());
        dev.wait_until(&mut || Ok(req.poll_waited()))?;
        trace::record(started, || {
            let request = Event { on: Some("request"), ..Event::of(Kind::Wait) };
            (dev.rank(), req.waits_on().or(before).unwrap_or(request))
        });
    }
    req.take()
}

fn device_of<R: Completable>(reqs: &[R]) -> Option<Rc<dyn Device>> {
    reqs.iter().filter(|r| r.is_active()).find_map(|r| r.device())
}

/// Waits for every request (MPI_Waitall). All are completed even if one fails; then the first
/// error is returned (and the other outputs are dropped). Inactive scope and persistent
/// requests report an empty status.
pub fn waitall<R: Completable>(reqs: &mut [R]) -> Result<Vec<R::Output>> {
    let mut first_error = None;
    let mut outputs = Vec::with_capacity(reqs.len());
    for req in reqs.iter_mut() {
        match wait_one(req) {
            Ok(output) => outputs.push(output),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        None => Ok(outputs),
        Some(e) => Err(e),
    }
}

/// Waits until one request completes and returns its index and output (MPI_Waitany); `None` if
/// no request is active.
pub fn waitany<R: Completable>(reqs: &mut [R]) -> Result<Option<(usize, R::Output)>> {
    let Some(dev) = device_of(reqs) else { return Ok(None) };
    let mut done = None;
    dev.wait_until(&mut || {
        done = reqs.iter_mut().position(|r| r.poll());
        Ok(done.is_some())
    })?;
    let index = done.expect("waitany completed");
    reqs[index].take().map(|output| Some((index, output)))
}

/// Completes one finished request if there is one (MPI_Testany). `Ok(None)` if none finished yet.
pub fn testany<R: Completable>(reqs: &mut [R]) -> Result<Option<(usize, R::Output)>> {
    match reqs.iter_mut().position(|r| r.poll()) {
        Some(index) => reqs[index].take().map(|output| Some((index, output))),
        None => Ok(None),
    }
}

/// Completes all requests if all have finished (MPI_Testall); otherwise completes none of them
/// from the caller's point of view and returns `Ok(None)`.
pub fn testall<R: Completable>(reqs: &mut [R]) -> Result<Option<Vec<R::Output>>> {
    let mut all = true;
    for req in reqs.iter_mut() {
        all &= req.poll() || !req.is_active();
    }
    if !all {
        return Ok(None);
    }
    waitall(reqs).map(Some)
}

/// Waits until at least one request finished, then completes every finished one and returns
/// their indices and outputs in index order (MPI_Waitsome). Empty if no request is active.
///
/// If a finished request failed, only that one is completed and its error returned: the other
/// finished requests keep their results for the next call (none is lost, MPI's
/// `MPI_ERR_IN_STATUS` case).
///
/// ```
/// fastmp::run(2, |world| {
///     let peer = 1 - world.rank();
///     let mut reqs = vec![
///         world.irecv_owned(vec![0u32; 2], peer, 0)?,
///         world.irecv_owned(vec![0u32; 2], peer, 1)?,
///     ];
///     world.send(&[1u32, 2], peer, 0)?;
///     world.send(&[3u32, 4], peer, 1)?;
///     let mut got = Vec::new();
///     while got.len() < 2 {
///         for (index, (buf, _status)) in fastmp::wait_some(&mut reqs)? {
///             got.push((index, buf));
///         }
///     }
///     got.sort();
///     assert_eq!(got, [(0, vec![1, 2]), (1, vec![3, 4])]);
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub fn wait_some<R: Completable>(reqs: &mut [R]) -> Result<Vec<(usize, R::Output)>> {
    let Some(dev) = device_of(reqs) else { return Ok(Vec::new()) };
    let mut any = false;
    dev.wait_until(&mut || {
        // Polls every request (not just up to the first finished one), as test_some does.
        any = reqs.iter_mut().fold(false, |any, r| r.poll() | any);
        Ok(any)
    })?;
    take_finished(reqs)
}

/// Completes every request that has finished (MPI_Testsome): like [`wait_some`] without
/// blocking, so the list may be empty.
pub fn test_some<R: Completable>(reqs: &mut [R]) -> Result<Vec<(usize, R::Output)>> {
    for req in reqs.iter_mut() {
        req.poll();
    }
    take_finished(reqs)
}

/// Takes the results of the requests whose `poll` reported them ready (polling is idempotent
/// once ready), or just the first failed one.
fn take_finished<R: Completable>(reqs: &mut [R]) -> Result<Vec<(usize, R::Output)>> {
    if let Some(failed) = reqs.iter_mut().position(|r| r.is_active() && r.poll() && r.failed()) {
        return reqs[failed].take().map(|_| unreachable!("a failed request's result is an error"));
    }
    let mut done = Vec::new();
    for (index, req) in reqs.iter_mut().enumerate() {
        if req.is_active() && req.poll() {
            done.push((index, req.take()?));
        }
    }
    Ok(done)
}
