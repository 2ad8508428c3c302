//! Output in the OSU Micro-Benchmarks table format, or one JSON object per line.

use serde_json::json;

/// OSU version whose methodology and columns we follow.
pub const OSU_VERSION: &str = "7.4";

pub struct Reporter {
    pub bench: &'static str,
    pub device: &'static str,
    pub np: usize,
    pub json: bool,
    /// Only rank 0 prints.
    pub printer: bool,
    /// Whether rows have a size (table column and JSON key); OSU's osu_ibarrier has none.
    pub sized: bool,
}

impl Reporter {
    /// Prints the OSU header lines (nothing in JSON mode).
    pub fn header(&self, title: &str, extra: &[String], columns: &[&str]) {
        if self.json || !self.printer {
            return;
        }
        println!("# fastmp {title} v{OSU_VERSION} (OSU methodology, device {}, np {})", self.device, self.np);
        for line in extra {
            println!("{line}");
        }
        let mut head = if self.sized { format!("{:<10}", "# Size") } else { String::new() };
        for c in columns {
            head.push_str(&format!("{c:>20}"));
        }
        if !self.sized {
            // Without a size column the line starts with a padded column name: mark it a comment.
            head.replace_range(..1, "#");
        }
        println!("{head}");
    }

    /// One row of numbers: `values` are (json key, value) pairs in column order.
    pub fn row(&self, size: usize, values: &[(&str, f64)]) {
        let cells: Vec<(&str, Cell)> = values.iter().map(|&(key, v)| (key, Cell::Num(v))).collect();
        self.row_cells(size, &cells);
    }

    /// One row of numbers and labels: (json key, cell) pairs in column order (`size` is left out
    /// when the table has no size column).
    pub fn row_cells(&self, size: usize, cells: &[(&str, Cell)]) {
        if !self.printer {
            return;
        }
        if self.json {
            let mut obj = serde_json::Map::new();
            obj.insert("bench".into(), json!(self.bench));
            obj.insert("device".into(), json!(self.device));
            obj.insert("np".into(), json!(self.np));
            if self.sized {
                obj.insert("size".into(), json!(size));
            }
            for (key, cell) in cells {
                let value = match cell {
                    Cell::Num(v) | Cell::JsonNum(v) => {
                        let digits = if key.ends_with("_us") { 3 } else { 2 };
                        let scale = 10f64.powi(digits);
                        json!((v * scale).round() / scale)
                    }
                    Cell::Int(n) => json!(n),
                    Cell::Text(t) | Cell::JsonText(t) => json!(t),
                };
                obj.insert((*key).into(), value);
            }
            println!("{}", serde_json::Value::Object(obj));
        } else {
            let mut line = if self.sized { format!("{size:<10}") } else { String::new() };
            for (_, cell) in cells {
                match cell {
                    Cell::Num(v) => line.push_str(&format!("{v:>20.2}")),
                    Cell::Text(t) => line.push_str(&format!("{t:>20}")),
                    Cell::Int(n) => line.push_str(&format!("{n:>20}")),
                    Cell::JsonNum(_) | Cell::JsonText(_) => {}
                }
            }
            println!("{line}");
        }
    }
}

/// One table cell / JSON value of a row.
pub enum Cell<'a> {
    Num(f64),
    /// A count (an integer in JSON).
    Int(u64),
    Text(&'a str),
    /// A number in the JSON object only, not in the table.
    JsonNum(f64),
    /// A label in the JSON object only (the table says it in its header).
    JsonText(&'a str),
}
