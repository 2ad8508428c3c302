//! Traces (`Config::trace`, `FASTMP_TRACE`): a small job's trace file is parsed back and its
//! events checked: ranks, peers, tags, bytes, collective names and algorithms, and the wait of
//! a rank that another made wait.

use std::path::PathBuf;
use std::time::Duration;

use fastmp::coll::Collective;
use fastmp::{Config, DeviceKind};
use serde_json::Value;

fn trace_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("fastmp-trace-{name}-{}.json", std::process::id()))
}

/// The complete (`"ph": "X"`) events of a trace file.
fn events(path: &PathBuf) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("the job wrote its trace");
    let doc: Value = serde_json::from_str(&text).expect("the trace is JSON");
    let list = doc["traceEvents"].as_array().expect("a traceEvents list").clone();
    list.into_iter().filter(|e| e["ph"] == "X").collect()
}

/// Events of rank `tid` named `name`.
fn named<'a>(events: &'a [Value], tid: u64, name: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["tid"].as_u64() == Some(tid) && e["name"] == name).collect()
}

/// Rank 1 sends after a pause (so rank 0's receive waits), then both run a bcast from root 1, an
/// allreduce and a nonblocking exchange; returns, per rank, the algorithms selection gives.
fn traced_job(config: Config) -> Vec<(String, String)> {
    config
        .np(2)
        .run(|world| {
            let rank = world.rank();
            world.barrier()?;
            if rank == 1 {
                std::thread::sleep(Duration::from_millis(100));
                world.send(&[7u8; 16], 0, 7)?;
            } else {
                let mut buf = [0u8; 16];
                world.recv(&mut buf, 1, 7)?;
            }
            let mut data = [rank as u32; 8];
            world.bcast(&mut data, 1)?;
            let mut sum = [0u64; 4];
            world.allreduce(&[1u64; 4], &mut sum, fastmp::op::Sum)?;
            assert_eq!(sum, [2; 4]);
            let peer = 1 - rank;
            let mut inc = [0u16; 3];
            world.scope(|s| {
                let r = s.irecv(&mut inc, peer, 9)?;
                let w = s.isend(&[5u16; 3], peer, 9)?;
                w.wait()?;
                r.wait()
            })?;
            let bcast = world.algorithm_for(Collective::Bcast, 32, true).name().to_string();
            let allreduce = world.algorithm_for(Collective::Allreduce, 32, true).name().to_string();
            Ok((bcast, allreduce))
        })
        .expect("the traced job runs")
}

fn check(path: &PathBuf, algorithms: &[(String, String)]) {
    let events = events(path);
    // Each rank is its own row.
    for tid in [0, 1] {
        assert!(!named(&events, tid, "barrier").is_empty(), "rank {tid} records its barrier");
    }
    let sends = named(&events, 1, "send");
    assert_eq!(sends.len(), 1, "rank 1's one blocking send: {sends:?}");
    assert_eq!((sends[0]["args"]["peer"].as_u64(), sends[0]["args"]["tag"].as_i64()), (Some(0), Some(7)));
    assert_eq!(sends[0]["args"]["bytes"].as_u64(), Some(16));
    let recvs = named(&events, 0, "recv");
    assert_eq!(recvs.len(), 1, "rank 0's one blocking receive: {recvs:?}");
    assert_eq!((recvs[0]["args"]["peer"].as_u64(), recvs[0]["args"]["tag"].as_i64()), (Some(1), Some(7)));
    // Rank 1 slept before sending: rank 0's receive waited on it.
    let waits: Vec<_> = named(&events, 0, "wait").into_iter().filter(|e| e["args"]["on"] == "recv").collect();
    assert!(
        waits.iter().any(|e| e["args"]["peer"].as_u64() == Some(1) && e["args"]["tag"].as_i64() == Some(7)),
        "rank 0 records waiting for rank 1's tag 7: {waits:?}"
    );
    for (tid, (bcast, allreduce)) in algorithms.iter().enumerate() {
        let tid = tid as u64;
        let b = named(&events, tid, "bcast");
        assert_eq!(b.len(), 1, "rank {tid}: one bcast");
        assert_eq!(b[0]["args"]["root"].as_u64(), Some(1));
        assert_eq!(b[0]["args"]["bytes"].as_u64(), Some(32));
        assert_eq!(b[0]["args"]["algorithm"].as_str(), Some(bcast.as_str()));
        assert_eq!(b[0]["cat"], "collective");
        let a = named(&events, tid, "allreduce");
        assert_eq!(a.len(), 1, "rank {tid}: one allreduce");
        assert_eq!(a[0]["args"]["algorithm"].as_str(), Some(allreduce.as_str()));
        assert_eq!(a[0]["args"]["bytes"].as_u64(), Some(32));
        let peer = 1 - tid;
        let isend = named(&events, tid, "isend");
        assert_eq!(isend.len(), 1);
        assert_eq!((isend[0]["args"]["peer"].as_u64(), isend[0]["args"]["bytes"].as_u64()), (Some(peer), Some(6)));
        let irecv = named(&events, tid, "irecv");
        assert_eq!(irecv.len(), 1);
        assert_eq!((irecv[0]["args"]["peer"].as_u64(), irecv[0]["args"]["tag"].as_i64()), (Some(peer), Some(9)));
    }
    for e in &events {
        assert!(e["ts"].as_f64().is_some() && e["dur"].as_f64().is_some_and(|d| d >= 0.0), "timed: {e}");
    }
}

#[test]
fn shm_trace_names_peers_collectives_and_waits() {
    let path = trace_path("shm");
    let algorithms = traced_job(Config::new().trace(&path));
    check(&path, &algorithms);
    std::fs::remove_file(&path).ok();
}

#[test]
fn tcp_trace_names_peers_collectives_and_waits() {
    let path = trace_path("tcp");
    let algorithms = traced_job(Config::new().device(DeviceKind::Tcp).trace(&path));
    check(&path, &algorithms);
    std::fs::remove_file(&path).ok();
}

#[test]
fn untraced_job_writes_nothing() {
    let path = trace_path("untraced");
    std::fs::remove_file(&path).ok();
    fastmp::run(2, |world| world.barrier()).unwrap();
    assert!(!path.exists());
}

#[test]
fn merge_joins_rank_files_and_names_missing_ranks() {
    let path = trace_path("merge");
    for rank in 0..2u64 {
        let doc = serde_json::json!({"traceEvents": [
            {"name": "send", "ph": "X", "pid": 10 + rank, "tid": rank, "ts": 1.0, "dur": 2.0, "args": {"peer": 1 - rank}}
        ]});
        std::fs::write(fastmp::trace_rank_file(&path, rank as usize), doc.to_string()).unwrap();
    }
    fastmp::merge_trace_files(&path, 2).unwrap();
    let merged = events(&path);
    let tids: Vec<_> = merged.iter().map(|e| e["tid"].as_u64().unwrap()).collect();
    assert_eq!(tids, [0, 1]);
    assert!(!fastmp::trace_rank_file(&path, 0).exists(), "merged rank files are removed");
    let err = fastmp::merge_trace_files(&path, 3).unwrap_err().to_string();
    assert!(err.contains("[0, 1, 2]"), "{err}");
    std::fs::remove_file(&path).ok();
}
