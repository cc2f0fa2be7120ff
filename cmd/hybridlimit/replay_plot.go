package main

import (
	"maps"
	"slices"

	"gonum.org/v1/plot/plotter"

	"github.com/hybridlimit/hybridlimit/replay"
)

// replayPanels plots a replay's would-be 429s per minute, one line per rule
// that answered any, one panel per rules file: every minute from the
// replay's first to its last, a minute without any at zero.
func replayPanels(rep replay.Report) []panel {
	start := rep.From.Unix() / 60
	minutes := max(rep.To.Unix()/60-start, 0) + 1
	var panels []panel
	for _, run := range rep.Runs {
		pn := panel{title: "would-be 429s per minute: " + run.Name,
			x: "minutes since " + rep.From.UTC().Format("2006-01-02 15:04 MST"), y: "requests a minute"}
		byRule := map[string]map[int64]int64{}
		for _, m := range run.Minutes {
			for rule, n := range m.ByRule {
				if byRule[rule] == nil {
					byRule[rule] = map[int64]int64{}
				}
				byRule[rule][m.Start.Unix()/60-start] = n
			}
		}
		for _, rule := range slices.Sorted(maps.Keys(byRule)) {
			pts := make(plotter.XYs, minutes)
			for i := range pts {
				pts[i].X, pts[i].Y = float64(i), float64(byRule[rule][int64(i)])
			}
			pn.lines = append(pn.lines, series{name: rule, points: pts})
		}
		if len(pn.lines) == 0 {
			pn.lines = []series{{name: "no would-be 429", points: plotter.XYs{{X: 0}, {X: float64(minutes - 1)}}}}
		}
		panels = append(panels, pn)
	}
	return panels
}
