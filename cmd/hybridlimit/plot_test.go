package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The x axis has a tick at every measured interval, labelled, and no other;
// past maxTickLabels every other one is labelled, the ticks all stay.
func TestPlotTicksAtEveryMeasuredInterval(t *testing.T) {
	ticks := measuredTicks([]float64{100, 1, 5, 10, 20, 50, 5}).Ticks(1, 100)
	var labels []string
	for _, tk := range ticks {
		labels = append(labels, tk.Label)
	}
	assert.Equal(t, []string{"1", "5", "10", "20", "50", "100"}, labels)

	var seconds []float64
	for s := 1; s <= 30; s++ {
		seconds = append(seconds, float64(s))
	}
	ticks = measuredTicks(seconds).Ticks(1, 30)
	require.Len(t, ticks, 30, "a tick every second")
	labelled := 0
	for _, tk := range ticks {
		if tk.Label != "" {
			labelled++
		}
	}
	assert.Equal(t, 15, labelled, "every other second labelled")
}

// Every legend sits beside its plot's data area, never over it, and has
// room for its longest entry.
func TestPlotLegendIsBesideTheData(t *testing.T) {
	panels := tunePanelsForTest(t)
	c := draw.New(vgimg.New(figureWidth, panelHeight*vg.Length(len(panels))))
	figure, err := layout(c, panels)
	require.NoError(t, err)
	require.Len(t, figure, len(panels))
	for i, f := range figure {
		data := f.plot.DataCanvas(f.plotArea)
		assert.GreaterOrEqual(t, f.legendArea.Min.X, data.Max.X, "panel %d: the legend starts right of the data", i)
		assert.LessOrEqual(t, f.legendArea.Max.X, c.Max.X, "panel %d: within the figure", i)
		assert.LessOrEqual(t, f.legend.Rectangle(f.legendArea).Size().X, f.legendArea.Size().X, "panel %d: the legend fits its strip", i)
	}
	// All data areas are aligned, one above the other.
	for _, f := range figure[1:] {
		assert.InDelta(t, float64(figure[0].plot.DataCanvas(figure[0].plotArea).Min.X), float64(f.plot.DataCanvas(f.plotArea).Min.X), 0.01)
	}
}

// Measured points carry a marker each; reference lines do not.
func TestPlotMarksMeasuredPoints(t *testing.T) {
	pts := plotter.XYs{{X: 1, Y: 1}, {X: 5, Y: 2}, {X: 10, Y: 3}}
	paths := func(marked bool) int {
		path := filepath.Join(t.TempDir(), "p.svg")
		require.NoError(t, savePlots(path, panel{title: "t", x: "x", y: "y", xTicks: []float64{1, 5, 10},
			lines: []series{{name: "measured", points: pts, marked: marked}, {name: "reference", points: pts, dashed: true}}}))
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		return strings.Count(string(raw), "<path")
	}
	assert.Equal(t, paths(false)+len(pts)+1, paths(true), "a marker per point, and one in the legend")
}

// tunePanelsForTest are the panels tunePlot draws for tuneRows.
func tunePanelsForTest(t *testing.T) []panel {
	t.Helper()
	panels, err := tunePanels(tuneRows(), 1, redisBudget{perSecond: 5000})
	require.NoError(t, err)
	return panels
}

// The y axis has three to five round, labelled ticks, with an unlabelled
// one between each two: 10k, 20k, 30k rather than gonum's 2500, 12.5k, 22.5k.
func TestPlotReadableTicks(t *testing.T) {
	for _, tc := range []struct {
		min, max float64
		labels   []string
	}{
		{-3.73, 0.05, []string{"-3", "-2", "-1", "0"}},
		{600, 34063, []string{"10k", "20k", "30k"}},
		{0.7, 11.2, []string{"2.5", "5", "7.5", "10"}},
		{0, 3, []string{"0", "1", "2", "3"}},
		{0.25, 0.75, []string{"0.3", "0.4", "0.5", "0.6", "0.7"}},
	} {
		var labels []string
		for _, tk := range readableTicks.Ticks(tc.min, tc.max) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		assert.Equal(t, tc.labels, labels, "%v to %v", tc.min, tc.max)
	}
}
