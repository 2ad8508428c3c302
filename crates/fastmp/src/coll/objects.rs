//! Collectives on serde values: encoded with postcard, then moved with the byte collectives
//! (sizes first, so every rank can allocate exactly).

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::comm::Comm;
use crate::error::{Error, Result};

fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    postcard::to_allocvec(value).map_err(|e| Error::Serialization(e.to_string()))
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|e| Error::Serialization(e.to_string()))
}

/// Counts and displacements of consecutive blocks with these lengths.
fn packed(lengths: &[u64]) -> (Vec<usize>, Vec<usize>) {
    let counts: Vec<usize> = lengths.iter().map(|&l| l as usize).collect();
    let displs = counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect();
    (counts, displs)
}

impl Comm {
    /// Broadcasts any serde value from `root`: on other ranks `value` is replaced.
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
        let mut bytes = if self.rank() == root { encode(value)? } else { Vec::new() };
        let mut len = [bytes.len() as u64];
        self.bcast(&mut len, root)?;
        bytes.resize(len[0] as usize, 0);
        self.bcast(&mut bytes, root)?;
        if self.rank() != root {
            *value = decode(&bytes)?;
        }
        Ok(())
    }

    /// Gathers a serde value from every rank at `root`: `Some(values in rank order)` there,
    /// `None` elsewhere.
    pub fn gather_obj<T: Serialize + DeserializeOwned>(&self, value: &T, root: usize) -> Result<Option<Vec<T>>> {
        let bytes = encode(value)?;
        let is_root = self.rank() == root;
        let mut lengths = vec![0u64; if is_root { self.size() } else { 0 }];
        self.gather(&[bytes.len() as u64], &mut lengths, root)?;
        let (counts, displs) = packed(&lengths);
        let mut all = vec![0u8; counts.iter().sum()];
        self.gatherv(&bytes, &mut all, &counts, &displs, root)?;
        if !is_root {
            return Ok(None);
        }
        counts.iter().zip(&displs).map(|(&c, &d)| decode(&all[d..d + c])).collect::<Result<_>>().map(Some)
    }

    /// Sends `values[i]` from `root` to rank `i` and returns this rank's value. `values` is
    /// only read at the root, where it must hold `size()` values; other ranks may pass `&[]`.
    pub fn scatter_obj<T: Serialize + DeserializeOwned>(&self, values: &[T], root: usize) -> Result<T> {
        let is_root = self.rank() == root;
        let encoded: Vec<Vec<u8>> = if is_root {
            if values.len() != self.size() {
                return Err(Error::InvalidArgument(format!(
                    "scatter_obj: {} values for a communicator of size {}",
                    values.len(),
                    self.size()
                )));
            }
            values.iter().map(encode).collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        let lengths: Vec<u64> = encoded.iter().map(|b| b.len() as u64).collect();
        let mut len = [0u64];
        self.scatter(&lengths, &mut len, root)?;
        let (counts, displs) = packed(&lengths);
        let mut mine = vec![0u8; len[0] as usize];
        self.scatterv(&encoded.concat(), &counts, &displs, &mut mine, root)?;
        decode(&mine)
    }
}
