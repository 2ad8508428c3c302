//! Tiny end-to-end exchanges through the public API on two ranks, small enough to run under Miri
//! (`scripts/miri.sh`): eager (inline and spilled), rendezvous (sender first), receiver-first
//! direct copy, a synchronous send, and requests leaked with `mem::forget` (the scope must release
//! them: the send's data is detached, the receive cancelled).

use fastmp::{ANY_SOURCE, ANY_TAG, Comm, Config, Result};

/// Eager limit small enough that a 200-byte message is a rendezvous.
const EAGER: usize = 64;
const BIG: usize = 200;

fn job(f: impl Fn(Comm) -> Result<()> + Sync) {
    Config::new().np(2).eager_limit(EAGER).run(f).expect("job");
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8).wrapping_mul(3)).collect()
}

#[test]
fn eager_inline_spilled_and_synchronous() {
    job(|world| {
        if world.rank() == 0 {
            world.send(&pattern(1, 8), 1, 1)?;
            world.send(&pattern(2, 40), 1, 2)?;
            world.send::<u8>(&[], 1, 3)?;
            world.ssend(&pattern(4, 16), 1, 4)?;
        } else {
            let mut buf = [0u8; 64];
            let st = world.recv(&mut buf, 0, 1)?;
            assert_eq!(&buf[..st.count], &pattern(1, 8)[..]);
            // Wildcards; the spilled payload arrives intact.
            let st = world.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
            assert_eq!((st.source, st.tag), (0, 2));
            assert_eq!(&buf[..st.count], &pattern(2, 40)[..]);
            assert_eq!(world.recv(&mut buf, 0, 3)?.count, 0);
            let st = world.recv(&mut buf, 0, 4)?;
            assert_eq!(&buf[..st.count], &pattern(4, 16)[..]);
        }
        Ok(())
    });
}

#[test]
fn rendezvous_sender_first() {
    job(|world| {
        if world.rank() == 0 {
            world.send(&pattern(5, BIG), 1, 9)?;
        } else {
            // Wait until the ready-to-send is here, so the receive finds it as unexpected.
            let st = world.probe(0, 9)?;
            assert_eq!(st.bytes, BIG);
            let mut buf = vec![0u8; BIG];
            world.recv(&mut buf, 0, 9)?;
            assert_eq!(buf, pattern(5, BIG));
        }
        Ok(())
    });
}

#[test]
fn receiver_first_direct_copy() {
    job(|world| {
        if world.rank() == 0 {
            // Send only once the receive is posted: the sender copies straight into it.
            world.recv(&mut [0u8; 1], 1, 100)?;
            world.send(&pattern(6, BIG), 1, 10)?;
        } else {
            let mut buf = vec![0u8; BIG];
            world.scope(|s| {
                let req = s.irecv(&mut buf, 0, 10)?;
                world.send(&[1u8], 0, 100)?;
                let st = req.wait()?;
                assert_eq!((st.source, st.tag, st.count), (0, 10, BIG));
                Ok::<_, fastmp::Error>(())
            })?;
            assert_eq!(buf, pattern(6, BIG));
        }
        Ok(())
    });
}

#[test]
fn forgotten_requests_are_released_by_the_scope() {
    job(|world| {
        if world.rank() == 0 {
            let mut big = pattern(7, BIG);
            world.scope(|s| {
                let req = s.isend(&big, 1, 20)?;
                // Leaked: the scope's end must detach the data before the buffer is reused.
                std::mem::forget(req);
                Ok::<_, fastmp::Error>(())
            })?;
            big.fill(0xEE);
            drop(big);
            world.send(&[1u8], 1, 21)?;
            // The receiver's leaked receive was cancelled; this message needs a new one.
            world.recv(&mut [0u8; 1], 1, 22)?;
            world.send(&pattern(8, 16), 1, 23)?;
        } else {
            world.recv(&mut [0u8; 1], 0, 21)?;
            let mut buf = vec![0u8; BIG];
            world.recv(&mut buf, 0, 20)?;
            assert_eq!(buf, pattern(7, BIG), "detached data");
            let mut leaked = [0u8; 16];
            world.scope(|s| {
                std::mem::forget(s.irecv(&mut leaked, 0, 23)?);
                Ok::<_, fastmp::Error>(())
            })?;
            world.send(&[1u8], 0, 22)?;
            let mut fresh = [0u8; 16];
            world.recv(&mut fresh, 0, 23)?;
            assert_eq!(&fresh[..], &pattern(8, 16)[..]);
            assert_eq!(leaked, [0u8; 16], "a released receive must not be written");
        }
        Ok(())
    });
}
