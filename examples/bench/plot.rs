//! The fairness picture: when each partition was served, VTRR against a FIFO
//! list, and (below) the weight served per partition of different shares,
//! drawn as an SVG by hand (a few hundred rectangles and three lines need no
//! plotting library, and an SVG shows in the README as it is).

use std::fmt::Write as _;

/// One queue's service order: the positions (0-based, in the order items
/// were served) at which the heavy partition and each light one got an item.
pub struct Panel<'a> {
    pub title: &'a str,
    pub heavy: Vec<usize>,
    pub light: Vec<Vec<usize>>,
}

/// Service by share: the weight each partition had been served after each
/// item served, while every partition was backlogged.
pub struct SharesPanel<'a> {
    pub title: &'a str,
    /// (share, weight served so far after each item served: one entry per
    /// item served, every series equally long).
    pub series: Vec<(u64, Vec<u64>)>,
}

const WIDTH: usize = 900;
const LEFT: usize = 110;
const RIGHT: usize = 20;
const PLOT_WIDTH: usize = WIDTH - LEFT - RIGHT;
const HEAVY_HEIGHT: usize = 14;
const LIGHT_ROW: usize = 2;
const GAP: usize = 6;
const PANEL_TOP: usize = 26;
const PANEL_BOTTOM: usize = 44;
const HEAVY_COLOUR: &str = "#9aa5b1";
const LIGHT_COLOUR: &str = "#1f6feb";
const SHARES_HEIGHT: usize = 180;
const SHARE_COLOURS: [&str; 4] = ["#9aa5b1", "#1f6feb", "#d97706", "#16a34a"];

/// An SVG with one panel per queue, stacked, on a shared x axis: items served
/// so far. Each row is a partition; a mark is drawn where it was served.
/// `shares`, when given, adds a panel below with its own x axis.
pub fn service_order_svg(
    caption: &str,
    panels: &[Panel<'_>],
    shares: Option<&SharesPanel<'_>>,
) -> String {
    let served = panels
        .iter()
        .flat_map(|p| p.light.iter().flatten().chain(&p.heavy))
        .max()
        .map_or(1, |last| last + 1);
    let rows = panels.iter().map(|p| p.light.len()).max().unwrap_or(0);
    let panel_height = PANEL_TOP + HEAVY_HEIGHT + GAP + rows * LIGHT_ROW + PANEL_BOTTOM;
    let shares_height = PANEL_TOP + SHARES_HEIGHT + PANEL_BOTTOM;
    let height = 40 + panels.len() * panel_height + shares.map_or(0, |_| shares_height);
    let mut svg = String::new();
    writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    )
    .unwrap();
    writeln!(
        svg,
        r#"<rect width="{WIDTH}" height="{height}" fill="white"/>"#
    )
    .unwrap();
    writeln!(
        svg,
        r#"<text x="{LEFT}" y="24" font-size="14" font-weight="bold">{}</text>"#,
        escape(caption)
    )
    .unwrap();
    for (index, panel) in panels.iter().enumerate() {
        let top = 40 + index * panel_height;
        let heavy_top = top + PANEL_TOP;
        let light_top = heavy_top + HEAVY_HEIGHT + GAP;
        let axis_y = light_top + rows * LIGHT_ROW + 6;
        let finished = panel
            .light
            .iter()
            .flatten()
            .max()
            .map_or(0, |last| last + 1);
        writeln!(
            svg,
            r#"<text x="{LEFT}" y="{}" font-weight="bold">{}</text><text x="{}" y="{}" text-anchor="end">every light item served within the first {finished} items</text>"#,
            top + 16,
            escape(panel.title),
            LEFT + PLOT_WIDTH,
            top + 16
        )
        .unwrap();
        writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">heavy</text><text x="{}" y="{}" text-anchor="end">{} light</text>"#,
            LEFT - 8,
            heavy_top + HEAVY_HEIGHT - 3,
            LEFT - 8,
            light_top + rows * LIGHT_ROW / 2 + 4,
            panel.light.len()
        )
        .unwrap();
        draw_row(
            &mut svg,
            &panel.heavy,
            served,
            heavy_top,
            HEAVY_HEIGHT,
            HEAVY_COLOUR,
        );
        for (row, positions) in panel.light.iter().enumerate() {
            draw_row(
                &mut svg,
                positions,
                served,
                light_top + row * LIGHT_ROW,
                LIGHT_ROW,
                LIGHT_COLOUR,
            );
        }
        draw_axis(&mut svg, served, axis_y);
    }
    if let Some(shares) = shares {
        draw_shares(&mut svg, shares, 40 + panels.len() * panel_height);
    }
    svg.push_str("</svg>\n");
    svg
}

/// The shares panel at `top`: weight served so far (y) against items served
/// so far (x), one line per partition, and a dashed line where its share of
/// the total would put it.
fn draw_shares(svg: &mut String, panel: &SharesPanel<'_>, top: usize) {
    let served = panel.series.iter().map(|(_, s)| s.len()).max().unwrap_or(0);
    let most = panel
        .series
        .iter()
        .filter_map(|(_, s)| s.last().copied())
        .max()
        .unwrap_or(0)
        .max(1) as usize;
    let step = tick_step(most);
    let y_max = most.div_ceil(step) * step;
    let plot_top = top + PANEL_TOP;
    let axis_y = plot_top + SHARES_HEIGHT;
    let y_of = |value: f64| axis_y as f64 - value * SHARES_HEIGHT as f64 / y_max as f64;
    let finals: Vec<String> = panel
        .series
        .iter()
        .map(|(_, s)| s.last().copied().unwrap_or(0).to_string())
        .collect();
    let shares: Vec<String> = panel.series.iter().map(|(s, _)| s.to_string()).collect();
    writeln!(
        svg,
        r#"<text x="{LEFT}" y="{}" font-weight="bold">{}</text><text x="{}" y="{}" text-anchor="end">weight served {} (shares {})</text>"#,
        top + 16,
        escape(panel.title),
        LEFT + PLOT_WIDTH,
        top + 16,
        finals.join(" : "),
        shares.join(" : "),
    )
    .unwrap();
    // The y axis, its ticks and a light grid.
    writeln!(
        svg,
        r#"<line x1="{LEFT}" y1="{plot_top}" x2="{LEFT}" y2="{axis_y}" stroke="black"/><text x="{}" y="{}" text-anchor="middle" transform="rotate(-90 {} {})">weight served</text>"#,
        LEFT - 62,
        plot_top + SHARES_HEIGHT / 2,
        LEFT - 62,
        plot_top + SHARES_HEIGHT / 2,
    )
    .unwrap();
    for value in (step..=y_max).step_by(step) {
        let y = y_of(value as f64);
        writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#e5e7eb"/><line x1="{}" y1="{y:.1}" x2="{LEFT}" y2="{y:.1}" stroke="black"/><text x="{}" y="{:.1}" text-anchor="end">{value}</text>"##,
            LEFT + PLOT_WIDTH,
            LEFT - 4,
            LEFT - 8,
            y + 4.0,
        )
        .unwrap();
    }
    if served == 0 {
        draw_axis(svg, 1, axis_y);
        return;
    }
    let total_share: u64 = panel.series.iter().map(|(s, _)| s).sum();
    for (index, (share, cumulative)) in panel.series.iter().enumerate() {
        let colour = SHARE_COLOURS[index % SHARE_COLOURS.len()];
        // One point per pixel column: the weight served after the items
        // served up to that column.
        let points: Vec<String> = (0..=PLOT_WIDTH)
            .map(|column| {
                let items = column * served / PLOT_WIDTH;
                let value = if items == 0 { 0 } else { cumulative[items - 1] };
                format!("{},{:.1}", LEFT + column, y_of(value as f64))
            })
            .collect();
        writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="3"/>"#,
            points.join(" ")
        )
        .unwrap();
        let ideal = served as f64 * *share as f64 / total_share as f64;
        writeln!(
            svg,
            r#"<line x1="{LEFT}" y1="{axis_y}" x2="{}" y2="{:.1}" stroke="black" stroke-width="1" stroke-dasharray="4 3"/>"#,
            LEFT + PLOT_WIDTH,
            y_of(ideal)
        )
        .unwrap();
        // The legend, top left, where the lines (from the origin) are not.
        let last = cumulative.last().copied().unwrap_or(0);
        let legend_y = plot_top + 30 + index * 16;
        writeln!(
            svg,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{colour}" stroke-width="3"/><text x="{}" y="{}">share {share}: weight {last}</text>"#,
            LEFT + 8,
            legend_y - 4,
            LEFT + 30,
            legend_y - 4,
            LEFT + 36,
            legend_y,
        )
        .unwrap();
    }
    writeln!(
        svg,
        r#"<text x="{}" y="{}">dashed: share ÷ total shares × items served</text>"#,
        LEFT + 8,
        plot_top + 12
    )
    .unwrap();
    draw_axis(svg, served, axis_y);
}

/// Marks a row's positions; each covers its share of the pixel columns, and
/// touching marks merge into one rectangle (a 100,000-item row is one).
fn draw_row(
    svg: &mut String,
    positions: &[usize],
    served: usize,
    y: usize,
    height: usize,
    colour: &str,
) {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &position in positions {
        let start = position * PLOT_WIDTH / served;
        let end = ((position + 1) * PLOT_WIDTH)
            .div_ceil(served)
            .max(start + 1);
        match runs.last_mut() {
            Some((_, last_end)) if start <= *last_end => *last_end = (*last_end).max(end),
            _ => runs.push((start, end)),
        }
    }
    for (start, end) in runs {
        writeln!(
            svg,
            r#"<rect x="{}" y="{y}" width="{}" height="{height}" fill="{colour}"/>"#,
            LEFT + start,
            end - start
        )
        .unwrap();
    }
}

/// The x axis from 0 to `served`, ticked at round numbers (1, 2 or 5 times
/// a power of ten, at least four ticks).
fn draw_axis(svg: &mut String, served: usize, y: usize) {
    writeln!(
        svg,
        r#"<line x1="{LEFT}" y1="{y}" x2="{}" y2="{y}" stroke="black"/>"#,
        LEFT + PLOT_WIDTH
    )
    .unwrap();
    let step = tick_step(served);
    for value in (0..=served).step_by(step) {
        let x = LEFT + value * PLOT_WIDTH / served;
        writeln!(
            svg,
            r#"<line x1="{x}" y1="{y}" x2="{x}" y2="{}" stroke="black"/><text x="{x}" y="{}" text-anchor="middle">{value}</text>"#,
            y + 4,
            y + 17
        )
        .unwrap();
    }
    writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">items served so far</text>"#,
        LEFT + PLOT_WIDTH / 2,
        y + 32
    )
    .unwrap();
}

/// A round tick step for an axis from 0 to `max`: 1, 2 or 5 times a power
/// of ten, at least four ticks.
fn tick_step(max: usize) -> usize {
    let most = (max / 4).max(1);
    let power = 10usize.pow(most.ilog10());
    [5, 2, 1]
        .into_iter()
        .map(|m| m * power)
        .find(|&step| step <= most)
        .unwrap_or(power)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
