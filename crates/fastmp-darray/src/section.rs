//! Sections: regular sub-arrays selected by one triplet per dimension, aliasing their parent.

use fastmp::Result;
use ndarray::Dimension;

use crate::array::DArray;
use crate::invalid;

/// A triplet `lo:hi:stride` of global indices, `hi` exclusive as in Rust ranges and numpy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Triplet {
    pub lo: usize,
    /// Exclusive; `usize::MAX` means "to the end".
    pub hi: usize,
    pub stride: usize,
}

impl Triplet {
    /// `lo..hi` with stride `stride`.
    pub fn new(lo: usize, hi: usize, stride: usize) -> Triplet {
        Triplet { lo, hi, stride }
    }

    /// The whole dimension.
    pub fn all() -> Triplet {
        Triplet { lo: 0, hi: usize::MAX, stride: 1 }
    }
}

impl From<std::ops::Range<usize>> for Triplet {
    fn from(r: std::ops::Range<usize>) -> Triplet {
        Triplet::new(r.start, r.end, 1)
    }
}

impl From<std::ops::RangeFull> for Triplet {
    fn from(_: std::ops::RangeFull) -> Triplet {
        Triplet::all()
    }
}

/// A section's selection in one dimension, resolved against the parent's extent: global indices
/// `lo, lo + stride, ...`, `count` of them.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Span {
    pub(crate) lo: usize,
    pub(crate) stride: usize,
    pub(crate) count: usize,
}

impl Span {
    pub fn whole(extent: usize) -> Span {
        Span { lo: 0, stride: 1, count: extent }
    }

    /// The global index of the section's `i`-th index.
    pub fn at(&self, i: usize) -> usize {
        self.lo + i * self.stride
    }

    /// The sub-span `t` of this span (indices relative to the span).
    fn select(&self, t: Triplet, dim: usize, call: &str) -> Result<Span> {
        let hi = if t.hi == usize::MAX { self.count } else { t.hi };
        if t.stride == 0 || t.lo > hi || hi > self.count {
            return Err(invalid(
                call,
                format!(
                    "triplet {}:{}:{} of dimension {dim} does not fit its extent {}",
                    t.lo, hi, t.stride, self.count
                ),
            ));
        }
        let count = (hi - t.lo).div_ceil(t.stride);
        // At most one index has no stride to compute (any triplet stride fits then, and must not
        // overflow); two or more stay inside the parent's extent.
        Ok(match count {
            0 => Span { lo: self.lo, stride: 1, count },
            1 => Span { lo: self.at(t.lo), stride: 1, count },
            _ => Span { lo: self.at(t.lo), stride: self.stride * t.stride, count },
        })
    }
}

/// Resolves one triplet per dimension against `spans`.
pub(crate) fn select(spans: &[Span], triplets: &[Triplet], call: &str) -> Result<Vec<Span>> {
    if triplets.len() != spans.len() {
        return Err(invalid(call, format!("{} triplets for a {}-dimensional array", triplets.len(), spans.len())));
    }
    spans.iter().zip(triplets).enumerate().map(|(d, (s, &t))| s.select(t, d, call)).collect()
}

/// A read-only section of a [`DArray`]: same rank, aliasing the parent's elements.
#[derive(Clone, Debug)]
pub struct Section<'a, T, D: Dimension> {
    pub(crate) array: &'a DArray<T, D>,
    pub(crate) spans: Vec<Span>,
}

/// A writable section of a [`DArray`] (the destination of `remap`, `copy`, ...).
#[derive(Debug)]
pub struct SectionMut<'a, T, D: Dimension> {
    pub(crate) array: &'a mut DArray<T, D>,
    pub(crate) spans: Vec<Span>,
}

/// Something an operation can read from: a whole [`DArray`] or a [`Section`].
pub trait AsSection<T, D: Dimension> {
    /// The array and the selected spans.
    #[doc(hidden)]
    fn parts(&self) -> (&DArray<T, D>, Vec<Span>);
}

/// Something an operation can write into: a whole [`DArray`] or a [`SectionMut`].
pub trait AsSectionMut<T, D: Dimension> {
    #[doc(hidden)]
    fn parts_mut(&mut self) -> (&mut DArray<T, D>, Vec<Span>);
}

impl<T, D: Dimension> AsSection<T, D> for DArray<T, D> {
    fn parts(&self) -> (&DArray<T, D>, Vec<Span>) {
        (self, self.whole_spans())
    }
}

impl<T, D: Dimension> AsSection<T, D> for Section<'_, T, D> {
    fn parts(&self) -> (&DArray<T, D>, Vec<Span>) {
        (self.array, self.spans.clone())
    }
}

impl<T, D: Dimension> AsSection<T, D> for SectionMut<'_, T, D> {
    fn parts(&self) -> (&DArray<T, D>, Vec<Span>) {
        (self.array, self.spans.clone())
    }
}

impl<T, D: Dimension> AsSectionMut<T, D> for DArray<T, D> {
    fn parts_mut(&mut self) -> (&mut DArray<T, D>, Vec<Span>) {
        let spans = self.whole_spans();
        (self, spans)
    }
}

impl<T, D: Dimension> AsSectionMut<T, D> for SectionMut<'_, T, D> {
    fn parts_mut(&mut self) -> (&mut DArray<T, D>, Vec<Span>) {
        (self.array, self.spans.clone())
    }
}

impl<'a, T, D: Dimension> Section<'a, T, D> {
    /// The section's shape (indices selected per dimension).
    pub fn shape(&self) -> Vec<usize> {
        self.spans.iter().map(|s| s.count).collect()
    }

    /// A section of this section (triplets relative to it).
    pub fn section(&self, triplets: &[Triplet]) -> Result<Section<'a, T, D>> {
        Ok(Section { array: self.array, spans: select(&self.spans, triplets, "Section::section")? })
    }
}

impl<'a, T, D: Dimension> SectionMut<'a, T, D> {
    /// The section's shape (indices selected per dimension).
    pub fn shape(&self) -> Vec<usize> {
        self.spans.iter().map(|s| s.count).collect()
    }

    /// A section of this section (triplets relative to it).
    pub fn section_mut(self, triplets: &[Triplet]) -> Result<SectionMut<'a, T, D>> {
        let spans = select(&self.spans, triplets, "SectionMut::section_mut")?;
        Ok(SectionMut { array: self.array, spans })
    }
}
