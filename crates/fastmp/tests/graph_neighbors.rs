//! Distributed graph topologies and the neighbourhood collectives, on shm and tcp: rings, stars,
//! random graphs with repeated edges, self-loops and ranks without neighbours, built with both
//! creation calls, every collective blocking and nonblocking (two at once) against a reference
//! computed from the whole graph; Cartesian grids including periodic dimensions of extent 1 and 2
//! (where both neighbours are one rank); argument errors, inconsistent graphs and ranks that
//! disagree on lengths, each an `Err` (never a hang: every job runs under a watchdog).

mod coll_common;
mod common;

use std::fmt;
use std::sync::Arc;

use coll_common::job;
use common::Rng;
use fastmp::{Comm, Config, DeviceKind, Error, GraphComm, NeighborTopology, Result};

/// Both devices with `np` ranks: shm (thread ranks) and tcp (thread ranks over loopback).
fn devices(np: usize) -> [(&'static str, Config); 2] {
    [("shm", Config::new().np(np)), ("tcp", Config::new().device(DeviceKind::Tcp).np(np))]
}

/// Runs `f` on both devices; every rank must succeed.
fn on_both<F>(np: usize, what: &str, f: F)
where
    F: Fn(Comm) -> Result<()> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    for (device, config) in devices(np) {
        let f = f.clone();
        let what = format!("{what} on {device}, np={np}");
        job(config, &what, move |world| f(world)).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
}

fn assert_invalid<T: fmt::Debug>(result: Result<T>, want: &str, what: &str) {
    match result {
        Err(Error::InvalidArgument(msg)) if msg.contains(want) => {}
        other => panic!("{what}: expected InvalidArgument containing {want:?}, got {other:?}"),
    }
}

// ---------------------------------------------------------------- graphs and the reference

/// A whole graph as every rank knows it: each edge `(from, to)` with its weight, and each rank's
/// sources and destinations in buffer order (the order the creation call must produce).
#[derive(Clone, Debug)]
struct Graph {
    sources: Vec<Vec<usize>>,
    destinations: Vec<Vec<usize>>,
}

impl Graph {
    /// Graph whose destination lists are `destinations`, sources in the order `order` picks
    /// among each rank's incoming edges (as `(from, k-th edge from it)`).
    fn from_destinations(destinations: Vec<Vec<usize>>, rng: Option<&mut Rng>) -> Graph {
        let np = destinations.len();
        let mut sources = vec![Vec::new(); np];
        for (from, list) in destinations.iter().enumerate() {
            for &to in list {
                sources[to].push(from);
            }
        }
        if let Some(rng) = rng {
            for list in &mut sources {
                for i in (1..list.len()).rev() {
                    list.swap(i, rng.below(i as u64 + 1) as usize);
                }
            }
        }
        Graph { sources, destinations }
    }

    fn ring(np: usize) -> Graph {
        Graph::from_destinations((0..np).map(|r| vec![(r + 1) % np]).collect(), None)
    }

    /// Both ways round the ring: with np 2 the two edges between the ranks repeat, with np 1
    /// they are two self-loops.
    fn two_way_ring(np: usize) -> Graph {
        Graph::from_destinations((0..np).map(|r| vec![(r + 1) % np, (r + np - 1) % np]).collect(), None)
    }

    /// Rank 0 sends to every other rank, and each of them back to rank 0 only if it is odd.
    fn star(np: usize) -> Graph {
        let dest = |r: usize| {
            if r == 0 {
                (1..np).collect()
            } else if r % 2 == 1 {
                vec![0]
            } else {
                vec![]
            }
        };
        Graph::from_destinations((0..np).map(dest).collect(), None)
    }

    fn empty(np: usize) -> Graph {
        Graph::from_destinations(vec![Vec::new(); np], None)
    }

    /// Up to 4 destinations per rank, any rank (repeats and self-loops included), sources in
    /// shuffled order.
    fn random(np: usize, seed: u64) -> Graph {
        let mut rng = Rng::new(seed);
        let destinations =
            (0..np).map(|_| (0..rng.range(0, 4)).map(|_| rng.below(np as u64) as usize).collect()).collect();
        Graph::from_destinations(destinations, Some(&mut rng))
    }

    fn np(&self) -> usize {
        self.sources.len()
    }

    /// For source slot `i` of rank `r`: the sender and the index of this edge in its
    /// destinations (the k-th edge from `s` into `r` is the k-th of `s`'s edges to `r`).
    fn pair(&self, r: usize, i: usize) -> (usize, usize) {
        let s = self.sources[r][i];
        let k = self.sources[r][..i].iter().filter(|&&x| x == s).count();
        let j = self.destinations[s].iter().enumerate().filter(|&(_, &d)| d == r).nth(k).expect("consistent graph").0;
        (s, j)
    }

    fn weight(from: usize, to: usize, j: usize) -> i32 {
        ((from * 7 + to * 3 + j) % 50) as i32
    }
}

/// Value number `e` of the block that `from` sends as its block `j` (`u32::MAX` never occurs).
fn value(from: usize, j: usize, e: usize) -> u32 {
    (from as u32) << 20 | (j as u32) << 10 | e as u32
}

/// Per-edge element count of the `v` tests (zero included).
fn edge_count(from: usize, j: usize, to: usize) -> usize {
    (from + 2 * j + to) % 3
}

/// Builds `graph` on `world` with `dist_graph_create_adjacent` (weighted) and checks what the
/// communicator reports.
fn create_adjacent(world: &Comm, graph: &Graph) -> Result<GraphComm> {
    let me = world.rank();
    let (sources, destinations) = (&graph.sources[me], &graph.destinations[me]);
    // Weight of an in-edge: the sender's weight for that edge.
    let source_weights: Vec<i32> = (0..sources.len())
        .map(|i| {
            let (s, j) = graph.pair(me, i);
            Graph::weight(s, me, j)
        })
        .collect();
    let dest_weights: Vec<i32> = destinations.iter().enumerate().map(|(j, &d)| Graph::weight(me, d, j)).collect();
    let comm =
        world.dist_graph_create_adjacent(sources, Some(&source_weights), destinations, Some(&dest_weights), true)?;
    assert_eq!(comm.neighbors(), (&sources[..], &destinations[..]), "rank {me}: neighbours");
    assert_eq!(comm.neighbors_count(), (sources.len(), destinations.len()));
    assert_eq!(comm.weights(), Some((&source_weights[..], &dest_weights[..])), "rank {me}: weights");
    assert_eq!((comm.size(), comm.rank()), (world.size(), me));
    Ok(comm)
}

/// Builds `graph` with `dist_graph_create`, each edge contributed by a rank chosen by `seed`
/// (unweighted), and returns it with the graph in the order that call defines: neighbours by
/// contributing rank, then in that rank's order.
fn create_general(world: &Comm, graph: &Graph, seed: u64) -> Result<(GraphComm, Graph)> {
    let np = graph.np();
    let mut rng = Rng::new(seed);
    // contributions[c]: the edges rank c describes, in its order.
    let mut contributions = vec![Vec::new(); np];
    for (from, list) in graph.destinations.iter().enumerate() {
        for &to in list {
            contributions[rng.below(np as u64) as usize].push((from, to));
        }
    }
    let mut destinations = vec![Vec::new(); np];
    let mut sources = vec![Vec::new(); np];
    for list in &contributions {
        for &(from, to) in list {
            destinations[from].push(to);
            sources[to].push(from);
        }
    }
    let expected = Graph { sources, destinations };
    // Consecutive edges from one rank share a (source, degree) entry.
    let mine = &contributions[world.rank()];
    let (mut srcs, mut degrees, mut dests) = (Vec::new(), Vec::new(), Vec::new());
    for &(from, to) in mine {
        if srcs.last() == Some(&from) {
            *degrees.last_mut().unwrap() += 1;
        } else {
            srcs.push(from);
            degrees.push(1);
        }
        dests.push(to);
    }
    let comm = world.dist_graph_create(&srcs, &degrees, &dests, None, false)?;
    let me = world.rank();
    assert_eq!(comm.neighbors(), (&expected.sources[me][..], &expected.destinations[me][..]), "rank {me}");
    assert!(!comm.is_weighted() && comm.weights().is_none());
    Ok((comm, expected))
}

/// What each neighbourhood collective must deliver on rank `me`, in the buffers the checks use.
/// Untouched elements are `u32::MAX`.
struct Expected {
    allgather: Vec<u32>,
    allgatherv: Vec<u32>,
    alltoall: Vec<u32>,
    alltoallv: Vec<u32>,
}

const BLOCK: usize = 3;

/// The send buffers and layouts of rank `me`, shared by the blocking and nonblocking runs.
struct Inputs {
    allgather: Vec<u32>,
    allgatherv: Vec<u32>,
    allgatherv_counts: Vec<usize>,
    allgatherv_displs: Vec<usize>,
    alltoall: Vec<u32>,
    alltoallv: Vec<u32>,
    send_counts: Vec<usize>,
    send_displs: Vec<usize>,
    recv_counts: Vec<usize>,
    recv_displs: Vec<usize>,
}

/// Displacements placing blocks of `counts` in reverse order with one spare element before
/// each, so order and gaps both matter; also returns the buffer length.
fn reversed(counts: &[usize]) -> (Vec<usize>, usize) {
    let mut displs = vec![0; counts.len()];
    let mut end = 0;
    for i in (0..counts.len()).rev() {
        displs[i] = end + 1;
        end += 1 + counts[i];
    }
    (displs, end)
}

fn inputs_and_expected(graph: &Graph, me: usize) -> (Inputs, Expected) {
    let (sources, destinations) = (&graph.sources[me], &graph.destinations[me]);
    let (indegree, outdegree) = (sources.len(), destinations.len());
    let gather_count = |r: usize| r % 3;
    let allgather: Vec<u32> = (0..BLOCK).map(|e| value(me, 0, e)).collect();
    let allgatherv: Vec<u32> = (0..gather_count(me)).map(|e| value(me, 0, e)).collect();
    let allgatherv_counts: Vec<usize> = sources.iter().map(|&s| gather_count(s)).collect();
    let (allgatherv_displs, allgatherv_len) = reversed(&allgatherv_counts);
    let alltoall: Vec<u32> = (0..outdegree * BLOCK).map(|x| value(me, x / BLOCK, x % BLOCK)).collect();
    let send_counts: Vec<usize> = destinations.iter().enumerate().map(|(j, &d)| edge_count(me, j, d)).collect();
    let (send_displs, send_len) = reversed(&send_counts);
    let mut alltoallv = vec![u32::MAX; send_len];
    for j in 0..outdegree {
        for e in 0..send_counts[j] {
            alltoallv[send_displs[j] + e] = value(me, j, e);
        }
    }
    let pairs: Vec<(usize, usize)> = (0..indegree).map(|i| graph.pair(me, i)).collect();
    let recv_counts: Vec<usize> = pairs.iter().map(|&(s, j)| edge_count(s, j, me)).collect();
    let (recv_displs, recv_len) = reversed(&recv_counts);

    let expected = Expected {
        allgather: (0..indegree * BLOCK).map(|x| value(sources[x / BLOCK], 0, x % BLOCK)).collect(),
        allgatherv: {
            let mut want = vec![u32::MAX; allgatherv_len];
            for (i, &s) in sources.iter().enumerate() {
                for e in 0..gather_count(s) {
                    want[allgatherv_displs[i] + e] = value(s, 0, e);
                }
            }
            want
        },
        alltoall: (0..indegree * BLOCK).map(|x| value(pairs[x / BLOCK].0, pairs[x / BLOCK].1, x % BLOCK)).collect(),
        alltoallv: {
            let mut want = vec![u32::MAX; recv_len];
            for (i, &(s, j)) in pairs.iter().enumerate() {
                for e in 0..recv_counts[i] {
                    want[recv_displs[i] + e] = value(s, j, e);
                }
            }
            want
        },
    };
    let inputs = Inputs {
        allgather,
        allgatherv,
        allgatherv_counts,
        allgatherv_displs,
        alltoall,
        alltoallv,
        send_counts,
        send_displs,
        recv_counts,
        recv_displs,
    };
    (inputs, expected)
}

/// Runs the four collectives blocking, then all four nonblocking at once in one scope (waited
/// for in reverse order), and compares each with the reference.
fn check_collectives<G: NeighborTopology>(
    topology: &G,
    scope_comm: &Comm,
    inputs: &Inputs,
    want: &Expected,
    what: &str,
) -> Result<()> {
    let mut got = [
        vec![u32::MAX; want.allgather.len()],
        vec![u32::MAX; want.allgatherv.len()],
        vec![u32::MAX; want.alltoall.len()],
        vec![u32::MAX; want.alltoallv.len()],
    ];
    topology.neighbor_allgather(&inputs.allgather, &mut got[0])?;
    topology.neighbor_allgatherv(
        &inputs.allgatherv,
        &mut got[1],
        &inputs.allgatherv_counts,
        &inputs.allgatherv_displs,
    )?;
    topology.neighbor_alltoall(&inputs.alltoall, &mut got[2])?;
    topology.neighbor_alltoallv(
        &inputs.alltoallv,
        &inputs.send_counts,
        &inputs.send_displs,
        &mut got[3],
        &inputs.recv_counts,
        &inputs.recv_displs,
    )?;
    let check = |got: &[Vec<u32>; 4], how: &str| {
        let names = ["neighbor_allgather", "neighbor_allgatherv", "neighbor_alltoall", "neighbor_alltoallv"];
        let wants = [&want.allgather, &want.allgatherv, &want.alltoall, &want.alltoallv];
        for ((name, got), want) in names.iter().zip(got).zip(wants) {
            assert_eq!(got, want, "{what}: {how} {name}");
        }
    };
    check(&got, "blocking");

    let mut got = got.map(|g| vec![u32::MAX; g.len()]);
    let [a, b, c, d] = &mut got;
    scope_comm.scope(|s| {
        let requests = [
            s.ineighbor_allgather(topology, &inputs.allgather, a)?,
            s.ineighbor_allgatherv(
                topology,
                &inputs.allgatherv,
                b,
                &inputs.allgatherv_counts,
                &inputs.allgatherv_displs,
            )?,
            s.ineighbor_alltoall(topology, &inputs.alltoall, c)?,
            s.ineighbor_alltoallv(
                topology,
                &inputs.alltoallv,
                &inputs.send_counts,
                &inputs.send_displs,
                d,
                &inputs.recv_counts,
                &inputs.recv_displs,
            )?,
        ];
        for request in requests.into_iter().rev() {
            request.wait()?;
        }
        Ok::<_, Error>(())
    })?;
    check(&got, "nonblocking");
    Ok(())
}

fn graphs(np: usize) -> Vec<(String, Graph)> {
    let mut graphs = vec![
        ("ring".to_string(), Graph::ring(np)),
        ("two-way ring".to_string(), Graph::two_way_ring(np)),
        ("star".to_string(), Graph::star(np)),
        ("empty".to_string(), Graph::empty(np)),
    ];
    for seed in 0..3 {
        graphs.push((format!("random graph {seed}"), Graph::random(np, seed * 31 + np as u64)));
    }
    graphs
}

#[test]
fn graph_collectives_match_the_reference() {
    for np in [1, 2, 3, 5] {
        on_both(np, "graph collectives", move |world| {
            let me = world.rank();
            for (name, graph) in graphs(np) {
                let what = format!("{name} (rank {me})");
                let adjacent = create_adjacent(&world, &graph)?;
                let (inputs, want) = inputs_and_expected(&graph, me);
                // Nonblocking ones in a scope of the graph communicator, then of the parent.
                check_collectives(&adjacent, &adjacent, &inputs, &want, &format!("{what}, adjacent"))?;
                check_collectives(&adjacent, &world, &inputs, &want, &format!("{what}, adjacent, world scope"))?;
                let (general, order) = create_general(&world, &graph, np as u64 + name.len() as u64)?;
                let (inputs, want) = inputs_and_expected(&order, me);
                check_collectives(&general, &general, &inputs, &want, &format!("{what}, general"))?;
            }
            Ok(())
        });
    }
}

#[test]
fn general_creation_keeps_weights_and_reaches_both_ends() {
    on_both(3, "dist_graph_create with weights", |world| {
        // Rank 1 describes 0 → 2 (weight 5) and 2 → 2 twice (weights 1, 9); rank 2 adds 0 → 1
        // (weight 4). Neighbours are ordered by contributing rank.
        let (sources, degrees, destinations, weights): (&[usize], &[usize], &[usize], &[i32]) = match world.rank() {
            1 => (&[0, 2], &[1, 2], &[2, 2, 2], &[5, 1, 9]),
            2 => (&[0], &[1], &[1], &[4]),
            _ => (&[], &[], &[], &[]),
        };
        let graph = world.dist_graph_create(sources, degrees, destinations, Some(weights), false)?;
        let want: (&[usize], &[i32], &[usize], &[i32]) = match world.rank() {
            0 => (&[], &[], &[2, 1], &[5, 4]),
            1 => (&[0], &[4], &[], &[]),
            _ => (&[0, 2, 2], &[5, 1, 9], &[2, 2], &[1, 9]),
        };
        assert_eq!(graph.neighbors(), (want.0, want.2));
        assert_eq!(graph.weights(), Some((want.1, want.3)));
        // Self-loops pair in order: rank 2 sends blocks 0 and 1 to itself.
        let send: Vec<u32> = (0..graph.neighbors_count().1 as u32).map(|j| world.rank() as u32 * 10 + j).collect();
        let mut recv = vec![0u32; graph.neighbors_count().0];
        graph.neighbor_alltoall(&send, &mut recv)?;
        let expected: &[u32] = match world.rank() {
            0 => &[],
            1 => &[1],
            _ => &[0, 20, 21],
        };
        assert_eq!(recv, expected, "rank {}", world.rank());
        Ok(())
    });
}

// ---------------------------------------------------------------- Cartesian grids

/// The reference for a grid: block `2d` comes from the neighbour below in dimension `d` (its
/// block `2d + 1`, sent upwards), block `2d + 1` from the one above (its block `2d`).
fn cart_neighbor(dims: &[usize], periods: &[bool], rank: usize, d: usize, step: isize) -> Option<usize> {
    let mut coords = vec![0; dims.len()];
    let mut rest = rank;
    for (c, &n) in coords.iter_mut().zip(dims).rev() {
        *c = rest % n;
        rest /= n;
    }
    let moved = coords[d] as isize + step;
    let n = dims[d] as isize;
    coords[d] = if periods[d] {
        moved.rem_euclid(n) as usize
    } else if (0..n).contains(&moved) {
        moved as usize
    } else {
        return None;
    };
    Some(coords.iter().zip(dims).fold(0, |acc, (&c, &n)| acc * n + c))
}

#[test]
fn cartesian_neighborhoods_match_the_reference() {
    let cases: [(&[usize], &[bool]); 7] = [
        (&[4], &[true]),
        (&[4], &[false]),
        (&[2], &[true]),
        (&[1], &[true]),
        (&[2, 2], &[true, true]),
        (&[3, 1], &[true, true]),
        (&[2, 3], &[false, true]),
    ];
    for (dims, periods) in cases {
        let np: usize = dims.iter().product();
        on_both(np + 1, &format!("grid {dims:?} {periods:?}"), move |world| {
            // One rank more than the grid: it gets no grid communicator and takes no part.
            let Some(grid) = world.cart_create(dims, periods, false)? else { return Ok(()) };
            let me = grid.rank();
            let slots = 2 * dims.len();
            let neighbor =
                |slot: usize| cart_neighbor(dims, periods, me, slot / 2, if slot.is_multiple_of(2) { -1 } else { 1 });
            let send: Vec<u32> = (0..slots * BLOCK).map(|x| value(me, x / BLOCK, x % BLOCK)).collect();
            let untouched = u32::MAX;

            let mut got = vec![untouched; slots * BLOCK];
            grid.neighbor_alltoall(&send, &mut got)?;
            let want: Vec<u32> = (0..slots * BLOCK)
                .map(|x| neighbor(x / BLOCK).map_or(untouched, |from| value(from, (x / BLOCK) ^ 1, x % BLOCK)))
                .collect();
            assert_eq!(got, want, "grid {dims:?} {periods:?}, rank {me}: neighbor_alltoall");

            let mut gathered = vec![untouched; slots];
            grid.neighbor_allgather(&[me as u32], &mut gathered)?;
            let want_gathered: Vec<u32> = (0..slots).map(|i| neighbor(i).map_or(untouched, |r| r as u32)).collect();
            assert_eq!(gathered, want_gathered, "grid {dims:?} {periods:?}, rank {me}: neighbor_allgather");

            // Nonblocking, two at once, the same answers.
            let (mut got_nb, mut gathered_nb) = (vec![untouched; slots * BLOCK], vec![untouched; slots]);
            let mine = [me as u32];
            grid.scope(|s| {
                let one = s.ineighbor_alltoall(&grid, &send, &mut got_nb)?;
                let two = s.ineighbor_allgather(&grid, &mine, &mut gathered_nb)?;
                two.wait()?;
                one.wait().map(drop)
            })?;
            assert_eq!((got_nb, gathered_nb), (want, want_gathered), "grid {dims:?}, rank {me}: nonblocking");

            // alltoallv: block i has i % 2 + 1 elements (the same on every rank, so counts match).
            let counts: Vec<usize> = (0..slots).map(|i| i % 2 + 1).collect();
            let recv_counts: Vec<usize> = (0..slots).map(|i| (i ^ 1) % 2 + 1).collect();
            let displs: Vec<usize> = (0..slots).map(|i| 2 * i).collect();
            let sendv: Vec<u32> = (0..2 * slots).map(|x| value(me, x / 2, x % 2)).collect();
            let mut gotv = vec![untouched; 2 * slots];
            grid.neighbor_alltoallv(&sendv, &counts, &displs, &mut gotv, &recv_counts, &displs)?;
            for slot in 0..slots {
                for e in 0..2 {
                    let want = match neighbor(slot) {
                        Some(from) if e < recv_counts[slot] => value(from, slot ^ 1, e),
                        _ => untouched,
                    };
                    assert_eq!(gotv[2 * slot + e], want, "grid {dims:?}, rank {me}: alltoallv slot {slot} element {e}");
                }
            }
            Ok(())
        });
    }
}

// ---------------------------------------------------------------- errors

#[test]
fn bad_graphs_fail_on_every_rank() {
    on_both(3, "bad graphs", |world| {
        let (me, np) = (world.rank(), world.size());
        let (left, right) = ((me + np - 1) % np, (me + 1) % np);
        let create = |sources: &[usize], sw: Option<&[i32]>, destinations: &[usize], dw: Option<&[i32]>| {
            world.dist_graph_create_adjacent(sources, sw, destinations, dw, false)
        };
        // Rank 1 alone gives a bad argument; it names it, and the others fail too.
        let others = "dist_graph_create_adjacent: rank 1 reported invalid arguments or an inconsistent graph";
        let pick = |bad: &str| if me == 1 { bad.to_string() } else { others.to_string() };
        let bad_rank = if me == 1 { 7 } else { left };
        assert_invalid(
            create(&[bad_rank], None, &[right], None),
            &pick("sources[0] = 7 is out of range for a communicator of size 3"),
            "source out of range",
        );
        let bad_rank = if me == 1 { 3 } else { right };
        assert_invalid(
            create(&[left], None, &[bad_rank], None),
            &pick("destinations[0] = 3 is out of range"),
            "destination out of range",
        );
        let sw: &[i32] = if me == 1 { &[1, 2] } else { &[1] };
        assert_invalid(
            create(&[left], Some(sw), &[right], Some(&[1])),
            &pick("source_weights has 2 entries for the 1 entries of sources"),
            "weights length",
        );
        let dw: &[i32] = if me == 1 { &[-4] } else { &[1] };
        assert_invalid(
            create(&[left], Some(&[1]), &[right], Some(dw)),
            &pick("dest_weights[0] = -4 is negative"),
            "negative weight",
        );
        let dw = if me == 1 { None } else { Some(&[1][..]) };
        assert_invalid(
            create(&[left], Some(&[1]), &[right], dw),
            &pick("must both be given or both be None"),
            "one-sided weights",
        );
        // Weights on some ranks only.
        let weights = (me != 0).then_some(&[1][..]);
        assert_invalid(
            create(&[left], weights, &[right], weights),
            "some ranks give weights and others do not",
            "mixed weights",
        );
        // Inconsistent: rank 0 also sends to rank 2, which does not list it.
        let destinations: &[usize] = if me == 0 { &[1, 2] } else { &[right] };
        let want = match me {
            2 => "sources list rank 0 0 times, but rank 0's destinations list this rank (2) 1 times",
            _ => "rank 2 reported invalid arguments or an inconsistent graph",
        };
        assert_invalid(create(&[left], None, destinations, None), want, "inconsistent graph");

        let general =
            |s: &[usize], d: &[usize], t: &[usize], w: Option<&[i32]>| world.dist_graph_create(s, d, t, w, false);
        let others = "dist_graph_create: rank 1 reported invalid arguments or an inconsistent graph";
        let pick = |bad: &str| if me == 1 { bad.to_string() } else { others.to_string() };
        let degrees: &[usize] = if me == 1 { &[1, 1] } else { &[1] };
        assert_invalid(general(&[me], degrees, &[right], None), &pick("2 degrees for 1 sources"), "degrees length");
        let degrees: &[usize] = if me == 1 { &[2] } else { &[1] };
        assert_invalid(
            general(&[me], degrees, &[right], None),
            &pick("degrees add up to Some(2) edges but destinations has 1"),
            "degrees sum",
        );
        let sources: &[usize] = if me == 1 { &[9] } else { &[me] };
        assert_invalid(
            general(sources, &[1], &[right], None),
            &pick("sources[0] = 9 is out of range"),
            "general source out of range",
        );
        let weights: &[i32] = if me == 1 { &[] } else { &[3] };
        assert_invalid(
            general(&[me], &[1], &[right], Some(weights)),
            &pick("weights has 0 entries for the 1 entries of destinations"),
            "general weights",
        );

        // Nothing is left half-done: the world and a good graph still work.
        let ring = create(&[left], None, &[right], None)?;
        let mut got = [0u32];
        ring.neighbor_allgather(&[me as u32], &mut got)?;
        assert_eq!(got, [left as u32]);
        Ok(())
    });
}

#[test]
fn bad_buffers_are_errors_naming_the_call_and_argument() {
    on_both(3, "bad buffers", |world| {
        let (me, np) = (world.rank(), world.size());
        // Two sources and one destination on every rank.
        let graph = world.dist_graph_create_adjacent(
            &[(me + np - 1) % np, (me + 1) % np],
            None,
            &[(me + 1) % np, (me + np - 1) % np],
            None,
            false,
        )?;
        let mut five = [0u32; 5];
        // Every rank makes the same mistake, so nobody waits for anybody.
        assert_invalid(
            graph.neighbor_allgather(&[1u32, 2], &mut five),
            "neighbor_allgather: receive buffer has 5 elements, expected 4 (2 sources × 2)",
            "allgather",
        );
        assert_invalid(
            graph.neighbor_alltoall(&[1u32, 2, 3], &mut [0u32; 4]),
            "neighbor_alltoall: send buffer of 3 elements does not split into 2 equal blocks (one per destination)",
            "alltoall send",
        );
        assert_invalid(
            graph.neighbor_alltoall(&[1u32, 2], &mut five),
            "neighbor_alltoall: receive buffer has 5 elements, expected 2 (2 sources × 1)",
            "alltoall receive",
        );
        assert_invalid(
            graph.neighbor_allgatherv(&[1u32], &mut five, &[1], &[0, 1]),
            "neighbor_allgatherv: 1 receive counts and 2 displacements for 2 sources",
            "allgatherv counts",
        );
        assert_invalid(
            graph.neighbor_allgatherv(&[1u32], &mut five, &[1, 1], &[0, 5]),
            "neighbor_allgatherv receive (blocks indexed by sources): block of rank 1 (displacement 5, count 1) exceeds the buffer of 5 elements",
            "allgatherv displacement",
        );
        assert_invalid(
            graph.neighbor_alltoallv(&[1u32, 2], &[1, 1], &[0, 0], &mut five, &[1, 1], &[0, 1]),
            "neighbor_alltoallv send (blocks indexed by destinations): blocks of ranks 0 and 1 overlap",
            "alltoallv send overlap",
        );
        assert_invalid(
            graph.neighbor_alltoallv(&[1u32, 2], &[1, 1], &[0, 1], &mut five, &[1], &[0]),
            "neighbor_alltoallv: 1 receive counts and 1 displacements for 2 sources",
            "alltoallv receive counts",
        );
        let (two, three, mut four) = ([1u32, 2], [1u32, 2, 3], [0u32; 4]);
        world.scope(|s| {
            assert_invalid(
                s.ineighbor_allgather(&graph, &two, &mut five).map(drop),
                "ineighbor_allgather: receive buffer has 5 elements, expected 4",
                "ineighbor_allgather",
            );
            assert_invalid(
                s.ineighbor_alltoall(&graph, &three, &mut four).map(drop),
                "ineighbor_alltoall: send buffer of 3 elements",
                "ineighbor_alltoall",
            );
        });
        // Still usable afterwards.
        let mut got = [0u32; 2];
        graph.neighbor_allgather(&[me as u32], &mut got)?;
        assert_eq!(got, [((me + np - 1) % np) as u32, ((me + 1) % np) as u32]);
        Ok(())
    });
}

/// Ranks that disagree on lengths (rank 0 sends longer or shorter blocks than rank 1 expects)
/// end the job in `Err`, at small and rendezvous sizes, blocking and nonblocking.
#[test]
fn cross_rank_mismatches_end_in_err() {
    for (label, ours, theirs) in [("4 vs 3", 4usize, 3usize), ("3 vs 4", 3, 4), ("large", 100_000, 99_999)] {
        for nonblocking in [false, true] {
            for (device, config) in devices(2) {
                let what = format!("{label}, nonblocking {nonblocking}, on {device}");
                let result = job(config, &what, move |world| {
                    let peer = 1 - world.rank();
                    let graph = world.dist_graph_create_adjacent(&[peer], None, &[peer], None, false)?;
                    // Rank 0 sends `ours` elements and expects `ours`; rank 1 both `theirs`.
                    let n = if world.rank() == 0 { ours } else { theirs };
                    let (send, mut recv) = (vec![1u32; n], vec![0u32; n]);
                    if nonblocking {
                        graph.scope(|s| s.ineighbor_alltoall(&graph, &send, &mut recv)?.wait().map(drop))
                    } else {
                        graph.neighbor_alltoall(&send, &mut recv)
                    }
                });
                let error = result.expect_err(&format!("{what}: the job succeeded"));
                assert!(
                    error.to_string().contains("neighbor_alltoall") || error.to_string().contains("truncated"),
                    "{what}: {error}"
                );
            }
        }
    }
}
