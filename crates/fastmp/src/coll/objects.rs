//! Collectives on serde values. Every one takes the same route: encode with postcard, move the
//! encoded lengths with the plain collective of the pattern, then the bytes with its `v`
//! collective (so every rank allocates exactly), and decode ([`Comm::move_objects`]). The
//! reductions gather the values and fold them in rank order with the caller's closure, so any
//! associative function works, commutative or not.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::vector::offsets_of;
use crate::comm::Comm;
use crate::error::{Error, Result};

fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    postcard::to_allocvec(value).map_err(|e| Error::Serialization(e.to_string()))
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|e| Error::Serialization(e.to_string()))
}

/// How encoded values travel between the ranks.
#[derive(Clone, Copy)]
enum Pattern {
    /// The root's one value to every rank.
    Bcast(usize),
    /// Every rank's one value to the root.
    Gather(usize),
    /// The root's value `i` to rank `i`.
    Scatter(usize),
    /// Every rank's one value to every rank.
    Allgather,
    /// Value `j` of every rank to rank `j`.
    Alltoall,
}

/// Byte counts (from the exchanged `u64` lengths) and their packed displacements.
fn layout(lengths: &[u64]) -> Result<(Vec<usize>, Vec<usize>)> {
    let counts = lengths
        .iter()
        .map(|&l| usize::try_from(l).map_err(|_| Error::InvalidArgument(format!("an encoded value of {l} bytes"))))
        .collect::<Result<Vec<usize>>>()?;
    counts
        .iter()
        .try_fold(0usize, |sum, &c| sum.checked_add(c))
        .ok_or_else(|| Error::InvalidArgument("the encoded values' total length overflows usize".into()))?;
    let mut displs = offsets_of(&counts);
    displs.pop();
    Ok((counts, displs))
}

/// Decodes the values packed in `bytes` with `lengths`.
fn unpack<T: DeserializeOwned>(bytes: &[u8], lengths: &[u64]) -> Result<Vec<T>> {
    let (counts, displs) = layout(lengths)?;
    counts.iter().zip(&displs).map(|(&c, &d)| decode(&bytes[d..d + c])).collect()
}

impl Comm {
    /// The one route of every `*_obj` collective: `outgoing` (the values this rank sends, in
    /// destination order) is encoded and packed, the lengths move with the pattern's plain
    /// collective and the bytes with its `v` collective; returns the values this rank received
    /// (in source order; none at a bcast's root, which keeps its own).
    fn move_objects<T: Serialize + DeserializeOwned>(&self, pattern: Pattern, outgoing: &[T]) -> Result<Vec<T>> {
        let (np, me) = (self.size(), self.rank());
        let encoded = outgoing.iter().map(encode).collect::<Result<Vec<_>>>()?;
        let lengths: Vec<u64> = encoded.iter().map(|b| b.len() as u64).collect();
        let bytes = encoded.concat();
        let (out_counts, out_displs) = layout(&lengths)?;
        let receives = |n: usize| vec![0u64; n];
        let (incoming, in_lengths) = match pattern {
            Pattern::Bcast(root) => {
                let mut len = lengths.first().map_or([0], |&l| [l]);
                self.bcast(&mut len, root)?;
                let mut buf = if me == root { bytes } else { vec![0; layout(&len)?.0[0]] };
                self.bcast(&mut buf, root)?;
                (buf, if me == root { Vec::new() } else { len.to_vec() })
            }
            Pattern::Gather(root) => {
                let mut in_lengths = receives(if me == root { np } else { 0 });
                self.gather(&lengths, &mut in_lengths, root)?;
                let (counts, displs) = layout(&in_lengths)?;
                let mut buf = vec![0; counts.iter().sum()];
                self.gatherv(&bytes, &mut buf, &counts, &displs, root)?;
                (buf, in_lengths)
            }
            Pattern::Scatter(root) => {
                let mut in_lengths = receives(1);
                self.scatter(&lengths, &mut in_lengths, root)?;
                let mut buf = vec![0; layout(&in_lengths)?.0[0]];
                self.scatterv(&bytes, &out_counts, &out_displs, &mut buf, root)?;
                (buf, in_lengths)
            }
            Pattern::Allgather => {
                let mut in_lengths = receives(np);
                self.allgather(&lengths, &mut in_lengths)?;
                let (counts, displs) = layout(&in_lengths)?;
                let mut buf = vec![0; counts.iter().sum()];
                self.allgatherv(&bytes, &mut buf, &counts, &displs)?;
                (buf, in_lengths)
            }
            Pattern::Alltoall => {
                let mut in_lengths = receives(np);
                self.alltoall(&lengths, &mut in_lengths)?;
                let (counts, displs) = layout(&in_lengths)?;
                let mut buf = vec![0; counts.iter().sum()];
                self.alltoallv(&bytes, &out_counts, &out_displs, &mut buf, &counts, &displs)?;
                (buf, in_lengths)
            }
        };
        unpack(&incoming, &in_lengths)
    }

    /// Checks that a rank passes one value per rank.
    fn check_values(&self, call: &str, len: usize) -> Result<()> {
        if len == self.size() {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{call}: {len} values for a communicator of size {}, expected one per rank",
                self.size()
            )))
        }
    }

    /// Broadcasts any serde value from `root` (MPI_Bcast of an object): on other ranks `value`
    /// is replaced.
    ///
    /// ```
    /// fastmp::run(3, |world| {
    ///     let mut names = if world.rank() == 0 { vec!["a".to_string(), "b".into()] } else { vec![] };
    ///     world.bcast_obj(&mut names, 0)?;
    ///     assert_eq!(names, ["a", "b"]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn bcast_obj<T: Serialize + DeserializeOwned>(&self, value: &mut T, root: usize) -> Result<()> {
        self.check_root(root)?;
        let outgoing = if self.rank() == root { std::slice::from_ref(&*value) } else { &[] };
        if let Some(received) = self.move_objects(Pattern::Bcast(root), outgoing)?.pop() {
            *value = received;
        }
        Ok(())
    }

    /// Gathers a serde value from every rank at `root` (MPI_Gather of objects): `Some(values in
    /// rank order)` there, `None` elsewhere.
    pub fn gather_obj<T: Serialize + DeserializeOwned>(&self, value: &T, root: usize) -> Result<Option<Vec<T>>> {
        self.check_root(root)?;
        let values = self.move_objects(Pattern::Gather(root), std::slice::from_ref(value))?;
        Ok((self.rank() == root).then_some(values))
    }

    /// Gathers a serde value from every rank on every rank, in rank order (MPI_Allgather of
    /// objects).
    ///
    /// ```
    /// fastmp::run(3, |world| {
    ///     let names = world.allgather_obj(&format!("rank {}", world.rank()))?;
    ///     assert_eq!(names, ["rank 0", "rank 1", "rank 2"]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn allgather_obj<T: Serialize + DeserializeOwned>(&self, value: &T) -> Result<Vec<T>> {
        self.move_objects(Pattern::Allgather, std::slice::from_ref(value))
    }

    /// Sends `values[i]` from `root` to rank `i` and returns this rank's value (MPI_Scatter of
    /// objects). `values` is only read at the root, where it must hold `size()` values; other
    /// ranks may pass `&[]`.
    pub fn scatter_obj<T: Serialize + DeserializeOwned>(&self, values: &[T], root: usize) -> Result<T> {
        self.check_root(root)?;
        let outgoing = if self.rank() == root {
            self.check_values("scatter_obj", values.len())?;
            values
        } else {
            &[]
        };
        let mut received = self.move_objects(Pattern::Scatter(root), outgoing)?;
        received.pop().ok_or_else(|| Error::InvalidArgument("scatter_obj: no value arrived".into()))
    }

    /// Sends `values[j]` to rank `j` and returns the value every rank sent this one, in rank
    /// order (MPI_Alltoall of objects). Every rank passes `size()` values.
    ///
    /// ```
    /// fastmp::run(2, |world| {
    ///     let me = world.rank();
    ///     let got = world.alltoall_obj(&[format!("{me}->0"), format!("{me}->1")])?;
    ///     assert_eq!(got, [format!("0->{me}"), format!("1->{me}")]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn alltoall_obj<T: Serialize + DeserializeOwned>(&self, values: &[T]) -> Result<Vec<T>> {
        self.check_values("alltoall_obj", values.len())?;
        self.move_objects(Pattern::Alltoall, values)
    }

    /// Combines every rank's value with `f` in rank order (`f(f(v0, v1), v2)...`; `f` must be
    /// associative, need not be commutative) at `root` (MPI_Reduce of objects with a user
    /// function): `Some(result)` there, `None` elsewhere.
    pub fn reduce_obj<T, F>(&self, value: &T, f: F, root: usize) -> Result<Option<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(T, T) -> T,
    {
        Ok(self.gather_obj(value, root)?.and_then(|values| values.into_iter().reduce(f)))
    }

    /// [`Comm::reduce_obj`] with the result on every rank (MPI_Allreduce of objects).
    ///
    /// ```
    /// fastmp::run(3, |world| {
    ///     let words = world.allreduce_obj(&world.rank().to_string(), |a, b| a + &b)?;
    ///     assert_eq!(words, "012");
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn allreduce_obj<T, F>(&self, value: &T, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(T, T) -> T,
    {
        let values = self.allgather_obj(value)?;
        values.into_iter().reduce(f).ok_or_else(|| Error::InvalidArgument("allreduce_obj: no values".into()))
    }

    /// Inclusive prefix of the values with `f` in rank order (MPI_Scan of objects): rank `i`
    /// gets `f(...f(v0, v1)..., vi)`.
    pub fn scan_obj<T, F>(&self, value: &T, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(T, T) -> T,
    {
        let values = self.allgather_obj(value)?;
        values
            .into_iter()
            .take(self.rank() + 1)
            .reduce(f)
            .ok_or_else(|| Error::InvalidArgument("scan_obj: no values".into()))
    }

    /// Exclusive prefix (MPI_Exscan of objects): `None` on rank 0, else the prefix of the ranks
    /// below this one.
    pub fn exscan_obj<T, F>(&self, value: &T, f: F) -> Result<Option<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(T, T) -> T,
    {
        let values = self.allgather_obj(value)?;
        Ok(values.into_iter().take(self.rank()).reduce(f))
    }
}
