//! fastmp's tag space inside the MPI library's `MPI_TAG_UB`.
//!
//! fastmp's tags go up to `i32::MAX`; MPI only promises 32767 (Open MPI 4.1 gives `2^31 - 1`,
//! MPICH 4 `2^28 - 1`). User tags (even contexts) above the bound are refused as MPI refuses
//! them. Internal tags (odd contexts: collectives and setup traffic) are fastmp's own and are
//! mapped into the bound, keeping apart what must stay apart:
//! - a collective's tag `seq << 5 | coll + 1` keeps its collective and the low bits of its
//!   sequence number, so operations close in sequence stay distinct;
//! - a reserved setup tag (low 5 bits zero, the kind in bit 30, the user's tag in bits 5..30)
//!   keeps its kind and the low bits of the user's tag, and stays a tag with low bits zero, so
//!   it never meets a collective's.

use crate::device::ContextId;
use crate::error::{Error, Result};

/// Bits of a tag that name the collective (as in the collectives' transport).
const COLL_BITS: u32 = 5;

/// How this MPI's tags carry fastmp's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TagMap {
    /// MPI's largest tag.
    tag_ub: i32,
    /// Bits every internal tag is mapped into (`2^bits - 1 <= tag_ub`).
    bits: u32,
}

impl TagMap {
    /// The map for an MPI whose `MPI_TAG_UB` is `tag_ub` (at least 32767 by the standard).
    pub(crate) fn new(tag_ub: i32) -> Result<TagMap> {
        if tag_ub < 32_767 {
            return Err(Error::other(format!("mpi device: MPI_TAG_UB is {tag_ub}, below the standard's 32767")));
        }
        // floor(log2(tag_ub + 1)): 31 for Open MPI's i32::MAX.
        Ok(TagMap { tag_ub, bits: 31 - (tag_ub as u32 + 1).leading_zeros() })
    }

    /// The MPI tag carrying `tag` on `context` (wildcards, below 0, become -1).
    pub(crate) fn wire(&self, tag: i32, context: ContextId) -> Result<i32> {
        if tag < 0 {
            return Ok(-1);
        }
        if tag <= self.tag_ub && (context.is_multiple_of(2) || self.bits == 31) {
            return Ok(tag);
        }
        if context.is_multiple_of(2) {
            return Err(Error::TagOutOfRange { tag, max: self.tag_ub });
        }
        Ok(self.internal(tag as u32) as i32)
    }

    /// An internal tag in `bits` bits (see the module docs).
    fn internal(&self, tag: u32) -> u32 {
        let coll = tag & ((1 << COLL_BITS) - 1);
        let upper = tag >> COLL_BITS;
        let upper_bits = self.bits - COLL_BITS;
        let mapped = if coll != 0 {
            upper & ((1 << upper_bits) - 1)
        } else {
            // Reserved: the kind (bit 30 of the tag, 25 of `upper`) into bit 0.
            let kind = upper >> 25;
            (upper & ((1 << (upper_bits - 1)) - 1)) << 1 | kind
        };
        mapped << COLL_BITS | coll
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MPICH: i32 = (1 << 28) - 1;

    #[test]
    fn open_mpis_bound_maps_nothing() {
        let map = TagMap::new(i32::MAX).unwrap();
        for tag in [0, 5, 1 << 30, i32::MAX] {
            assert_eq!(map.wire(tag, 0).unwrap(), tag);
            assert_eq!(map.wire(tag, 1).unwrap(), tag);
        }
        assert_eq!(map.wire(-1, 3).unwrap(), -1);
    }

    #[test]
    fn user_tags_above_the_bound_are_refused_with_it() {
        let map = TagMap::new(MPICH).unwrap();
        assert_eq!(map.wire(MPICH, 2).unwrap(), MPICH);
        let err = map.wire(MPICH + 1, 2).unwrap_err();
        assert!(matches!(err, Error::TagOutOfRange { tag, max: MPICH } if tag == MPICH + 1), "{err:?}");
    }

    #[test]
    fn internal_tags_fit_and_stay_apart() {
        for tag_ub in [MPICH, 32_767, 100_000] {
            let map = TagMap::new(tag_ub).unwrap();
            let wire = |tag: u32| {
                let w = map.wire(tag as i32, 1).unwrap();
                assert!((0..=tag_ub).contains(&w), "{tag} -> {w} beyond {tag_ub}");
                w
            };
            // Collectives close in sequence, around the top of the sequence space.
            let window = 1u32 << (map.bits - COLL_BITS);
            let mut seen = std::collections::HashSet::new();
            for seq in ((1 << 26) - window / 2..(1 << 26)).chain(0..window / 2).step_by(97) {
                for coll in [1, 7, 31] {
                    assert!(seen.insert(wire(seq << 5 | coll)), "seq {seq} coll {coll}");
                }
            }
            // Reserved tags: both kinds of the same user tag differ, and never meet a collective.
            for user in [0u32, 1, 77, (1 << 25) - 1] {
                let (create, inter) = (wire(user << 5), wire((1 << 25 | user) << 5));
                assert_ne!(create, inter, "user tag {user}");
                assert_eq!((create & 31, inter & 31), (0, 0));
            }
        }
    }
}
