package measure

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBuckets(t *testing.T) {
	prev := -1
	for ns := int64(1); ns < 1<<40; ns = ns*17/16 + 1 {
		b := bucketOf(ns)
		if b < prev {
			t.Fatalf("bucketOf not monotonic at %d", ns)
		}
		prev = b
		if lo := lowerOf(b); lo > ns || lowerOf(b+1) <= ns {
			t.Fatalf("%d in bucket %d = [%d, %d)", ns, b, lo, lowerOf(b+1))
		}
	}
}

func TestQuantileWithinResolution(t *testing.T) {
	var h Histogram
	var all []int64
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		v := int64(r.ExpFloat64()*50_000) + 100
		all = append(all, v)
		h.Record(time.Duration(v))
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := float64(all[int(q*float64(len(all)))])
		got := float64(h.Quantile(q))
		if got < want*0.97 || got > want*1.03 {
			t.Errorf("q%.3f = %v, want %v ± 3%%", q, got, want)
		}
	}
}
