//! `--plot FILE.svg|.png`: throughput (IOPS) against the swept parameter,
//! one line per system and driver.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::BenchResult;
use crate::size::fmt_bytes;

/// Where a TrueType font is looked for (plotters measures and draws text
/// with it); `OVERLAP_PLOT_FONT` comes first.
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

fn load_font() -> Result<()> {
    static LOADED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let mut candidates: Vec<PathBuf> = Vec::new();
            if let Some(p) = std::env::var_os("OVERLAP_PLOT_FONT") {
                candidates.push(p.into());
            }
            candidates.extend(FONT_CANDIDATES.iter().map(PathBuf::from));
            for p in &candidates {
                if let Ok(bytes) = std::fs::read(p) {
                    // Registered once for the life of the process.
                    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                    if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                        .is_ok()
                    {
                        return Ok(());
                    }
                }
            }
            Err(format!(
                "--plot needs a TrueType font to draw text and found none (looked at {}); \
                 install one (`apt-get install fonts-dejavu-core`) or set OVERLAP_PLOT_FONT=/path/to/font.ttf",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// The x value of a result for the swept parameter.
fn x_label(r: &BenchResult, swept: Option<&str>) -> String {
    match swept {
        Some("concurrency") | Some("iodepth") => r.in_flight().to_string(),
        Some("bs") => fmt_bytes(r.bs),
        Some("prealloc") => if r.prealloc {
            "preallocated"
        } else {
            "growing"
        }
        .into(),
        _ => r.driver.clone(),
    }
}

/// The label of one bar: the system and driver, and for write jobs the file.
fn bar_label(r: &BenchResult, swept: Option<&str>) -> String {
    match swept {
        Some("prealloc") => format!(
            "{} {}",
            r.system,
            if r.prealloc {
                "preallocated"
            } else {
                "growing"
            }
        ),
        _ => format!("{} {}", r.system, r.driver),
    }
}

fn x_title(swept: Option<&str>) -> &'static str {
    match swept {
        Some("concurrency") | Some("iodepth") => "operations in flight (concurrency x iodepth)",
        Some("bs") => "block size",
        Some("prealloc") => "system and file",
        _ => "system and driver",
    }
}

/// A line of a numeric sweep: system and driver, plus whatever else varies
/// between the results and is not on the x axis.
fn series_name(r: &BenchResult, swept: Option<&str>, all: &[BenchResult]) -> String {
    let mut name = format!("{} {}", r.system, r.driver);
    let varies = |f: &dyn Fn(&BenchResult) -> u64| all.iter().any(|o| f(o) != f(&all[0]));
    if swept != Some("bs") && varies(&|o| o.bs) {
        name.push_str(&format!(" bs={}", fmt_bytes(r.bs)));
    }
    if !matches!(swept, Some("concurrency") | Some("iodepth")) && varies(&|o| o.in_flight()) {
        name.push_str(&format!(" in_flight={}", r.in_flight()));
    }
    if varies(&|o| u64::from(o.prealloc)) {
        name.push_str(if r.prealloc { " prealloc" } else { " growing" });
    }
    name
}

/// Draws the chart into `path` (.svg or .png).
pub(crate) fn draw(path: &Path, results: &[BenchResult], swept: Option<&str>) -> Result<()> {
    if results.is_empty() {
        bail!("nothing to plot");
    }
    load_font()?;
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase())
        .unwrap_or_default();
    let size = (1000, 600);
    match ext.as_str() {
        "svg" => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            chart(&root, results, swept)?;
            root.present()
                .with_context(|| format!("writing {}", path.display()))?;
        }
        "png" => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            chart(&root, results, swept)?;
            root.present()
                .with_context(|| format!("writing {}", path.display()))?;
        }
        _ => bail!("{}: the plot file must end in .svg or .png", path.display()),
    }
    Ok(())
}

/// The chart's coordinates: x the label's index, y the IOPS.
type Plot<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The error of a drawing call, for the user.
fn draw_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> anyhow::Error {
    anyhow!("drawing the plot: {e:?}")
}

fn chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    results: &[BenchResult],
    swept: Option<&str>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = draw_err::<DB::ErrorType>;
    // A numeric sweep draws one line per system and driver; otherwise
    // (drivers, growing vs preallocated) one bar per result.
    let numeric = matches!(swept, Some("concurrency") | Some("iodepth") | Some("bs"));
    let xs = x_labels(results, swept, numeric);
    let series = series_names(results, swept, numeric);
    let ymax = results.iter().map(|r| r.iops).fold(0.0f64, f64::max) * 1.15 + 1.0;
    root.fill(&WHITE).map_err(err)?;
    let n = xs.len();
    let title = chart_title(results, swept, numeric);
    let mut c = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax)
        .map_err(err)?;
    let labels = xs.clone();
    c.configure_mesh()
        .x_desc(x_title(swept))
        .y_desc("IOPS")
        .x_labels(n.max(2) * 2 + 1)
        .x_label_formatter(&move |v: &f64| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v: &f64| format!("{v:.0}"))
        .draw()
        .map_err(err)?;
    for (k, name) in series.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        if !numeric {
            draw_bars(&mut c, results, swept, &xs, name, color)?;
            continue;
        }
        draw_line(&mut c, results, swept, &xs, name, color)?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// The labels on the x axis, in order: numeric ones sorted by value, the
/// others in the order of the results.
fn x_labels(results: &[BenchResult], swept: Option<&str>, numeric: bool) -> Vec<String> {
    let mut xs: Vec<String> = Vec::new();
    for r in results {
        let l = if numeric {
            x_label(r, swept)
        } else {
            bar_label(r, swept)
        };
        if !xs.contains(&l) {
            xs.push(l);
        }
    }
    if numeric {
        xs.sort_by_key(|x| x.parse::<u64>().unwrap_or(0));
    }
    xs
}

/// The names of the series (lines of a numeric sweep, else systems), in the
/// order of the results.
fn series_names(results: &[BenchResult], swept: Option<&str>, numeric: bool) -> Vec<String> {
    let mut series: Vec<String> = Vec::new();
    for r in results {
        let s = if numeric {
            series_name(r, swept, results)
        } else {
            r.system.clone()
        };
        if !series.contains(&s) {
            series.push(s);
        }
    }
    series
}

/// The chart's caption: what is plotted against what, and the preset.
fn chart_title(results: &[BenchResult], swept: Option<&str>, numeric: bool) -> String {
    format!(
        "{}{}",
        if numeric {
            format!("throughput vs {}", swept.unwrap_or("driver"))
        } else {
            format!("throughput by {}", x_title(swept))
        },
        results[0]
            .preset
            .as_ref()
            .map(|p| format!(" (preset {p})"))
            .unwrap_or_default()
    )
}

/// The bars of the system `name`, one per result, with its legend entry.
fn draw_bars<DB: DrawingBackend>(
    c: &mut Plot<'_, DB>,
    results: &[BenchResult],
    swept: Option<&str>,
    xs: &[String],
    name: &str,
    color: RGBAColor,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let bars: Vec<(f64, f64)> = results
        .iter()
        .filter(|r| r.system == name)
        .filter_map(|r| {
            let l = bar_label(r, swept);
            xs.iter().position(|x| *x == l).map(|i| (i as f64, r.iops))
        })
        .collect();
    c.draw_series(
        bars.iter()
            .map(|&(x, y)| Rectangle::new([(x - 0.35, 0.0), (x + 0.35, y)], color.filled())),
    )
    .map_err(draw_err)?
    .label(name)
    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], color.filled()));
    Ok(())
}

/// The line of the series `name`, its points and its legend entry.
fn draw_line<DB: DrawingBackend>(
    c: &mut Plot<'_, DB>,
    results: &[BenchResult],
    swept: Option<&str>,
    xs: &[String],
    name: &str,
    color: RGBAColor,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let mut pts: Vec<(f64, f64)> = results
        .iter()
        .filter(|r| series_name(r, swept, results) == *name)
        .filter_map(|r| {
            let l = x_label(r, swept);
            xs.iter().position(|x| *x == l).map(|i| (i as f64, r.iops))
        })
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    c.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
        .map_err(draw_err)?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    c.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
        .map_err(draw_err)?;
    Ok(())
}
