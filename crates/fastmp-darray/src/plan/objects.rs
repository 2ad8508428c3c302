//! Executing a plan on serde elements (HPJava's `Object` arrays): each peer's elements travel as
//! one encoded vector. Sends are nonblocking and posted first, so the blocking receives that
//! follow cannot deadlock whatever the order of the peers.

use fastmp::{Error, Result, waitall};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Plan;
use super::exec::copy_blocks;

impl Plan {
    /// Moves the data like [`Plan::execute`], cloning elements out of the source block and
    /// assigning them into the destination block (`src == None`: the source is `dst` itself).
    pub(crate) fn execute_obj<T>(&self, src: Option<&[T]>, dst: &mut [T], tag: i32) -> Result<()>
    where
        T: Serialize + DeserializeOwned + Clone,
    {
        let comm = &self.comm;
        let mut outgoing = Vec::with_capacity(self.sends.len());
        for t in self.sends.iter().chain(&self.direct_sends) {
            let from: &[T] = src.unwrap_or(dst);
            let mut items: Vec<&T> = Vec::with_capacity(t.elements);
            for b in &t.blocks {
                b.for_each_run(|o, n| items.extend(&from[o..o + n]));
            }
            let bytes = postcard::to_allocvec(&items).map_err(|e| Error::Serialization(e.to_string()))?;
            outgoing.push(comm.isend_owned(bytes, t.peer, tag)?);
        }
        for t in self.recvs.iter().chain(&self.direct_recvs) {
            let (items, _) = comm.recv_obj::<Vec<T>>(t.peer, tag)?;
            if items.len() != t.elements {
                return Err(Error::InvalidArgument(format!(
                    "distributed array operation: rank {} sent {} elements where {} were expected; \
                     the ranks are executing different operations or schedules",
                    t.peer,
                    items.len(),
                    t.elements
                )));
            }
            let mut items = items.into_iter();
            for b in &t.blocks {
                b.for_each_run(|o, n| {
                    for (slot, x) in dst[o..o + n].iter_mut().zip(items.by_ref()) {
                        *slot = x;
                    }
                });
            }
        }
        waitall(&mut outgoing)?;
        for (a, b) in &self.copies {
            let mut moved: Vec<(usize, usize, usize)> = Vec::new();
            copy_blocks(a, b, 1, |f, t, n| moved.push((f, t, n)));
            for (f, t, n) in moved {
                for k in 0..n {
                    let x = match src {
                        Some(s) => s[f + k].clone(),
                        None => dst[f + k].clone(),
                    };
                    dst[t + k] = x;
                }
            }
        }
        Ok(())
    }
}
