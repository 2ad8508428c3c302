//! `fastmp-bench plot --input F... --out DIR`: one SVG per benchmark from measured series,
//! fastmp beside the system MPI (what `bench/compare.sh --plot DIR` saves and draws).
//!
//! Input: JSON lines, one point each (other lines are skipped):
//! `{"bench":"latency","series":"fastmp","size":8,"value":0.15,"metric":"avg_us",
//!   "lower_is_better":true,"np":2,"device":"shm","cpu":"Intel Xeon ..."}`
//! `series` names a curve (`fastmp`, `mpi`, `hybrid`, ...); `value` is its median at `size`
//! bytes; `np`, `device` and `cpu` go into the title. Each benchmark's chart shows every series
//! against log2 of the size (size 0 drawn at -1) on a log scale, and under it each series'
//! ratio to `mpi` when there is an `mpi` series.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Parser;
use plotters::prelude::*;
use serde_json::Value;

/// The series the others are divided by in the ratio panel.
const REFERENCE: &str = "mpi";
const WIDTH: u32 = 900;
const HEIGHT: u32 = 720;
/// Height of the value panel when a ratio panel follows.
const VALUE_PANEL: u32 = 470;

#[derive(Parser, Debug)]
#[command(name = "fastmp-bench plot", about = "Draws one SVG per benchmark from measured series")]
struct PlotArgs {
    /// JSON-lines files of points (see the module documentation); may be repeated.
    #[arg(long, required = true)]
    input: Vec<PathBuf>,
    /// Directory for the SVGs (`<bench>.svg`), created if missing.
    #[arg(long)]
    out: PathBuf,
}

/// One benchmark's measurements.
#[derive(Debug, Default)]
struct Chart {
    metric: String,
    lower_is_better: bool,
    np: Option<u64>,
    device: Option<String>,
    cpu: Option<String>,
    /// Series name -> size -> value.
    series: BTreeMap<String, BTreeMap<u64, f64>>,
}

/// Runs `fastmp-bench plot ARGS` (the words after `plot`).
pub fn main(args: Vec<String>) -> Result<(), String> {
    let args = PlotArgs::try_parse_from(std::iter::once("fastmp-bench plot".to_string()).chain(args))
        .map_err(|e| e.to_string())?;
    let mut charts = BTreeMap::new();
    for input in &args.input {
        let text = std::fs::read_to_string(input).map_err(|e| format!("{}: {e}", input.display()))?;
        read_points(&text, &mut charts).map_err(|e| format!("{}: {e}", input.display()))?;
    }
    if charts.is_empty() {
        return Err("no points in the input (see `fastmp-bench plot --help`)".into());
    }
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    for (bench, chart) in &charts {
        let path = args.out.join(format!("{}.svg", file_stem(bench)));
        let svg = draw(bench, chart)?;
        std::fs::write(&path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("fastmp-bench plot: wrote {}", path.display());
    }
    Ok(())
}

/// Adds the points of `text` (JSON lines) to `charts`, by benchmark.
fn read_points(text: &str, charts: &mut BTreeMap<String, Chart>) -> Result<(), String> {
    for (number, line) in text.lines().enumerate() {
        let Ok(Value::Object(point)) = serde_json::from_str::<Value>(line) else { continue };
        let field = |key: &str| point.get(key).ok_or_else(|| format!("line {}: no \"{key}\"", number + 1));
        let text_of = |key: &str| field(key).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
        let bench = text_of("bench")?;
        let series = text_of("series")?;
        let size = field("size")?.as_u64().ok_or_else(|| format!("line {}: size is not a byte count", number + 1))?;
        let value = field("value")?.as_f64().ok_or_else(|| format!("line {}: value is not a number", number + 1))?;
        let chart = charts.entry(bench).or_default();
        if chart.metric.is_empty() {
            chart.metric = text_of("metric").unwrap_or_else(|_| "value".into());
            chart.lower_is_better = point.get("lower_is_better").and_then(Value::as_bool).unwrap_or(true);
        }
        chart.np = chart.np.or_else(|| point.get("np").and_then(Value::as_u64));
        chart.device = chart.device.take().or_else(|| point.get("device").and_then(Value::as_str).map(String::from));
        chart.cpu = chart.cpu.take().or_else(|| point.get("cpu").and_then(Value::as_str).map(String::from));
        chart.series.entry(series).or_default().insert(size, value);
    }
    Ok(())
}

/// A file name for `bench`: its letters, digits, `-` and `_`.
fn file_stem(bench: &str) -> String {
    bench.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// The x coordinate of `size`: log2, with 0 bytes at -1.
fn x_of(size: u64) -> f64 {
    if size == 0 { -1.0 } else { (size as f64).log2() }
}

/// `2^x` as a size label (`0`, `512`, `4K`, `1M`).
fn size_label(x: &f64) -> String {
    if *x < -0.5 {
        return "0".into();
    }
    let bytes = 2f64.powf(x.round()) as u64;
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

fn color_of(index: usize, name: &str) -> RGBColor {
    match name {
        "fastmp" => RGBColor(31, 119, 180),
        "mpi" => RGBColor(214, 39, 40),
        "hybrid" => RGBColor(44, 160, 44),
        _ => {
            let c = Palette99::pick(index + 3).to_rgba();
            RGBColor(c.0, c.1, c.2)
        }
    }
}

fn plot_error<E: std::fmt::Debug>(e: E) -> String {
    format!("drawing failed: {e:?}")
}

/// The range `lo..hi` widened by `pad` of its width (or by 1 when empty).
fn padded(lo: f64, hi: f64, pad: f64) -> std::ops::Range<f64> {
    let width = if hi > lo { hi - lo } else { 1.0 };
    (lo - width * pad)..(hi + width * pad)
}

/// The chart of one benchmark as an SVG document.
fn draw(bench: &str, chart: &Chart) -> Result<String, String> {
    let points: Vec<(&String, Vec<(f64, f64)>)> = chart
        .series
        .iter()
        .map(|(name, values)| (name, values.iter().filter(|&(_, &v)| v > 0.0).map(|(&s, &v)| (x_of(s), v)).collect()))
        .collect();
    let all = || points.iter().flat_map(|(_, p)| p.iter());
    let (x_lo, x_hi) = all().fold((f64::MAX, f64::MIN), |(lo, hi), &(x, _)| (lo.min(x), hi.max(x)));
    let (y_lo, y_hi) = all().fold((f64::MAX, f64::MIN), |(lo, hi), &(_, y)| (lo.min(y), hi.max(y)));
    if x_lo > x_hi {
        return Err(format!("{bench}: no positive values to draw"));
    }
    let ratios = ratio_series(chart);
    let mut title = format!(
        "{bench}: np={}, {}",
        chart.np.map_or("?".into(), |n| n.to_string()),
        chart.device.as_deref().unwrap_or("?")
    );
    if let Some(cpu) = &chart.cpu {
        title += &format!(" — {cpu}");
    }
    let better = if chart.lower_is_better { "lower is better" } else { "higher is better" };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let root = root.titled(&title, ("sans-serif", 16)).map_err(plot_error)?;
        let (upper, lower) = if ratios.is_empty() {
            (root.clone(), None)
        } else {
            let (u, l) = root.split_vertically(VALUE_PANEL);
            (u, Some(l))
        };
        let x_range = padded(x_lo, x_hi, 0.02);
        let mut values = ChartBuilder::on(&upper)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(x_range.clone(), (y_lo * 0.8..y_hi * 1.25).log_scale())
            .map_err(plot_error)?;
        values
            .configure_mesh()
            .x_desc("message size (bytes, log2 scale)")
            .y_desc(format!("{} ({better})", chart.metric))
            .x_label_formatter(&size_label)
            .draw()
            .map_err(plot_error)?;
        for (index, (name, series)) in points.iter().enumerate() {
            let color = color_of(index, name);
            values
                .draw_series(LineSeries::new(series.iter().copied(), color.stroke_width(2)).point_size(3))
                .map_err(plot_error)?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        values
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
        if let Some(lower) = lower {
            let (r_lo, r_hi) = ratios
                .iter()
                .flat_map(|(_, p)| p.iter())
                .fold((1.0f64, 1.0f64), |(lo, hi), &(_, r)| (lo.min(r), hi.max(r)));
            let mut ratio = ChartBuilder::on(&lower)
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(70)
                .build_cartesian_2d(x_range.clone(), padded(r_lo, r_hi, 0.08))
                .map_err(plot_error)?;
            ratio
                .configure_mesh()
                .x_desc("message size (bytes, log2 scale)")
                .y_desc(format!("ratio to {REFERENCE} ({better})"))
                .x_label_formatter(&size_label)
                .draw()
                .map_err(plot_error)?;
            let one = [(x_range.start, 1.0), (x_range.end, 1.0)];
            ratio.draw_series(LineSeries::new(one, BLACK.mix(0.5).stroke_width(1))).map_err(plot_error)?;
            for (name, series) in &ratios {
                let index = points.iter().position(|(n, _)| *n == name).unwrap_or(0);
                let color = color_of(index, name);
                ratio
                    .draw_series(LineSeries::new(series.iter().copied(), color.stroke_width(2)).point_size(3))
                    .map_err(plot_error)?
                    .label(format!("{name} / {REFERENCE}"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            }
            ratio
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(plot_error)?;
        }
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// Each series other than the reference divided by the reference, at the sizes both have.
fn ratio_series(chart: &Chart) -> Vec<(String, Vec<(f64, f64)>)> {
    let Some(reference) = chart.series.get(REFERENCE) else { return Vec::new() };
    chart
        .series
        .iter()
        .filter(|(name, _)| name.as_str() != REFERENCE)
        .map(|(name, values)| {
            let points = values
                .iter()
                .filter_map(|(size, v)| reference.get(size).filter(|&&r| r > 0.0).map(|r| (x_of(*size), v / r)))
                .collect();
            (name.clone(), points)
        })
        .filter(|(_, points): &(String, Vec<_>)| !points.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_labelled_in_binary_units() {
        assert_eq!([-1.0, 3.0, 12.0, 20.0].map(|x| size_label(&x)), ["0", "8", "4K", "1M"]);
    }

    #[test]
    fn ratios_use_the_sizes_both_sides_have() {
        let mut charts = BTreeMap::new();
        let text = r#"{"bench":"bw","series":"fastmp","size":8,"value":4.0}
{"bench":"bw","series":"mpi","size":8,"value":2.0}
{"bench":"bw","series":"fastmp","size":16,"value":4.0}"#;
        read_points(text, &mut charts).unwrap();
        assert_eq!(ratio_series(&charts["bw"]), [("fastmp".to_string(), vec![(3.0, 2.0)])]);
    }
}
