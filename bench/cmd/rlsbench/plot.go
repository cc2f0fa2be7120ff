package main

import (
	"cmp"
	"fmt"
	"image/color"
	"os"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/hybridlimit/hybridlimit/bench/rlsrun"
)

var (
	colOurs   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colTheirs = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)

func colorOf(k rlsrun.Kind) color.Color {
	if k == rlsrun.Ours {
		return colOurs
	}
	return colTheirs
}

// drawPlot writes three panels as a PNG: p99 against throughput for each
// service and instance count; p99 per quarter second through the outage;
// admitted ÷ limit per second through the outage.
func drawPlot(path string, r *report) error {
	left, err := latencyPlot(r)
	if err != nil {
		return err
	}
	mid, right, err := outagePlots(r)
	if err != nil {
		return err
	}
	w, h := 18*vg.Inch, 6*vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: vg.Inch / 4, PadY: vg.Inch / 8, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	for i, p := range []*plot.Plot{left, mid, right} {
		p.Draw(tiles.At(dc, i, 0))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return err
}

func latencyPlot(r *report) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "ShouldRateLimit p99 against throughput"
	p.X.Label.Text = "answered calls/s"
	p.Y.Label.Text = "p99 (ms, log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	top := 0.0
	for _, kind := range []rlsrun.Kind{rlsrun.Theirs, rlsrun.Ours} {
		for ni, n := range r.o.instances {
			var pts plotter.XYs
			for _, x := range r.sweep {
				if x.kind == kind && x.instances == n && !x.saturatedAfter && x.st.calls > 0 {
					pts = append(pts, plotter.XY{X: x.st.perSec, Y: max(float64(x.st.p99)/float64(time.Millisecond), 0.01)})
				}
			}
			if len(pts) == 0 {
				continue
			}
			slices.SortFunc(pts, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
			top = max(top, slices.MaxFunc(pts, func(a, b plotter.XY) int { return cmp.Compare(a.Y, b.Y) }).Y)
			l, s, err := plotter.NewLinePoints(pts)
			if err != nil {
				return nil, err
			}
			l.Color, s.Color = colorOf(kind), colorOf(kind)
			l.Dashes = [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}, {vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2)}}[ni%4]
			s.Shape = [](draw.GlyphDrawer){draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{}}[ni%4]
			p.Add(l, s)
			p.Legend.Add(fmt.Sprintf("%v, %d instance(s)", kind, n), l, s)
		}
	}
	p.Y.Max = top * 20 // room for the legend above the lines
	return p, nil
}

func outagePlots(r *report) (*plot.Plot, *plot.Plot, error) {
	lat := plot.New()
	lat.Title.Text = fmt.Sprintf("Redis killed for %v: p99 per 250 ms", r.o.outage)
	lat.X.Label.Text = "s since the load began (Redis dead in the shaded span)"
	lat.Y.Label.Text = "p99 (ms, log)"
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	lat.Legend.Top = true
	lat.Legend.Left = true
	adm := plot.New()
	adm.Title.Text = "admitted ÷ limit per second, errors per second ÷ limit"
	adm.X.Label.Text = "s since the load began"
	adm.Y.Label.Text = "÷ limit"
	adm.Legend.Top = true
	adm.Y.Min, adm.Y.Max = 0, 1.7 // room for the legend above the limit
	for _, x := range r.outages {
		var p99s, admitted, errs plotter.XYs
		q := 250 * time.Millisecond
		for t := time.Duration(0); t < time.Duration(x.seconds)*time.Second; t += q {
			st := summarise(window(x.samples, t, t+q), q)
			if st.calls > 0 {
				p99s = append(p99s, plotter.XY{X: (t + q/2).Seconds(), Y: max(float64(st.p99)/float64(time.Millisecond), 0.01)})
			}
		}
		for i, a := range x.perSecond {
			admitted = append(admitted, plotter.XY{X: float64(i) + 0.5, Y: a})
			from := time.Duration(i) * time.Second
			st := summarise(window(x.samples, from, from+time.Second), time.Second)
			errs = append(errs, plotter.XY{X: float64(i) + 0.5, Y: float64(st.errs) / float64(r.o.hotLimit)})
		}
		for _, panel := range []struct {
			p    *plot.Plot
			pts  plotter.XYs
			name string
			dash bool
		}{{lat, p99s, x.kind.String(), false}, {adm, admitted, x.kind.String() + " admitted", false}, {adm, errs, x.kind.String() + " errors", true}} {
			if len(panel.pts) == 0 {
				continue
			}
			l, err := plotter.NewLine(panel.pts)
			if err != nil {
				return nil, nil, err
			}
			l.Color = colorOf(x.kind)
			l.Width = vg.Points(1.5)
			if panel.dash {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			panel.p.Add(l)
			panel.p.Legend.Add(panel.name, l)
		}
	}
	from, to := r.o.before.Seconds(), (r.o.before + r.o.outage).Seconds()
	lat.Y.Max = 20_000 // above the client timeout: room for the legend
	var ticks []plot.Tick
	for t := 0; t <= int((r.o.before+r.o.outage+r.o.after)/time.Second); t += 5 {
		ticks = append(ticks, plot.Tick{Value: float64(t), Label: fmt.Sprint(t)})
	}
	for _, p := range []*plot.Plot{lat, adm} {
		p.X.Min = 0
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		shade, err := plotter.NewPolygon(plotter.XYs{{X: from, Y: yMin(p)}, {X: to, Y: yMin(p)}, {X: to, Y: yMax(p)}, {X: from, Y: yMax(p)}})
		if err != nil {
			return nil, nil, err
		}
		shade.Color = color.NRGBA{A: 0x18} // translucent: the lines drawn before it show through
		shade.LineStyle.Width = 0
		p.Add(shade)
	}
	limit, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 1}, {X: float64(r.o.before+r.o.outage+r.o.after) / float64(time.Second), Y: 1}})
	if err != nil {
		return nil, nil, err
	}
	limit.Color = color.Gray{Y: 0x80}
	limit.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	adm.Add(limit)
	adm.Legend.Add("the limit", limit)
	return lat, adm, nil
}

func yMin(p *plot.Plot) float64 {
	if p.Y.Min > 0 {
		return p.Y.Min
	}
	return 0.01
}

func yMax(p *plot.Plot) float64 { return max(p.Y.Max, 1) }
