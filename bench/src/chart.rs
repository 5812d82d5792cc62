//! An SVG chart of a bench run: throughput bars for the drains and references, and p50/p99
//! bars for the steady-latency runs. Written by hand: two bar charts are a few dozen lines of
//! SVG, where a plotting crate would bring font handling and a long build for nothing more.

use std::fmt::Write as _;

use crate::report::Figure;

const WIDTH: f64 = 900.0;
const LABEL_W: f64 = 330.0;
const ROW_H: f64 = 26.0;
const BAR_H: f64 = 18.0;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One horizontal bar chart: a title and labelled rows of (value, colour) bars.
struct Panel<'a> {
    title: &'a str,
    unit: &'a str,
    rows: Vec<(String, Vec<(f64, &'static str)>)>,
}

impl Panel<'_> {
    fn height(&self) -> f64 {
        40.0 + self.rows.len() as f64 * ROW_H + 10.0
    }

    fn render(&self, out: &mut String, top: f64) {
        let max = self
            .rows
            .iter()
            .flat_map(|(_, bars)| bars.iter().map(|b| b.0))
            .fold(0.0_f64, f64::max)
            .max(1e-9);
        let span = WIDTH - LABEL_W - 110.0;
        let _ = writeln!(
            out,
            r#"<text x="10" y="{:.0}" class="title">{} ({})</text>"#,
            top + 24.0,
            escape(self.title),
            escape(self.unit)
        );
        for (i, (label, bars)) in self.rows.iter().enumerate() {
            let y = top + 40.0 + i as f64 * ROW_H;
            let _ = writeln!(
                out,
                r#"<text x="{:.0}" y="{:.0}" text-anchor="end">{}</text>"#,
                LABEL_W - 8.0,
                y + BAR_H * 0.75,
                escape(label)
            );
            let h = BAR_H / bars.len().max(1) as f64;
            for (j, (value, colour)) in bars.iter().enumerate() {
                let w = (value / max * span).max(1.0);
                let by = y + j as f64 * h;
                let _ = writeln!(
                    out,
                    r#"<rect x="{LABEL_W:.0}" y="{by:.1}" width="{w:.1}" height="{:.1}" fill="{colour}"/><text x="{:.1}" y="{:.1}" class="value">{}</text>"#,
                    h - 1.0,
                    LABEL_W + w + 4.0,
                    by + h * 0.8,
                    format_value(*value)
                );
            }
        }
    }
}

fn format_value(v: f64) -> String {
    if v >= 100.0 {
        let n = v.round() as u64;
        let s = n.to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else {
        format!("{v:.1}")
    }
}

/// Renders the run as a standalone SVG document.
pub fn render(figures: &[Figure], started_at: &str) -> String {
    let throughput = Panel {
        title: "Drain throughput",
        unit: "events/s, higher is better",
        rows: figures
            .iter()
            .filter(|f| f.p50_ms.is_none())
            .filter_map(|f| Some((f.scenario.clone(), vec![(f.events_per_sec?, "#2f7ed8")])))
            .collect(),
    };
    let latency = Panel {
        title: "Commit-to-stream latency: p50 (light), p99 (dark)",
        unit: "ms, lower is better",
        rows: figures
            .iter()
            .filter_map(|f| {
                Some((
                    f.scenario.clone(),
                    vec![(f.p50_ms?, "#f5a25d"), (f.p99_ms?, "#c0392b")],
                ))
            })
            .collect(),
    };
    let height = 40.0 + throughput.height() + latency.height();
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0}" height="{height:.0}" viewBox="0 0 {WIDTH:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    out.push_str(
        "<style>.title{font-weight:bold;font-size:14px}.value{font-size:11px;fill:#333}</style>\n",
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/><text x="10" y="20" class="title">outbox-relay bench, {}</text>"#,
        escape(started_at)
    );
    throughput.render(&mut out, 30.0);
    latency.render(&mut out, 30.0 + throughput.height());
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_has_a_bar_per_figure_and_escapes_names() {
        let figures = vec![
            Figure {
                scenario: "drain <keep>".into(),
                events_per_sec: Some(30_000.0),
                ..Figure::default()
            },
            Figure {
                scenario: "latency at 1000/s".into(),
                events_per_sec: Some(1000.0),
                p50_ms: Some(2.0),
                p99_ms: Some(8.0),
                ..Figure::default()
            },
        ];
        let svg = render(&figures, "now");
        assert_eq!(svg.matches("<rect x=").count(), 3);
        assert!(svg.contains("drain &lt;keep&gt;"));
        assert!(svg.contains(">30,000<"));
        assert!(!svg.contains("<keep>"));
    }
}
