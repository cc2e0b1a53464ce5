//! SVG charts of the results (plotters' SVG backend only, no fonts or bitmaps, to keep the
//! build small): line charts for series over a trace or a size range, horizontal bar charts for
//! one figure per allocator.
//!
//! Every chart is laid out the same way, so that it can be read without the tables: a title
//! that says what is shown and which way is better, the plotting area with both axes labelled
//! with their units, the legend (or the bar labels) beside the plotting area, never over the
//! data, and notes below it. Each allocator is drawn in its own look from [`crate::style`], the
//! same in every chart. One outlier must not flatten the others: a line chart may stop its y
//! axis below the highest lines (they leave through the top, with an arrowhead there and ↑ in
//! the legend), and a bar chart stops its axis before bars far longer than the rest (broken by a
//! white gap, their value written on them); the notes say so.

use std::ops::Range;
use std::path::Path;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::style::{self, Look, Shape};

pub(crate) const FONT: FontFamily = FontFamily::SansSerif;
/// Font sizes as plotters takes them (the SVG says size / 1.24 px).
pub(crate) const TITLE: f64 = 24.0;
pub(crate) const TEXT: f64 = 17.0;
pub(crate) const SMALL: f64 = 15.0;
/// Line spacing of titles and notes, in pixels.
const TITLE_LINE: i32 = 26;
const NOTE_LINE: i32 = 18;
/// Marker radius in pixels.
const MARK: i32 = 5;

/// One named line of a line chart. Its look is that of its name in [`crate::style`].
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// A figure shown after the name in the legend (e.g. the peak footprint ÷ peak live).
    pub value: Option<String>,
}

/// What a line chart shows.
pub struct Lines<'a> {
    /// What is shown and which way is better.
    pub title: &'a str,
    /// Axis descriptions, with units.
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    /// Logarithmic x axis, with its ticks at these values (say, the sizes measured).
    pub log_x_ticks: Option<&'a [f64]>,
    /// Stop the y axis here (lines above it leave through the top); else it covers every line.
    pub y_max: Option<f64>,
    /// Heading of the legend's column of [`Series::value`]s.
    pub value_header: &'a str,
    /// Lines of explanation below the chart.
    pub notes: &'a [String],
}

/// One bar of a bar chart.
pub struct Bar {
    /// The allocator, for its look.
    pub name: String,
    /// What the bar is labelled with (the name, perhaps with a mark such as †).
    pub label: String,
    /// NaN for none (the label then says "no result").
    pub value: f64,
}

/// What a bar chart shows.
pub struct Bars<'a> {
    /// What is shown and which way is better.
    pub title: &'a str,
    /// The value axis, with units.
    pub x_desc: &'a str,
    /// Written after each value at the end of its bar (" %", " ns", or nothing).
    pub unit: &'a str,
    /// Lines of explanation below the chart.
    pub notes: &'a [String],
}

pub(crate) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

pub(crate) fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub(crate) fn text_style(size: f64, color: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    TextStyle {
        font: FontDesc::new(FONT, size, FontStyle::Normal),
        color: color.to_backend_color(),
        pos: Pos::new(h, v),
    }
}

/// A linear axis with its ticks where the chart puts them (plotters' own f64 axis chooses
/// them itself, and its `with_key_points` wrapper cannot take a label formatter).
struct Axis {
    range: Range<f64>,
    ticks: Vec<f64>,
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let span = self.range.end - self.range.start;
        if span <= 0.0 || !v.is_finite() {
            return limit.0;
        }
        let t = (v - self.range.start) / span;
        limit.0 + ((limit.1 - limit.0) as f64 * t).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

/// About how wide `text` is in pixels (DejaVu Sans averages a little over half an em).
pub(crate) fn text_width(text: &str, size: f64) -> i32 {
    (text.chars().count() as f64 * size / 1.24 * 0.58).ceil() as i32
}

/// `text` broken into lines of at most `width` pixels, at spaces.
pub(crate) fn wrap(text: &str, width: i32, size: f64) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let candidate = if line.is_empty() {
            word.to_string()
        } else {
            format!("{line} {word}")
        };
        if !line.is_empty() && text_width(&candidate, size) > width {
            lines.push(std::mem::replace(&mut line, word.to_string()));
        } else {
            line = candidate;
        }
    }
    lines.push(line);
    lines
}

/// A number for an axis tick or a bar: thousands grouped, at most two decimals, no trailing
/// zeros.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    if v.abs() >= 1000.0 {
        let digits = format!("{:.0}", v.abs());
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        return if v < 0.0 { format!("-{out}") } else { out };
    }
    let decimals = if v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else {
        2
    };
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A bar's value: one decimal below 100, none above, thousands grouped.
fn bar_value(v: f64) -> String {
    if v.abs() >= 1000.0 {
        number(v)
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Evenly spaced round values (steps of 1, 2, 2.5 or 5 × a power of ten) from `lo` to `hi`,
/// about `target` of them.
pub(crate) fn ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    let span = hi - lo;
    if !(span > 0.0 && span.is_finite()) {
        return vec![lo];
    }
    let raw = span / target as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| span / s <= target as f64)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).ceil();
    (0..)
        .map(|k| (first + k as f64) * step)
        .take_while(|v| *v <= hi + step * 1e-9)
        .collect()
}

/// The title (wrapped to the chart's width) and the notes (each wrapped), and the heights they
/// take at the top and the bottom of the chart: known before the chart is drawn, so that it
/// can be sized to fit them.
pub(crate) fn frame_heights(
    width: i32,
    title: &str,
    notes: &[String],
) -> (i32, i32, Vec<String>, Vec<String>) {
    let title_lines = wrap(title, width - 40, TITLE);
    let note_lines: Vec<String> = notes
        .iter()
        .flat_map(|n| wrap(n, width - 40, SMALL))
        .collect();
    let title_h = 18 + TITLE_LINE * title_lines.len() as i32;
    let notes_h = if note_lines.is_empty() {
        0
    } else {
        14 + NOTE_LINE * note_lines.len() as i32
    };
    (title_h, notes_h, title_lines, note_lines)
}

/// Draws the title lines at the top of `root` and the note lines from `notes_top` down.
pub(crate) fn draw_frame(
    root: &Area,
    title_lines: &[String],
    note_lines: &[String],
    notes_top: i32,
) -> Result<(), String> {
    let title = TextStyle::from(FontDesc::new(FONT, TITLE, FontStyle::Bold))
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Top));
    for (i, line) in title_lines.iter().enumerate() {
        root.draw_text(line, &title, (20, 12 + TITLE_LINE * i as i32))
            .map_err(err)?;
    }
    let note = text_style(SMALL, RGBColor(0x33, 0x33, 0x33), HPos::Left, VPos::Top);
    for (i, line) in note_lines.iter().enumerate() {
        root.draw_text(line, &note, (20, notes_top + 8 + NOTE_LINE * i as i32))
            .map_err(err)?;
    }
    Ok(())
}

/// The end of a bar cut short (its value passes the axis): a slanted white gap across the bar
/// at pixel column `gx`, between pixel rows `top` and `bottom`, and the value `text` in `style`
/// on a white label left of the gap, centred on row `ym`.
fn broken_end<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (gx, ym): (i32, i32),
    (top, bottom): (i32, i32),
    text: &str,
    style: &TextStyle<'_>,
) -> Result<(), String> {
    let gap = vec![
        (gx - 4, bottom),
        (gx + 4, bottom),
        (gx + 10, top),
        (gx + 2, top),
    ];
    area.draw(&Polygon::new(gap, WHITE.filled())).map_err(err)?;
    let w = text_width(text, SMALL);
    let right = gx - 12;
    area.draw(&Rectangle::new(
        [(right - w - 6, ym - 9), (right + 4, ym + 9)],
        WHITE.filled(),
    ))
    .map_err(err)?;
    area.draw_text(text, style, (right, ym)).map_err(err)
}

/// Draws `look`'s marker centred at pixel `at` of `area`.
fn marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    at: (i32, i32),
    look: &Look,
) -> Result<(), String> {
    let (x, y) = at;
    let (r, c) = (MARK, look.color);
    let fill: ShapeStyle = if look.hollow {
        WHITE.filled()
    } else {
        c.filled()
    };
    let outline: ShapeStyle = if look.hollow {
        c.stroke_width(2)
    } else {
        WHITE.stroke_width(1)
    };
    let polygon = |points: Vec<(i32, i32)>| -> Result<(), String> {
        area.draw(&Polygon::new(points.clone(), fill))
            .map_err(err)?;
        let mut closed = points;
        closed.push(closed[0]);
        area.draw(&PathElement::new(closed, outline)).map_err(err)
    };
    match look.shape {
        Shape::None => Ok(()),
        Shape::Circle => {
            area.draw(&Circle::new((x, y), r, fill)).map_err(err)?;
            area.draw(&Circle::new((x, y), r, outline)).map_err(err)
        }
        Shape::Square => polygon(vec![
            (x - r + 1, y - r + 1),
            (x + r - 1, y - r + 1),
            (x + r - 1, y + r - 1),
            (x - r + 1, y + r - 1),
        ]),
        Shape::Diamond => polygon(vec![
            (x, y - r - 1),
            (x + r + 1, y),
            (x, y + r + 1),
            (x - r - 1, y),
        ]),
        Shape::TriangleUp => polygon(vec![(x, y - r - 1), (x + r + 1, y + r), (x - r - 1, y + r)]),
        Shape::TriangleDown => {
            polygon(vec![(x, y + r + 1), (x + r + 1, y - r), (x - r - 1, y - r)])
        }
        Shape::Plus | Shape::Cross => {
            let d = r + 1;
            let arms = if look.shape == Shape::Plus {
                [[(x - d, y), (x + d, y)], [(x, y - d), (x, y + d)]]
            } else {
                [
                    [(x - d, y - d), (x + d, y + d)],
                    [(x - d, y + d), (x + d, y - d)],
                ]
            };
            for arm in arms {
                area.draw(&PathElement::new(arm.to_vec(), c.stroke_width(3)))
                    .map_err(err)?;
            }
            Ok(())
        }
    }
}

/// A short stretch of `look`'s line with its marker, as in the legend.
fn sample<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    look: &Look,
) -> Result<(), String> {
    let style = look.color.stroke_width(look.width);
    if look.dashed {
        for dx in [0, 15, 30] {
            area.draw(&PathElement::new(vec![(x + dx, y), (x + dx + 9, y)], style))
                .map_err(err)?;
        }
    } else {
        area.draw(&PathElement::new(vec![(x, y), (x + 40, y)], style))
            .map_err(err)?;
    }
    marker(area, (x + 20, y), look)
}

/// The parts of a line at or below `top`: runs of points, cut where the line crosses `top`,
/// and the points where it leaves through the top.
type Clipped = (Vec<Vec<(f64, f64)>>, Vec<(f64, f64)>);

fn clip(points: &[(f64, f64)], top: f64) -> Clipped {
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut exits = Vec::new();
    let mut run: Vec<(f64, f64)> = Vec::new();
    let cross = |a: (f64, f64), b: (f64, f64)| {
        let t = (top - a.1) / (b.1 - a.1);
        (a.0 + (b.0 - a.0) * t, top)
    };
    for (i, &p) in points.iter().enumerate() {
        let inside = p.1 <= top;
        match (i.checked_sub(1).map(|j| points[j]), inside) {
            (None, true) => run.push(p),
            (None, false) => {}
            (Some(a), true) if a.1 <= top => run.push(p),
            (Some(a), true) => {
                run.push(cross(a, p));
                run.push(p);
            }
            (Some(a), false) if a.1 <= top => {
                let c = cross(a, p);
                run.push(c);
                exits.push(c);
                runs.push(std::mem::take(&mut run));
            }
            (Some(_), false) => {}
        }
    }
    if !run.is_empty() {
        runs.push(run);
    }
    (runs, exits)
}

/// The y of the polyline `points` (sorted by x) at `x`, if `x` is within it.
fn at_x(points: &[(f64, f64)], x: f64) -> Option<f64> {
    let i = points.partition_point(|p| p.0 < x);
    let b = *points.get(i)?;
    if i == 0 {
        return (b.0 == x).then_some(b.1);
    }
    let a = points[i - 1];
    let t = if b.0 > a.0 {
        (x - a.0) / (b.0 - a.0)
    } else {
        0.0
    };
    Some(a.1 + (b.1 - a.1) * t)
}

/// A line chart of `series`, drawn in the given order (the first underneath), y from zero.
pub fn lines(path: &Path, chart: &Lines, series: &[Series]) -> Result<(), String> {
    const WIDTH: i32 = 1250;
    const LEGEND: i32 = 380;
    const PLOT_H: i32 = 560;
    let (title_h, notes_h, title_lines, note_lines) =
        frame_heights(WIDTH, chart.title, chart.notes);
    let height = title_h + PLOT_H + notes_h;
    let root = SVGBackend::new(path, (WIDTH as u32, height as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    draw_frame(&root, &title_lines, &note_lines, title_h + PLOT_H)?;
    let (_, rest) = root.split_vertically(title_h);
    let (middle, _) = rest.split_vertically(PLOT_H);
    let (plot_area, legend) = middle.split_horizontally(WIDTH - LEGEND);

    // x in log10 units on a logarithmic axis, so that one coordinate type serves both.
    let to_x = |x: f64| {
        if chart.log_x_ticks.is_some() {
            x.log10()
        } else {
            x
        }
    };
    let points: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .filter(|p| chart.log_x_ticks.is_none() || p.0 > 0.0)
                .map(|&(x, y)| (to_x(x), y))
                .collect()
        })
        .collect();
    let all = points.iter().flatten();
    let (x_lo, x_hi, y_hi) = all.fold((f64::MAX, f64::MIN, 0f64), |(a, b, c), &(x, y)| {
        (a.min(x), b.max(x), c.max(y))
    });
    let (x_lo, x_hi, x_keys) = match chart.log_x_ticks {
        Some(ticks) => {
            let keys: Vec<f64> = ticks
                .iter()
                .filter(|t| **t > 0.0)
                .map(|t| t.log10())
                .collect();
            let lo = keys.iter().copied().fold(x_lo, f64::min);
            let hi = keys.iter().copied().fold(x_hi, f64::max);
            let pad = ((hi - lo) * 0.04).max(0.02);
            (lo - pad, hi + pad, keys)
        }
        None => {
            let (lo, hi) = if x_hi > x_lo {
                (x_lo.min(0.0), x_hi)
            } else {
                (0.0, 1.0)
            };
            (lo, hi, ticks(lo, hi, 8))
        }
    };
    let y_top = match chart.y_max {
        Some(m) if m > 0.0 => m,
        _ if y_hi > 0.0 => y_hi * 1.05,
        _ => 1.0,
    };
    let y_keys = ticks(0.0, y_top, 8);
    let log_x = chart.log_x_ticks.is_some();
    let x_label = |v: &f64| number(if log_x { 10f64.powf(*v) } else { *v });
    let y_label = |v: &f64| number(*v);
    let mut ctx = ChartBuilder::on(&plot_area)
        .margin_top(12)
        .margin_left(10)
        .margin_right(25)
        .margin_bottom(8)
        .x_label_area_size(58)
        .y_label_area_size(90)
        .build_cartesian_2d(
            Axis {
                range: x_lo..x_hi,
                ticks: x_keys,
            },
            Axis {
                range: 0.0..y_top,
                ticks: y_keys,
            },
        )
        .map_err(err)?;
    ctx.configure_mesh()
        .x_desc(chart.x_desc)
        .y_desc(chart.y_desc)
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .label_style((FONT, SMALL))
        .axis_desc_style((FONT, TEXT))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(err)?;

    // Lines, then markers, then arrowheads where lines leave through the top.
    let mut left_top = vec![false; series.len()];
    for (i, (s, pts)) in series.iter().zip(&points).enumerate() {
        let look = style::of(&s.name);
        let line = look.color.stroke_width(look.width);
        let (runs, exits) = clip(pts, y_top);
        left_top[i] = pts.iter().any(|p| p.1 > y_top);
        for run in runs {
            if look.dashed {
                ctx.draw_series(DashedLineSeries::new(run, 9, 6, line))
                    .map_err(err)?;
            } else {
                ctx.draw_series(LineSeries::new(run, line)).map_err(err)?;
            }
        }
        for exit in exits {
            let (x, y) = ctx.backend_coord(&exit);
            let head = vec![(x, y - 2), (x + 6, y + 9), (x - 6, y + 9)];
            root.draw(&Polygon::new(head, look.color.filled()))
                .map_err(err)?;
        }
    }
    let n = series.len().max(1);
    for (i, (s, pts)) in series.iter().zip(&points).enumerate() {
        let look = style::of(&s.name);
        if look.shape == Shape::None {
            continue;
        }
        // Few points: mark each. Many: mark a few places, staggered from line to line so
        // that lines drawn on top of each other still show every marker.
        let at: Vec<(f64, f64)> = if pts.len() <= 12 {
            pts.clone()
        } else {
            const PLACES: usize = 6;
            (0..PLACES)
                .filter_map(|k| {
                    let f = (k as f64 + (i as f64 + 0.5) / n as f64) / PLACES as f64;
                    let x = x_lo + (x_hi - x_lo) * f;
                    at_x(pts, x).map(|y| (x, y))
                })
                .collect()
        };
        for p in at.into_iter().filter(|p| p.1 <= y_top) {
            marker(&root, ctx.backend_coord(&p), &look)?;
        }
    }

    // The legend, beside the plotting area.
    let dark = RGBColor(0x33, 0x33, 0x33);
    let right = LEGEND - 14;
    let mut y = 22;
    if series.iter().any(|s| s.value.is_some()) {
        let head = text_style(SMALL, dark, HPos::Right, VPos::Center);
        legend
            .draw_text(chart.value_header, &head, (right, y))
            .map_err(err)?;
        y += 24;
    }
    let name_style = text_style(TEXT, BLACK, HPos::Left, VPos::Center);
    let value_style = text_style(TEXT, BLACK, HPos::Right, VPos::Center);
    for (s, &up) in series.iter().zip(&left_top) {
        let look = style::of(&s.name);
        sample(&legend, (6, y), &look)?;
        legend
            .draw_text(&s.name, &name_style, (56, y))
            .map_err(err)?;
        let value = match (&s.value, up) {
            (Some(v), true) => format!("{v} ↑"),
            (Some(v), false) => v.clone(),
            (None, true) => "↑".into(),
            (None, false) => String::new(),
        };
        if !value.is_empty() {
            legend
                .draw_text(&value, &value_style, (right, y))
                .map_err(err)?;
        }
        y += 26;
    }
    root.present().map_err(err)
}

/// A horizontal bar chart, one bar per allocator, in the given order from the top, each with
/// its value written at its end.
pub fn bars(path: &Path, chart: &Bars, bars: &[Bar]) -> Result<(), String> {
    const WIDTH: i32 = 1150;
    const ROW: i32 = 36;
    let n = bars.len().max(1);
    // Bars far beyond the others (over 4 × the median) are cut, so that the rest stay
    // readable; the axis covers the others with room for their labels.
    let mut finite: Vec<f64> = bars
        .iter()
        .map(|b| b.value)
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    finite.sort_by(f64::total_cmp);
    let median = finite.get(finite.len() / 2).copied().unwrap_or(1.0);
    let limit = 4.0 * median;
    let shown = finite
        .iter()
        .copied()
        .filter(|v| *v <= limit)
        .fold(0f64, f64::max);
    let cut = finite.iter().any(|v| *v > limit);
    // Room for the labels at the ends of the bars, up to a round value.
    let x_keys = ticks(0.0, if shown > 0.0 { shown * 1.2 } else { 1.0 }, 8);
    let step = x_keys.get(1).map_or(1.0, |t| t - x_keys[0]);
    let x_hi = ((shown * 1.2) / step).ceil().max(1.0) * step;
    let x_keys = ticks(0.0, x_hi, 8);
    let mut notes: Vec<String> = Vec::new();
    if cut {
        notes.push(format!(
            "Bars broken by a white gap are cut: the axis stops at {}{}, and each carries its \
             value.",
            number(x_hi),
            chart.unit
        ));
    }
    notes.extend(chart.notes.iter().cloned());
    let (title_h, notes_h, title_lines, note_lines) = frame_heights(WIDTH, chart.title, &notes);
    let plot_h = 20 + ROW * n as i32 + 70;
    let height = title_h + plot_h + notes_h;
    let root = SVGBackend::new(path, (WIDTH as u32, height as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    draw_frame(&root, &title_lines, &note_lines, title_h + plot_h)?;
    let (_, rest) = root.split_vertically(title_h);
    let (plot_area, _) = rest.split_vertically(plot_h);

    // Row i (from the top) spans y in [n - 1 - i, n - i].
    let row_of = |v: f64| n.checked_sub(1 + v.floor() as usize);
    let label = |v: &f64| {
        row_of(*v)
            .and_then(|i| bars.get(i))
            .map_or(String::new(), |b| b.label.clone())
    };
    let y_keys: Vec<f64> = (0..n).map(|i| i as f64 + 0.5).collect();
    let mut ctx = ChartBuilder::on(&plot_area)
        .margin_top(10)
        .margin_left(10)
        .margin_right(30)
        .margin_bottom(8)
        .x_label_area_size(58)
        .y_label_area_size(300)
        .build_cartesian_2d(
            Axis {
                range: 0.0..x_hi,
                ticks: x_keys,
            },
            Axis {
                range: 0.0..n as f64,
                ticks: y_keys,
            },
        )
        .map_err(err)?;
    ctx.configure_mesh()
        .disable_y_mesh()
        .x_desc(chart.x_desc)
        .x_label_formatter(&|v| number(*v))
        .y_label_formatter(&label)
        .label_style((FONT, TEXT))
        .axis_desc_style((FONT, TEXT))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(err)?;
    let value_style = text_style(SMALL, BLACK, HPos::Left, VPos::Center);
    let inside_style = text_style(SMALL, BLACK, HPos::Right, VPos::Center);
    for (i, b) in bars.iter().enumerate() {
        let look = style::of(&b.name);
        let y = (n - 1 - i) as f64;
        if !b.value.is_finite() {
            let at = ctx.backend_coord(&(0.0, y + 0.5));
            root.draw_text("no result", &value_style, (at.0 + 8, at.1))
                .map_err(err)?;
            continue;
        }
        let broken = b.value > limit;
        let end = if broken { x_hi } else { b.value };
        let fill = if look.hollow {
            look.color.mix(0.45).filled()
        } else {
            look.color.filled()
        };
        ctx.draw_series([Rectangle::new([(0.0, y + 0.18), (end, y + 0.82)], fill)])
            .map_err(err)?;
        if look.hollow {
            ctx.draw_series([Rectangle::new(
                [(0.0, y + 0.18), (end, y + 0.82)],
                look.color.stroke_width(2),
            )])
            .map_err(err)?;
        }
        let text = format!("{}{}", bar_value(b.value), chart.unit);
        let (x1, ym) = ctx.backend_coord(&(end, y + 0.5));
        if broken {
            let (_, top) = ctx.backend_coord(&(end, y + 0.82));
            let (_, bottom) = ctx.backend_coord(&(end, y + 0.18));
            broken_end(
                &root,
                (x1 - 26, ym),
                (top - 2, bottom + 2),
                &text,
                &inside_style,
            )?;
        } else {
            root.draw_text(&text, &value_style, (x1 + 6, ym))
                .map_err(err)?;
        }
    }
    root.present().map_err(err)
}

/// One group of a grouped bar chart: its label (a program) and one bar per allocator, by the
/// allocator's name (for its look); NaN for no result.
pub struct Group {
    pub label: String,
    pub bars: Vec<(String, f64)>,
}

/// What a grouped bar chart shows.
pub struct Grouped<'a> {
    /// What is shown and which way is better.
    pub title: &'a str,
    /// The value axis, with units.
    pub x_desc: &'a str,
    /// A value marked by a dashed vertical line across the chart (the reference of ratios), and
    /// its label.
    pub reference: Option<(f64, &'a str)>,
    /// Lines of explanation below the chart.
    pub notes: &'a [String],
}

/// A horizontal bar chart in groups (one per program), one bar per allocator in each, in the
/// order given, each bar with its allocator's colour, its marker at the end and its value; the
/// legend of allocators beside the plotting area. Bars far beyond the rest (over 3 × the
/// median, and past 2) are cut as in [`bars`].
pub fn grouped_bars(path: &Path, chart: &Grouped, groups: &[Group]) -> Result<(), String> {
    const WIDTH: i32 = 1250;
    const LEGEND: i32 = 260;
    const ROW: i32 = 22;
    let mut names: Vec<&str> = Vec::new();
    for g in groups {
        for (n, _) in &g.bars {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
    }
    // Rows from the top: each group's bars, then a gap row.
    let rows: usize = groups
        .iter()
        .map(|g| g.bars.len() + 1)
        .sum::<usize>()
        .max(1);
    let mut finite: Vec<f64> = groups
        .iter()
        .flat_map(|g| g.bars.iter().map(|b| b.1))
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    finite.sort_by(f64::total_cmp);
    let median = finite.get(finite.len() / 2).copied().unwrap_or(1.0);
    let limit = (3.0 * median).max(2.0);
    let shown = finite
        .iter()
        .copied()
        .filter(|v| *v <= limit)
        .fold(chart.reference.map_or(0.0, |r| r.0), f64::max);
    let cut = finite.iter().any(|v| *v > limit);
    let x_keys = ticks(0.0, shown * 1.15, 8);
    let step = x_keys.get(1).map_or(1.0, |t| t - x_keys[0]);
    let x_hi = ((shown * 1.15) / step).ceil().max(1.0) * step;
    let x_keys = ticks(0.0, x_hi, 8);
    let mut notes: Vec<String> = Vec::new();
    if cut {
        notes.push(format!(
            "Bars broken by a white gap are cut: the axis stops at {}, and each carries its \
             value.",
            number(x_hi)
        ));
    }
    notes.extend(chart.notes.iter().cloned());
    let (title_h, notes_h, title_lines, note_lines) = frame_heights(WIDTH, chart.title, &notes);
    let plot_h = 20 + ROW * rows as i32 + 70;
    let height = title_h + plot_h + notes_h;
    let root = SVGBackend::new(path, (WIDTH as u32, height as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    draw_frame(&root, &title_lines, &note_lines, title_h + plot_h)?;
    let (_, rest) = root.split_vertically(title_h);
    let (middle, _) = rest.split_vertically(plot_h);
    let (plot_area, legend) = middle.split_horizontally(WIDTH - LEGEND);

    // Row r from the top spans y in [rows - 1 - r, rows - r]; a group is labelled at the middle
    // of its bars.
    let mut centres: Vec<(f64, String)> = Vec::new();
    let mut r = 0;
    for g in groups {
        let mid = rows as f64 - r as f64 - g.bars.len() as f64 / 2.0;
        centres.push((mid, g.label.clone()));
        r += g.bars.len() + 1;
    }
    let label = |v: &f64| {
        centres
            .iter()
            .find(|(c, _)| (c - v).abs() < 1e-6)
            .map_or(String::new(), |(_, l)| l.clone())
    };
    let mut ctx = ChartBuilder::on(&plot_area)
        .margin_top(10)
        .margin_left(10)
        .margin_right(20)
        .margin_bottom(8)
        .x_label_area_size(58)
        .y_label_area_size(190)
        .build_cartesian_2d(
            Axis {
                range: 0.0..x_hi,
                ticks: x_keys,
            },
            Axis {
                range: 0.0..rows as f64,
                ticks: centres.iter().map(|c| c.0).collect(),
            },
        )
        .map_err(err)?;
    ctx.configure_mesh()
        .disable_y_mesh()
        .x_desc(chart.x_desc)
        .x_label_formatter(&|v| number(*v))
        .y_label_formatter(&label)
        .label_style((FONT, TEXT))
        .axis_desc_style((FONT, TEXT))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(err)?;
    // The reference line first, under the bars and their values.
    if let Some((at, name)) = chart.reference {
        let top = ctx.backend_coord(&(at, rows as f64));
        let bottom = ctx.backend_coord(&(at, 0.0));
        let dashes = (bottom.1 - top.1) / 12;
        for k in 0..dashes.max(1) {
            let y0 = top.1 + k * 12;
            root.draw(&PathElement::new(
                vec![(top.0, y0), (top.0, (y0 + 7).min(bottom.1))],
                BLACK.stroke_width(2),
            ))
            .map_err(err)?;
        }
        let style = text_style(SMALL, BLACK, HPos::Center, VPos::Bottom);
        root.draw_text(name, &style, (top.0, top.1 - 2))
            .map_err(err)?;
    }

    let value_style = text_style(SMALL, BLACK, HPos::Left, VPos::Center);
    let inside_style = text_style(SMALL, BLACK, HPos::Right, VPos::Center);
    let mut r = 0;
    for g in groups {
        for (name, value) in &g.bars {
            let look = style::of(name);
            let y = (rows - 1 - r) as f64;
            r += 1;
            if !value.is_finite() {
                let at = ctx.backend_coord(&(0.0, y + 0.5));
                root.draw_text("no result", &value_style, (at.0 + 8, at.1))
                    .map_err(err)?;
                continue;
            }
            let broken = *value > limit;
            let end = if broken { x_hi } else { *value };
            let fill = if look.hollow {
                look.color.mix(0.45).filled()
            } else {
                look.color.filled()
            };
            ctx.draw_series([Rectangle::new([(0.0, y + 0.12), (end, y + 0.88)], fill)])
                .map_err(err)?;
            let (x1, ym) = ctx.backend_coord(&(end, y + 0.5));
            let text = format!("{value:.2}");
            if broken {
                let (_, top) = ctx.backend_coord(&(end, y + 0.88));
                let (_, bottom) = ctx.backend_coord(&(end, y + 0.12));
                broken_end(
                    &root,
                    (x1 - 30, ym),
                    (top - 1, bottom + 1),
                    &text,
                    &inside_style,
                )?;
            } else {
                // The marker just past the bar's end, on white (a plus or a cross in the bar's
                // own colour would vanish on the bar), then the value on a white ground, so that
                // the reference line cannot cross either.
                let w = text_width(&text, SMALL);
                root.draw(&Rectangle::new(
                    [(x1 + 1, ym - 9), (x1 + 22 + w, ym + 9)],
                    WHITE.filled(),
                ))
                .map_err(err)?;
                marker(&root, (x1 + 9, ym), &look)?;
                root.draw_text(&text, &value_style, (x1 + 19, ym))
                    .map_err(err)?;
            }
        }
        r += 1;
    }
    // The legend: a swatch with the marker, and the name.
    let name_style = text_style(TEXT, BLACK, HPos::Left, VPos::Center);
    let mut y = 30;
    for name in names {
        let look = style::of(name);
        let fill = if look.hollow {
            look.color.mix(0.45).filled()
        } else {
            look.color.filled()
        };
        legend
            .draw(&Rectangle::new([(6, y - 8), (34, y + 8)], fill))
            .map_err(err)?;
        marker(&legend, (44, y), &look)?;
        legend.draw_text(name, &name_style, (58, y)).map_err(err)?;
        y += 28;
    }
    if let Some((_, name)) = chart.reference {
        for k in 0..3 {
            legend
                .draw(&PathElement::new(
                    vec![(23, y - 10 + k * 8), (23, y - 5 + k * 8)],
                    BLACK.stroke_width(2),
                ))
                .map_err(err)?;
        }
        legend
            .draw_text(&format!("{name} (= 1)"), &name_style, (58, y))
            .map_err(err)?;
    }
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short() {
        assert_eq!(number(27932.4), "27,932");
        assert_eq!(number(432.3), "432");
        assert_eq!(number(10.0), "10");
        assert_eq!(number(12.34), "12.3");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(0.30000000000000004), "0.3");
        assert_eq!(number(f64::NAN), "—");
        assert_eq!(bar_value(13.0), "13.0");
        assert_eq!(bar_value(9.97), "10.0");
        assert_eq!(bar_value(27932.4), "27,932");
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(0.0, 97.0, 8), vec![0.0, 20.0, 40.0, 60.0, 80.0]);
        assert_eq!(ticks(0.0, 0.0, 8), vec![0.0]);
    }

    #[test]
    fn lines_are_cut_where_they_cross_the_top() {
        let (runs, exits) = clip(&[(0.0, 0.0), (1.0, 20.0), (2.0, 0.0)], 10.0);
        assert_eq!(
            runs,
            vec![vec![(0.0, 0.0), (0.5, 10.0)], vec![(1.5, 10.0), (2.0, 0.0)]]
        );
        assert_eq!(exits, vec![(0.5, 10.0)]);
        let (runs, exits) = clip(&[(0.0, 1.0), (1.0, 2.0)], 10.0);
        assert_eq!(runs, vec![vec![(0.0, 1.0), (1.0, 2.0)]]);
        assert!(exits.is_empty());
    }

    #[test]
    fn wrapping_breaks_at_spaces() {
        let lines = wrap("aaaa bbbb cccc", text_width("aaaa bbbb", SMALL), SMALL);
        assert_eq!(lines, vec!["aaaa bbbb", "cccc"]);
    }

    #[test]
    fn interpolates_within_a_line_only() {
        let pts = [(0.0, 0.0), (10.0, 100.0)];
        assert_eq!(at_x(&pts, 5.0), Some(50.0));
        assert_eq!(at_x(&pts, 0.0), Some(0.0));
        assert_eq!(at_x(&pts, 11.0), None);
    }
}
