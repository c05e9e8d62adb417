//! # Throughput timelines around failures (FaRM Figure 9)
//!
//! A [`Timeline`] counts committed transactions in 1 ms buckets of the
//! system-wide monotonic clock, which the bench's history and every node's
//! `events.jsonl` share (one machine), so the reconfiguration milestones
//! nodes record (suspect, config CAS, config commit, regions active, data
//! recovered) become markers on the same axis. It says how long throughput
//! took to come back to a fraction of its level before a fault, is written
//! as JSON, and is plotted as PNG with plotters.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Bucket width, ms.
pub const BUCKET_MS: u64 = 1;

/// One node milestone on the timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    /// When, ms from the timeline's start.
    pub t_ms: f64,
    /// The node that recorded it.
    pub node: u32,
    /// Its kind (`Suspect`, `ConfigCas`, `Committed`, ...).
    pub event: String,
    /// The full event.
    pub detail: String,
}

/// Commits per 1 ms bucket, with markers and the injected fault.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Bucket width, ms.
    pub bucket_ms: u64,
    /// Start, monotonic ns.
    pub start_mono_ns: u64,
    /// Committed transactions per bucket.
    pub commits: Vec<u32>,
    /// Node milestones, in time order.
    pub markers: Vec<Marker>,
    /// When the fault was injected, ms from the start.
    pub fault_ms: Option<f64>,
    /// What the fault was.
    pub fault: Option<String>,
}

impl Timeline {
    /// Bucket the completion times (monotonic ns) of committed
    /// transactions between `start_mono_ns` and `end_mono_ns`.
    pub fn from_commits(
        start_mono_ns: u64,
        end_mono_ns: u64,
        commits: impl IntoIterator<Item = u64>,
    ) -> Self {
        let width = BUCKET_MS * 1_000_000;
        let n = (end_mono_ns.saturating_sub(start_mono_ns) / width + 1) as usize;
        let mut buckets = vec![0u32; n];
        for t in commits {
            if t >= start_mono_ns && t <= end_mono_ns {
                let i = ((t - start_mono_ns) / width) as usize;
                if let Some(b) = buckets.get_mut(i) {
                    *b += 1;
                }
            }
        }
        Timeline {
            bucket_ms: BUCKET_MS,
            start_mono_ns,
            commits: buckets,
            markers: Vec::new(),
            fault_ms: None,
            fault: None,
        }
    }

    /// Add the events of every `events.jsonl` under `cluster_dir` (one per
    /// node directory) that fall inside the timeline.
    ///
    /// Errors: I/O errors reading a file (lines that do not parse are
    /// skipped: a node killed mid-write leaves a torn last line).
    pub fn add_node_events(&mut self, cluster_dir: &Path) -> std::io::Result<()> {
        let end = self.start_mono_ns + self.commits.len() as u64 * self.bucket_ms * 1_000_000;
        let mut dirs: Vec<_> = std::fs::read_dir(cluster_dir)?
            .flatten()
            .map(|e| e.path().join("events.jsonl"))
            .filter(|p| p.exists())
            .collect();
        dirs.sort();
        for path in dirs {
            let text = std::fs::read_to_string(&path)?;
            for line in text.lines() {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                let (Some(t), Some(node), Some(event)) = (
                    v["mono_ns"].as_u64(),
                    v["node"].as_u64(),
                    v["event"].as_str(),
                ) else {
                    continue;
                };
                if t < self.start_mono_ns || t > end {
                    continue;
                }
                self.markers.push(Marker {
                    t_ms: (t - self.start_mono_ns) as f64 / 1e6,
                    node: node as u32,
                    event: event.to_string(),
                    detail: v["detail"].as_str().unwrap_or("").to_string(),
                });
            }
        }
        self.markers
            .sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms).then(a.node.cmp(&b.node)));
        Ok(())
    }

    /// Mean commits per ms over `[from_ms, to_ms)`.
    pub fn rate(&self, from_ms: f64, to_ms: f64) -> f64 {
        let lo = (from_ms.max(0.0) / self.bucket_ms as f64) as usize;
        let hi = ((to_ms.max(0.0) / self.bucket_ms as f64) as usize).min(self.commits.len());
        if hi <= lo {
            return 0.0;
        }
        let sum: u64 = self.commits[lo..hi].iter().map(|c| *c as u64).sum();
        sum as f64 / (hi - lo) as f64
    }

    /// FaRM Figure 9's recovery time: ms from the fault until throughput,
    /// averaged over `window_ms`, is back to `fraction` of its mean over
    /// the `before_ms` before the fault. `None` if there is no fault or it
    /// never comes back within the timeline.
    pub fn recovery_ms(&self, fraction: f64, before_ms: f64, window_ms: f64) -> Option<f64> {
        let fault = self.fault_ms?;
        let base = self.rate(fault - before_ms, fault);
        if base <= 0.0 {
            return None;
        }
        let mut t = fault;
        let end = self.commits.len() as f64 * self.bucket_ms as f64;
        while t + window_ms <= end {
            if self.rate(t, t + window_ms) >= fraction * base {
                return Some(t - fault);
            }
            t += self.bucket_ms as f64;
        }
        None
    }

    /// The time of the first marker of kind `event` at or after the fault,
    /// and of the last one of that kind, ms (e.g. how long clocks were
    /// disabled: from `Applied` of a CM-changing configuration to
    /// `Committed`).
    pub fn first_after_fault(&self, event: &str) -> Option<f64> {
        let fault = self.fault_ms.unwrap_or(0.0);
        self.markers
            .iter()
            .find(|m| m.event == event && m.t_ms >= fault)
            .map(|m| m.t_ms)
    }

    /// FaRMv2 §4.3's clock-disabled time after the fault, ms: per node,
    /// from its first `ClockDisabled` marker at or after the fault to its
    /// next `ClockEnabled`; the longest over the nodes. `None` if no clock
    /// was disabled (the CM did not change) or none was enabled again.
    pub fn clock_disabled_ms(&self) -> Option<f64> {
        let fault = self.fault_ms.unwrap_or(0.0);
        let mut off: std::collections::BTreeMap<u32, f64> = Default::default();
        let mut longest: Option<f64> = None;
        for m in self.markers.iter().filter(|m| m.t_ms >= fault) {
            match m.event.as_str() {
                "ClockDisabled" => {
                    off.entry(m.node).or_insert(m.t_ms);
                }
                "ClockEnabled" => {
                    if let Some(t) = off.get(&m.node) {
                        let d = m.t_ms - t;
                        longest = Some(longest.map_or(d, |l: f64| l.max(d)));
                    }
                }
                _ => {}
            }
        }
        longest
    }

    /// The time of the last marker of kind `event` at or after the fault,
    /// ms (every node's `RegionsActive`, or `DataRecovered`, has come).
    pub fn last_after_fault(&self, event: &str) -> Option<f64> {
        let fault = self.fault_ms.unwrap_or(0.0);
        self.markers
            .iter()
            .rev()
            .find(|m| m.event == event && m.t_ms >= fault)
            .map(|m| m.t_ms)
    }

    /// Write as JSON.
    ///
    /// Errors: I/O.
    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string(self).map_err(std::io::Error::other)?;
        std::fs::write(path, text)
    }

    /// Plot commits per ms around the fault (`±span_ms`, or everything),
    /// with the fault and the markers as vertical lines, as PNG.
    ///
    /// Errors: plotting errors (for example, no font on the machine), as
    /// text.
    pub fn plot_png(&self, path: &Path, span_ms: Option<f64>) -> Result<(), String> {
        use plotters::prelude::*;
        let total = self.commits.len() as f64 * self.bucket_ms as f64;
        let (from, to) = match (self.fault_ms, span_ms) {
            (Some(f), Some(s)) => ((f - s).max(0.0), (f + 2.0 * s).min(total)),
            _ => (0.0, total),
        };
        let ymax = self
            .commits
            .iter()
            .enumerate()
            .filter(|(i, _)| (*i as f64) >= from && (*i as f64) < to)
            .map(|(_, c)| *c)
            .max()
            .unwrap_or(1)
            .max(1) as f64
            * 1.15;
        let root = BitMapBackend::new(path, (1400, 700)).into_drawing_area();
        let err = |e: &dyn std::fmt::Display| e.to_string();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let title = match &self.fault {
            Some(f) => format!("commits per ms around {f}"),
            None => "commits per ms".to_string(),
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 24))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(from..to, 0.0..ymax)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("time (ms)")
            .y_desc("committed transactions per 1 ms")
            .draw()
            .map_err(|e| err(&e))?;
        chart
            .draw_series(LineSeries::new(
                self.commits
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (i as f64 * self.bucket_ms as f64, *c as f64))
                    .filter(|(t, _)| *t >= from && *t <= to),
                &BLUE,
            ))
            .map_err(|e| err(&e))?
            .label("commits/ms")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        let mut lines: Vec<(f64, String, RGBColor)> = Vec::new();
        if let Some(f) = self.fault_ms {
            lines.push((f, "fault".into(), RED));
        }
        // The first suspicion, CAS, commit; the last node's regions active,
        // replicas filled and clock enabled (one line per kind keeps the
        // plot readable; the JSON has them all).
        let palette = [
            ("Suspect", RGBColor(230, 120, 0), false),
            ("ConfigCas", RGBColor(150, 0, 150), false),
            ("Committed", RGBColor(0, 140, 0), false),
            ("RegionsActive", RGBColor(0, 150, 150), true),
            ("DataRecovered", RGBColor(90, 90, 90), true),
            ("ClockEnabled", RGBColor(200, 0, 0), true),
        ];
        for (kind, color, last) in palette {
            let t = if last {
                self.last_after_fault(kind)
            } else {
                self.first_after_fault(kind)
            };
            if let Some(t) = t {
                lines.push((t, kind.to_string(), color));
            }
        }
        for (t, label, color) in lines {
            if t < from || t > to {
                continue;
            }
            chart
                .draw_series(LineSeries::new(vec![(t, 0.0), (t, ymax)], color))
                .map_err(|e| err(&e))?
                .label(format!("{label} @ {t:.1} ms"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_is_measured_from_the_fault_to_80_percent_of_the_prior_rate() {
        // 10 commits/ms for 100 ms, nothing for 30 ms, then 10/ms again.
        let ms = 1_000_000u64;
        let mut commits = Vec::new();
        for t in (0..100).chain(130..200) {
            for k in 0..10 {
                commits.push(t * ms + k);
            }
        }
        let mut tl = Timeline::from_commits(0, 200 * ms, commits);
        tl.fault_ms = Some(100.0);
        assert_eq!(tl.rate(0.0, 100.0), 10.0);
        let r = tl.recovery_ms(0.8, 50.0, 10.0).expect("recovers");
        // The first 10 ms window at >= 8/ms starts at 128 ms.
        assert!((27.0..=30.0).contains(&r), "{r}");
        tl.fault_ms = None;
        assert_eq!(tl.recovery_ms(0.8, 50.0, 10.0), None);
    }

    fn marker(t_ms: f64, node: u32, event: &str) -> Marker {
        Marker {
            t_ms,
            node,
            event: event.into(),
            detail: String::new(),
        }
    }

    #[test]
    fn the_clock_disabled_time_is_the_longest_per_node_span_after_the_fault() {
        let mut tl = Timeline::from_commits(0, 100_000_000, []);
        tl.fault_ms = Some(10.0);
        tl.markers = vec![
            // Before the fault: ignored.
            marker(5.0, 1, "ClockDisabled"),
            marker(20.0, 2, "ClockDisabled"),
            marker(21.0, 3, "ClockDisabled"),
            marker(24.0, 2, "ClockEnabled"),
            marker(29.5, 3, "ClockEnabled"),
            // Node 1 is enabled after the fault, but disabled before it.
            marker(40.0, 1, "ClockEnabled"),
        ];
        assert_eq!(tl.clock_disabled_ms(), Some(8.5));
        tl.markers.retain(|m| m.event != "ClockEnabled");
        assert_eq!(tl.clock_disabled_ms(), None);
    }
}
