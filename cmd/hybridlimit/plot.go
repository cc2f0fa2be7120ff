package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
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
	dashed bool // a reference line: grey unless color says otherwise
	dotted bool // a target or a budget: red
	color  int  // for a dashed line: a palette color (plotutil.Color) instead of grey; 0 is grey
}

// panel is one plot of a figure.
type panel struct {
	title, x, y string
	logX, logY  bool
	lines       []series
}

// savePlots draws panels stacked vertically into path; its extension (.png
// or .svg) picks the format.
func savePlots(path string, panels ...panel) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" {
		return fmt.Errorf("plot %s: want a .png or .svg file", path)
	}
	plots := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p, err := pn.plot()
		if err != nil {
			return err
		}
		plots[i] = []*plot.Plot{p}
	}
	const w, h = 9 * vg.Inch, 3.5 * vg.Inch
	height := h * vg.Length(len(panels))
	var canvas vg.CanvasWriterTo
	if ext == ".svg" {
		canvas = vgsvg.New(w, height)
	} else {
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(w, height)}
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadY: vg.Centimeter / 2, PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4,
		PadLeft: vg.Centimeter / 4, PadRight: vg.Centimeter / 4}
	canvases := plot.Align(plots, tiles, draw.New(canvas))
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
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

func (pn panel) plot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = pn.title, pn.x, pn.y
	if pn.logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Y.Tick.Marker = readableTicks
	if pn.logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	for j, s := range pn.lines {
		l, err := plotter.NewLine(s.points)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %s: %w", pn.title, s.name, err)
		}
		l.Color = plotutil.Color(j)
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
		}
		p.Add(l)
		if s.name != "" {
			p.Legend.Add(s.name, l)
		}
	}
	p.Legend.Top = true
	return p, nil
}

// readableTicks are gonum's default ticks, labelled without trailing zeros
// and with k and M for thousands and millions: "17.5k", not "17500.00".
var readableTicks = plot.TickerFunc(func(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = tickLabel(t.Value)
		}
	}
	return ticks
})

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
