package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// series is one line of a plot.
type series struct {
	name   string // "" keeps it out of the legend
	points plotter.XYs
	marked bool // measured points: each drawn as a marker on the line
	dashed bool // a reference line: grey unless color says otherwise
	dotted bool // a target or a budget: red
	color  int  // for a dashed line: a palette color (plotutil.Color) instead of grey; 0 is grey
}

// panel is one plot of a figure.
type panel struct {
	title, x, y string
	logX, logY  bool
	// xTicks, when set, are the x values measured: the x axis has a tick,
	// labelled, at each of them (at most maxTickLabels labels: beyond, every
	// few), and no other.
	xTicks []float64
	lines  []series
}

// maxTickLabels is the most labels an x axis with xTicks gets; the ticks
// between labelled ones stay, unlabelled.
const maxTickLabels = 24

// Figure geometry: each panel is a plot with its legend beside it, in a
// strip of the figure's right-hand side, never over the data.
const (
	figureWidth  = 11 * vg.Inch
	panelHeight  = 3.5 * vg.Inch
	legendMargin = vg.Centimeter / 2
)

// checkPlotPath reports a path whose extension picks no format of
// savePlots: the commands check it before they run for seconds.
func checkPlotPath(path string) error {
	if ext := strings.ToLower(filepath.Ext(path)); ext != ".png" && ext != ".svg" {
		return fmt.Errorf("plot %s: want a .png or .svg file", path)
	}
	return nil
}

// savePlots draws panels stacked vertically into path; its extension (.png
// or .svg) picks the format.
func savePlots(path string, panels ...panel) error {
	if err := checkPlotPath(path); err != nil {
		return err
	}
	ext := strings.ToLower(filepath.Ext(path))
	height := panelHeight * vg.Length(len(panels))
	var canvas vg.CanvasWriterTo
	if ext == ".svg" {
		canvas = vgsvg.New(figureWidth, height)
	} else {
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(figureWidth, height)}
	}
	figure, err := layout(draw.New(canvas), panels)
	if err != nil {
		return err
	}
	for _, f := range figure {
		f.plot.Draw(f.plotArea)
		f.legend.Draw(f.legendArea)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := canvas.WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return f.Close()
}

// drawnPanel is a panel laid out on a figure: its plot and where it goes,
// its legend and where that goes.
type drawnPanel struct {
	plot       *plot.Plot
	plotArea   draw.Canvas
	legend     plot.Legend
	legendArea draw.Canvas
}

// layout places panels on dc, one above the other: each plot on the left,
// their data areas aligned, and each legend in a strip on the right as wide
// as the widest legend, so that no legend covers a line.
func layout(dc draw.Canvas, panels []panel) ([]drawnPanel, error) {
	out := make([]drawnPanel, len(panels))
	plots := make([][]*plot.Plot, len(panels))
	var strip vg.Length
	for i, pn := range panels {
		p, legend, err := pn.plot()
		if err != nil {
			return nil, err
		}
		plots[i] = []*plot.Plot{p}
		out[i].plot, out[i].legend = p, legend
		strip = max(strip, legend.Rectangle(dc).Size().X)
	}
	strip += 2 * legendMargin
	plotsArea := dc
	plotsArea.Max.X -= strip
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadY: vg.Centimeter / 2, PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4,
		PadLeft: vg.Centimeter / 4, PadRight: vg.Centimeter / 4}
	for i, c := range plot.Align(plots, tiles, plotsArea) {
		out[i].plotArea = c[0]
		data := out[i].plot.DataCanvas(c[0])
		la := c[0]
		la.Min.X, la.Max.X = plotsArea.Max.X+legendMargin, dc.Max.X-legendMargin
		la.Min.Y, la.Max.Y = data.Min.Y, data.Max.Y
		out[i].legendArea = la
	}
	return out, nil
}

// plot builds the panel's plot and its legend, drawn apart from it.
func (pn panel) plot() (*plot.Plot, plot.Legend, error) {
	p := plot.New()
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = pn.title, pn.x, pn.y
	if pn.logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if len(pn.xTicks) > 0 {
		p.X.Tick.Marker = measuredTicks(pn.xTicks)
	}
	p.Y.Tick.Marker = readableTicks
	if pn.logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	solid, marked := 0, 0 // lines of a palette color, and with markers, so far
	for _, s := range pn.lines {
		l, err := plotter.NewLine(s.points)
		if err != nil {
			return nil, legend, fmt.Errorf("plot %s: %s: %w", pn.title, s.name, err)
		}
		l.Width = vg.Points(1.5)
		switch {
		case s.dotted:
			l.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
			l.Color = color.RGBA{R: 200, A: 255}
		case s.dashed:
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
			l.Color = color.Gray{Y: 60}
			if s.color > 0 {
				l.Color = plotutil.Color(s.color)
			}
		default:
			l.Color = plotutil.Color(solid)
			solid++
		}
		p.Add(l)
		thumbs := []plot.Thumbnailer{l}
		if s.marked {
			m, err := plotter.NewScatter(s.points)
			if err != nil {
				return nil, legend, fmt.Errorf("plot %s: %s: %w", pn.title, s.name, err)
			}
			m.Color, m.Shape, m.Radius = l.Color, markers[marked%len(markers)], vg.Points(3)
			marked++
			p.Add(m)
			thumbs = append(thumbs, m)
		}
		if s.name != "" {
			legend.Add(s.name, thumbs...)
		}
	}
	if len(pn.xTicks) > 0 {
		// Room around the first and last measured points, so that their
		// markers clear the axes.
		lo, hi := slices.Min(pn.xTicks), slices.Max(pn.xTicks)
		if pn.logX && lo > 0 {
			p.X.Min, p.X.Max = lo/1.15, hi*1.15
		} else if hi > lo {
			pad := (hi - lo) / 40
			p.X.Min, p.X.Max = lo-pad, hi+pad
		}
	}
	return p, legend, nil
}

// markers are the shapes of measured points, filled so that they show at a
// glance, one per line of a panel in turn.
var markers = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}, draw.RingGlyph{}, draw.SquareGlyph{}, draw.CrossGlyph{}}

// measuredTicks puts a tick at each measured x, labelled (every few when
// there are more than maxTickLabels), and no others.
func measuredTicks(xs []float64) plot.Ticker {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	xs = slices.Compact(xs)
	every := (len(xs) + maxTickLabels - 1) / maxTickLabels
	ticks := make([]plot.Tick, len(xs))
	for i, x := range xs {
		ticks[i].Value = x
		if i%every == 0 {
			ticks[i].Label = tickLabel(x)
		}
	}
	return plot.ConstantTicks(ticks)
}

// readableTicks are about five round ticks over the axis (steps of 1, 2,
// 2.5 or 5 times a power of ten), labelled without trailing zeros and with k
// and M for thousands and millions ("17.5k", not "17500.00"), with an
// unlabelled tick halfway between labelled ones.
var readableTicks = plot.TickerFunc(func(min, max float64) []plot.Tick {
	if !(max > min) || math.IsInf(max-min, 0) {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	step := niceStep((max - min) / 5)
	var ticks []plot.Tick
	for i := math.Ceil(min / step * 2); i <= math.Floor(max/step*2); i++ {
		v := i * step / 2
		t := plot.Tick{Value: v}
		if math.Mod(i, 2) == 0 {
			t.Label = tickLabel(v)
		}
		ticks = append(ticks, t)
	}
	return ticks
})

// niceStep is the round step nearest above raw: 1, 2, 2.5 or 5 times a
// power of ten.
func niceStep(raw float64) float64 {
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*pow >= raw {
			return m * pow
		}
	}
	return 10 * pow
}

// tickLabel writes v briefly: 0.25, 5, 750, 17.5k, 2M.
func tickLabel(v float64) string {
	suffix := ""
	switch a := math.Abs(v); {
	case a >= 1e6:
		v, suffix = v/1e6, "M"
	case a >= 1e4:
		v, suffix = v/1e3, "k"
	}
	v, _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64) // drop float noise: 0.30000000000000004
	return strconv.FormatFloat(v, 'f', -1, 64) + suffix
}
