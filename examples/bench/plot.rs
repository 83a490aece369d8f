//! The fairness picture: when each partition was served, VTRR against a FIFO
//! list, drawn as an SVG by hand (a few hundred rectangles need no plotting
//! library, and an SVG shows in the README as it is).

use std::fmt::Write as _;

/// One queue's service order: the positions (0-based, in the order items
/// were served) at which the heavy partition and each light one got an item.
pub struct Panel<'a> {
    pub title: &'a str,
    pub heavy: Vec<usize>,
    pub light: Vec<Vec<usize>>,
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

/// An SVG with one panel per queue, stacked, on a shared x axis: items served
/// so far. Each row is a partition; a mark is drawn where it was served.
pub fn service_order_svg(caption: &str, panels: &[Panel<'_>]) -> String {
    let served = panels
        .iter()
        .flat_map(|p| p.light.iter().flatten().chain(&p.heavy))
        .max()
        .map_or(1, |last| last + 1);
    let rows = panels.iter().map(|p| p.light.len()).max().unwrap_or(0);
    let panel_height = PANEL_TOP + HEAVY_HEIGHT + GAP + rows * LIGHT_ROW + PANEL_BOTTOM;
    let height = 40 + panels.len() * panel_height;
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
    svg.push_str("</svg>\n");
    svg
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
    let most = (served / 4).max(1);
    let power = 10usize.pow(most.ilog10());
    let step = [5, 2, 1]
        .into_iter()
        .map(|m| m * power)
        .find(|&step| step <= most)
        .unwrap_or(power);
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

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
