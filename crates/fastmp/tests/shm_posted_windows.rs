//! osu_bw's pattern with checks: windows of preposted receives (more than the board's 64
//! entries, so some stay private) taking bursts of tiny, spilled, receiver-first and rendezvous
//! messages through wildcard and exact receives, finished in posting order, in reverse and by
//! `waitany`, with cancelled receives between them. A receive the owner matches from its ring
//! completes at once and frees its board entry for the next posting; every receive must still
//! get the message of its posting position, intact, and a cancelled one nothing.

use fastmp::{ANY_SOURCE, ANY_TAG, Comm, Config, DEFAULT_EAGER_LIMIT, DeviceKind, Request, Result, Status};

#[path = "common/indexed_messages.rs"]
mod indexed_messages;

/// Mostly tiny and inline lengths, some spilled, receiver-first (1 KiB up) and rendezvous ones.
const LENGTHS: [usize; 12] = [1, 0, 8, 32, 40, 2, 41, 96, 1, 1024, 16, DEFAULT_EAGER_LIMIT + 1];
/// Receives (and messages) per window: past the board's 64 entries.
const WINDOW: usize = 100;
const WINDOWS: usize = 6;

fn shm(np: usize) -> Config {
    Config::new().device(DeviceKind::Shm).np(np)
}

fn length(i: usize) -> usize {
    LENGTHS[i % LENGTHS.len()]
}

/// How a window's receives are finished.
#[derive(Clone, Copy, Debug)]
enum Finish {
    InOrder,
    Reverse,
    Any,
}

const FINISHES: [Finish; 3] = [Finish::InOrder, Finish::Reverse, Finish::Any];

/// Waits for every request of `reqs` the way `finish` says; the statuses in posting order.
fn finish_all(reqs: Vec<Request<'_>>, finish: Finish) -> Result<Vec<Status>> {
    match finish {
        Finish::InOrder => fastmp::waitall(&mut { reqs }),
        Finish::Reverse => {
            let mut statuses: Vec<Status> = reqs.into_iter().rev().map(Request::wait).collect::<Result<_>>()?;
            statuses.reverse();
            Ok(statuses)
        }
        Finish::Any => {
            let mut reqs = reqs;
            let mut statuses = vec![None; reqs.len()];
            while let Some((k, st)) = fastmp::waitany(&mut reqs)? {
                statuses[k] = Some(st);
            }
            Ok(statuses.into_iter().map(|s| s.expect("every request finished")).collect())
        }
    }
}

/// The receiver's side of one window: receive `k` of the window is exact (sender, tag) or a
/// wildcard by turns, and every `cancel_every`-th one (if any) is posted and cancelled first.
fn receive_window(world: &Comm, sender: usize, first: usize, finish: Finish, cancel_every: usize) -> Result<()> {
    let mut bufs: Vec<Vec<u8>> = (0..WINDOW).map(|k| vec![0u8; length(first + k).max(1)]).collect();
    let mut withdrawn = vec![vec![0u8; DEFAULT_EAGER_LIMIT + 1]; WINDOW];
    let statuses = world.scope(|s| {
        let mut reqs = Vec::with_capacity(WINDOW);
        for (k, (b, w)) in bufs.iter_mut().zip(withdrawn.iter_mut()).enumerate() {
            if cancel_every > 0 && k % cancel_every == 1 {
                let c = s.irecv(&mut w[..], ANY_SOURCE, ANY_TAG)?;
                c.cancel()?;
                assert!(c.wait()?.cancelled, "nothing was sent yet: the cancel wins");
            }
            let tag = (first + k) as i32;
            reqs.push(match k % 4 {
                0 => s.irecv(&mut b[..], ANY_SOURCE, ANY_TAG)?,
                1 => s.irecv(&mut b[..], sender, ANY_TAG)?,
                2 => s.irecv(&mut b[..], ANY_SOURCE, tag)?,
                _ => s.irecv(&mut b[..], sender, tag)?,
            });
        }
        // The sender starts once every receive is posted.
        world.send(&[0u8; 0], sender, 0)?;
        finish_all(reqs, finish)
    })?;
    for (k, (st, b)) in statuses.iter().zip(&bufs).enumerate() {
        let i = first + k;
        assert_eq!(
            (st.source, st.tag),
            (sender, i as i32),
            "window at {first} ({finish:?}): receive {k} got another message"
        );
        indexed_messages::check(i, length(i), b, st.bytes);
    }
    assert!(withdrawn.iter().flatten().all(|&b| b == 0), "a cancelled receive got data");
    Ok(())
}

#[test]
fn preposted_windows_keep_order_and_contents() {
    shm(2)
        .run(|world| {
            for w in 0..WINDOWS {
                let first = w * WINDOW;
                if world.rank() == 0 {
                    world.recv(&mut [0u8; 0], 1, 0)?;
                    indexed_messages::send_burst(&world, 1, first, first + WINDOW, length)?;
                } else {
                    let cancel_every = if w % 2 == 1 { 7 } else { 0 };
                    receive_window(&world, 0, first, FINISHES[w % FINISHES.len()], cancel_every)?;
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Two senders stream windows to one receiver whose receives name each sender in turn, with
/// ANY_SOURCE receives for the first sender's half: each sender's messages land in its own
/// posting order.
#[test]
fn two_senders_into_preposted_windows() {
    shm(3)
        .run(|world| {
            let me = world.rank();
            for w in 0..WINDOWS {
                let first = w * WINDOW;
                if me != 0 {
                    world.recv(&mut [0u8; 0], 0, 0)?;
                    indexed_messages::send_burst(&world, 0, first, first + WINDOW, length)?;
                    continue;
                }
                let mut bufs: Vec<Vec<u8>> = (0..2 * WINDOW).map(|k| vec![0u8; length(first + k / 2).max(1)]).collect();
                let statuses = world.scope(|s| {
                    let mut reqs = Vec::with_capacity(2 * WINDOW);
                    for (k, b) in bufs.iter_mut().enumerate() {
                        // Rank 2's receives are exact, so ANY_SOURCE ones can only take rank 1's.
                        let sender = 1 + k % 2;
                        let tag = (first + k / 2) as i32;
                        reqs.push(if sender == 2 {
                            s.irecv(&mut b[..], 2, tag)?
                        } else {
                            s.irecv(&mut b[..], 1, ANY_TAG)?
                        });
                    }
                    world.send(&[0u8; 0], 1, 0)?;
                    world.send(&[0u8; 0], 2, 0)?;
                    finish_all(reqs, FINISHES[w % FINISHES.len()])
                })?;
                for (k, (st, b)) in statuses.iter().zip(&bufs).enumerate() {
                    let i = first + k / 2;
                    assert_eq!((st.source, st.tag), (1 + k % 2, i as i32), "window {w}: receive {k}");
                    indexed_messages::check(i, length(i), b, st.bytes);
                }
            }
            Ok(())
        })
        .unwrap();
}
