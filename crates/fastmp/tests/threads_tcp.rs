//! Several threads of one rank communicating at once through `Comm::threaded` handles (tcp:
//! MPI_THREAD_MULTIPLE), racing matched probes that must never take the same message, and the
//! thread levels and errors of both devices.

use std::sync::Mutex;

use fastmp::{ANY_SOURCE, ANY_TAG, Config, DeviceKind, Error, ThreadComm, ThreadLevel};

fn tcp(np: usize) -> Config {
    Config::new().device(DeviceKind::Tcp).np(np)
}

const HELPERS: usize = 3;
const ROUNDS: u64 = 40;
const MAIN_TAG: i32 = 100;
/// Offset of each thread's second tag (the all-to-all step), so a peer's next ring message
/// cannot meet this round's `ANY_SOURCE` receives.
const EAGER_TAGS: i32 = 50;

/// The payload of message `i` of thread `t` of rank `r`: sizes alternate between eager and
/// rendezvous (above tcp's 64 KiB eager limit).
fn payload(r: usize, t: usize, i: u64) -> Vec<u64> {
    let len = if i % 4 == 3 { 10_000 } else { 1 + (i as usize % 5) };
    (0..len as u64).map(|k| (r as u64) << 48 | (t as u64) << 40 | i << 20 | k).collect()
}

/// Every rank runs helper threads that each exchange with the other ranks on their own tag while
/// the rank's own thread does the same on `MAIN_TAG`: per round a ring `sendrecv` (eager or
/// rendezvous-sized, receiving from `ANY_SOURCE`), then eager sends to every peer received with
/// `ANY_SOURCE` on a second tag. Every message is checked.
#[test]
fn helper_threads_and_main_thread_exchange_concurrently() {
    tcp(3)
        .run(|world| {
            assert_eq!(world.thread_level(), ThreadLevel::Multiple);
            let handle = world.threaded()?;
            assert_eq!((handle.rank(), handle.size()), (world.rank(), 3));
            let (me, size) = (world.rank(), world.size());
            let (next, prev) = ((me + 1) % size, (me + size - 1) % size);
            let exchange = |comm: &ThreadComm, t: usize, tag: i32| -> fastmp::Result<()> {
                let mut buf = vec![0u64; 10_000];
                let mut next_round = vec![0u64; size];
                for i in 0..ROUNDS {
                    let status = comm.sendrecv(&payload(me, t, i), next, tag, &mut buf, ANY_SOURCE, tag)?;
                    assert_eq!(status.source, prev);
                    assert_eq!(&buf[..status.bytes / 8], &payload(prev, t, i)[..], "thread {t} round {i}");
                    for peer in (0..size).filter(|&p| p != me) {
                        comm.send(&payload(me, t, ROUNDS + i)[..1], peer, tag + EAGER_TAGS)?;
                    }
                    // A fast peer's next round may come before a slow one's: per sender the
                    // rounds arrive in order (non-overtaking).
                    for _ in 0..size - 1 {
                        let status = comm.recv(&mut buf, ANY_SOURCE, tag + EAGER_TAGS)?;
                        let round = &mut next_round[status.source];
                        assert_eq!(&buf[..status.bytes / 8], &payload(status.source, t, ROUNDS + *round)[..1]);
                        *round += 1;
                    }
                }
                assert!(next_round.iter().enumerate().all(|(p, &n)| n == if p == me { 0 } else { ROUNDS }));
                Ok(())
            };
            std::thread::scope(|s| {
                let helpers: Vec<_> = (0..HELPERS)
                    .map(|t| {
                        let comm = handle.clone();
                        let exchange = &exchange;
                        s.spawn(move || exchange(&comm, t, t as i32))
                    })
                    .collect();
                // The rank's own thread, through its `Comm`, on the same context.
                let mut buf = vec![0u64; 10_000];
                for i in 0..ROUNDS {
                    let status =
                        world.sendrecv(&payload(me, HELPERS, i), next, MAIN_TAG, &mut buf, ANY_SOURCE, MAIN_TAG)?;
                    assert_eq!(&buf[..status.bytes / 8], &payload(prev, HELPERS, i)[..]);
                }
                helpers.into_iter().try_for_each(|h| h.join().expect("helper panicked"))
            })
        })
        .unwrap();
}

/// Rank 0 sends numbered messages (eager and rendezvous) and then one stop message per thread;
/// rank 1's threads race on `mprobe(ANY_SOURCE, ANY_TAG)` + receive. Every message must be
/// received exactly once, with its data, whichever thread got it.
#[test]
fn racing_matched_probes_never_share_a_message() {
    const MESSAGES: u64 = 300;
    const THREADS: usize = 4;
    const STOP: i32 = 9;
    tcp(2)
        .run(|world| {
            let handle = world.threaded()?;
            if world.rank() == 0 {
                for i in 0..MESSAGES {
                    world.send(&payload(0, 0, i), 1, (i % 3) as i32)?;
                }
                for _ in 0..THREADS {
                    world.send(&[0u8; 0], 1, STOP)?;
                }
                return Ok(());
            }
            let got = Mutex::new(Vec::new());
            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let (comm, got) = (handle.clone(), &got);
                    s.spawn(move || -> fastmp::Result<()> {
                        loop {
                            let (message, status) = comm.mprobe(ANY_SOURCE, ANY_TAG)?;
                            if status.tag == STOP {
                                comm.mrecv(&mut [0u8; 0], message)?;
                                return Ok(());
                            }
                            // Take turns between the receive forms.
                            let data = if t % 2 == 0 {
                                message.recv_vec::<u64>()?.0
                            } else {
                                let mut buf = vec![0u64; status.bytes / 8];
                                comm.mrecv(&mut buf, message)?;
                                buf
                            };
                            let i = (data[0] >> 20) & 0xFFFFF;
                            assert_eq!(data, payload(0, 0, i), "message {i}");
                            assert_eq!(status.tag, (i % 3) as i32);
                            got.lock().unwrap().push(i);
                        }
                    });
                }
            });
            let mut got = got.into_inner().unwrap();
            got.sort_unstable();
            assert_eq!(got, (0..MESSAGES).collect::<Vec<_>>(), "each message exactly once");
            Ok(())
        })
        .unwrap();
}

/// Threads receiving objects concurrently (`recv_obj` rests on the matched probe).
#[test]
fn concurrent_object_receives() {
    tcp(2)
        .run(|world| {
            let handle = world.threaded()?;
            if world.rank() == 0 {
                for i in 0..60u32 {
                    handle.send_obj(&(i, format!("message {i}")), 1, 4)?;
                }
                return Ok(());
            }
            let got = Mutex::new(Vec::new());
            std::thread::scope(|s| {
                for _ in 0..3 {
                    let (comm, got) = (handle.clone(), &got);
                    s.spawn(move || -> fastmp::Result<()> {
                        for _ in 0..20 {
                            let ((i, text), status): ((u32, String), _) = comm.recv_obj(0, 4)?;
                            assert_eq!((text, status.source), (format!("message {i}"), 0));
                            got.lock().unwrap().push(i);
                        }
                        Ok(())
                    });
                }
            });
            let mut got = got.into_inner().unwrap();
            got.sort_unstable();
            assert_eq!(got, (0..60).collect::<Vec<_>>());
            Ok(())
        })
        .unwrap();
}

/// A helper thread and the rank's own thread talk to each other through the rank itself, with
/// a synchronous send: the blocked side must not be declared deadlocked while another thread of
/// the rank can still send.
#[test]
fn threads_of_one_rank_talk_through_it() {
    tcp(2)
        .run(|world| {
            let handle = world.threaded()?;
            let me = world.rank();
            std::thread::scope(|s| {
                let helper = s.spawn(|| -> fastmp::Result<u64> {
                    let mut buf = [0u64; 2];
                    handle.recv(&mut buf, me, 1)?; // blocks until the rank's thread sends
                    handle.ssend(&[buf[0] + buf[1]], me, 2)?;
                    Ok(buf[0])
                });
                std::thread::sleep(std::time::Duration::from_millis(50));
                world.send(&[me as u64, 10], me, 1)?;
                let mut sum = [0u64];
                world.recv(&mut sum, me, 2)?;
                assert_eq!(sum[0], me as u64 + 10);
                assert_eq!(helper.join().expect("helper panicked")?, me as u64);
                Ok(())
            })
        })
        .unwrap();
}

/// A sub-communicator's handle uses its context and numbering.
#[test]
fn handle_of_a_split_communicator() {
    tcp(4)
        .run(|world| {
            let sub = world.split(Some((world.rank() / 2) as u32), 0)?.expect("every rank has a colour");
            let handle = sub.threaded()?;
            let (peer, me) = (1 - handle.rank(), world.rank());
            let got = std::thread::scope(|s| {
                s.spawn(|| {
                    let mut got = [0u32];
                    let status = handle.sendrecv(&[me as u32], peer, 0, &mut got, ANY_SOURCE, 0)?;
                    assert_eq!(status.source, peer);
                    Ok::<_, Error>(got[0])
                })
                .join()
                .expect("helper panicked")
            })?;
            assert_eq!(got as usize, world.rank() ^ 1);
            Ok(())
        })
        .unwrap();
}

/// A handle that outlives its rank fails cleanly instead of hanging.
#[test]
fn handle_after_the_rank_ended() {
    let handles = tcp(2).run(|world| world.threaded()).unwrap();
    for handle in handles {
        assert!(matches!(handle.send(&[1u8], 0, 0), Err(Error::Finalized(_))));
        assert!(matches!(handle.recv(&mut [0u8], ANY_SOURCE, 0), Err(Error::Finalized(_))));
    }
}

/// Argument errors name the call and the argument.
#[test]
fn handle_argument_errors() {
    tcp(2)
        .run(|world| {
            let handle = world.threaded()?;
            let err = handle.send(&[1u8], 2, 0).unwrap_err().to_string();
            assert!(err.contains("ThreadComm::send") && err.contains("destination rank 2"), "{err}");
            let err = handle.recv(&mut [0u8], 0, -5).unwrap_err().to_string();
            assert!(err.contains("ThreadComm::recv") && err.contains("tag -5"), "{err}");
            // PROC_NULL: nothing is sent, a receive completes at once.
            handle.send(&[1u8], fastmp::PROC_NULL, 0)?;
            let status = handle.recv(&mut [0u8; 4], fastmp::PROC_NULL, 0)?;
            assert_eq!((status.source, status.bytes), (fastmp::PROC_NULL, 0));
            Ok(())
        })
        .unwrap();
}

/// shm endpoints belong to their rank's thread: the level is `Funneled` and asking for a handle
/// is an error that says what to do.
#[test]
fn shm_is_funneled_and_has_no_handles() {
    fastmp::run(2, |world| {
        assert_eq!(world.thread_level(), ThreadLevel::Funneled);
        let err = world.threaded().unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        assert!(text.contains("Comm::threaded") && text.contains("shm") && text.contains("DeviceKind::Tcp"), "{text}");
        Ok(())
    })
    .unwrap();
}
