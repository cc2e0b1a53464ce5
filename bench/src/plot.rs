//! SVG charts of the results (plotters' SVG backend only, no fonts or bitmaps, to keep the
//! build small): line charts for series over a trace or a size range, horizontal bar charts for
//! one figure per allocator.

use std::path::Path;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

/// One named line of a line chart.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn thick and black: the reference the other lines are read against.
    pub bold: bool,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A line chart of `series`, x and y from zero (or logarithmic in x) to the largest value, y
/// cut at `y_cap` if given (so that one outlier does not flatten every other line).
#[allow(clippy::too_many_arguments)]
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    log_x: bool,
    y_cap: Option<f64>,
) -> Result<(), String> {
    let all = series.iter().flat_map(|s| s.points.iter());
    let (x_min, x_max, y_max) = all.fold((f64::MAX, 0f64, 0f64), |(a, b, c), &(x, y)| {
        (a.min(x), b.max(x), c.max(y))
    });
    let x_max = if x_max > 0.0 { x_max } else { 1.0 };
    let y_max = y_cap.map_or(y_max, |c| y_max.min(c));
    let y_max = if y_max > 0.0 { y_max * 1.05 } else { 1.0 };
    let number = |v: &f64| {
        if v.abs() >= 100.0 || v.fract() == 0.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.1}")
        }
    };
    let root = SVGBackend::new(path, (1100, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80);
    // Two chart types (linear and logarithmic x), one drawing routine.
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .x_label_formatter(&number)
                .y_label_formatter(&number)
                .draw()
                .map_err(err)?;
            for (i, s) in series.iter().enumerate() {
                let (color, width) = if s.bold {
                    (BLACK.to_rgba(), 3)
                } else {
                    (Palette99::pick(i).to_rgba(), 2)
                };
                chart
                    .draw_series(LineSeries::new(
                        s.points.iter().copied(),
                        color.stroke_width(width),
                    ))
                    .map_err(err)?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
                    });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(err)?;
        }};
    }
    if log_x {
        let x_min = if x_min > 0.0 && x_min < x_max {
            x_min
        } else {
            x_max / 10.0
        };
        draw!(builder
            .build_cartesian_2d((x_min..x_max).log_scale(), 0f64..y_max)
            .map_err(err)?);
    } else {
        draw!(builder
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)
            .map_err(err)?);
    }
    root.present().map_err(err)
}

/// A horizontal bar chart: one bar per named value, the value written at its end.
pub fn bars(path: &Path, title: &str, x_desc: &str, bars: &[(String, f64)]) -> Result<(), String> {
    let n = bars.len().max(1);
    let max = bars
        .iter()
        .map(|b| b.1)
        .filter(|v| v.is_finite())
        .fold(0f64, f64::max);
    let max = if max > 0.0 { max * 1.15 } else { 1.0 };
    let root = SVGBackend::new(path, (1000, 120 + 38 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(260)
        // An integer range is inclusive when segmented: `0..n - 1` gives the n rows.
        .build_cartesian_2d(0f64..max, (0..n - 1).into_segmented())
        .map_err(err)?;
    let label = |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) => bars.get(*i).map(|b| b.0.clone()).unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&label)
        .x_desc(x_desc)
        .draw()
        .map_err(err)?;
    for (i, (_, v)) in bars.iter().enumerate() {
        if !v.is_finite() {
            continue;
        }
        let color = Palette99::pick(i).to_rgba();
        let mut bar = Rectangle::new(
            [
                (0.0, SegmentValue::Exact(i)),
                (*v, SegmentValue::Exact(i + 1)),
            ],
            color.filled(),
        );
        bar.set_margin(4, 4, 0, 0);
        chart.draw_series(std::iter::once(bar)).map_err(err)?;
        let text = if *v >= 100.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.1}")
        };
        chart
            .draw_series(std::iter::once(Text::new(
                text,
                (*v, SegmentValue::CenterOf(i)),
                ("sans-serif", 14),
            )))
            .map_err(err)?;
    }
    root.present().map_err(err)
}
