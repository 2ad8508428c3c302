//! Neighbourhood collectives (MPI_Neighbor_allgather(v), MPI_Neighbor_alltoall(v) and their
//! nonblocking twins): each rank exchanges blocks with the neighbours its process topology gives
//! it, not with every rank, so the cost follows the graph's degree rather than the job's size.
//!
//! One algorithm serves all four and both twins: every receive is posted, then every send is
//! started, and the batch is waited for as one stage. The messages travel on the collective
//! context under the operation's number, so outstanding operations never match each other's
//! messages. Between two ranks, messages of one operation match in the order they were posted
//! (non-overtaking): the k-th edge from a rank to another pairs with the k-th edge into it, which
//! is how MPI pairs the blocks of repeated edges on graph topologies. On a Cartesian topology MPI
//! (4.1, Example 8.10) wants the block sent in the negative direction of a dimension to land in
//! the receiver's positive slot and vice versa, which matters where both neighbours are the same
//! rank (a periodic dimension of extent 1 or 2): there the receives of each pair are posted in
//! swapped order.

use std::borrow::Cow;
use std::ops::Range;

use bytemuck::Pod;

use super::select::Collective;
use super::transport::Run;
use super::vector::{Layout, carve_blocks, equal_chunks};
use crate::comm::Comm;
use crate::device::PROC_NULL;
use crate::error::{Error, Result};
use crate::scope::{Request, Scope};

/// This rank's neighbours in a process topology, in buffer order: receive block `i` comes from
/// `sources[i]`, send block `i` goes to `destinations[i]`. [`PROC_NULL`] entries (off the edge of
/// a non-periodic grid) keep their block but move nothing.
pub struct Adjacency<'a> {
    sources: Cow<'a, [usize]>,
    destinations: Cow<'a, [usize]>,
    /// Cartesian pairs: the receive of block `2d + 1` is posted before that of block `2d`.
    swap_pairs: bool,
}

impl<'a> Adjacency<'a> {
    /// A graph's lists (validated ranks of the communicator, repeats allowed).
    pub(crate) fn graph(sources: &'a [usize], destinations: &'a [usize]) -> Self {
        Adjacency { sources: Cow::Borrowed(sources), destinations: Cow::Borrowed(destinations), swap_pairs: false }
    }

    /// A Cartesian grid's neighbours: for each dimension the rank one step below, then the rank
    /// one step above (or `PROC_NULL`); sources and destinations are the same list.
    pub(crate) fn cartesian(neighbors: Vec<usize>) -> Adjacency<'static> {
        debug_assert!(neighbors.len().is_multiple_of(2));
        Adjacency { sources: Cow::Owned(neighbors.clone()), destinations: Cow::Owned(neighbors), swap_pairs: true }
    }
}

/// What the neighbourhood collectives need from a topology (sealed: its types are private).
pub trait Topology {
    /// The communicator the topology's ranks are numbered in.
    fn topology_comm(&self) -> &Comm;
    /// This rank's neighbours.
    fn adjacency(&self) -> Result<Adjacency<'_>>;
}

/// A communicator with a process topology, whose ranks exchange data with their neighbours
/// (MPI's neighbourhood collectives): [`crate::GraphComm`] (blocks in the order of
/// [`crate::GraphComm::neighbors`]) and [`crate::CartComm`] (for each dimension the neighbour one
/// step below, then the one above; a neighbour off a non-periodic edge is MPI_PROC_NULL and its
/// receive block is left untouched). The nonblocking forms are on [`Scope`]
/// (`ineighbor_allgather`, ...).
///
/// ```
/// use fastmp::NeighborTopology;
/// fastmp::run(4, |world| {
///     let ring = world.cart_create(&[4], &[true], false)?.unwrap();
///     // Send my rank both ways; receive from below (block 0) and from above (block 1).
///     let mut got = [0u32; 2];
///     ring.neighbor_allgather(&[ring.rank() as u32], &mut got)?;
///     let (below, above) = ((ring.rank() + 3) % 4, (ring.rank() + 1) % 4);
///     assert_eq!(got, [below as u32, above as u32]);
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub trait NeighborTopology: Topology {
    /// Sends `send` to every destination and receives one block of `send.len()` elements from
    /// each source into `recv` (sources × `send.len()` elements), in source order
    /// (MPI_Neighbor_allgather). Collective over the topology's communicator.
    fn neighbor_allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let adjacency = self.adjacency()?;
        let run = Run::new(self.topology_comm(), true)?;
        run.finish(run.neighbor_allgather(Call::Allgather.blocking(), &adjacency, send, recv))
    }

    /// Like [`NeighborTopology::neighbor_allgather`] with `counts[i]` elements from source `i`
    /// stored at element offset `displs[i]` of `recv` (MPI_Neighbor_allgatherv).
    fn neighbor_allgatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        let adjacency = self.adjacency()?;
        let run = Run::new(self.topology_comm(), true)?;
        run.finish(run.neighbor_allgatherv(Call::Allgatherv.blocking(), &adjacency, send, recv, counts, displs))
    }

    /// Sends block `i` of `send` to destination `i` and receives block `i` of `recv` from source
    /// `i` (MPI_Neighbor_alltoall). All blocks have the same length: `send` holds destinations ×
    /// block elements, `recv` sources × block.
    ///
    /// ```
    /// use fastmp::NeighborTopology;
    /// fastmp::run(3, |world| {
    ///     // Every rank sends to the next one and receives from the previous one.
    ///     let (me, np) = (world.rank(), world.size());
    ///     let ring = world.dist_graph_create_adjacent(&[(me + np - 1) % np], None, &[(me + 1) % np], None, false)?;
    ///     let mut got = [0u64; 2];
    ///     ring.neighbor_alltoall(&[me as u64, 10], &mut got)?;
    ///     assert_eq!(got, [((me + np - 1) % np) as u64, 10]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    fn neighbor_alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let adjacency = self.adjacency()?;
        let run = Run::new(self.topology_comm(), true)?;
        run.finish(run.neighbor_alltoall(Call::Alltoall.blocking(), &adjacency, send, recv))
    }

    /// Like [`NeighborTopology::neighbor_alltoall`] with per-neighbour counts and element
    /// offsets: `send_counts`/`send_displs` per destination, `recv_counts`/`recv_displs` per
    /// source (MPI_Neighbor_alltoallv). Blocks must lie inside their buffers and not overlap.
    #[allow(clippy::too_many_arguments)]
    fn neighbor_alltoallv<T: Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        let adjacency = self.adjacency()?;
        let run = Run::new(self.topology_comm(), true)?;
        let (send, recv_blocks) = ((send, send_counts, send_displs), (recv_counts, recv_displs));
        run.finish(run.neighbor_alltoallv(Call::Alltoallv.blocking(), &adjacency, send, recv, recv_blocks))
    }
}

impl<G: Topology> NeighborTopology for G {}

/// The four operations, for error messages that name the call.
#[derive(Clone, Copy)]
enum Call {
    Allgather,
    Allgatherv,
    Alltoall,
    Alltoallv,
}

impl Call {
    fn blocking(self) -> &'static str {
        match self {
            Call::Allgather => "neighbor_allgather",
            Call::Allgatherv => "neighbor_allgatherv",
            Call::Alltoall => "neighbor_alltoall",
            Call::Alltoallv => "neighbor_alltoallv",
        }
    }

    fn nonblocking(self) -> &'static str {
        match self {
            Call::Allgather => "ineighbor_allgather",
            Call::Allgatherv => "ineighbor_allgatherv",
            Call::Alltoall => "ineighbor_alltoall",
            Call::Alltoallv => "ineighbor_alltoallv",
        }
    }
}

fn invalid(call: &str, message: std::fmt::Arguments<'_>) -> Error {
    Error::InvalidArgument(format!("{call}: {message}"))
}

/// `what` must hold one block of `block` elements per neighbour (`neighbors` of them, called
/// `whom`).
fn check_blocks(call: &str, what: &str, len: usize, neighbors: usize, whom: &str, block: usize) -> Result<()> {
    match neighbors.checked_mul(block) {
        Some(expected) if expected == len => Ok(()),
        Some(expected) => Err(invalid(
            call,
            format_args!("{what} has {len} elements, expected {expected} ({neighbors} {whom} × {block})"),
        )),
        None => Err(invalid(call, format_args!("{what}: {neighbors} {whom} × {block} elements overflow usize"))),
    }
}

/// The common block length of neighbor_alltoall: send holds one block per destination, recv one
/// per source.
fn alltoall_block(call: &str, adjacency: &Adjacency<'_>, send: usize, recv: usize) -> Result<usize> {
    let (outdegree, indegree) = (adjacency.destinations.len(), adjacency.sources.len());
    let split = |len: usize, parts: usize, what: &str, whom: &str| {
        if len.is_multiple_of(parts) {
            Ok(len / parts)
        } else {
            Err(invalid(
                call,
                format_args!("{what} of {len} elements does not split into {parts} equal blocks (one per {whom})"),
            ))
        }
    };
    let block = match (outdegree, indegree) {
        (0, 0) => 0,
        (0, _) => split(recv, indegree, "receive buffer", "source")?,
        _ => split(send, outdegree, "send buffer", "destination")?,
    };
    check_blocks(call, "send buffer", send, outdegree, "destinations", block)?;
    check_blocks(call, "receive buffer", recv, indegree, "sources", block)?;
    Ok(block)
}

/// A `v` layout with one block per neighbour.
fn layout<T>(
    call: &str,
    what: &str,
    counts: &[usize],
    displs: &[usize],
    len: usize,
    neighbors: usize,
    whom: &str,
) -> Result<Layout> {
    if counts.len() != neighbors || displs.len() != neighbors {
        return Err(invalid(
            call,
            format_args!("{} {what} counts and {} displacements for {neighbors} {whom}", counts.len(), displs.len()),
        ));
    }
    // The layout's messages call block `i` "rank i": here it is neighbour `i`.
    // Send blocks may overlap (MPI reads a location for several neighbours); receive blocks not.
    let disjoint = what != "send";
    Layout::of_blocks::<T>(&format!("{call} {what} (blocks indexed by {whom})"), counts, displs, len, disjoint)
}

/// Names the call in errors of the exchange (ranks that disagree on lengths).
fn in_call(call: &'static str) -> impl FnOnce(Error) -> Error {
    move |e| match e {
        Error::InvalidArgument(message) => Error::InvalidArgument(format!("{call}: {message}")),
        e => e,
    }
}

/// The neighbourhood collectives as operations of a [`Run`]: checks, then the one exchange.
impl Run<'_> {
    async fn neighbor_allgather<T: Pod>(
        &self,
        call: &'static str,
        adjacency: &Adjacency<'_>,
        send: &[T],
        recv: &mut [T],
    ) -> Result<()> {
        let indegree = adjacency.sources.len();
        check_blocks(call, "receive buffer", recv.len(), indegree, "sources", send.len())?;
        let (send, recv): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        let inbox = equal_chunks(recv, send.len(), indegree).collect();
        exchange(self, adjacency, send, |_| 0..send.len(), inbox, Collective::Allgatherv).await.map_err(in_call(call))
    }

    async fn neighbor_allgatherv<T: Pod>(
        &self,
        call: &'static str,
        adjacency: &Adjacency<'_>,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        let indegree = adjacency.sources.len();
        let layout = layout::<T>(call, "receive", counts, displs, recv.len(), indegree, "sources")?;
        let (send, recv): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        let inbox = carve_blocks(recv, &layout, indegree);
        exchange(self, adjacency, send, |_| 0..send.len(), inbox, Collective::Allgatherv).await.map_err(in_call(call))
    }

    async fn neighbor_alltoall<T: Pod>(
        &self,
        call: &'static str,
        adjacency: &Adjacency<'_>,
        send: &[T],
        recv: &mut [T],
    ) -> Result<()> {
        let block = alltoall_block(call, adjacency, send.len(), recv.len())? * size_of::<T>();
        let (send, recv): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        let inbox = equal_chunks(recv, block, adjacency.sources.len()).collect();
        exchange(self, adjacency, send, |i| i * block..(i + 1) * block, inbox, Collective::Alltoallv)
            .await
            .map_err(in_call(call))
    }

    /// `send` is (buffer, counts, displacements), `recv_blocks` (counts, displacements).
    async fn neighbor_alltoallv<T: Pod>(
        &self,
        call: &'static str,
        adjacency: &Adjacency<'_>,
        (send, send_counts, send_displs): (&[T], &[usize], &[usize]),
        recv: &mut [T],
        (recv_counts, recv_displs): (&[usize], &[usize]),
    ) -> Result<()> {
        let (outdegree, indegree) = (adjacency.destinations.len(), adjacency.sources.len());
        let send_layout = layout::<T>(call, "send", send_counts, send_displs, send.len(), outdegree, "destinations")?;
        let recv_layout = layout::<T>(call, "receive", recv_counts, recv_displs, recv.len(), indegree, "sources")?;
        let (send, recv): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        let inbox = carve_blocks(recv, &recv_layout, indegree);
        exchange(self, adjacency, send, |i| send_layout.block(i), inbox, Collective::Alltoallv)
            .await
            .map_err(in_call(call))
    }
}

/// Receives `inbox[i]` from source `i` and sends `send[send_block(i)]` to destination `i`, all
/// started before any is waited for. Every receive is posted before the first send, so messages
/// to this rank itself (self-loops) always find theirs. `coll` only tells this operation's
/// message kinds apart in tags; the operation's number keeps it apart from other operations.
async fn exchange(
    run: &Run<'_>,
    adjacency: &Adjacency<'_>,
    send: &[u8],
    send_block: impl Fn(usize) -> Range<usize>,
    mut inbox: Vec<&mut [u8]>,
    coll: Collective,
) -> Result<()> {
    let mut pending = run.batch();
    for posted in 0..inbox.len() {
        let i = if adjacency.swap_pairs { posted ^ 1 } else { posted };
        let source = adjacency.sources[i];
        if source != PROC_NULL {
            pending.irecv(std::mem::take(&mut inbox[i]), source, coll)?;
        }
    }
    for (i, &destination) in adjacency.destinations.iter().enumerate() {
        if destination != PROC_NULL {
            pending.isend(&send[send_block(i)], destination, coll)?;
        }
    }
    pending.wait_all().await
}

/// The nonblocking neighbourhood collectives: the blocking ones' operations run by the rank's
/// progress engine. `topology` may be any topology communicator of this rank; it stays borrowed
/// with the buffers until the scope ends.
impl<'scope> Scope<'scope, '_> {
    /// Nonblocking [`NeighborTopology::neighbor_allgather`] (MPI_Ineighbor_allgather).
    ///
    /// ```
    /// fastmp::run(3, |world| {
    ///     let (me, np) = (world.rank(), world.size());
    ///     // Everybody hears from everybody else.
    ///     let others: Vec<usize> = (0..np).filter(|&r| r != me).collect();
    ///     let graph = world.dist_graph_create_adjacent(&others, None, &others, None, false)?;
    ///     let (mine, mut heard) = ([me as u32], [0u32; 2]);
    ///     graph.scope(|s| s.ineighbor_allgather(&graph, &mine, &mut heard)?.wait().map(drop))?;
    ///     assert_eq!(heard.map(|r| r as usize), [others[0], others[1]]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn ineighbor_allgather<T: Pod, G: NeighborTopology>(
        &'scope self,
        topology: &'scope G,
        send: &'scope [T],
        recv: &'scope mut [T],
    ) -> Result<Request<'scope>> {
        let adjacency = topology.adjacency()?;
        let run = Run::number(topology.topology_comm())?;
        self.start_collective(move || async move {
            run.start().neighbor_allgather(Call::Allgather.nonblocking(), &adjacency, send, recv).await
        })
    }

    /// Nonblocking [`NeighborTopology::neighbor_allgatherv`] (MPI_Ineighbor_allgatherv);
    /// `counts` and `displs` are copied.
    pub fn ineighbor_allgatherv<T: Pod, G: NeighborTopology>(
        &'scope self,
        topology: &'scope G,
        send: &'scope [T],
        recv: &'scope mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<Request<'scope>> {
        let adjacency = topology.adjacency()?;
        let run = Run::number(topology.topology_comm())?;
        let (counts, displs) = (counts.to_vec(), displs.to_vec());
        self.start_collective(move || async move {
            run.start()
                .neighbor_allgatherv(Call::Allgatherv.nonblocking(), &adjacency, send, recv, &counts, &displs)
                .await
        })
    }

    /// Nonblocking [`NeighborTopology::neighbor_alltoall`] (MPI_Ineighbor_alltoall).
    pub fn ineighbor_alltoall<T: Pod, G: NeighborTopology>(
        &'scope self,
        topology: &'scope G,
        send: &'scope [T],
        recv: &'scope mut [T],
    ) -> Result<Request<'scope>> {
        let adjacency = topology.adjacency()?;
        let run = Run::number(topology.topology_comm())?;
        self.start_collective(move || async move {
            run.start().neighbor_alltoall(Call::Alltoall.nonblocking(), &adjacency, send, recv).await
        })
    }

    /// Nonblocking [`NeighborTopology::neighbor_alltoallv`] (MPI_Ineighbor_alltoallv); counts
    /// and displacements are copied.
    #[allow(clippy::too_many_arguments)]
    pub fn ineighbor_alltoallv<T: Pod, G: NeighborTopology>(
        &'scope self,
        topology: &'scope G,
        send: &'scope [T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &'scope mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<Request<'scope>> {
        let adjacency = topology.adjacency()?;
        let run = Run::number(topology.topology_comm())?;
        let send_layout = (send_counts.to_vec(), send_displs.to_vec());
        let recv_layout = (recv_counts.to_vec(), recv_displs.to_vec());
        self.start_collective(move || async move {
            let send = (send, &send_layout.0[..], &send_layout.1[..]);
            let recv_blocks = (&recv_layout.0[..], &recv_layout.1[..]);
            run.start().neighbor_alltoallv(Call::Alltoallv.nonblocking(), &adjacency, send, recv, recv_blocks).await
        })
    }
}
