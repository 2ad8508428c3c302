//! Point-to-point benchmarks following OSU 7.4: latency, bw, bibw, mbw_mr; and `strided`, the
//! latency of a matrix column sent with a layout (bench/mpi_bench.c's MPI_Type_vector twin).

use std::time::Instant;

use fastmp::layout::Vector;
use fastmp::{Comm, Error, Result};

use crate::coll::Iterations;
use crate::report::Reporter;
use crate::support::{AlignedBuf, Sizes, barrier, gather_f64};

const WINDOW: usize = 64;
const TAG_DATA: i32 = 100;
const TAG_ACK: i32 = 101;

/// OSU 7.4's ping-pong counts (latency, strided): timed and warm-up iterations up to 8 KiB and
/// above.
pub const LATENCY_ITERATIONS: Iterations = Iterations { small: (10_000, 100), large: (1_000, 10) };
/// OSU 7.4's window counts (bw, bibw, mbw_mr): windows of 64 messages.
pub const BW_ITERATIONS: Iterations = Iterations { small: (100, 10), large: (20, 2) };

/// Ping-pong with blocking send/recv; one-way latency = round trip / 2.
pub fn latency(world: &Comm, sizes: &Sizes, iterations: Iterations, out: &Reporter) -> Result<()> {
    out.header("Latency Test", &[], &["Latency (us)"]);
    let mut sbuf = AlignedBuf::new(sizes.max, b'a');
    let mut rbuf = AlignedBuf::new(sizes.max, b'b');
    let me = world.rank();
    for size in sizes.iter() {
        let (iters, skip) = iterations.at(size);
        barrier(world)?;
        let mut start = Instant::now();
        for i in 0..iters + skip {
            if i == skip {
                start = Instant::now();
            }
            if me == 0 {
                world.send(&sbuf.as_slice()[..size], 1, 1)?;
                world.recv(&mut rbuf.as_mut_slice()[..size], 1, 1)?;
            } else if me == 1 {
                world.recv(&mut rbuf.as_mut_slice()[..size], 0, 1)?;
                world.send(&sbuf.as_slice()[..size], 0, 1)?;
            }
        }
        let elapsed = start.elapsed().as_secs_f64();
        if me == 0 {
            out.row(size, &[("avg_us", elapsed * 1e6 / (2.0 * iters as f64))]);
        }
        sbuf.as_mut_slice()[0] ^= 1;
    }
    Ok(())
}

/// Default largest `strided` message: one column of a 4096 × 4096 f64 matrix.
pub const STRIDED_MAX_SIZE: usize = 4096 * 8;

/// The latency ping-pong on `size / 8` f64 of column 0 of a row-major `rows × rows` matrix
/// (`rows` = largest size / 8), sent and received with one `Vector` layout on both sides.
pub fn strided(world: &Comm, sizes: &Sizes, iterations: Iterations, out: &Reporter) -> Result<()> {
    const F64: usize = size_of::<f64>();
    if sizes.min < F64 || !sizes.min.is_multiple_of(F64) || !sizes.max.is_multiple_of(F64) {
        return Err(Error::InvalidArgument("strided sizes must be positive multiples of 8 (whole f64s)".into()));
    }
    out.header("Strided Latency Test (column of a row-major f64 matrix, layout::Vector)", &[], &["Latency (us)"]);
    let rows = sizes.max / F64;
    // Every page touched before anything is timed.
    let mut matrix: Vec<f64> = (0..rows * rows).map(|k| k as f64).collect();
    let me = world.rank();
    for size in sizes.iter() {
        let column = Vector { count: size / F64, blocklength: 1, stride: rows };
        let (iters, skip) = iterations.at(size);
        barrier(world)?;
        let mut start = Instant::now();
        for i in 0..iters + skip {
            if i == skip {
                start = Instant::now();
            }
            if me == 0 {
                world.send_strided(&matrix, &column, 1, 1)?;
                world.recv_strided(&mut matrix, &column, 1, 1)?;
            } else if me == 1 {
                world.recv_strided(&mut matrix, &column, 0, 1)?;
                world.send_strided(&matrix, &column, 0, 1)?;
            }
        }
        let elapsed = start.elapsed().as_secs_f64();
        if me == 0 {
            out.row(size, &[("avg_us", elapsed * 1e6 / (2.0 * iters as f64))]);
        }
    }
    Ok(())
}

/// One window: `WINDOW` nonblocking sends of `size` bytes to `peer`.
fn send_window(world: &Comm, buf: &[u8], peer: usize) -> Result<()> {
    world.scope(|s| {
        let mut reqs = Vec::with_capacity(WINDOW);
        for _ in 0..WINDOW {
            reqs.push(s.isend(buf, peer, TAG_DATA)?);
        }
        fastmp::waitall(&mut reqs).map(drop)
    })
}

/// One window of receives, all into the same buffer as OSU does (see `Scope::irecv_raw`).
fn recv_window(world: &Comm, buf: &mut [u8], peer: usize) -> Result<()> {
    let (ptr, len) = (buf.as_mut_ptr(), buf.len());
    world.scope(|s| {
        let mut reqs = Vec::with_capacity(WINDOW);
        for _ in 0..WINDOW {
            // SAFETY: `buf` outlives the scope and is not touched by us until it ends; the window's
            // receives overlap in it exactly as OSU's do (contents unspecified, never read).
            reqs.push(unsafe { s.irecv_raw(ptr, len, peer, TAG_DATA)? });
        }
        fastmp::waitall(&mut reqs).map(drop)
    })
}

/// Windowed unidirectional bandwidth between `sender` and `receiver`; returns the sender's
/// elapsed seconds for `iters` timed iterations.
fn bw_pair(
    world: &Comm,
    (size, iterations): (usize, Iterations),
    sender: usize,
    receiver: usize,
    sbuf: &[u8],
    rbuf: &mut [u8],
) -> Result<f64> {
    let (iters, skip) = iterations.at(size);
    let me = world.rank();
    let mut start = Instant::now();
    let mut ack = [0u8; 4];
    for i in 0..iters + skip {
        if i == skip {
            start = Instant::now();
        }
        if me == sender {
            send_window(world, &sbuf[..size], receiver)?;
            world.recv(&mut ack, receiver, TAG_ACK)?;
        } else if me == receiver {
            recv_window(world, &mut rbuf[..size], sender)?;
            world.send(&ack, sender, TAG_ACK)?;
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

pub fn bw(world: &Comm, sizes: &Sizes, iterations: Iterations, out: &Reporter) -> Result<()> {
    out.header("Bandwidth Test", &[], &["Bandwidth (MB/s)"]);
    let sbuf = AlignedBuf::new(sizes.max, b'a');
    let mut rbuf = AlignedBuf::new(sizes.max, b'b');
    for size in sizes.iter() {
        barrier(world)?;
        let t = bw_pair(world, (size, iterations), 0, 1, sbuf.as_slice(), rbuf.as_mut_slice())?;
        if world.rank() == 0 {
            let (iters, _) = iterations.at(size);
            out.row(size, &[("mb_s", size as f64 / 1e6 * (WINDOW * iters) as f64 / t)]);
        }
    }
    Ok(())
}

pub fn bibw(world: &Comm, sizes: &Sizes, iterations: Iterations, out: &Reporter) -> Result<()> {
    out.header("Bi-Directional Bandwidth Test", &[], &["Bandwidth (MB/s)"]);
    let sbuf = AlignedBuf::new(sizes.max, b'a');
    let mut rbuf = AlignedBuf::new(sizes.max, b'b');
    let peer = 1 - world.rank();
    for size in sizes.iter() {
        let (iters, skip) = iterations.at(size);
        barrier(world)?;
        let mut start = Instant::now();
        let (rptr, sbytes) = (rbuf.as_mut_slice().as_mut_ptr(), &sbuf.as_slice()[..size]);
        for i in 0..iters + skip {
            if i == skip {
                start = Instant::now();
            }
            world.scope(|s| {
                let mut reqs = Vec::with_capacity(2 * WINDOW);
                for _ in 0..WINDOW {
                    // SAFETY: as in `recv_window`: the buffer outlives the scope, receives overlap
                    // as in OSU and the contents are never read.
                    reqs.push(unsafe { s.irecv_raw(rptr, size, peer, TAG_DATA)? });
                }
                for _ in 0..WINDOW {
                    reqs.push(s.isend(sbytes, peer, TAG_DATA)?);
                }
                fastmp::waitall(&mut reqs).map(drop)
            })?;
        }
        let t = start.elapsed().as_secs_f64();
        if world.rank() == 0 {
            out.row(size, &[("mb_s", size as f64 / 1e6 * (2 * WINDOW * iters) as f64 / t)]);
        }
    }
    Ok(())
}

/// np/2 pairs (rank i sends to i + np/2) stream concurrently; aggregate MB/s and messages/s.
pub fn mbw_mr(world: &Comm, sizes: &Sizes, iterations: Iterations, out: &Reporter) -> Result<()> {
    let pairs = world.size() / 2;
    out.header(
        "Multiple Bandwidth / Message Rate Test",
        &[format!("# [ pairs: {pairs} ] [ window size: {WINDOW} ]")],
        &["MB/s", "Messages/s"],
    );
    let sbuf = AlignedBuf::new(sizes.max, b'a');
    let mut rbuf = AlignedBuf::new(sizes.max, b'b');
    let me = world.rank();
    let (sender, receiver) = if me < pairs { (me, me + pairs) } else { (me - pairs, me) };
    for size in sizes.iter() {
        barrier(world)?;
        let t = bw_pair(world, (size, iterations), sender, receiver, sbuf.as_slice(), rbuf.as_mut_slice())?;
        // OSU: the senders' times are averaged at rank 0.
        let times = gather_f64(world, if me < pairs { t } else { 0.0 })?;
        if me == 0 {
            let avg_t = times[..pairs].iter().sum::<f64>() / pairs as f64;
            let (iters, _) = iterations.at(size);
            let mb_s = pairs as f64 * size as f64 / 1e6 * (WINDOW * iters) as f64 / avg_t;
            out.row(size, &[("mb_s", mb_s), ("msg_s", mb_s * 1e6 / size as f64)]);
        }
    }
    Ok(())
}
