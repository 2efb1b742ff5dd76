//! The counterexample's plots, drawn by `plotters` into SVG strings that `index.html`
//! embeds inline: the fault timeline (one lane per fault name with its windows as bands and
//! its instants as ticks, one lane per fault-effect kind with a tick per effect) and line
//! charts on the same time axis (throughput, lag, latency), each shaded with the fault
//! windows as Jepsen's plots shade nemesis intervals.
//!
//! Every chart is [`PLOT_WIDTH_PX`] wide with the same label areas, so their time axes line
//! up when stacked. Text is laid out by plotters' built-in metrics (no font files).

use super::timeline::{Series, Timeline};
use plotters::prelude::*;
use std::collections::BTreeSet;

/// Width of every chart, px.
pub const PLOT_WIDTH_PX: u32 = 960;

/// Height of a line chart, px.
pub const LINE_CHART_HEIGHT_PX: u32 = 220;

/// Height of one timeline lane, px.
const LANE_HEIGHT_PX: u32 = 22;

/// Left label area of every chart, px: wide enough for `messages.drop-response`.
const Y_LABEL_AREA_PX: u32 = 170;

/// Effect ticks drawn per lane; the rest are left out (the count is in the lane's label).
pub const TICKS_PER_LANE_MAX: usize = 2_000;

/// Colours of the line series, in order.
const LINE_COLOURS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// A chart plotters could not draw.
#[derive(Debug, thiserror::Error)]
#[error("plotters: {0}")]
pub struct PlotError(String);

fn draw_error<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> PlotError {
    PlotError(e.to_string())
}

/// A lane's colour: faults by family (process faults red, network faults blue, clocks
/// green), effects grey.
fn lane_colour(lane: &str) -> RGBColor {
    match lane {
        "kill" | "kill-leader" | "task-crash" => RGBColor(214, 39, 40),
        "pause" => RGBColor(255, 127, 14),
        "partition" | "clog" | "messages" => RGBColor(31, 119, 180),
        "clock-jump" => RGBColor(44, 160, 44),
        _ => RGBColor(120, 120, 120),
    }
}

/// The timeline's lanes, top to bottom: fault names (bands and instants), then effect
/// kinds as `effect <kind> (N)`.
fn lanes(t: &Timeline) -> (Vec<String>, Vec<String>) {
    let faults: BTreeSet<&str> = t
        .bands
        .iter()
        .map(|b| b.name.as_str())
        .chain(t.instants.iter().map(|i| i.lane.as_str()))
        .collect();
    let effects: BTreeSet<&str> = t.effects.iter().map(|e| e.lane.as_str()).collect();
    (
        faults.into_iter().map(str::to_string).collect(),
        effects.into_iter().map(str::to_string).collect(),
    )
}

/// The fault timeline over `[0, t.end_s]`: one lane per fault name, windows as shaded
/// bands and instantaneous faults as ticks, then one lane per effect kind with a tick per
/// effect (up to [`TICKS_PER_LANE_MAX`]). `x_desc` names the time axis.
///
/// # Errors
/// [`PlotError`] when plotters fails to draw.
pub fn timeline_svg(t: &Timeline, x_desc: &str) -> Result<String, PlotError> {
    let (faults, effects) = lanes(t);
    let mut names: Vec<String> = faults.clone();
    for kind in &effects {
        let n = t.effects.iter().filter(|e| &e.lane == kind).count();
        names.push(format!("effect {kind} ({n})"));
    }
    if names.is_empty() {
        names.push("no fault".to_string());
    }
    let lane_count = names.len() as u32;
    let height = 70 + LANE_HEIGHT_PX * lane_count;
    let end_s = t.end_s.max(0.001);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (PLOT_WIDTH_PX, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("fault timeline", ("sans-serif", 15))
            .margin(6)
            .x_label_area_size(32)
            .y_label_area_size(Y_LABEL_AREA_PX)
            .build_cartesian_2d(0f64..end_s, (0u32..lane_count).into_segmented())
            .map_err(draw_error)?;
        let label = |v: &SegmentValue<u32>| match v {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(names.len())
            .y_label_formatter(&label)
            .x_desc(x_desc)
            .draw()
            .map_err(draw_error)?;
        let lane_of = |name: &str| faults.iter().position(|f| f == name).unwrap_or(0) as u32;
        let band = |lane: u32, start: f64, end: f64, style: ShapeStyle| {
            Rectangle::new(
                [
                    (start, SegmentValue::Exact(lane)),
                    (
                        end.max(start + end_s / 1000.0),
                        SegmentValue::Exact(lane + 1),
                    ),
                ],
                style,
            )
        };
        chart
            .draw_series(t.bands.iter().map(|b| {
                let style = lane_colour(&b.name).mix(0.45).filled();
                band(lane_of(&b.name), b.start_s, b.end_s, style)
            }))
            .map_err(draw_error)?;
        chart
            .draw_series(t.instants.iter().map(|i| {
                let style = lane_colour(&i.lane).filled();
                band(lane_of(&i.lane), i.time_s, i.time_s, style)
            }))
            .map_err(draw_error)?;
        for (n, kind) in effects.iter().enumerate() {
            let lane = (faults.len() + n) as u32;
            let ticks = t
                .effects
                .iter()
                .filter(|e| &e.lane == kind)
                .take(TICKS_PER_LANE_MAX);
            let style = lane_colour(kind).filled();
            chart
                .draw_series(ticks.map(|e| band(lane, e.time_s, e.time_s, style)))
                .map_err(draw_error)?;
        }
        root.present().map_err(draw_error)?;
    }
    Ok(svg)
}

/// One line of a chart: its legend label and its (time s, value) points.
pub type Line = (String, Vec<(f64, f64)>);

/// A line chart over `[0, t.end_s]` with `t`'s fault windows shaded behind the lines.
///
/// # Errors
/// [`PlotError`] when plotters fails to draw.
pub fn line_chart_svg(
    caption: &str,
    y_desc: &str,
    x_desc: &str,
    t: &Timeline,
    lines: &[Line],
) -> Result<String, PlotError> {
    let end_s = t.end_s.max(0.001);
    let y_max = lines
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.1))
        .fold(1.0f64, f64::max)
        * 1.1;
    let mut svg = String::new();
    {
        let size = (PLOT_WIDTH_PX, LINE_CHART_HEIGHT_PX);
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 15))
            .margin(6)
            .x_label_area_size(32)
            .y_label_area_size(Y_LABEL_AREA_PX)
            .build_cartesian_2d(0f64..end_s, 0f64..y_max)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .draw()
            .map_err(draw_error)?;
        chart
            .draw_series(t.bands.iter().map(|b| {
                let style = lane_colour(&b.name).mix(0.12).filled();
                Rectangle::new([(b.start_s, 0.0), (b.end_s, y_max)], style)
            }))
            .map_err(draw_error)?;
        for (n, (label, points)) in lines.iter().enumerate() {
            let colour = LINE_COLOURS[n % LINE_COLOURS.len()];
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    colour.stroke_width(2),
                ))
                .map_err(draw_error)?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], colour));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()
            .map_err(draw_error)?;
        root.present().map_err(draw_error)?;
    }
    Ok(svg)
}

/// The three line charts of a counterexample under its timeline: throughput (one line per
/// operation), the lag proxy and the latency (median and maximum per bucket), in that
/// order, each with its caption.
///
/// # Errors
/// [`PlotError`] when plotters fails to draw one of them.
pub fn series_svgs(t: &Timeline, s: &Series, x_desc: &str) -> Result<Vec<String>, PlotError> {
    let mid = |i: usize| s.bucket_mid_s(i);
    let throughput: Vec<Line> = s
        .throughput
        .iter()
        .map(|(f, v)| {
            let points = v.iter().enumerate().map(|(i, y)| (mid(i), *y)).collect();
            (format!("{f} ok/s"), points)
        })
        .collect();
    let caption = format!("throughput (ok ops/s, {:.3} s buckets)", s.bucket_s);
    let lag_points = s
        .lag
        .iter()
        .enumerate()
        .map(|(i, n)| ((i + 1) as f64 * s.bucket_s, *n as f64))
        .collect();
    let lag_label = match s.delivered_by {
        Some(f) => format!("acknowledged, not yet in an ok {f}"),
        None => "acknowledged (no sink op in the history)".to_string(),
    };
    let median = s.latency_ms.iter().map(|(i, m, _)| (mid(*i), *m)).collect();
    let max = s.latency_ms.iter().map(|(i, _, x)| (mid(*i), *x)).collect();
    Ok(vec![
        line_chart_svg(&caption, "ops/s", x_desc, t, &throughput)?,
        line_chart_svg(
            "consumer lag (records produced, not yet in the sink)",
            "records",
            x_desc,
            t,
            &[(lag_label, lag_points)],
        )?,
        line_chart_svg(
            "end-to-end latency (send invoked to first delivery, by delivery time)",
            "ms",
            x_desc,
            t,
            &[("median".to_string(), median), ("max".to_string(), max)],
        )?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::timeline::{FaultBand, Tick};

    fn sample() -> Timeline {
        Timeline {
            end_s: 10.0,
            bands: vec![FaultBand {
                name: "kill".into(),
                detail: "target=[broker-1]".into(),
                start_s: 2.0,
                end_s: 4.0,
                closed: true,
            }],
            instants: vec![],
            effects: vec![Tick {
                lane: "messages.delay".into(),
                time_s: 5.0,
            }],
        }
    }

    #[test]
    fn the_timeline_has_a_lane_per_fault_and_effect_kind_and_a_rect_per_band() {
        let svg = timeline_svg(&sample(), "time (s)").unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert!(
            svg.contains(">\nkill\n</text>"),
            "the fault lane is labelled"
        );
        assert!(svg.contains(">\neffect messages.delay (1)\n</text>"));
        // The background, the plotting area, then one band and one tick at least.
        assert!(svg.matches("<rect").count() >= 3);
    }

    #[test]
    fn a_line_chart_draws_each_line_as_a_polyline_with_its_points() {
        let points = vec![(0.5, 1.0), (1.5, 3.0), (2.5, 2.0)];
        let lines = [("send ok/s".to_string(), points)];
        let svg = line_chart_svg("throughput", "ops/s", "t", &sample(), &lines).unwrap();
        let polyline = svg
            .lines()
            .find(|l| l.contains("<polyline") && l.contains("stroke-width=\"2\""))
            .expect("a polyline for the series");
        let points = polyline.split("points=\"").nth(1).unwrap();
        let points = points.split('"').next().unwrap();
        assert_eq!(points.split_whitespace().count(), 3, "{polyline}");
        assert!(
            svg.contains(">\nsend ok/s\n</text>"),
            "the legend names the line"
        );
    }
}
