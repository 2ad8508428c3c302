//! Shared areas for the shm device's native collectives: one per communicator, holding per-rank
//! published buffer references and progress flags (see `coll::native` for the algorithms).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use super::ShmWorld;
use crate::device::ContextId;

/// A communicator's native-collective area.
pub(crate) struct NativeArea {
    members: Box<[usize]>,
}

impl NativeArea {
    /// World ranks of the communicator, in communicator order.
    pub(crate) fn members(&self) -> &[usize] {
        &self.members
    }
}

/// Areas by (context, lowest member), created by the first member that asks.
#[derive(Default)]
pub(crate) struct Registry {
    areas: Mutex<HashMap<(ContextId, usize), Weak<NativeArea>>>,
}

impl ShmWorld {
    /// The area of the communicator with `context` over `members`; communicator creation only,
    /// never on a hot path.
    pub(crate) fn native_area(self: &Arc<Self>, context: ContextId, members: &[usize]) -> Arc<NativeArea> {
        let key = (context, members.iter().copied().min().unwrap_or(0));
        let mut areas = self.native_areas.areas.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(area) = areas.get(&key).and_then(Weak::upgrade) {
            return area;
        }
        areas.retain(|_, weak| weak.strong_count() > 0);
        let area = Arc::new(NativeArea { members: members.into() });
        areas.insert(key, Arc::downgrade(&area));
        area
    }
}
