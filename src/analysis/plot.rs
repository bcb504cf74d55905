//! PNG plots of the diagnostics with `plotters`: line charts (one curve per layer or per run) and
//! the angular-distance heatmap with its colour scale.
//!
//! Text is drawn with an embedded subset of DejaVu Sans (`assets/`), so plots need no system fonts.
//! Every file is written through a temporary sibling and renamed: a reader never sees half a PNG.

use std::path::Path;
use std::sync::Once;

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;

const FONT: &[u8] = include_bytes!("../../assets/DejaVuSans-subset.ttf");
const FAMILY: &str = "sans-serif";
const SIZE: (u32, u32) = (960, 640);

/// One curve: its legend label and `(x, y)` points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points in drawing order.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// The points that can be drawn: both coordinates finite.
    fn finite_points(&self) -> Vec<(f64, f64)> {
        self.points.iter().copied().filter(|p| p.0.is_finite() && p.1.is_finite()).collect()
    }

    /// The legend entry: the label, marked `(no data)` when the series has no point to draw.
    pub fn legend_label(&self) -> String {
        if self.finite_points().is_empty() {
            format!("{} (no data)", self.label)
        } else {
            self.label.clone()
        }
    }
}

/// A line chart with a title, axis labels and a legend.
#[derive(Clone, Debug, PartialEq)]
pub struct LineChart {
    /// Title drawn above the chart.
    pub title: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// The curves.
    pub series: Vec<Series>,
    /// Draw the y axis on a log scale (ignored when a value is not positive).
    pub log_y: bool,
}

/// A matrix drawn as coloured cells: `cells[x][k]` is the cell at column `x` and row `y_start + k`
/// (rows may be ragged, as the angular distance's triangle). Non-finite cells are left blank.
#[derive(Clone, Debug, PartialEq)]
pub struct Heatmap {
    /// Title drawn above the chart.
    pub title: String,
    /// Label of the x axis (columns).
    pub x_label: String,
    /// Label of the y axis (rows).
    pub y_label: String,
    /// Label of the colour scale.
    pub value_label: String,
    /// The x value of the first column.
    pub x_start: usize,
    /// The y value of each column's first cell.
    pub y_start: usize,
    /// The cells, column by column.
    pub cells: Vec<Vec<f64>>,
    /// Draw the smallest values bright (yellow) and the largest dark (purple), as the paper's
    /// angular-distance heatmap; `false`: the other way round.
    pub small_is_bright: bool,
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and known to parse; a failure would only mean unreadable text.
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

fn plot_error<E: std::fmt::Display>(error: E) -> std::io::Error {
    std::io::Error::other(format!("cannot draw the plot: {error}"))
}

/// Draws into a temporary `.png` beside `path` (its folder made if missing) and renames it into
/// place.
fn write_png(
    path: &Path,
    draw: impl FnOnce(&DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    register_font();
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| std::io::Error::other("plot path has no file name"))?;
    // As every output of the programs: a missing folder is made (plotters' error would be a dump).
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{}.tmp{}.png", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        {
            let root = BitMapBackend::new(&tmp, SIZE).into_drawing_area();
            root.fill(&WHITE).map_err(plot_error)?;
            draw(&root)?;
            root.present().map_err(plot_error)?;
        }
        // Marked as ours, so that a later chart may replace it and nothing else.
        std::fs::write(&tmp, crate::io::mark_chart(std::fs::read(&tmp)?)?)?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// `[min, max]` of `values` widened by 5% (and made non-empty), for an axis.
fn padded_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (min, max) =
        values.filter(|v| v.is_finite()).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !min.is_finite() {
        return (0.0, 1.0);
    }
    let pad = if max > min { 0.05 * (max - min) } else { 0.5 * min.abs().max(1e-3) };
    (min - pad, max + pad)
}

/// A distinguishable colour for curve `i` of `n`: a categorical palette up to 10 curves, the
/// viridis scale beyond (curves ordered by depth then read as a gradient).
fn series_colour(i: usize, n: usize) -> RGBColor {
    const PALETTE: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    if n <= PALETTE.len() {
        PALETTE[i]
    } else {
        ViridisRGB::get_color(i as f64 / (n - 1).max(1) as f64 * 0.9)
    }
}

impl LineChart {
    /// An empty chart.
    pub fn new(title: impl Into<String>, x_label: impl Into<String>, y_label: impl Into<String>) -> Self {
        Self { title: title.into(), x_label: x_label.into(), y_label: y_label.into(), series: Vec::new(), log_y: false }
    }

    /// Adds a curve.
    pub fn with_series(mut self, label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        self.series.push(Series { label: label.into(), points });
        self
    }

    /// Uses a log-scale y axis when every value is positive.
    pub fn with_log_y(mut self, log_y: bool) -> Self {
        self.log_y = log_y;
        self
    }

    /// Writes the chart as a PNG at `path`.
    pub fn write_png(&self, path: &Path) -> std::io::Result<()> {
        let points = || self.series.iter().flat_map(|s| s.points.iter().copied());
        let (x_min, x_max) = padded_range(points().map(|p| p.0));
        let y_values = || points().map(|p| p.1).filter(|y| y.is_finite());
        let log_y = self.log_y && y_values().all(|y| y > 0.0) && y_values().next().is_some();
        write_png(path, |root| {
            let mut builder = ChartBuilder::on(root);
            builder.caption(&self.title, (FAMILY, 28)).margin(16).x_label_area_size(52).y_label_area_size(84);
            if log_y {
                let min = y_values().fold(f64::INFINITY, f64::min);
                let max = y_values().fold(f64::NEG_INFINITY, f64::max);
                let (lo, hi) = if max > min { (min / 1.25, max * 1.25) } else { (min / 2.0, max * 2.0) };
                let chart = builder.build_cartesian_2d(x_min..x_max, (lo..hi).log_scale()).map_err(plot_error)?;
                self.draw_curves(chart)
            } else {
                let (lo, hi) = padded_range(y_values());
                let chart = builder.build_cartesian_2d(x_min..x_max, lo..hi).map_err(plot_error)?;
                self.draw_curves(chart)
            }
        })
    }

    fn draw_curves<'a, Y>(
        &self,
        mut chart: ChartContext<'a, BitMapBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    ) -> std::io::Result<()>
    where
        Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .x_label_formatter(&|x| format!("{}", (x * 1e6).round() / 1e6))
            .y_label_formatter(&|y| axis_number(*y))
            .label_style((FAMILY, 16))
            .axis_desc_style((FAMILY, 18))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(plot_error)?;
        let n = self.series.len();
        for (i, series) in self.series.iter().enumerate() {
            let colour = series_colour(i, n);
            let finite = series.finite_points();
            chart
                .draw_series(LineSeries::new(finite.clone(), colour.stroke_width(2)))
                .map_err(plot_error)?
                .label(series.legend_label())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3)));
            chart.draw_series(finite.into_iter().map(|p| Circle::new(p, 3, colour.filled()))).map_err(plot_error)?;
        }
        if n > 1 || self.series.first().is_some_and(|s| !s.label.is_empty()) {
            chart
                .configure_series_labels()
                .label_font((FAMILY, 16))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.4))
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(plot_error)?;
        }
        Ok(())
    }
}

impl Heatmap {
    /// Writes the heatmap with a colour scale on its right as a PNG at `path`.
    pub fn write_png(&self, path: &Path) -> std::io::Result<()> {
        let values = || self.cells.iter().flatten().copied().filter(|v| v.is_finite());
        let min = values().fold(f64::INFINITY, f64::min);
        let max = values().fold(f64::NEG_INFINITY, f64::max);
        let (min, max) = if !min.is_finite() {
            (0.0, 1.0)
        } else if max > min {
            (min, max)
        } else {
            (min, min + 1.0)
        };
        let columns = self.cells.len().max(1);
        let rows = self.cells.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let (x_start, y_start) = (self.x_start as f64, self.y_start as f64);
        let reverse = self.small_is_bright;
        let colour_of =
            move |v: f64| ViridisRGB::get_color_normalized(if reverse { max + min - v } else { v }, min, max);
        write_png(path, |root| {
            let (main, scale) = root.split_horizontally(SIZE.0 - 150);
            let mut chart = ChartBuilder::on(&main)
                .caption(&self.title, (FAMILY, 28))
                .margin(16)
                .x_label_area_size(52)
                .y_label_area_size(64)
                .build_cartesian_2d(
                    x_start - 0.5..x_start + columns as f64 - 0.5,
                    y_start - 0.5..y_start + rows as f64 - 0.5,
                )
                .map_err(plot_error)?;
            chart
                .configure_mesh()
                .disable_mesh()
                .x_desc(&self.x_label)
                .y_desc(&self.y_label)
                .x_labels(columns.min(16))
                .y_labels(rows.min(16))
                .x_label_formatter(&|x| format!("{}", x.round() as i64))
                .y_label_formatter(&|y| format!("{}", y.round() as i64))
                .label_style((FAMILY, 16))
                .axis_desc_style((FAMILY, 18))
                .draw()
                .map_err(plot_error)?;
            let cells = self.cells.iter().enumerate().flat_map(|(x, column)| {
                column.iter().enumerate().filter(|(_, v)| v.is_finite()).map(move |(k, &v)| {
                    let (x, y) = (x_start + x as f64, y_start + k as f64);
                    let colour = colour_of(v);
                    Rectangle::new([(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)], colour.filled())
                })
            });
            chart.draw_series(cells).map_err(plot_error)?;

            // The colour scale: a vertical gradient with the value axis on its right.
            let mut bar = ChartBuilder::on(&scale)
                .margin_top(60)
                .margin_bottom(68)
                .margin_right(8)
                .y_label_area_size(0)
                .right_y_label_area_size(70)
                .build_cartesian_2d(0.0..1.0, min..max)
                .map_err(plot_error)?;
            bar.configure_mesh()
                .disable_mesh()
                .disable_x_axis()
                .y_desc(&self.value_label)
                .label_style((FAMILY, 14))
                .axis_desc_style((FAMILY, 16))
                .y_label_formatter(&|v| format!("{v:.2}"))
                .draw()
                .map_err(plot_error)?;
            const STEPS: usize = 100;
            let step = (max - min) / STEPS as f64;
            let gradient = (0..STEPS).map(|i| {
                let lo = min + i as f64 * step;
                Rectangle::new([(0.0, lo), (1.0, lo + step)], colour_of(lo + step / 2.0).filled())
            });
            bar.draw_series(gradient).map_err(plot_error)?;
            Ok(())
        })
    }
}

/// An axis label: three significant digits (a log axis's ticks carry float noise, 0.0100000000001),
/// in exponent form below 0.001 and from 100,000.
fn axis_number(value: f64) -> String {
    let rounded: f64 = format!("{value:.2e}").parse().unwrap_or(value);
    if rounded != 0.0 && !(1e-3..1e5).contains(&rounded.abs()) {
        format!("{rounded:e}")
    } else {
        format!("{rounded}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn axis_numbers_are_short() {
        assert_eq!(super::axis_number(0.0100000000001), "0.01");
        assert_eq!(super::axis_number(0.002), "0.002");
        assert_eq!(super::axis_number(2.5e-4), "2.5e-4");
        assert_eq!(super::axis_number(123456.0), "1.23e5");
        assert_eq!(super::axis_number(0.0), "0");
        assert_eq!(super::axis_number(-3.0), "-3");
    }

    #[test]
    fn a_series_with_nothing_to_draw_is_marked_in_the_legend() {
        let series = |points: Vec<(f64, f64)>| super::Series { label: "lns train".into(), points };
        assert_eq!(series(vec![]).legend_label(), "lns train (no data)");
        assert_eq!(series(vec![(1.0, f64::NAN), (f64::INFINITY, 2.0)]).legend_label(), "lns train (no data)");
        assert_eq!(series(vec![(1.0, f64::NAN), (2.0, 5.5)]).legend_label(), "lns train");
    }
}
