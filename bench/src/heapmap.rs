//! The heap-map picture: a heap's regions and chunks at one moment, drawn the way PyTorch's
//! memory visualiser draws its segments, so that fragmentation can be seen: each region a
//! horizontal bar on one scale (offset from the region's base on the x axis), each chunk a
//! stretch of its bar, blue when in use and orange when free, darker the larger it is.
//!
//! Legibility at any size: a chunk narrower than [`MERGE_PX`] pixels is not drawn alone (there
//! may be hundreds in a pixel); such chunks are merged per pixel column, drawn as a stacked
//! column (their bytes in use from the bottom, free above), and the notes say how many were
//! merged. Rows are as tall as the picture allows, and past [`MAX_ROWS`] regions the rest are
//! summed up in a line instead of drawn. The figures (reserved, in use, free, largest free
//! chunk, fragmentation, counts) are written in the picture itself.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::plot::{self, err, text_style, Area, FONT, SMALL, TEXT};
use crate::report;

/// A chunk, at `offset` bytes from its region's base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub offset: usize,
    pub bytes: usize,
    pub free: bool,
}

/// A region: its length and its chunks in address order.
#[derive(Clone, Debug, Default)]
pub struct Region {
    pub len: usize,
    pub chunks: Vec<Chunk>,
}

/// What the picture shows.
pub struct Picture<'a> {
    /// What is shown (the trace, the moment, the pool).
    pub title: &'a str,
    /// The figures, one line each, written under the title.
    pub figures: &'a [String],
    /// The regions, in the order to draw them (by address).
    pub regions: &'a [Region],
    /// Lines of explanation below the picture (the picture adds its own about merging).
    pub notes: &'a [String],
}

/// What the picture had to simplify, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drawn {
    /// Regions drawn as rows, and regions left out past the cap.
    pub rows: usize,
    pub omitted: usize,
    /// Chunks drawn alone, and chunks merged into pixel columns.
    pub alone: u64,
    pub merged: u64,
}

/// The picture's width in pixels, and the parts of a row.
const WIDTH: i32 = 1400;
const LABEL_W: i32 = 170;
const RIGHT_W: i32 = 110;
const PLOT_W: i32 = WIDTH - 40 - LABEL_W - RIGHT_W;
/// At most this many regions are drawn; past it, every k-th region by address.
pub const MAX_ROWS: usize = 100;
/// The height the rows share, and the range of a row's height.
const ROWS_H: i32 = 620;
const ROW_MAX: i32 = 28;
const ROW_MIN: i32 = 9;
/// Chunks narrower than this many pixels are merged per pixel column.
pub const MERGE_PX: f64 = 2.0;
/// A chunk at least this many pixels wide starts with a white line, so that neighbours of the
/// same shade can be told apart.
const SEPARATE_PX: i32 = 5;
/// A chunk at least this many pixels wide, in a row at least [`LABEL_ROW_PX`] high, has its
/// size written on it.
const LABEL_PX: i32 = 70;
const LABEL_ROW_PX: i32 = 14;

/// Size classes of chunks drawn alone: below 64 KiB, below 1 MiB, and larger.
const CLASS_BOUNDS: [usize; 2] = [64 << 10, 1 << 20];
/// Shades by class, lightest first: merged columns (the smallest chunks), then the classes.
/// Blue and orange are the pair colour-blind readers tell apart best (ColorBrewer's Blues and
/// Oranges). The lightest free shade is still a strong orange: a thin line of free bytes in a
/// merged column must stand out against the light blue around it.
const USED: [RGBColor; 4] = [
    RGBColor(0x9E, 0xCA, 0xE1),
    RGBColor(0x42, 0x92, 0xC6),
    RGBColor(0x08, 0x51, 0x9C),
    RGBColor(0x08, 0x25, 0x5B),
];
const FREE: [RGBColor; 4] = [
    RGBColor(0xFD, 0x8D, 0x3C),
    RGBColor(0xE6, 0x55, 0x0D),
    RGBColor(0xA6, 0x36, 0x03),
    RGBColor(0x4D, 0x19, 0x01),
];
/// Bytes of a region outside any chunk (its header and end fence), and outlines.
const OVERHEAD: RGBColor = RGBColor(0xDD, 0xDD, 0xDD);
const OUTLINE: RGBColor = RGBColor(0x77, 0x77, 0x77);
const DARK: RGBColor = RGBColor(0x33, 0x33, 0x33);

fn class(bytes: usize) -> usize {
    1 + CLASS_BOUNDS.iter().filter(|&&b| bytes >= b).count()
}

/// A run of pixel columns of merged chunks with the same stacking: `used` pixels in use from
/// the bottom, the rest free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Column {
    x: i32,
    w: i32,
    used: i32,
}

/// A chunk drawn alone, in pixels from the row's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stretch {
    x0: i32,
    x1: i32,
    bytes: usize,
    class: usize,
    free: bool,
}

/// One row laid out in pixels.
#[derive(Debug, Default)]
struct Row {
    width: i32,
    columns: Vec<Column>,
    stretches: Vec<Stretch>,
    /// Chunks that start on this row, drawn alone and merged.
    alone: u64,
    merged: u64,
}

/// Lays out the bytes `start..start + len` of a region (one row: the whole region, or one line
/// of a region that wraps) at `px_per_byte`, in a row `h` pixels high. Whether a chunk is drawn
/// alone depends on its whole size, so a chunk cut by a wrap looks the same on both lines.
fn layout_row(r: &Region, start: usize, len: usize, px_per_byte: f64, h: i32) -> Row {
    let width = ((len as f64 * px_per_byte).round() as i32).clamp(1, PLOT_W);
    let cols = width as usize;
    let end = start + len;
    let (mut used, mut free) = (vec![0f64; cols], vec![0f64; cols]);
    let mut row = Row {
        width,
        ..Row::default()
    };
    let first = r.chunks.partition_point(|c| c.offset + c.bytes <= start);
    for c in r.chunks[first..].iter().take_while(|c| c.offset < end) {
        let starts_here = c.offset >= start;
        let x0 = (c.offset.max(start) - start) as f64 * px_per_byte;
        let x1 = ((c.offset + c.bytes).min(end) - start) as f64 * px_per_byte;
        if c.bytes as f64 * px_per_byte >= MERGE_PX {
            row.alone += u64::from(starts_here);
            let x0 = (x0.round() as i32).min(width);
            row.stretches.push(Stretch {
                x0,
                x1: (x1.round() as i32).clamp(x0 + 1, width.max(x0 + 1)),
                bytes: c.bytes,
                class: class(c.bytes),
                free: c.free,
            });
            continue;
        }
        row.merged += u64::from(starts_here);
        // Spread the chunk's bytes over the columns it covers.
        let mut x = x0;
        while x < x1 {
            let col = x.floor();
            let stop = (col + 1.0).min(x1);
            let i = (col as usize).min(cols - 1);
            let share = (stop - x) / px_per_byte;
            if c.free {
                free[i] += share;
            } else {
                used[i] += share;
            }
            x = stop;
        }
    }
    // Each column's pixels in use, from the bottom: by bytes, but at least one pixel for either
    // state when it is present, so that a few free bytes among many in use still show.
    let stack = |u: f64, f: f64| -> Option<i32> {
        if u + f <= 0.0 {
            return None;
        }
        let px = (u / (u + f) * h as f64).round() as i32;
        Some(match (u > 0.0, f > 0.0) {
            (true, true) => px.clamp(1, h - 1),
            (true, false) => h,
            _ => 0,
        })
    };
    for i in 0..cols {
        let Some(px) = stack(used[i], free[i]) else {
            continue;
        };
        match row.columns.last_mut() {
            Some(c) if c.x + c.w == i as i32 && c.used == px => c.w += 1,
            _ => row.columns.push(Column {
                x: i as i32,
                w: 1,
                used: px,
            }),
        }
    }
    row
}

/// The bytes one row spans (the x axis): the longest region, but no more than 4 × the median
/// region's length, so that one huge region does not shrink all the others to slivers; longer
/// regions wrap onto further lines.
fn span(regions: &[&Region]) -> usize {
    let mut lens: Vec<usize> = regions.iter().map(|r| r.len.max(1)).collect();
    lens.sort_unstable();
    let max = lens.last().copied().unwrap_or(1);
    let median = lens.get(lens.len() / 2).copied().unwrap_or(1);
    max.min(median.saturating_mul(4))
}

/// One line of the picture: all of a region, or one part of a region that wraps.
struct Line<'a> {
    /// The region's place in the whole list, from 0.
    index: usize,
    region: &'a Region,
    start: usize,
    len: usize,
}

/// The lines of the regions kept, every `stride`-th, at `span` bytes a line.
fn lines(regions: &[Region], stride: usize, span: usize) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    for (index, region) in regions.iter().enumerate().step_by(stride) {
        let mut start = 0;
        loop {
            let len = (region.len - start).min(span);
            out.push(Line {
                index,
                region,
                start,
                len,
            });
            start += len;
            if start >= region.len || len == 0 {
                break;
            }
        }
    }
    out
}

/// A round unit for the axis: KiB below a MiB, else MiB.
fn unit(max_len: usize) -> (f64, &'static str) {
    if max_len >= 1 << 20 {
        ((1 << 20) as f64, "MiB")
    } else {
        (1024.0, "KiB")
    }
}

/// Draws `picture` as an SVG at `path`.
pub fn draw(path: &Path, picture: &Picture) -> Result<Drawn, String> {
    let regions = picture.regions;
    let all: Vec<&Region> = regions.iter().collect();
    let span = span(&all).max(1);
    // Past the cap, every `stride`-th region: a sample of the whole heap, not its start.
    let mut stride = regions.len().div_ceil(MAX_ROWS).max(1);
    let mut shown = lines(regions, stride, span);
    while shown.len() > MAX_ROWS && stride < regions.len() {
        stride += 1;
        shown = lines(regions, stride, span);
    }
    let kept = regions.len().div_ceil(stride);
    let omitted = regions.len() - kept;
    let wrapped = shown.iter().any(|l| l.start > 0);
    let max_len = span;
    let px_per_byte = PLOT_W as f64 / span as f64;
    let n = shown.len().max(1) as i32;
    let h = (ROWS_H / n - 4).clamp(ROW_MIN, ROW_MAX);
    let gap = if h >= 14 { 6 } else { 3 };
    let rows: Vec<Row> = shown
        .iter()
        .map(|l| layout_row(l.region, l.start, l.len, px_per_byte, h))
        .collect();
    let drawn_rows = rows.len();
    let drawn = Drawn {
        rows: kept,
        omitted,
        alone: rows.iter().map(|r| r.alone).sum(),
        merged: rows.iter().map(|r| r.merged).sum(),
    };

    // Notes: the picture's own, then the caller's.
    let merge_bytes = (MERGE_PX / px_per_byte).ceil() as u64;
    let mut notes = vec![format!(
        "Each bar is one region, drawn to scale from its base (x axis); a chunk narrower than \
         {} px (under {}) is not drawn alone: such chunks are merged per pixel column, their \
         bytes in use stacked in light blue from the bottom and free in orange above (by \
         bytes, at least 1 px each when present). {} of {} chunks were merged. Grey: bytes of a \
         region outside any chunk (its header and end fence). Right: the share of the region's \
         chunk bytes in use.",
        MERGE_PX,
        report::bytes(merge_bytes),
        report::count(drawn.merged),
        report::count(drawn.merged + drawn.alone),
    )];
    if omitted > 0 {
        notes.push(format!(
            "{} regions are too many to draw: every {} by address is drawn ({} regions, \
             numbered as in the whole list); the figures above count them all.",
            report::count(regions.len() as u64),
            ordinal(stride),
            kept,
        ));
    }
    if wrapped {
        notes.push(format!(
            "A region longer than the axis ({}, 4 × the median region) continues on the next \
             line(s), marked ↳ with the offset the line starts at.",
            report::bytes(span as u64)
        ));
    }
    notes.extend(picture.notes.iter().cloned());

    let (title_h, notes_h, title_lines, note_lines) =
        plot::frame_heights(WIDTH, picture.title, &notes);
    let figure_lines: Vec<String> = picture
        .figures
        .iter()
        .flat_map(|f| plot::wrap(f, WIDTH - 40, TEXT))
        .collect();
    let figures_h = 8 + 24 * figure_lines.len() as i32;
    let legend_h = 2 * 26 + 12;
    let axis_h = 30;
    let rows_h = drawn_rows as i32 * (h + gap);
    let axis_desc_h = 30;
    let plot_top = title_h + figures_h + legend_h + axis_h;
    let height = plot_top + rows_h + axis_h + axis_desc_h + notes_h;
    let root = SVGBackend::new(path, (WIDTH as u32, height as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    plot::draw_frame(
        &root,
        &title_lines,
        &note_lines,
        plot_top + rows_h + axis_h + axis_desc_h,
    )?;

    // Figures.
    let fig_style = text_style(TEXT, BLACK, HPos::Left, VPos::Top);
    for (i, line) in figure_lines.iter().enumerate() {
        root.draw_text(line, &fig_style, (20, title_h + 4 + 24 * i as i32))
            .map_err(err)?;
    }

    // Legend: one line per state, a swatch per shade.
    let legend_top = title_h + figures_h;
    let labels = [
        format!("merged (each < {})", report::bytes(merge_bytes)),
        "< 64 KiB".to_string(),
        "64 KiB – 1 MiB".to_string(),
        "≥ 1 MiB".to_string(),
    ];
    let label_style = text_style(SMALL, BLACK, HPos::Left, VPos::Center);
    let state_style = text_style(TEXT, BLACK, HPos::Left, VPos::Center);
    for (k, (state, shades)) in [("in use", &USED), ("free", &FREE)].iter().enumerate() {
        let y = legend_top + 14 + 26 * k as i32;
        root.draw_text(state, &state_style, (20, y)).map_err(err)?;
        let mut x = LABEL_W + 20;
        for (shade, label) in shades.iter().zip(&labels) {
            root.draw(&Rectangle::new(
                [(x, y - 8), (x + 34, y + 8)],
                shade.filled(),
            ))
            .map_err(err)?;
            root.draw_text(label, &label_style, (x + 42, y))
                .map_err(err)?;
            x += 42 + plot::text_width(label, SMALL) + 34;
        }
    }
    let note_style = text_style(SMALL, DARK, HPos::Left, VPos::Center);
    root.draw_text(
        "chunk size: darker is larger",
        &note_style,
        (WIDTH - RIGHT_W - 250, legend_top + 14),
    )
    .map_err(err)?;

    // Axis: ticks and labels above and below the rows, faint lines between the rows; none
    // for a pool that holds nothing yet.
    let left = 20 + LABEL_W;
    let (scale, unit_name) = unit(max_len);
    let ticks = if shown.is_empty() {
        root.draw_text(
            "The pool holds no region at this moment.",
            &text_style(TEXT, DARK, HPos::Left, VPos::Center),
            (left, plot_top + 4),
        )
        .map_err(err)?;
        Vec::new()
    } else {
        plot::ticks(0.0, max_len as f64 / scale, 10)
    };
    let rows_bottom = plot_top + rows_h;
    let tick_style = text_style(SMALL, BLACK, HPos::Center, VPos::Bottom);
    let tick_style_below = text_style(SMALL, BLACK, HPos::Center, VPos::Top);
    for t in &ticks {
        let x = left + (t * scale * px_per_byte).round() as i32;
        root.draw(&PathElement::new(
            vec![(x, plot_top - 6), (x, rows_bottom + 4)],
            BLACK.mix(0.15).stroke_width(1),
        ))
        .map_err(err)?;
        root.draw(&PathElement::new(
            vec![(x, plot_top - 6), (x, plot_top - 1)],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?;
        root.draw(&PathElement::new(
            vec![(x, rows_bottom), (x, rows_bottom + 5)],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?;
        let label = plot::number(*t);
        root.draw_text(&label, &tick_style, (x, plot_top - 8))
            .map_err(err)?;
        root.draw_text(&label, &tick_style_below, (x, rows_bottom + 7))
            .map_err(err)?;
    }
    if !shown.is_empty() {
        let desc = format!("offset from the region's base ({unit_name})");
        let desc_style = TextStyle::from(FontDesc::new(FONT, TEXT, FontStyle::Normal))
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Top));
        root.draw_text(
            &desc,
            &desc_style,
            (left + PLOT_W / 2, rows_bottom + axis_h),
        )
        .map_err(err)?;
    }

    // Rows: label every row when they are tall enough, else every few.
    // Labels in a font that fits the row pitch (plotters' sizes are 1.24 × the pixel height);
    // below 11 pixels of pitch, every few rows.
    let pitch = h + gap;
    let label_size = if h >= 12 { SMALL } else { 12.0 };
    let every = (11 + pitch - 1).div_euclid(pitch).max(1) as usize;
    let row_label = text_style(label_size, BLACK, HPos::Right, VPos::Center);
    let right_label = text_style(label_size, DARK, HPos::Left, VPos::Center);
    for (i, (row, line)) in rows.iter().zip(&shown).enumerate() {
        let y = plot_top + i as i32 * (h + gap);
        draw_row(&root, row, left, y, h)?;
        if line.start > 0 {
            if i % every == 0 {
                let label = format!("↳ +{}", report::bytes(line.start as u64));
                root.draw_text(&label, &row_label, (left - 10, y + h / 2))
                    .map_err(err)?;
            }
        } else if i % every == 0 {
            let r = line.region;
            let label = format!("#{}  {}", line.index + 1, report::bytes(r.len as u64));
            root.draw_text(&label, &row_label, (left - 10, y + h / 2))
                .map_err(err)?;
            let (used, free) = r.chunks.iter().fold((0, 0), |(u, f), c| {
                if c.free {
                    (u, f + c.bytes)
                } else {
                    (u + c.bytes, f)
                }
            });
            root.draw_text(
                &format!("{} in use", percent(used, free)),
                &right_label,
                (left + PLOT_W + 10, y + h / 2),
            )
            .map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    Ok(drawn)
}

/// "2nd", "5th": which regions a sample keeps.
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The share of a region's chunk bytes in use, never rounded to all or none: "99.6 %", and
/// "> 99.9 %" rather than "100 %" while anything is free.
fn percent(used: usize, free: usize) -> String {
    let p = used as f64 * 100.0 / (used + free).max(1) as f64;
    match (used, free) {
        (_, 0) => "100 %".into(),
        (0, _) => "0 %".into(),
        _ if p >= 99.95 => "> 99.9 %".into(),
        _ if p < 0.05 => "< 0.1 %".into(),
        _ if !(1.0..=99.0).contains(&p) => format!("{p:.1} %"),
        _ => format!("{p:.0} %"),
    }
}

/// Draws one laid-out row with its top-left corner at (`left`, `y`), inside a 1-pixel outline
/// (outside the row, so that it hides none of it).
fn draw_row(root: &Area, row: &Row, left: i32, y: i32, h: i32) -> Result<(), String> {
    let rect = |x0: i32, y0: i32, x1: i32, y1: i32, c: RGBColor| {
        root.draw(&Rectangle::new(
            [(left + x0, y0), (left + x1, y1)],
            c.filled(),
        ))
        .map_err(err)
    };
    rect(-1, y - 1, row.width + 1, y + h + 1, OUTLINE)?;
    rect(0, y, row.width, y + h, OVERHEAD)?;
    for c in &row.columns {
        if c.used > 0 {
            rect(c.x, y + h - c.used, c.x + c.w, y + h, USED[0])?;
        }
        if c.used < h {
            rect(c.x, y, c.x + c.w, y + h - c.used, FREE[0])?;
        }
    }
    let on_dark = text_style(12.0, WHITE, HPos::Center, VPos::Center);
    let on_light = text_style(12.0, BLACK, HPos::Center, VPos::Center);
    for s in &row.stretches {
        let shade = if s.free { FREE } else { USED }[s.class];
        rect(s.x0, y, s.x1.max(s.x0 + 1), y + h, shade)?;
        if s.x1 - s.x0 >= SEPARATE_PX {
            rect(s.x0, y, s.x0 + 1, y + h, WHITE)?;
        }
        if s.x1 - s.x0 >= LABEL_PX && h >= LABEL_ROW_PX {
            let style = if s.class >= 2 { &on_dark } else { &on_light };
            root.draw_text(
                &report::bytes(s.bytes as u64),
                style,
                (left + (s.x0 + s.x1) / 2, y + h / 2),
            )
            .map_err(err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(offset: usize, bytes: usize, free: bool) -> Chunk {
        Chunk {
            offset,
            bytes,
            free,
        }
    }

    #[test]
    fn narrow_chunks_merge_into_stacked_columns() {
        // 1 byte per pixel: 100 bytes of one-byte chunks alternating in use and free, then a
        // wide free chunk.
        let mut chunks: Vec<Chunk> = (0..100).map(|i| chunk(i, 1, i % 4 == 0)).collect();
        chunks.push(chunk(100, 50, true));
        let r = Region { len: 150, chunks };
        let row = layout_row(&r, 0, r.len, 1.0, 10);
        assert_eq!((row.merged, row.alone), (100, 1));
        // Each pixel holds one chunk: all in use or all free, so runs alternate.
        assert!(row.columns.iter().all(|c| c.used == 0 || c.used == 10));
        assert_eq!(row.columns.iter().map(|c| c.w).sum::<i32>(), 100);
        assert_eq!(
            row.stretches,
            vec![Stretch {
                x0: 100,
                x1: 150,
                bytes: 50,
                class: 1,
                free: true
            }]
        );
    }

    #[test]
    fn mixed_pixels_stack_by_bytes_and_keep_a_minority_visible() {
        // 4 bytes per pixel... at 0.25 px per byte: 3 bytes in use and 1 free per pixel.
        let chunks: Vec<Chunk> = (0..40).map(|i| chunk(i, 1, i % 4 == 3)).collect();
        let r = Region { len: 40, chunks };
        let row = layout_row(&r, 0, r.len, 0.25, 8);
        assert_eq!(
            row.columns,
            vec![Column {
                x: 0,
                w: 10,
                used: 6
            }]
        );
        // One free byte in 4,000: still a pixel.
        let mut chunks = vec![chunk(0, 3999, false)];
        chunks.push(chunk(3999, 1, true));
        let r = Region { len: 4000, chunks };
        let row = layout_row(&r, 0, r.len, 1.0 / 4000.0, 8);
        assert_eq!(
            row.columns,
            vec![Column {
                x: 0,
                w: 1,
                used: 7
            }]
        );
    }

    #[test]
    fn long_regions_wrap_and_split_chunks_keep_their_look() {
        let small = |len| Region {
            len,
            chunks: vec![chunk(0, len, false)],
        };
        let big = Region {
            len: 1000,
            chunks: vec![chunk(0, 150, false), chunk(150, 850, true)],
        };
        let regions = vec![small(100), small(100), big];
        let all: Vec<&Region> = regions.iter().collect();
        assert_eq!(span(&all), 400, "4 × the median");
        let l = lines(&regions, 1, 400);
        let parts: Vec<(usize, usize, usize)> =
            l.iter().map(|l| (l.index, l.start, l.len)).collect();
        assert_eq!(
            parts,
            vec![
                (0, 0, 100),
                (1, 0, 100),
                (2, 0, 400),
                (2, 400, 400),
                (2, 800, 200)
            ]
        );
        // The free chunk starts on the first line of the big region and is counted there
        // only; on the next line it is still drawn alone, in its own shade.
        let first = layout_row(&regions[2], 0, 400, 1.0, 10);
        let second = layout_row(&regions[2], 400, 400, 1.0, 10);
        assert_eq!((first.alone, second.alone), (2, 0));
        assert_eq!(
            second.stretches,
            vec![Stretch {
                x0: 0,
                x1: 400,
                bytes: 850,
                class: class(850),
                free: true
            }]
        );
        assert_eq!(
            lines(&regions, 2, 400).len(),
            4,
            "every 2nd region: #1 and #3"
        );
    }

    #[test]
    fn an_empty_pool_draws_a_sentence_not_an_axis() {
        let path =
            std::env::temp_dir().join(format!("tagalloc-heapmap-{}.svg", std::process::id()));
        let picture = Picture {
            title: "empty",
            figures: &[],
            regions: &[],
            notes: &[],
        };
        let d = draw(&path, &picture).unwrap();
        assert_eq!((d.rows, d.alone, d.merged), (0, 0, 0));
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("holds no region"));
        assert!(!svg.contains("offset from the region"));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn classes_and_units() {
        assert_eq!(class(100), 1);
        assert_eq!(class(64 << 10), 2);
        assert_eq!(class(3 << 20), 3);
        assert_eq!(unit(2 << 20).1, "MiB");
        assert_eq!(unit(64 << 10).1, "KiB");
    }
}
