package replay

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText prints the report as a reader wants it: the traffic, then for
// each rules file its outcomes, its rules, the first and worst minutes and
// its top clients, then what changes between the two files.
func (rep Report) WriteText(w io.Writer) error {
	var b bytes.Buffer
	rep.writeInput(&b)
	for _, run := range rep.Runs {
		fmt.Fprintf(&b, "\n== %s\n", run.Name)
		run.write(&b)
	}
	if c := rep.Changes; c != nil && len(rep.Runs) == 2 {
		fmt.Fprintf(&b, "\n== changes from %s to %s\n", rep.Runs[0].Name, rep.Runs[1].Name)
		c.write(&b)
	}
	_, err := w.Write(b.Bytes())
	return err
}

func (rep Report) writeInput(b *bytes.Buffer) {
	if rep.Requests == 0 {
		fmt.Fprintf(b, "No requests replayed: %s lines read", count(rep.Lines))
	} else {
		fmt.Fprintf(b, "Replayed %s requests from %s lines, %s to %s (%s)", count(rep.Requests), count(rep.Lines),
			rep.From.UTC().Format("2006-01-02 15:04:05"), rep.To.UTC().Format("2006-01-02 15:04:05 MST"), span(rep.To.Sub(rep.From)))
	}
	switch rep.Malformed {
	case 0:
		b.WriteString(".\n")
	case 1:
		b.WriteString("; 1 line malformed, not replayed:\n")
	default:
		fmt.Fprintf(b, "; %s lines malformed, not replayed; the first:\n", count(rep.Malformed))
	}
	for _, m := range rep.MalformedExamples {
		fmt.Fprintf(b, "  %s\n", m)
	}
}

func (run Run) write(b *bytes.Buffer) {
	o := run.Outcomes
	fmt.Fprintf(b, "passed %s, limited (429) %s, shadow limited %s, banned (403) %s, not checked %s\n",
		count(o.Passed), count(o.Limited), count(o.ShadowLimited), count(o.Banned), count(o.Unchecked))
	if len(run.Rules) > 0 {
		b.WriteString("\n")
		tw := table(b)
		fmt.Fprintln(tw, "RULE\tLIMIT\tCHECKED\tDENIED\t429\tSHADOW 429\tRETRY-AFTER MEDIAN/MAX")
		for _, r := range run.Rules {
			name := r.Rule
			if r.Shadow {
				name += " (shadow)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, cmp.Or(r.Limit, "-"), count(r.Checked), count(r.Denied),
				count(r.Limited), count(r.ShadowLimited), retryPair(r.RetryAfterMedian, r.RetryAfterMax, r.Limited+r.ShadowLimited))
		}
		_ = tw.Flush()
	}
	b.WriteString("\n")
	if run.FirstMinute == nil {
		b.WriteString("No would-be 429 in any minute.\n")
	} else {
		fmt.Fprintf(b, "First minute with a would-be 429: %s\n", run.FirstMinute)
		fmt.Fprintf(b, "Worst minute:                     %s\n", run.WorstMinute)
	}
	if len(run.Clients) > 0 {
		b.WriteString("\n")
		tw := table(b)
		fmt.Fprintln(tw, "TOP CLIENTS\tREQUESTS\t429\tSHADOW 429\t403\tLONGEST RETRY-AFTER")
		for _, c := range run.Clients {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cmp.Or(c.Client, `""`), count(c.Requests), count(c.Limited),
				count(c.ShadowLimited), count(c.Banned), seconds(c.LongestRetryAfter))
		}
		_ = tw.Flush()
	}
	if len(run.Unchecked) > 0 {
		b.WriteString("\nNot checked:\n")
		for _, r := range run.Unchecked {
			fmt.Fprintf(b, "  %s: %s\n", count(r.Requests), r.Reason)
		}
	}
}

// String is the minute, its would-be 429s and the rules that answered
// them, most first.
func (m *Minute) String() string {
	rules := slices.Sorted(maps.Keys(m.ByRule))
	slices.SortStableFunc(rules, func(x, y string) int { return cmp.Compare(m.ByRule[y], m.ByRule[x]) })
	parts := make([]string, len(rules))
	for i, r := range rules {
		parts[i] = r + " " + count(m.ByRule[r])
	}
	return fmt.Sprintf("%s, %s (%s)", m.Start.UTC().Format("2006-01-02 15:04 MST"), count(m.WouldBe429), strings.Join(parts, ", "))
}

func (c *Changes) write(b *bytes.Buffer) {
	if c.Requests == 0 {
		b.WriteString("No request is answered differently.\n")
		return
	}
	fmt.Fprintf(b, "%s requests answered differently: %s newly refused, %s newly admitted.\n",
		count(c.Requests), count(c.NewlyRefused), count(c.NewlyAdmitted))
	b.WriteString("\n")
	tw := table(b)
	fmt.Fprintln(tw, "CLIENT\tCHANGED\tNEWLY REFUSED\tNEWLY ADMITTED")
	for _, cc := range c.Clients {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cmp.Or(cc.Client, `""`), count(cc.Requests), count(cc.NewlyRefused), count(cc.NewlyAdmitted))
	}
	_ = tw.Flush()
	b.WriteString("\nThe first requests answered differently:\n")
	tw = table(b)
	for _, e := range c.Examples {
		fmt.Fprintf(tw, "  %s\t%s\t%s %s\t%s -> %s\n", e.Time.Format("2006-01-02 15:04:05.000"), cmp.Or(e.Client, `""`), e.Method, e.Target, e.Before, e.After)
	}
	_ = tw.Flush()
}

func table(b *bytes.Buffer) *tabwriter.Writer { return tabwriter.NewWriter(b, 0, 0, 2, ' ', 0) }

// count writes n with thousands separated: 1,234,567.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// seconds writes a Retry-After: "-" for none.
func seconds(s int64) string {
	if s <= 0 {
		return "-"
	}
	return (time.Duration(s) * time.Second).String()
}

// retryPair writes a median and a largest Retry-After, "-" with no
// requests to have them.
func retryPair(med, largest, n int64) string {
	if n == 0 {
		return "-"
	}
	return seconds(med) + " / " + seconds(largest)
}

// span writes a duration for a reader: 1h0m0s as "1h", 90s as "1m30s".
func span(d time.Duration) string {
	s := d.Round(time.Second).String()
	s = strings.Replace(s, "m0s", "m", 1)
	return strings.Replace(s, "h0m", "h", 1)
}
