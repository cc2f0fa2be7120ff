package accesslog

// Merge reads several access logs as one, in the order of their entries'
// times: the rotated files of one server, or the logs of every server of a
// fleet, whose traffic one limit counted together. Each log is read in its
// own order; of the entries at the head of each, the earliest comes next,
// and of equal times the one of the log given first. It is not safe for
// concurrent use.
type Merge struct {
	readers []*Reader
	heads   []Entry
	live    []bool
	started bool
}

// NewMerge returns a Merge of readers.
func NewMerge(readers ...*Reader) *Merge {
	return &Merge{readers: readers, heads: make([]Entry, len(readers)), live: make([]bool, len(readers))}
}

// Next reads the next entry into e and reports whether it did: false once
// every log is read to its end, or one could not be read (Err).
func (m *Merge) Next(e *Entry) bool {
	if !m.started {
		m.started = true
		for i, r := range m.readers {
			m.live[i] = r.Next(&m.heads[i])
		}
	}
	if m.Err() != nil {
		return false
	}
	next := -1
	for i := range m.readers {
		if m.live[i] && (next < 0 || m.heads[i].Time.Before(m.heads[next].Time)) {
			next = i
		}
	}
	if next < 0 {
		return false
	}
	*e = m.heads[next]
	m.live[next] = m.readers[next].Next(&m.heads[next])
	return true
}

// Err returns the first error of a log that could not be read, or nil.
func (m *Merge) Err() error {
	for _, r := range m.readers {
		if err := r.Err(); err != nil {
			return err
		}
	}
	return nil
}
