//! The examples' algorithms at small sizes on 1–4 thread ranks (and on the tcp device), each
//! checked by the example itself against its serial computation. The sizes are not multiples
//! of the grid's shape, and at 4 ranks some blocks are one row wide.
//!
//! Each example is included as a module; its `main` and command-line code are unused here, and
//! each brings its own copy of the modules the examples share (`examples/common/`), as its
//! binary needs them.
#![allow(clippy::duplicate_mod)]

#[allow(dead_code)]
#[path = "../examples/heat.rs"]
mod heat;
#[allow(dead_code)]
#[path = "../examples/redblack.rs"]
mod redblack;
#[allow(dead_code)]
#[path = "../examples/transpose.rs"]
mod transpose;

use fastmp::{Config, DeviceKind};

/// Runs `f` on `np` thread ranks of `device` and returns rank 0's result after checking that
/// every rank returned the same.
fn on<R: Send + PartialEq + std::fmt::Debug>(
    device: DeviceKind,
    np: usize,
    f: impl Fn(&fastmp::Comm) -> fastmp::Result<R> + Sync,
) -> R {
    let mut results = Config::new().device(device).np(np).run(|world| f(&world)).unwrap_or_else(|e| panic!("{e}"));
    assert!(results.windows(2).all(|w| w[0] == w[1]), "ranks disagree: {results:?}");
    results.swap_remove(0)
}

#[test]
fn heat_equals_the_serial_stencil() {
    for (rows, cols) in [(13, 9), (5, 22), (3, 3)] {
        let params = heat::Params { rows, cols, steps: 6 };
        for np in 1..=4 {
            let check = on(DeviceKind::Shm, np, |world| Ok(heat::run(world, &params)?.check));
            assert!(check.exact(), "heat {rows}x{cols} np {np}: {check:?}");
        }
    }
}

#[test]
fn heat_changes_the_field() {
    // The check would be empty if the stencil did nothing.
    let params = heat::Params { rows: 9, cols: 8, steps: 3 };
    let before = heat::serial(&heat::Params { steps: 0, ..params });
    assert_ne!(heat::serial(&params), before);
}

#[test]
fn redblack_equals_the_serial_relaxation() {
    for (rows, cols) in [(17, 12), (6, 31), (4, 4)] {
        let params = redblack::Params { rows, cols, iterations: 5 };
        for np in 1..=4 {
            let check = on(DeviceKind::Shm, np, |world| Ok(redblack::run(world, &params)?.check));
            assert!(check.exact(), "redblack {rows}x{cols} np {np}: {check:?}");
        }
    }
}

#[test]
fn redblack_converges_to_the_harmonic_solution() {
    // A linear boundary is harmonic, so relaxation must approach the same plane inside.
    let params = redblack::Params { rows: 12, cols: 10, iterations: 400 };
    let field = redblack::serial(&params);
    let plane = |i: usize, j: usize| (i + 2 * j) as f64 / 22.0;
    let worst = field.indexed_iter().map(|((i, j), &x)| (x - plane(i, j)).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-9, "off the harmonic solution by {worst}");
}

#[test]
fn transpose_equals_the_serial_transpose() {
    for (rows, cols) in [(11, 7), (7, 40), (1, 5), (70, 33)] {
        let params = transpose::Params { rows, cols, repeat: 2 };
        for np in 1..=4 {
            let check = on(DeviceKind::Shm, np, |world| Ok(transpose::run(world, &params)?.check));
            assert!(check.exact(), "transpose {rows}x{cols} np {np}: {check:?}");
        }
    }
}

#[test]
fn examples_run_on_tcp() {
    let check =
        on(DeviceKind::Tcp, 3, |world| Ok(heat::run(world, &heat::Params { rows: 10, cols: 7, steps: 4 })?.check));
    assert!(check.exact(), "heat on tcp: {check:?}");
    let params = redblack::Params { rows: 9, cols: 11, iterations: 3 };
    let check = on(DeviceKind::Tcp, 3, |world| Ok(redblack::run(world, &params)?.check));
    assert!(check.exact(), "redblack on tcp: {check:?}");
    let params = transpose::Params { rows: 13, cols: 6, repeat: 2 };
    let check = on(DeviceKind::Tcp, 3, |world| Ok(transpose::run(world, &params)?.check));
    assert!(check.exact(), "transpose on tcp: {check:?}");
}

#[test]
fn zero_sizes_are_refused_on_every_rank() {
    let refused =
        |r: fastmp::Result<()>| matches!(r, Err(fastmp::Error::InvalidArgument(m)) if m.contains("must be at least 1"));
    let results = fastmp::run(2, |world| {
        Ok([
            refused(heat::run(&world, &heat::Params { rows: 0, cols: 4, steps: 1 }).map(drop)),
            refused(redblack::run(&world, &redblack::Params { rows: 4, cols: 0, iterations: 1 }).map(drop)),
            refused(transpose::run(&world, &transpose::Params { rows: 0, cols: 0, repeat: 1 }).map(drop)),
        ])
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(results.iter().all(|r| r.iter().all(|&ok| ok)), "{results:?}");
}

#[test]
fn the_readme_shows_the_crate_docs_example() {
    // The README's example cannot run as a doctest of fastmp (which includes the README), so it
    // is the crate docs' schedule example, which runs as a doctest here; keep them the same.
    let readme = include_str!("../../../README.md");
    let shown = readme
        .split_once("## Distributed arrays (fastmp-darray)")
        .and_then(|(_, section)| section.split_once("```rust,ignore\n"))
        .and_then(|(_, block)| block.split_once("```"))
        .map(|(code, _)| code.lines().collect::<Vec<_>>())
        .unwrap_or_default();
    let docs: Vec<&str> = include_str!("../src/lib.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(|line| line.strip_prefix(' ').unwrap_or(line))
        .collect();
    let tested = docs
        .split(|line| line.starts_with("```"))
        .find(|block| block.iter().any(|line| line.contains("RemapSchedule::build")))
        .map(|block| block.iter().copied().filter(|line| !line.starts_with("# ")).collect::<Vec<_>>())
        .unwrap_or_default();
    assert!(!shown.is_empty(), "the README's fastmp-darray section has no rust,ignore example");
    assert_eq!(shown, tested, "the README's example differs from the crate docs' doctest");
}
