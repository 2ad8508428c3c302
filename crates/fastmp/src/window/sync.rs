//! Synchronisation: fence (flush + one allreduce that also checks the assertions agree), PSCW
//! (zero-byte messages on the window communicator's point-to-point context), passive-target locks
//! and flushes (the device's), each guarded by the epoch state machine of `epoch.rs`.

use super::Assert;
use super::epoch::Held;
use super::lifecycle::Core;
use crate::coll::op::Bor;
use crate::device::one_sided::LockKind;
use crate::device::requests;
use crate::device::{MatchSpec, PROC_NULL, SendMode, Source};
use crate::error::{Error, Result};
use crate::group::Group;

/// Tag of the zero-byte message `post` sends each origin of its group.
const TAG_POST: i32 = 1;
/// Tag of the zero-byte message `complete` sends each target of its group.
const TAG_COMPLETE: i32 = 2;
/// A rank refused the fence (its own epochs forbid it): every rank fails.
const FENCE_REFUSED: u32 = 1 << 31;
/// The assertions every rank must give alike.
const AGREED: Assert = Assert(Assert::NOPRECEDE.0 | Assert::NOSUCCEED.0);

impl Core {
    pub(crate) fn fence(&self, assert: Assert) -> Result<()> {
        self.usable("fence")?;
        let refusal = self.epochs.fence_refusal(assert);
        if refusal.is_none() && !assert.contains(Assert::NOPRECEDE) {
            self.dev.flush(None)?;
        }
        let mine = (assert.0 & AGREED.0) | if refusal.is_some() { FENCE_REFUSED } else { 0 };
        let mut all = [0u32; 2];
        // Or of the bits and of their complements: every bit's or and and in one allreduce.
        self.comm.allreduce(&[mine, !mine], &mut all, Bor)?;
        let (any, every) = (all[0], !all[1]);
        if let Some(why) = refusal {
            return Err(Error::RmaSync(why));
        }
        if any & FENCE_REFUSED != 0 {
            return Err(Error::RmaSync(
                "fence: another rank called fence inside a PSCW or passive-target epoch (see its error)".into(),
            ));
        }
        if (any ^ every) & AGREED.0 != 0 {
            return Err(Error::RmaSync(format!(
                "fence: ranks disagree on {} (every rank must give the same NOPRECEDE and NOSUCCEED)",
                if (any ^ every) & Assert::NOPRECEDE.0 != 0 { "NOPRECEDE" } else { "NOSUCCEED" }
            )));
        }
        self.epochs.fenced(assert);
        Ok(())
    }

    /// The window ranks of `group`'s members; `Err` if one is not in the window's communicator.
    fn window_ranks<'g>(&'g self, call: &'g str, group: &'g Group) -> impl Iterator<Item = Result<usize>> + 'g {
        group.members().iter().map(move |&world| {
            self.comm.group.group_rank_of(world).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{call}: world rank {world} of the group is not in the window's communicator \
                     (build the group from win.comm().group())"
                ))
            })
        })
    }

    fn check_group(&self, call: &str, group: &Group) -> Result<()> {
        self.window_ranks(call, group).try_for_each(|r| r.map(drop))
    }

    fn signal(&self, target: usize, tag: i32) -> Result<()> {
        let world = self.comm.group.world_rank(target);
        self.comm.dev.send(&[], world, tag, self.comm.context, SendMode::Standard)
    }

    /// Receives one zero-byte signal with `tag` from `source`; returns its sender's window rank.
    fn await_signal(&self, source: Source, tag: i32) -> Result<usize> {
        let spec = MatchSpec { context: self.comm.context, source, tag };
        let status = requests::recv(&*self.comm.dev, &mut [], spec)?;
        Ok(self.comm.group.group_rank_of(status.source).unwrap_or(status.source))
    }

    pub(crate) fn post(&self, group: &Group, assert: Assert) -> Result<()> {
        self.usable("post")?;
        self.check_group("post", group)?;
        self.epochs.post(self.window_ranks("post", group).map(|r| r.expect("checked")))?;
        if !assert.contains(Assert::NOCHECK) {
            for origin in self.window_ranks("post", group) {
                self.signal(origin?, TAG_POST)?;
            }
        }
        Ok(())
    }

    pub(crate) fn start(&self, group: &Group, assert: Assert) -> Result<()> {
        self.usable("start")?;
        self.check_group("start", group)?;
        self.epochs.start(self.window_ranks("start", group).map(|r| r.expect("checked")))?;
        if !assert.contains(Assert::NOCHECK) {
            // Each target's post, in group order; posts of other epochs wait their turn.
            for target in self.window_ranks("start", group) {
                let target = target?;
                if let Err(e) = self.await_signal(Source::Rank(self.comm.group.world_rank(target)), TAG_POST) {
                    self.epochs.completed();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn complete(&self) -> Result<()> {
        self.usable("complete")?;
        let result = {
            let targets = self.epochs.access_group()?;
            let flushed = targets.iter().try_for_each(|&t| self.dev.flush(Some(t)));
            flushed.and_then(|()| targets.iter().try_for_each(|&t| self.signal(t, TAG_COMPLETE)))
        };
        self.epochs.completed();
        result
    }

    pub(crate) fn wait(&self) -> Result<()> {
        self.usable("wait")?;
        if self.epochs.awaiting("wait")? == 0 {
            self.epochs.close_exposure_if_done();
            return Ok(());
        }
        loop {
            let origin = self.await_signal(Source::Any, TAG_COMPLETE)?;
            if self.epochs.complete_from("wait", origin)? {
                return Ok(());
            }
        }
    }

    pub(crate) fn test(&self) -> Result<bool> {
        self.usable("test")?;
        if self.epochs.awaiting("test")? == 0 {
            return Ok(self.epochs.close_exposure_if_done());
        }
        let spec = MatchSpec { context: self.comm.context, source: Source::Any, tag: TAG_COMPLETE };
        while let Some(status) = self.comm.dev.iprobe(spec)? {
            let origin = self.await_signal(Source::Rank(status.source), TAG_COMPLETE)?;
            if self.epochs.complete_from("test", origin)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Checks a target rank of a synchronisation call; `None` for `PROC_NULL` (a no-op).
    fn sync_target(&self, call: &str, target: usize) -> Result<Option<usize>> {
        self.usable(call)?;
        match target {
            PROC_NULL => Ok(None),
            t if t >= self.comm.size() => Err(Error::RankOutOfRange { rank: t, size: self.comm.size() }),
            t => Ok(Some(t)),
        }
    }

    pub(crate) fn lock(&self, kind: LockKind, target: usize, assert: Assert) -> Result<()> {
        let Some(target) = self.sync_target("lock", target)? else { return Ok(()) };
        let held = if assert.contains(Assert::NOCHECK) { Held::Asserted } else { Held::Device };
        self.epochs.lock(target, kind, held)?;
        if held == Held::Device
            && let Err(e) = self.dev.lock(target, kind)
        {
            self.epochs.unlocked(target);
            return Err(e);
        }
        Ok(())
    }

    pub(crate) fn unlock(&self, target: usize) -> Result<()> {
        let Some(target) = self.sync_target("unlock", target)? else { return Ok(()) };
        let held = self.epochs.lock_of(target)?;
        // The epoch ends whatever the device says: a failed unlock (a dead peer) is reported, and a
        // retry would find no lock.
        self.epochs.unlocked(target);
        match held {
            Held::Device => self.dev.unlock(target),
            Held::Asserted => self.dev.flush(Some(target)),
        }
    }

    pub(crate) fn lock_all(&self, assert: Assert) -> Result<()> {
        self.usable("lock_all")?;
        let held = if assert.contains(Assert::NOCHECK) { Held::Asserted } else { Held::Device };
        self.epochs.lock_all(held)?;
        if held == Held::Device {
            for target in 0..self.comm.size() {
                if let Err(e) = self.dev.lock(target, LockKind::Shared) {
                    for taken in 0..target {
                        let _ = self.dev.unlock(taken);
                    }
                    self.epochs.unlocked_all();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn unlock_all(&self) -> Result<()> {
        self.usable("unlock_all")?;
        let held = self.epochs.lock_all_held()?;
        self.epochs.unlocked_all();
        match held {
            Held::Device => (0..self.comm.size()).map(|t| self.dev.unlock(t)).fold(Ok(()), Result::and),
            Held::Asserted => self.dev.flush(None),
        }
    }

    pub(crate) fn flush(&self, call: &str, target: usize) -> Result<()> {
        let Some(target) = self.sync_target(call, target)? else { return Ok(()) };
        self.epochs.passive(call, target)?;
        self.dev.flush(Some(target))
    }

    pub(crate) fn flush_all(&self, call: &str) -> Result<()> {
        self.usable(call)?;
        self.epochs.any_passive(call)?;
        self.dev.flush(None)
    }
}
