package clock

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestManualAdvanceAndSet(t *testing.T) {
	m := NewManual(t0)
	assert.True(t, m.Now().Equal(t0))
	assert.True(t, m.Advance(time.Second).Equal(t0.Add(time.Second)))
	assert.True(t, m.Advance(-2*time.Second).Equal(t0.Add(-time.Second)), "Advance moves backwards on a negative duration")
	m.Set(t0.Add(time.Hour))
	assert.True(t, m.Now().Equal(t0.Add(time.Hour)))

	var zero Manual
	assert.Equal(t, int64(0), zero.Now().UnixNano(), "the zero Manual reads the Unix epoch")
}

func TestManualConcurrentAdvance(t *testing.T) {
	m := NewManual(t0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				m.Advance(time.Nanosecond)
				_ = m.Now()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, t0.Add(8000*time.Nanosecond), m.Now().UTC())
}

func TestRealIsNow(t *testing.T) {
	before := time.Now()
	got := Real{}.Now()
	assert.False(t, got.Before(before))
}

func TestOffsetBeforeAnySampleIsIdentity(t *testing.T) {
	o := NewOffset(t0)
	_, _, ok := o.Estimate()
	assert.False(t, ok)
	assert.Equal(t, t0.Add(time.Second).UnixNano(), o.Map(t0.Add(time.Second)))
}

// observe feeds a round trip that left at sent, took rtt, and found the
// server's clock offset ahead of ours at the middle of the trip.
func observe(o *Offset, sent time.Time, rtt, offset time.Duration) {
	server := sent.Add(rtt / 2).Add(offset)
	o.Observe(sent, server, sent.Add(rtt))
}

func TestOffsetPrefersLowestRoundTrip(t *testing.T) {
	cases := []struct {
		name    string
		samples []struct{ rtt, offset time.Duration }
		want    time.Duration
		unc     time.Duration
	}{
		{"single", []struct{ rtt, offset time.Duration }{{2 * time.Millisecond, 5 * time.Millisecond}}, 5 * time.Millisecond, time.Millisecond},
		{"lowest rtt wins over later noisy ones", []struct{ rtt, offset time.Duration }{
			{200 * time.Microsecond, 3 * time.Millisecond},
			{5 * time.Millisecond, 7 * time.Millisecond},
			{9 * time.Millisecond, -1 * time.Millisecond},
		}, 3 * time.Millisecond, 100 * time.Microsecond},
		{"negative offset", []struct{ rtt, offset time.Duration }{{time.Millisecond, -40 * time.Millisecond}}, -40 * time.Millisecond, 500 * time.Microsecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOffset(t0)
			at := t0
			for _, s := range tc.samples {
				observe(o, at, s.rtt, s.offset)
				at = at.Add(10 * time.Millisecond)
			}
			off, unc, ok := o.Estimate()
			require.True(t, ok)
			assert.Equal(t, tc.want, off)
			assert.Equal(t, tc.unc, unc)
		})
	}
}

func TestOffsetForgetsSamplesBeyondTheFilter(t *testing.T) {
	o := NewOffset(t0)
	at := t0
	observe(o, at, 100*time.Microsecond, 9*time.Millisecond) // excellent, but old
	for range filterSize {
		at = at.Add(10 * time.Millisecond)
		observe(o, at, time.Millisecond, 2*time.Millisecond)
	}
	off, _, _ := o.Estimate()
	assert.Equal(t, 2*time.Millisecond, off, "the old sample has left the filter")
}

func TestOffsetIgnoresNegativeRoundTrip(t *testing.T) {
	o := NewOffset(t0)
	o.Observe(t0, t0.Add(time.Hour), t0.Add(-time.Millisecond))
	_, _, ok := o.Estimate()
	assert.False(t, ok)
}

func TestOffsetStepsForwardAndSlewsBack(t *testing.T) {
	o := NewOffset(t0)
	observe(o, t0, time.Millisecond, 100*time.Millisecond)
	assert.Equal(t, 100*time.Millisecond, o.Applied(), "the first estimate applies at once")

	// A better sample says Redis is only 10 ms ahead: the applied offset
	// falls by at most 5% of the elapsed time per adjustment.
	at := t0.Add(time.Second)
	observe(o, at, 100*time.Microsecond, 10*time.Millisecond)
	off, _, _ := o.Estimate()
	assert.Equal(t, 10*time.Millisecond, off)
	assert.InDelta(t, float64(100*time.Millisecond-50*time.Millisecond), float64(o.Applied()), float64(100*time.Microsecond))

	// Later adjustments finish the slew, and never undershoot.
	observe(o, at.Add(2*time.Second), 100*time.Microsecond, 10*time.Millisecond)
	assert.Equal(t, 10*time.Millisecond, o.Applied())

	// A larger estimate applies at once.
	observe(o, at.Add(3*time.Second), 50*time.Microsecond, 30*time.Millisecond)
	assert.Equal(t, 30*time.Millisecond, o.Applied())
}

func TestOffsetMappedTimeNeverGoesBackwards(t *testing.T) {
	o := NewOffset(t0)
	o.SetMaxSlew(1) // the harshest setting: the offset may fall as fast as time passes
	var last int64
	at := t0
	for i := range 200 {
		// Offsets that jump around by tens of milliseconds, with round
		// trips that keep getting better so every sample becomes the estimate.
		offset := time.Duration((i*7919)%100-50) * time.Millisecond
		observe(o, at, time.Duration(1000-i)*time.Microsecond, offset)
		for j := range 5 {
			v := o.Now(at.Add(time.Duration(j) * time.Millisecond))
			require.GreaterOrEqual(t, v, last, "sample %d read %d", i, j)
			last = v
		}
		at = at.Add(5 * time.Millisecond)
	}
}

func TestOffsetNowConcurrentMonotonic(t *testing.T) {
	o := NewOffset(time.Now())
	stop := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			observe(o, time.Now(), time.Duration(100+i%50)*time.Microsecond, time.Duration(i%20-10)*time.Millisecond)
		}
	}()
	var readers sync.WaitGroup
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			var last int64
			for range 20000 {
				v := o.Now(time.Now())
				if v < last {
					t.Errorf("Now went backwards: %d after %d", v, last)
					return
				}
				last = v
			}
		}()
	}
	readers.Wait()
	close(stop)
	<-writerDone
}

// A Manual clock's After fires when Set or Advance reaches its time, not
// before, and a released one never fires.
func TestManualAfter(t *testing.T) {
	c := NewManual(time.Unix(100, 0))
	a, _ := c.After(2 * time.Second)
	b, stopB := c.After(time.Second)
	now, _ := c.After(0)
	assert.Equal(t, time.Unix(100, 0), <-now, "a zero wait fires at once")
	assert.Equal(t, 2, c.Waiters())
	stopB()
	assert.Equal(t, 1, c.Waiters())
	c.Advance(1999 * time.Millisecond)
	select {
	case <-a:
		t.Fatal("fired early")
	case <-b:
		t.Fatal("a released wait fired")
	default:
	}
	c.Set(time.Unix(103, 0))
	assert.Equal(t, time.Unix(103, 0), <-a)
	assert.Zero(t, c.Waiters())
	c.Advance(time.Hour)
	select {
	case <-b:
		t.Fatal("a released wait fired")
	default:
	}
}

// Real's After is a timer.
func TestRealAfter(t *testing.T) {
	ch, stop := Real{}.After(time.Millisecond)
	defer stop()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("never fired")
	}
	_, stop2 := Real{}.After(time.Hour)
	stop2()
}

// A step of either clock, in either direction, is recognised at the first
// sample after it, even one with a worse round trip than the filter's best:
// the mapping is Redis's time again at once, and Now starts from it. Before,
// a forward jump of the node's clock by 5 minutes slewed back at 5% of the
// elapsed time, some 100 minutes.
func TestOffsetRecognisesAStepWithinOneSample(t *testing.T) {
	const jump = 5 * time.Minute
	for _, tc := range []struct {
		name       string
		node, srv  time.Duration // how each clock steps
		wantMapped time.Duration // how the mapped time moves
	}{
		{"node clock forward", jump, 0, -jump},
		{"node clock backward", -jump, 0, jump},
		{"redis TIME backward", 0, -jump, -jump},
		{"redis TIME forward", 0, jump, jump},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOffset(t0)
			var steps []Step
			o.OnStep(func(s Step) { steps = append(steps, s) })
			// Steady: Redis 10 ms ahead, round trips of a millisecond. Real
			// time is `at`; the node reads at+nodeStep, Redis at+10ms+srvStep.
			at := t0
			var nodeStep, srvStep time.Duration
			sample := func(rtt time.Duration) (received time.Time) {
				sent := at.Add(nodeStep)
				server := at.Add(rtt / 2).Add(10 * time.Millisecond).Add(srvStep)
				o.Observe(sent, server, sent.Add(rtt))
				return sent.Add(rtt)
			}
			for range 8 {
				sample(time.Millisecond)
				at = at.Add(20 * time.Millisecond)
			}
			_ = o.Now(at.Add(nodeStep))
			require.Empty(t, steps)

			nodeStep, srvStep = tc.node, tc.srv
			received := sample(5 * time.Millisecond) // a worse round trip than the filter's best
			require.Len(t, steps, 1, "recognised at the first sample")
			assert.Equal(t, uint64(1), o.Steps())
			assert.InDelta(t, float64(tc.wantMapped), float64(steps[0].By), float64(5*time.Millisecond))
			redisNow := at.Add(5 * time.Millisecond).Add(10 * time.Millisecond).Add(srvStep)
			assert.InDelta(t, float64(redisNow.UnixNano()), float64(o.Map(received)), float64(3*time.Millisecond),
				"the mapping is Redis's time at once")
			assert.Equal(t, o.Map(received), steps[0].Mapped)
			assert.Equal(t, o.Map(received), o.Now(received), "Now starts again from the new mapping")

			// The next samples of the new timeline are no step.
			for range 3 {
				at = at.Add(20 * time.Millisecond)
				sample(time.Millisecond)
			}
			assert.Len(t, steps, 1)
		})
	}
}

// Noise is no step: a sample far off the estimate, but within what its own
// round trip explains, only joins the filter.
func TestOffsetNoiseIsNoStep(t *testing.T) {
	o := NewOffset(t0)
	observe(o, t0, time.Millisecond, 10*time.Millisecond)
	// A 600 ms round trip whose midpoint guess is 250 ms off.
	o.Observe(t0.Add(time.Second), t0.Add(time.Second+10*time.Millisecond+50*time.Millisecond), t0.Add(time.Second+600*time.Millisecond))
	assert.Zero(t, o.Steps())
	off, _, _ := o.Estimate()
	assert.Equal(t, 10*time.Millisecond, off, "the better sample still wins")

	o.SetStepThreshold(time.Hour)
	observe(o, t0.Add(2*time.Second), time.Millisecond, 10*time.Minute)
	assert.Zero(t, o.Steps(), "below a threshold of an hour")
}

// MapNow reads what Map of time.Now reads: between two such readings, on
// the same monotonic clock, whatever the offset.
func TestMapNowIsMapOfNow(t *testing.T) {
	o := NewOffset(time.Now())
	for i, off := range []time.Duration{0, time.Hour, -time.Hour} {
		if i > 0 {
			now := time.Now()
			o.Observe(now, now.Add(off), now)
		}
		before := o.Map(time.Now())
		got := o.MapNow()
		after := o.Map(time.Now())
		assert.LessOrEqual(t, before, got, "offset %v", off)
		assert.LessOrEqual(t, got, after, "offset %v", off)
	}
}
