package metrics

import (
	"fmt"
	"strings"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/prometheus/client_golang/prometheus"
)

// topClients keeps client_exceeded_total's series for the most recently
// limited clients only. The LRU and the vector change together under mu, so
// the vector never holds a series the LRU does not: at most size series
// exist at any time.
type topClients struct {
	size  int
	vec   *prometheus.CounterVec
	label func(string) string // nil: the client key itself

	mu  sync.Mutex
	lru *simplelru.LRU[string, prometheus.Counter] // label value → its series
}

func newTopClients(vec *prometheus.CounterVec, size int, label func(string) string) (*topClients, error) {
	c := &topClients{size: size, vec: vec, label: label}
	lru, err := simplelru.NewLRU(size, func(id string, _ prometheus.Counter) {
		vec.DeleteLabelValues(id) // called by Add, under mu
	})
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	c.lru = lru
	return c, nil
}

// inc counts a limited request of client.
func (c *topClients) inc(client string) {
	id := client
	if c.label != nil {
		id = c.label(client)
	}
	if id == "" {
		return
	}
	id = labelValue(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	ctr, ok := c.lru.Get(id)
	if !ok {
		if c.lru.Len() >= c.size {
			// Delete the least recently limited client's series before
			// creating the new one, so that a concurrent scrape never sees
			// more than size.
			c.lru.RemoveOldest()
		}
		id = strings.Clone(id) // held: do not pin the request's memory
		ctr = c.vec.WithLabelValues(id)
		c.lru.Add(id, ctr)
	}
	ctr.Inc()
}
