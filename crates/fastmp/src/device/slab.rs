//! Generation-checked request table: handles stay small and `Copy`, and a stale or forged handle is
//! an error instead of completing somebody else's request.

use super::ReqId;
use crate::error::{Error, Result};

struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { entries: Vec::new(), free: Vec::new() }
    }
}

impl<T> Slab<T> {
    pub fn with_capacity(n: usize) -> Self {
        Slab { entries: Vec::with_capacity(n), free: Vec::with_capacity(n) }
    }

    pub fn insert(&mut self, value: T) -> ReqId {
        if let Some(index) = self.free.pop() {
            let e = &mut self.entries[index as usize];
            e.generation = e.generation.wrapping_add(1);
            e.value = Some(value);
            ReqId { index, generation: e.generation }
        } else {
            let index = u32::try_from(self.entries.len()).expect("fewer than 2^32 requests");
            self.entries.push(Entry { generation: 0, value: Some(value) });
            ReqId { index, generation: 0 }
        }
    }

    pub fn get_mut(&mut self, id: ReqId) -> Result<&mut T> {
        match self.entries.get_mut(id.index as usize) {
            Some(Entry { generation, value: Some(value), .. }) if *generation == id.generation => Ok(value),
            _ => Err(Error::InvalidArgument("request handle is stale (already completed or released)".into())),
        }
    }

    pub fn get(&self, id: ReqId) -> Option<&T> {
        match self.entries.get(id.index as usize) {
            Some(Entry { generation, value: Some(value), .. }) if *generation == id.generation => Some(value),
            _ => None,
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

    /// Next live entry at or after `*cursor`; advances the cursor, so entries may be removed
    /// while iterating.
    pub fn next_live(&self, cursor: &mut usize) -> Option<ReqId> {
        while *cursor < self.entries.len() {
            let index = *cursor;
            *cursor += 1;
            let e = &self.entries[index];
            if e.value.is_some() {
                return Some(ReqId { index: index as u32, generation: e.generation });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    //! The request table's handle checks (also run under Miri, see `scripts/miri.sh`).

    use super::*;

    #[test]
    fn insert_get_remove_and_stale_handles() {
        let mut slab: Slab<String> = Slab::default();
        let a = slab.insert("a".into());
        let b = slab.insert("b".into());
        assert_eq!((a.index, a.generation, b.index, b.generation), (0, 0, 1, 0));
        assert_eq!(slab.get_mut(a).unwrap(), "a");
        slab.get_mut(b).unwrap().push('!');
        assert_eq!(slab.remove(b).as_deref(), Some("b!"));
        // A removed handle is stale for both lookups and removal.
        assert!(matches!(slab.get_mut(b), Err(Error::InvalidArgument(_))));
        assert!(slab.remove(b).is_none());
        // Reuse bumps the generation, so the old handle stays stale.
        let c = slab.insert("c".into());
        assert_eq!((c.index, c.generation), (1, 1));
        assert!(slab.get_mut(b).is_err());
        assert!(slab.remove(b).is_none());
        assert_eq!(slab.get_mut(c).unwrap(), "c");
        // Forged handles: out of range, or a generation never issued.
        assert!(slab.get_mut(ReqId { index: 7, generation: 0 }).is_err());
        assert!(slab.remove(ReqId { index: 7, generation: 0 }).is_none());
        assert!(slab.get_mut(ReqId { index: 0, generation: 5 }).is_err());
        assert_eq!(slab.remove(a).as_deref(), Some("a"));
        assert_eq!(slab.remove(c).as_deref(), Some("c"));
    }

    #[test]
    fn generation_wraps_without_panicking() {
        let mut slab: Slab<u8> = Slab::with_capacity(1);
        let first = slab.insert(1);
        slab.remove(first);
        slab.entries[0].generation = u32::MAX;
        let wrapped = slab.insert(2);
        assert_eq!((wrapped.index, wrapped.generation), (0, 0));
        assert_eq!(*slab.get_mut(wrapped).unwrap(), 2);
        // After 2^32 reuses of one entry a handle's generation repeats: the documented limit of
        // the stale-handle check (ABA), not reachable in practice.
        assert_eq!(*slab.get_mut(first).unwrap(), 2);
    }

    #[test]
    fn next_live_visits_exactly_the_live_entries() {
        let mut slab: Slab<usize> = Slab::default();
        let ids: Vec<ReqId> = (0..6).map(|i| slab.insert(i)).collect();
        slab.remove(ids[1]);
        slab.remove(ids[3]);
        let reused = slab.insert(30);
        assert_eq!(reused.index, ids[3].index);
        let mut cursor = 0;
        let mut seen = Vec::new();
        while let Some(id) = slab.next_live(&mut cursor) {
            seen.push(*slab.get_mut(id).unwrap());
        }
        assert_eq!(seen, vec![0, 2, 30, 4, 5]);
        // Removing while iterating (as an endpoint's drop does) is fine: the cursor only moves on.
        let mut cursor = 0;
        while let Some(id) = slab.next_live(&mut cursor) {
            slab.remove(id).expect("live");
        }
        assert!(slab.next_live(&mut 0).is_none());
    }
}
