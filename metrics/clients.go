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
	size   int
	vec    *prometheus.CounterVec
	label  func(string) string // Options.ClientLabel; nil: hashed
	hashed *hashedLabels       // the default, when label is nil

	mu  sync.Mutex
	lru *simplelru.LRU[string, prometheus.Counter] // label value → its series
}

func newTopClients(vec *prometheus.CounterVec, size int, label func(string) string, key []byte) (*topClients, error) {
	c := &topClients{size: size, vec: vec, label: label}
	if label == nil {
		h, err := newHashedLabels(key)
		if err != nil {
			return nil, err
		}
		c.hashed = h
	}
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
	if client == "" {
		return // no client key: nobody to count
	}
	if c.hashed != nil {
		c.hashed.with(func(h *clientHasher) { c.incLabel(h.label(client)) })
		return
	}
	id := c.label(client)
	if id == "" {
		return
	}
	id = labelValue(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	ctr, ok := c.lru.Get(id)
	if !ok {
		ctr = c.add(strings.Clone(id)) // held: do not pin the request's memory
	}
	ctr.Inc()
}

// incLabel is inc for a label in a scratch buffer: looking it up copies
// nothing, and only a new client's label is copied to be held.
func (c *topClients) incLabel(id []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctr, ok := c.lru.Get(string(id))
	if !ok {
		ctr = c.add(string(id))
	}
	ctr.Inc()
}

// add creates the series of a new client id. c.mu must be held.
func (c *topClients) add(id string) prometheus.Counter {
	if c.lru.Len() >= c.size {
		// Delete the least recently limited client's series before
		// creating the new one, so that a concurrent scrape never sees
		// more than size.
		c.lru.RemoveOldest()
	}
	ctr := c.vec.WithLabelValues(id)
	c.lru.Add(id, ctr)
	return ctr
}
