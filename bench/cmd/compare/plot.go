package main

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

var (
	colOurs  = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colDist  = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colLocal = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
)

func colorOf(x *result) color.Color {
	switch {
	case strings.HasPrefix(x.c.Name, "hybridlimit"):
		return colOurs
	case x.c.Distributed:
		return colDist
	}
	return colLocal
}

// drawPlot writes two panels: p99 under parallel load against accuracy
// (admitted/limit, nodes at twice the limit), and ns/op of a serial decision,
// both on log scales.
func drawPlot(path string, results []*result, o options) error {
	if len(results) == 0 {
		return nil
	}
	left, err := accuracyPlot(results, o)
	if err != nil {
		return err
	}
	right, err := costPlot(results)
	if err != nil {
		return err
	}
	w, h := 15*vg.Inch, 6.5*vg.Inch
	var c draw.Canvas
	var save func(f *os.File) error
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		s := vgsvg.New(w, h)
		c = draw.New(s)
		save = func(f *os.File) error { _, err := s.WriteTo(f); return err }
	case ".png":
		img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(96))
		c = draw.New(img)
		save = func(f *os.File) error { _, err := vgimg.PngCanvas{Canvas: img}.WriteTo(f); return err }
	default:
		return fmt.Errorf("%s: want .png or .svg", path)
	}
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	// The left panel gets 58% of the width: its labels need the room.
	pad := vg.Inch / 6
	split := w * 58 / 100
	left.Draw(draw.Crop(c, pad, -(w - split), pad, -pad))
	right.Draw(draw.Crop(c, split+pad, -pad, pad, -pad))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := save(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func glyphOf(x *result) draw.GlyphStyle {
	g := draw.GlyphStyle{Color: colorOf(x), Radius: vg.Points(4.5), Shape: draw.CircleGlyph{}}
	if x.c.Distributed {
		g.Shape = draw.BoxGlyph{}
	}
	return g
}

func accuracyPlot(results []*result, o options) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Latency against accuracy (%d nodes offered 2x the limit)", o.nodes)
	p.X.Label.Text = fmt.Sprintf("p99 latency per decision under %d goroutines (µs, log)", o.goroutines)
	p.Y.Label.Text = fmt.Sprintf("admitted / limit (%d nodes, 2x the limit)", o.nodes)
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	var yt []plot.Tick
	for v := 0.0; v <= 2.01; v += 0.25 {
		t := plot.Tick{Value: v}
		if math.Mod(v, 0.5) == 0 {
			t.Label = fmt.Sprintf("%.1f", v)
		}
		yt = append(yt, t)
	}
	p.Y.Tick.Marker = plot.ConstantTicks(yt)
	p.Add(plotter.NewGrid())
	lo, hi := math.Inf(1), math.Inf(-1)
	type pt struct {
		x, y float64
		r    *result
	}
	var pts []pt
	for _, x := range results {
		us := math.Max(float64(x.Par.Latency.Quantile(0.99))/1e3, 0.001)
		lo, hi = math.Min(lo, us), math.Max(hi, us)
		pts = append(pts, pt{us, x.Ratio(), x})
	}
	// Points crowd at two heights (about 1 and about 2): each crowd's labels
	// go on lines of their own below it, joined to their points.
	sorted := slices.Clone(pts)
	slices.SortFunc(sorted, func(a, b pt) int { return cmp.Compare(a.x, b.x) })
	const step = 0.075
	crowds := map[int]int{} // crowd (ratio rounded to 0.5) -> labels placed
	for _, q := range sorted {
		crowd := int(math.Round(q.y * 2))
		k := crowds[crowd]
		crowds[crowd]++
		ly := q.y - 0.12 - float64(k)*step
		lead, err := plotter.NewLine(plotter.XYs{{X: q.x, Y: q.y}, {X: q.x, Y: ly}})
		if err != nil {
			return nil, err
		}
		lead.Color = color.RGBA{R: 0xb0, G: 0xb0, B: 0xb0, A: 0xff}
		lead.Width = vg.Points(0.5)
		p.Add(lead)
		l, err := plotter.NewLabels(plotter.XYLabels{
			XYs:    plotter.XYs{{X: q.x, Y: ly}},
			Labels: []string{fmt.Sprintf("%s (%s, %.3f)", q.r.c.Name, fmtDur(q.r.Par.Latency.Quantile(0.99)), q.y)},
		})
		if err != nil {
			return nil, err
		}
		l.TextStyle[0].Font.Size = vg.Points(9)
		l.TextStyle[0].Color = colorOf(q.r)
		l.TextStyle[0].YAlign = draw.YCenter
		l.Offset = vg.Point{X: vg.Points(3)}
		p.Add(l)
	}
	// Peers first, ours last: on top where points overlap.
	slices.SortStableFunc(pts, func(a, b pt) int {
		oa, ob := strings.HasPrefix(a.r.c.Name, "hybridlimit"), strings.HasPrefix(b.r.c.Name, "hybridlimit")
		switch {
		case oa == ob:
			return 0
		case ob:
			return -1
		}
		return 1
	})
	for _, q := range pts {
		s, err := plotter.NewScatter(plotter.XYs{{X: q.x, Y: q.y}})
		if err != nil {
			return nil, err
		}
		s.GlyphStyle = glyphOf(q.r)
		p.Add(s)
	}
	exact, err := plotter.NewLine(plotter.XYs{{X: lo / 2, Y: 1}, {X: hi * 30, Y: 1}})
	if err != nil {
		return nil, err
	}
	exact.Color = color.RGBA{A: 0x80}
	exact.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(exact)
	p.Legend.Add("exact (1.0)", exact)
	p.X.Min, p.X.Max = lo/2, hi*30
	p.Y.Min, p.Y.Max = 0, 2.25
	for _, e := range []struct {
		name string
		g    draw.GlyphStyle
	}{
		{"hybridlimit", draw.GlyphStyle{Color: colOurs, Radius: vg.Points(4), Shape: draw.CircleGlyph{}}},
		{"peer, local only", draw.GlyphStyle{Color: colLocal, Radius: vg.Points(4), Shape: draw.CircleGlyph{}}},
		{"peer, shared through Redis", draw.GlyphStyle{Color: colDist, Radius: vg.Points(4), Shape: draw.BoxGlyph{}}},
		{"(square: distributed)", draw.GlyphStyle{Color: color.Black, Radius: vg.Points(4), Shape: draw.BoxGlyph{}}},
	} {
		s, _ := plotter.NewScatter(plotter.XYs{{}})
		s.GlyphStyle = e.g
		p.Legend.Add(e.name, s)
	}
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.YOffs = -vg.Points(70)
	return p, nil
}

func costPlot(results []*result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Cost of one decision, serial, existing key"
	p.X.Label.Text = "ns/op (log)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	var ticks []plot.Tick
	lo, hi := math.Inf(1), math.Inf(-1)
	n := len(results)
	var xys plotter.XYs
	var labels []string
	for i, x := range results {
		y := float64(n - 1 - i)
		ns := math.Max(x.NsPerOp, 1)
		lo, hi = math.Min(lo, ns), math.Max(hi, ns)
		s, err := plotter.NewScatter(plotter.XYs{{X: ns, Y: y}})
		if err != nil {
			return nil, err
		}
		s.GlyphStyle = glyphOf(x)
		p.Add(s)
		ticks = append(ticks, plot.Tick{Value: y, Label: x.c.Name})
		xys = append(xys, plotter.XY{X: ns, Y: y})
		labels = append(labels, fmt.Sprintf("%s, %s allocs", fmtNs(x.NsPerOp), fmtAllocs(x.AllocsPerOp)))
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return nil, err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Font.Size = vg.Points(9)
	}
	l.Offset = vg.Point{X: vg.Points(7), Y: vg.Points(-3)}
	p.Add(l)
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min, p.Y.Max = -0.7, float64(n)-0.3
	p.X.Min, p.X.Max = lo/2, hi*20
	return p, nil
}
