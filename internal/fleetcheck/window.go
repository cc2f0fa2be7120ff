package fleetcheck

import (
	"slices"
	"time"
)

// Event is one admission: when it was decided and its weight.
type Event struct {
	At time.Duration // since the scenario began
	N  int64
}

// WindowMax is the most admitted within one closed window [At, At+W].
type WindowMax struct {
	W        time.Duration
	At       time.Duration // where the window begins
	Admitted int64
	// Windows is how many window positions were examined: one starting at
	// each distinct admission time, which covers every window (the busiest
	// window of any length can be slid right until it starts at an
	// admission without losing one).
	Windows int
}

// MaxOver returns, for each length in ws, the most admitted within any closed
// window of that length, exactly: the events are sorted once (O(n log n)) and
// each length is a single two-pointer pass (O(n)). events is sorted in place.
// An empty events gives zero maxima.
func MaxOver(events []Event, ws []time.Duration) []WindowMax {
	slices.SortFunc(events, func(a, b Event) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	out := make([]WindowMax, len(ws))
	for k, w := range ws {
		out[k] = maxWindow(events, w)
	}
	return out
}

// maxWindow is MaxOver for one length, on sorted events.
func maxWindow(events []Event, w time.Duration) WindowMax {
	best := WindowMax{W: w}
	var sum int64
	j := 0 // events[i:j] lie within [events[i].At, events[i].At+w]
	for i := 0; i < len(events); i++ {
		if i > 0 {
			sum -= events[i-1].N
			if events[i].At == events[i-1].At {
				continue // the same window as the last start, less an event: never more
			}
		}
		if j < i {
			j, sum = i, 0
		}
		end := events[i].At + w
		for j < len(events) && events[j].At <= end {
			sum += events[j].N
			j++
		}
		best.Windows++
		if sum > best.Admitted {
			best.Admitted, best.At = sum, events[i].At
		}
	}
	return best
}
