package metrics

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Defaults for Options' zero fields.
const (
	// DefaultNamespace starts every metric name: rate_limit_requests_total,
	// rate_limit_exceeded_total, the names rate-limiting dashboards commonly
	// query.
	DefaultNamespace = "rate_limit"
	// DefaultNearLimit: a check is near its limit when it leaves less than a
	// tenth of the limit's capacity.
	DefaultNearLimit = 0.1
	// DefaultTopClients is how many clients rate_limit_client_exceeded_total
	// holds a series for.
	DefaultTopClients = 100
	// DefaultMaxRules is how many distinct rule names get their own series.
	DefaultMaxRules = 256
)

// OverflowRule is the rule label of checks and requests whose rule arrived
// after Options.MaxRules others already had their own series.
const OverflowRule = "_other"

// DefaultLatencyBuckets returns the default upper bounds, in seconds, of the
// check and request latency histograms: 100 ns to 50 ms. A decision in
// memory takes well under a microsecond and one in Redis a round trip (tens
// to hundreds of µs); 5 ms, a common alert threshold for the p99 of a
// rate-limit check, is a bound, so that alert is exact.
func DefaultLatencyBuckets() []float64 {
	return []float64{
		100e-9, 250e-9, 500e-9, // in memory
		1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6,
		100e-6, 250e-6, 500e-6, // Redis on a good network
		1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, // slow Redis, up to the default timeout
	}
}

// DefaultRoundBuckets returns the default upper bounds, in seconds, of the
// sync round duration histogram: 100 µs (a pipelined round on loopback) to
// 2.5 s (beyond any round timeout the limiter sets by default).
func DefaultRoundBuckets() []float64 {
	return []float64{100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5}
}

// roundKeyBuckets are the upper bounds of the keys-per-round histogram:
// powers of 4 from 1 to 65,536.
func roundKeyBuckets() []float64 {
	b := make([]float64, 9)
	for i := range b {
		b[i] = math.Pow(4, float64(i))
	}
	return b
}

// Options configures a Recorder. The zero value is the defaults.
type Options struct {
	// Namespace starts every metric name: Namespace + "_requests_total".
	// Empty means DefaultNamespace, "rate_limit". It must be a valid metric
	// name ([a-zA-Z_:][a-zA-Z0-9_:]*).
	Namespace string

	// LatencyBuckets are the upper bounds, in seconds, of the check and
	// request latency histograms, in increasing order. Nil or empty means
	// DefaultLatencyBuckets().
	LatencyBuckets []float64

	// RoundBuckets are the upper bounds, in seconds, of the sync round
	// duration histogram, in increasing order. Nil or empty means
	// DefaultRoundBuckets().
	RoundBuckets []float64

	// NearLimit is the fraction of a limit's capacity under which an
	// admitted check counts as near the limit: Remaining < NearLimit ×
	// Capacity. Zero means DefaultNearLimit (0.1); negative turns the
	// near-limit count off. It must not exceed 1.
	NearLimit float64

	// TopClients is how many clients rate_limit_client_exceeded_total keeps
	// a series for: the most recently limited ones. When a new client is
	// limited and TopClients are already held, the least recently limited
	// is forgotten and its series deleted. Zero means DefaultTopClients
	// (100); negative turns the per-client metric off (it is not
	// registered).
	TopClients int

	// ClientLabel maps the client key of a limited request to its
	// client_id label value; "" leaves the request out of the per-client
	// metric. It is called, on the request's goroutine, for every limited
	// request.
	//
	// Nil means hashed labels: the key's source prefix and 16 hex digits
	// of its HMAC-SHA256 under ClientLabelKey (client_id="ip:3fa29c0d81b2e4f7";
	// ClientLabelOf computes one), so neither client addresses nor API keys
	// reach Prometheus, and a client held in the metric costs no allocation.
	// PlainClientLabel keeps the keys as they are, on request. A function
	// of your own can coarsen the identity (an IPv6 /64) or drop some
	// clients.
	ClientLabel func(client string) string

	// ClientLabelKey is the secret the default hashed labels are computed
	// with. Give every node of a fleet the same key so that one client has
	// one label across the fleet and across restarts, and so that an
	// operator holding the key can find a known client's label. Nil means
	// a random key drawn by New: labels are then stable only for the
	// Recorder's life, and cannot be traced back to a client by anyone.
	// Ignored when ClientLabel is set.
	ClientLabelKey []byte

	// MaxRules bounds the distinct rule label values: the first MaxRules
	// rule names seen get their own series, any later one is counted under
	// OverflowRule. A rules file names its rules, so the bound is only a
	// guard against a caller passing per-request values as rule names.
	// Zero means DefaultMaxRules (256).
	MaxRules int
}

// withDefaults checks o and fills its zero fields.
func (o Options) withDefaults() (Options, error) {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if !validName(o.Namespace) {
		return o, fmt.Errorf("metrics: Namespace %q is not a valid metric name", o.Namespace)
	}
	var err error
	if o.LatencyBuckets, err = buckets(o.LatencyBuckets, DefaultLatencyBuckets); err != nil {
		return o, fmt.Errorf("metrics: LatencyBuckets: %w", err)
	}
	if o.RoundBuckets, err = buckets(o.RoundBuckets, DefaultRoundBuckets); err != nil {
		return o, fmt.Errorf("metrics: RoundBuckets: %w", err)
	}
	switch {
	case math.IsNaN(o.NearLimit) || o.NearLimit > 1:
		return o, fmt.Errorf("metrics: NearLimit %v is not at most 1", o.NearLimit)
	case o.NearLimit == 0:
		o.NearLimit = DefaultNearLimit
	case o.NearLimit < 0:
		o.NearLimit = 0 // off
	}
	if o.TopClients == 0 {
		o.TopClients = DefaultTopClients
	}
	if o.MaxRules < 0 {
		return o, fmt.Errorf("metrics: MaxRules is negative (%d)", o.MaxRules)
	}
	if o.MaxRules == 0 {
		o.MaxRules = DefaultMaxRules
	}
	return o, nil
}

// buckets returns a copy of b (so the caller may reuse it), or def() when b
// is empty, after checking the bounds increase.
func buckets(b []float64, def func() []float64) ([]float64, error) {
	if len(b) == 0 {
		return def(), nil
	}
	for i, v := range b {
		if math.IsNaN(v) {
			return nil, errors.New("a bound is NaN")
		}
		if i > 0 && v <= b[i-1] {
			return nil, fmt.Errorf("bounds not in increasing order: %v after %v", v, b[i-1])
		}
	}
	return slices.Clone(b), nil
}

// validName reports whether s is a metric name in Prometheus's classic
// character set, the one every PromQL query can name without quoting.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
