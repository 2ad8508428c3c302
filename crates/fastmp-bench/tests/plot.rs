//! `fastmp-bench plot`: a fixed input file gives one SVG per benchmark with a curve per series
//! and, where an `mpi` series exists, a ratio curve per other series.

use std::path::Path;
use std::process::Command;

const BENCH: &str = env!("CARGO_BIN_EXE_fastmp-bench");

fn plot(input: &Path, out: &Path) -> std::process::Output {
    Command::new(BENCH).arg("plot").arg("--input").arg(input).arg("--out").arg(out).output().expect("fastmp-bench runs")
}

/// Polylines drawn as curves (stroke width 2).
fn curves(svg: &str) -> usize {
    svg.split("<polyline")
        .skip(1)
        .filter(|element| element.split('>').next().unwrap().contains("stroke-width=\"2\""))
        .count()
}

#[test]
fn fixed_points_give_one_svg_per_benchmark() {
    let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/plot_points.jsonl");
    let out = std::env::temp_dir().join(format!("fastmp-plot-test-{}", std::process::id()));
    let output = plot(&input, &out);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

    let latency = std::fs::read_to_string(out.join("latency.svg")).expect("latency.svg");
    assert!(latency.starts_with("<svg") && latency.trim_end().ends_with("</svg>"), "an SVG document");
    for name in ["fastmp", "mpi", "hybrid", "fastmp / mpi", "hybrid / mpi", "Test CPU 3000", "np=2"] {
        assert!(latency.contains(name), "latency.svg names {name:?}");
    }
    // Three value curves and two ratio curves, each drawn once and once more in its legend
    // (axis ticks are thinner polylines).
    assert_eq!(curves(&latency), 2 * (3 + 2), "{latency}");

    // No mpi series: the values alone, no ratio panel.
    let bw = std::fs::read_to_string(out.join("bw.svg")).expect("bw.svg");
    assert_eq!(curves(&bw), 2);
    assert!(bw.contains("higher is better") && !bw.contains("ratio"));
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 2, "one file per benchmark");
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn bad_input_is_an_error_not_an_empty_plot() {
    let dir = std::env::temp_dir().join(format!("fastmp-plot-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("points.jsonl");
    std::fs::write(&input, "{\"bench\":\"bw\",\"series\":\"fastmp\",\"size\":\"eight\",\"value\":1}\n").unwrap();
    let output = plot(&input, &dir.join("out"));
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("size is not a byte count"));
    std::fs::write(&input, "nothing here\n").unwrap();
    let output = plot(&input, &dir.join("out"));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no points"));
    std::fs::remove_dir_all(&dir).ok();
}
