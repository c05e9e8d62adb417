//! # Throughput and latency against sessions
//!
//! One workload, several targets, session counts from 1 to 256: each
//! target is loaded once and then run for a few seconds at each count by
//! the same closed loop ([`crate::drive`]). The points go to JSON and to a
//! PNG with three panels (throughput, p50 latency, p99 latency, all
//! against sessions on a log₂ axis), one line per target.

use crate::drive::Mix;
use crate::peers::Peer;
use crate::run::BenchResult;
use meridian_client::Client;
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;

/// One run of the sweep.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// The target's label (`meridian (disk)`, `postgres`, …).
    pub target: String,
    /// Concurrent sessions.
    pub sessions: usize,
    /// Committed transactions per second.
    pub tx_per_s: f64,
    /// Median latency of committed transactions, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Aborts / (commits + aborts).
    pub abort_rate: f64,
}

impl Point {
    fn of(target: &str, r: &BenchResult) -> Point {
        let all = r.latency.get("all");
        Point {
            target: target.into(),
            sessions: r.clients,
            tx_per_s: r.committed_per_s,
            p50_us: all.map_or(0.0, |l| l.p50_us),
            p99_us: all.map_or(0.0, |l| l.p99_us),
            abort_rate: r.abort_rate,
        }
    }
}

/// Run `mix` on Meridian at each session count, `secs` each (`servers`:
/// as [`crate::run::meridian`]).
pub async fn meridian(
    client: &Client,
    label: &str,
    mix: Arc<Mix>,
    sessions: &[usize],
    secs: u64,
    servers: &crate::cpu::Servers,
) -> Vec<Point> {
    let mut out = Vec::new();
    for &n in sessions {
        let ran = crate::run::meridian(
            client,
            &format!("{label} x{n}"),
            mix.clone(),
            n,
            secs,
            0x5eed,
            servers,
        )
        .await;
        out.push(Point::of(label, &ran.result));
    }
    out
}

/// Run `mix` on a (loaded) peer at each session count, `secs` each.
///
/// Errors: a session could not connect.
pub async fn peer(
    peer: &Peer,
    mix: Arc<Mix>,
    sessions: &[usize],
    secs: u64,
) -> Result<Vec<Point>, String> {
    let mut out = Vec::new();
    for &n in sessions {
        let ran = peer.run(mix.clone(), n, secs, 0x5eed).await?;
        out.push(Point::of(peer.name(), &ran.result));
    }
    Ok(out)
}

/// The targets' lines, in first-appearance order.
fn series(points: &[Point]) -> Vec<(String, Vec<&Point>)> {
    let mut out: Vec<(String, Vec<&Point>)> = Vec::new();
    for p in points {
        match out.iter_mut().find(|(t, _)| *t == p.target) {
            Some((_, v)) => v.push(p),
            None => out.push((p.target.clone(), vec![p])),
        }
    }
    out
}

/// Plot the sweep as PNG: throughput, p50 and p99 against sessions.
///
/// Errors: plotting errors (for example, no font on the machine), as text.
pub fn plot_png(points: &[Point], title: &str, path: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let lines = series(points);
    let xmax = points.iter().map(|p| p.sessions).max().unwrap_or(1).max(2) as f64;
    let root = BitMapBackend::new(path, (1500, 1350)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 26))
        .map_err(|e| err(&e))?;
    let panels = root.split_evenly((3, 1));
    let palette = [
        RGBColor(0, 90, 200),
        RGBColor(0, 160, 220),
        RGBColor(210, 40, 40),
        RGBColor(0, 140, 60),
        RGBColor(150, 60, 170),
        RGBColor(230, 130, 0),
    ];
    type Pick = fn(&Point) -> f64;
    let specs: [(&str, Pick, bool); 3] = [
        ("committed transactions per second", |p| p.tx_per_s, false),
        ("p50 latency (µs)", |p| p.p50_us, true),
        ("p99 latency (µs)", |p| p.p99_us, true),
    ];
    for (area, (ydesc, pick, log_y)) in panels.iter().zip(specs) {
        let ys: Vec<f64> = points.iter().map(pick).filter(|y| *y > 0.0).collect();
        let ymax = ys.iter().cloned().fold(1.0, f64::max) * 1.3;
        let ymin = ys
            .iter()
            .cloned()
            .fold(f64::MAX, f64::min)
            .min(ymax / 10.0)
            .max(1.0)
            / 1.3;
        let mut builder = ChartBuilder::on(area);
        builder
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80);
        let x = (1.0..xmax * 1.1).log_scale();
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc("sessions")
                    .y_desc(ydesc)
                    .draw()
                    .map_err(|e| err(&e))?;
                for (i, (target, pts)) in lines.iter().enumerate() {
                    let color = palette[i % palette.len()];
                    let data: Vec<(f64, f64)> = pts
                        .iter()
                        .map(|p| (p.sessions as f64, pick(p)))
                        .filter(|(_, y)| *y > 0.0)
                        .collect();
                    chart
                        .draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))
                        .map_err(|e| err(&e))?
                        .label(target.clone())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                        });
                    chart
                        .draw_series(
                            data.into_iter()
                                .map(|(x, y)| Circle::new((x, y), 3, color.filled())),
                        )
                        .map_err(|e| err(&e))?;
                }
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()
                    .map_err(|e| err(&e))?;
            }};
        }
        if log_y {
            draw!(builder
                .build_cartesian_2d(x, (ymin..ymax).log_scale())
                .map_err(|e| err(&e))?);
        } else {
            draw!(builder
                .build_cartesian_2d(x, 0.0..ymax)
                .map_err(|e| err(&e))?);
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_group_by_target_in_order_and_plot() {
        let mk = |t: &str, n: usize, tps: f64| Point {
            target: t.into(),
            sessions: n,
            tx_per_s: tps,
            p50_us: 100.0 * n as f64,
            p99_us: 400.0 * n as f64,
            abort_rate: 0.0,
        };
        let pts = vec![
            mk("a", 1, 10.0),
            mk("b", 1, 5.0),
            mk("a", 2, 20.0),
            mk("b", 2, 6.0),
        ];
        let s = series(&pts);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].0, "a");
        assert_eq!(
            s[0].1.iter().map(|p| p.sessions).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(
            s[1].1.iter().map(|p| p.tx_per_s).collect::<Vec<_>>(),
            vec![5.0, 6.0]
        );
        let path = std::env::temp_dir().join(format!("meridian-sweep-{}.png", std::process::id()));
        match plot_png(&pts, "test", &path) {
            Ok(()) => {
                let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                let _ = std::fs::remove_file(&path);
                assert!(len > 1000, "an empty PNG");
            }
            // No font on this machine: plotting text fails; the grouping
            // above is still checked.
            Err(e) => eprintln!("plot skipped: {e}"),
        }
    }
}
