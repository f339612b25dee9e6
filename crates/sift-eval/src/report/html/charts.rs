//! The figures, as SVG: the domain x retriever heatmap, the means with their confidence
//! intervals, and the bars grouped by domain.
use std::fmt::Write as _;

use super::page::esc;

/// White (0) to dark blue (1).
fn color(v: f64) -> String {
    let v = v.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * v).round() as u8;
    format!(
        "rgb({},{},{})",
        lerp(247.0, 8.0),
        lerp(251.0, 48.0),
        lerp(255.0, 107.0)
    )
}

pub(super) fn heatmap_svg(
    task: &str,
    metric: &str,
    domains: &[String],
    labels: &[String],
    cells: &[Vec<Option<f64>>],
) -> String {
    let (cw, ch, left, top) = (56.0, 22.0, 260.0, 110.0);
    let w = left + cw * domains.len() as f64 + 20.0;
    let h = top + ch * labels.len() as f64 + 30.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"heatmap\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"11\"><title>Task {task}: {} by domain and retriever</title>",
        esc(metric)
    );
    for (c, d) in domains.iter().enumerate() {
        let x = left + cw * c as f64 + cw / 2.0;
        let _ = write!(
            s,
            "<text transform=\"translate({x},{}) rotate(-45)\" class=\"domain\">{}</text>",
            top - 6.0,
            esc(d)
        );
    }
    for (r, l) in labels.iter().enumerate() {
        let y = top + ch * r as f64;
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"retriever\">{}</text>",
            left - 6.0,
            y + ch * 0.7,
            esc(l)
        );
        for (c, v) in cells[r].iter().enumerate() {
            let x = left + cw * c as f64;
            match v {
                Some(v) => {
                    let fg = if *v > 0.55 { "#fff" } else { "#000" };
                    let _ = write!(
                        s,
                        "<rect class=\"cell\" x=\"{x}\" y=\"{y}\" width=\"{cw}\" height=\"{ch}\" fill=\"{}\"><title>{} / {}: {:.4}</title></rect>\
                         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{fg}\">{:.1}</text>",
                        color(*v),
                        esc(&domains[c]),
                        esc(l),
                        v,
                        x + cw / 2.0,
                        y + ch * 0.7,
                        v * 100.0
                    );
                }
                None => {
                    let _ = write!(
                        s,
                        "<rect x=\"{x}\" y=\"{y}\" width=\"{cw}\" height=\"{ch}\" fill=\"#eee\"/>"
                    );
                }
            }
        }
    }
    s.push_str("</svg>");
    s
}

/// A qualitative palette (Tableau 10) for retrievers.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// Bars grouped by domain: one bar per retriever in each domain's group, with a legend.
pub(super) fn grouped_svg(
    task: &str,
    metric: &str,
    domains: &[String],
    labels: &[String],
    cells: &[Vec<Option<f64>>],
) -> String {
    let (bw, gap, height, left, top) = (8.0, 10.0, 160.0, 40.0, 20.0);
    let group = bw * labels.len() as f64 + gap;
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0) as f64;
    let w = (left + group * domains.len() as f64 + 20.0).max(left + 20.0 + 6.5 * longest);
    let legend = 16.0 * labels.len() as f64;
    let h = top + height + 90.0 + legend;
    let y = |v: f64| top + height * (1.0 - v.clamp(0.0, 1.0));
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"grouped\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"11\"><title>Task {task}: {} per domain, a bar per retriever</title>",
        esc(metric)
    );
    for t in [0.0, 0.5, 1.0] {
        let _ = write!(
            s,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0}</text>",
            left + group * domains.len() as f64,
            y(t),
            y(t),
            left - 4.0,
            y(t) + 4.0,
            t * 100.0
        );
    }
    for (c, d) in domains.iter().enumerate() {
        let x0 = left + group * c as f64;
        for (r, l) in labels.iter().enumerate() {
            if let Some(v) = cells[r][c] {
                let _ = write!(
                    s,
                    "<rect class=\"gbar\" x=\"{}\" y=\"{}\" width=\"{bw}\" height=\"{}\" fill=\"{}\"><title>{} / {}: {:.4}</title></rect>",
                    x0 + bw * r as f64,
                    y(v),
                    top + height - y(v),
                    PALETTE[r % PALETTE.len()],
                    esc(d),
                    esc(l),
                    v
                );
            }
        }
        let _ = write!(
            s,
            "<text transform=\"translate({},{}) rotate(-45)\" text-anchor=\"end\">{}</text>",
            x0 + group / 2.0,
            top + height + 12.0,
            esc(d)
        );
    }
    for (r, l) in labels.iter().enumerate() {
        let ly = top + height + 80.0 + 16.0 * r as f64;
        let _ = write!(
            s,
            "<rect x=\"{left}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            ly - 9.0,
            PALETTE[r % PALETTE.len()],
            left + 14.0,
            ly,
            esc(l)
        );
    }
    s.push_str("</svg>");
    s
}

pub(super) fn bars_svg(
    task: &str,
    metric: &str,
    labels: &[String],
    bars: &[(f64, f64, (f64, f64))],
) -> String {
    let (bh, left, width) = (20.0, 260.0, 400.0);
    let h = bh * labels.len() as f64 + 40.0;
    let x = |v: f64| left + width * v.clamp(0.0, 1.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bars\" width=\"{}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"11\"><title>Task {task}: mean {} over queries with 95% bootstrap CI</title>",
        left + width + 60.0,
        esc(metric)
    );
    for (r, (l, (_, pooled, (lo, hi)))) in labels.iter().zip(bars).enumerate() {
        let y = 10.0 + bh * r as f64;
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
             <rect class=\"bar\" x=\"{left}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#4a78b5\"><title>{}: {:.4} [{:.4}, {:.4}]</title></rect>\
             <line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#000\"/>\
             <text x=\"{}\" y=\"{}\">{:.1}</text>",
            left - 6.0,
            y + bh * 0.7,
            esc(l),
            y + 3.0,
            x(*pooled) - left,
            bh - 6.0,
            esc(l),
            pooled,
            lo,
            hi,
            x(*lo),
            x(*hi),
            y + bh / 2.0,
            y + bh / 2.0,
            x(*hi) + 4.0,
            y + bh * 0.7,
            pooled * 100.0
        );
    }
    let _ = write!(
        s,
        "<line x1=\"{left}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#888\"/></svg>",
        left + width,
        h - 25.0,
        h - 25.0
    );
    s
}
