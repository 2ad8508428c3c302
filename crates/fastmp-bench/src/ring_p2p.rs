//! `fastmp-bench allreduce_ring_p2p`: the reference a user would write by hand instead of calling
//! `Comm::allreduce`, a segmented ring on the public point-to-point API only. The library's
//! allreduce should be no slower on the same device (issue 11).
//!
//! Reduce-scatter, then allgather, each `np - 1` ring steps over `np` near-equal blocks of the
//! `f32` vector; every block travels as `segments` messages (tag [`TAG`] + segment). In a
//! reduce-scatter step all receives and sends of the step are in flight at once, and each
//! segment is folded in as soon as it arrived while the later ones are still on the wire: the
//! receives are posted in nested scopes, the last segment's outermost, so a segment's buffer is
//! free to read when its own scope ends (what `Scope`'s borrows allow without `unsafe`). In an
//! allgather step the segments are just all in flight together. Measured, reported and keyed
//! as `fastmp-bench allreduce` (`algorithm` names the reference and its segment count).

use std::ops::Range;

use fastmp::coll::Collective;
use fastmp::op::{Op, Sum};
use fastmp::{Comm, Result, waitall};

use crate::coll::{Iterations, measure_with, sizes_for};
use crate::report::{Cell, Reporter};
use crate::support::{AlignedBuf, Sizes};

/// Segments per block unless `--segments` says otherwise (the count of the measurement in
/// issue 11).
pub const DEFAULT_SEGMENTS: usize = 8;

/// First tag of the segments (clear of the support module's barrier and gather tags).
const TAG: i32 = 1000;

type Elem = f32;

/// Start of part `index` of `len` elements split into `parts` near-equal parts (the first
/// `len % parts` one longer), as the library splits its ring blocks.
fn bound(len: usize, parts: usize, index: usize) -> usize {
    index * (len / parts) + index.min(len % parts)
}

/// `out` (read) and `into` (written) as disjoint parts of one buffer.
fn read_and_write(buf: &mut [Elem], out: Range<usize>, into: Range<usize>) -> (&[Elem], &mut [Elem]) {
    if out.start < into.start {
        let (low, high) = buf.split_at_mut(into.start);
        (&low[out], &mut high[..into.len()])
    } else {
        let (low, high) = buf.split_at_mut(out.start);
        (&high[..out.len()], &mut low[into])
    }
}

/// The reference allreduce (sum) of `send` into `recv` with `segments` messages per block.
pub fn allreduce(world: &Comm, send: &[Elem], recv: &mut [Elem], segments: usize) -> Result<()> {
    let (np, me, len) = (world.size(), world.rank(), send.len());
    let (right, left) = ((me + 1) % np, (me + np - 1) % np);
    let block = |i: usize| bound(len, np, i % np)..bound(len, np, i % np + 1);
    // Segment boundaries inside block `i`, relative to its start.
    let cuts = |i: usize| (0..=segments).map(|k| bound(block(i).len(), segments, k)).collect::<Vec<_>>();
    if np == 1 {
        recv.copy_from_slice(send);
        return Ok(());
    }
    // Reduce-scatter: in step s, pass on the partial sum of block me-s-1 (own data in step 0)
    // and fold own data into the partial of block me-s-2 arriving from the left.
    for step in 0..np - 1 {
        let (sent, folded) = (me + 2 * np - step - 1, me + 2 * np - step - 2);
        let (partial, into) = read_and_write(recv, block(sent), block(folded));
        let out = if step == 0 { &send[block(sent)] } else { partial };
        let (out_cuts, into_cuts) = (cuts(sent), cuts(folded));
        world.scope(|s| {
            let mut sends = Vec::with_capacity(segments);
            for (k, seg) in out_cuts.windows(2).enumerate() {
                sends.push(s.isend(&out[seg[0]..seg[1]], right, TAG + k as i32)?);
            }
            fold_as_they_arrive(world, left, into, &send[block(folded)], &into_cuts)?;
            waitall(&mut sends).map(drop)
        })?;
    }
    // Allgather: in step s, pass on block me-s (complete) and receive block me-s-1.
    for step in 0..np - 1 {
        let (sent, got) = (me + np - step, me + np - step - 1);
        let (out, into) = read_and_write(recv, block(sent), block(got));
        let (out_cuts, into_cuts) = (cuts(sent), cuts(got));
        world.scope(|s| {
            let mut reqs = Vec::with_capacity(2 * segments);
            let mut rest = into;
            for (k, seg) in into_cuts.windows(2).enumerate() {
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(seg[1] - seg[0]);
                rest = tail;
                reqs.push(s.irecv(piece, left, TAG + k as i32)?);
            }
            for (k, seg) in out_cuts.windows(2).enumerate() {
                reqs.push(s.isend(&out[seg[0]..seg[1]], right, TAG + k as i32)?);
            }
            waitall(&mut reqs).map(drop)
        })?;
    }
    Ok(())
}

/// Receives the segments of `into` (boundaries `cuts`) from `left` and adds `own` to each as
/// soon as it arrived. The last segment's receive is posted first, in the outermost scope; the
/// recursion posts the earlier ones in scopes nested inside, and each scope's end frees its
/// segment while those posted outside it are still in flight.
fn fold_as_they_arrive(world: &Comm, left: usize, into: &mut [Elem], own: &[Elem], cuts: &[usize]) -> Result<()> {
    let Some(last) = cuts.len().checked_sub(2) else { return Ok(()) };
    let (head, tail) = into.split_at_mut(cuts[last]);
    world.scope(|s| {
        let request = s.irecv(&mut *tail, left, TAG + last as i32)?;
        fold_as_they_arrive(world, left, head, own, &cuts[..=last])?;
        request.wait().map(drop)
    })?;
    Sum.combine(&own[cuts[last]..cuts[last + 1]], tail);
    Ok(())
}

/// Buffers of the reference at the largest size: ones to sum, and the result.
struct Buffers {
    send: AlignedBuf,
    recv: AlignedBuf,
}

/// The `fastmp-bench allreduce_ring_p2p` benchmark (JSON keys as `fastmp-bench allreduce`).
pub fn bench(world: &Comm, sizes: &Sizes, iterations: Iterations, segments: usize, out: &Reporter) -> Result<()> {
    let coll = Collective::Allreduce;
    let elem = size_of::<Elem>();
    let mut buffers = Buffers {
        send: AlignedBuf::new(sizes.max.next_multiple_of(elem), 0),
        recv: AlignedBuf::new(sizes.max.next_multiple_of(elem), 0),
    };
    bytemuck::cast_slice_mut::<u8, Elem>(buffers.send.as_mut_slice()).fill(1.0);
    let name = format!("ring_p2p_s{segments}");
    let np = world.size();
    out.header(
        "Allreduce Latency Test, hand-written segmented ring (isend/irecv)",
        &[
            "# Datatype: f32 (MPI_FLOAT), op Sum".to_string(),
            format!("# {segments} segments per block; reduce-scatter + allgather ring on Scope::isend/irecv"),
            "# Bandwidth: aggregated, np x size / avg latency (MB = 10^6 B)".to_string(),
        ],
        &["Avg Latency(us)", "Min Latency(us)", "Max Latency(us)", "Bandwidth (MB/s)", "Algorithm"],
    );
    for size in sizes_for(coll, sizes) {
        let n = size / elem;
        let Buffers { send, recv } = &mut buffers;
        let send: &[Elem] = &bytemuck::cast_slice(send.as_slice())[..n];
        let recv: &mut [Elem] = &mut bytemuck::cast_slice_mut(recv.as_mut_slice())[..n];
        let stats = measure_with(world, size, iterations, false, || allreduce(world, send, recv, segments))?;
        if let Some(wrong) = recv.iter().find(|&&x| x != np as Elem) {
            return Err(fastmp::Error::other(format!("ring_p2p at {size} B: a sum is {wrong}, not {np}")));
        }
        let Some(stats) = stats else { continue };
        let mb_s = if stats.avg_us > 0.0 { np as f64 * size as f64 / stats.avg_us } else { 0.0 };
        out.row_cells(
            size,
            &[
                ("avg_us", Cell::Num(stats.avg_us)),
                ("min_us", Cell::Num(stats.min_us)),
                ("max_us", Cell::Num(stats.max_us)),
                ("mb_s", Cell::Num(mb_s)),
                ("algorithm", Cell::Text(&name)),
            ],
        );
    }
    Ok(())
}
