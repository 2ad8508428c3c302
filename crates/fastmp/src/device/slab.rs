//! Generation-checked request table: handles stay small and `Copy`, and a stale or forged handle is
//! an error instead of completing somebody else's request. Each entry also records when it was
//! created, so a scope can release exactly the requests started inside it.

use super::ReqId;
use crate::error::{Error, Result};

struct Entry<T> {
    generation: u32,
    serial: u64,
    value: Option<T>,
}

pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
    next_serial: u64,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { entries: Vec::new(), free: Vec::new(), next_serial: 0 }
    }
}

impl<T> Slab<T> {
    pub fn with_capacity(n: usize) -> Self {
        Slab { entries: Vec::with_capacity(n), free: Vec::with_capacity(n), next_serial: 0 }
    }

    pub fn insert(&mut self, value: T) -> ReqId {
        let serial = self.next_serial;
        self.next_serial += 1;
        if let Some(index) = self.free.pop() {
            let e = &mut self.entries[index as usize];
            e.generation = e.generation.wrapping_add(1);
            e.serial = serial;
            e.value = Some(value);
            ReqId { index, generation: e.generation }
        } else {
            let index = u32::try_from(self.entries.len()).expect("fewer than 2^32 requests");
            self.entries.push(Entry { generation: 0, serial, value: Some(value) });
            ReqId { index, generation: 0 }
        }
    }

    pub fn get_mut(&mut self, id: ReqId) -> Result<&mut T> {
        match self.entries.get_mut(id.index as usize) {
            Some(Entry { generation, value: Some(value), .. }) if *generation == id.generation => Ok(value),
            _ => Err(Error::InvalidArgument("request handle is stale (already completed or released)".into())),
        }
    }

    pub fn remove(&mut self, id: ReqId) -> Option<T> {
        match self.entries.get_mut(id.index as usize) {
            Some(e) if e.generation == id.generation && e.value.is_some() => {
                self.free.push(id.index);
                e.value.take()
            }
            _ => None,
        }
    }

    /// Serial the next inserted entry will get.
    pub fn mark(&self) -> u64 {
        self.next_serial
    }

    /// Next live entry at or after `*cursor` created at or after `mark`; advances the cursor.
    pub fn next_live_since(&self, cursor: &mut usize, mark: u64) -> Option<ReqId> {
        while *cursor < self.entries.len() {
            let index = *cursor;
            *cursor += 1;
            let e = &self.entries[index];
            if e.value.is_some() && e.serial >= mark {
                return Some(ReqId { index: index as u32, generation: e.generation });
            }
        }
        None
    }
}
