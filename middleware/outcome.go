package middleware

import "fmt"

// String returns the outcome's name in snake case, for logs and test
// output: "passed", "limited", "banned", "unavailable", "shadow_limited",
// "failed"; or "outcome(n)" for an unknown value. (Package metrics keeps its
// own label values.)
func (o Outcome) String() string {
	switch o {
	case Passed:
		return "passed"
	case Limited:
		return "limited"
	case Banned:
		return "banned"
	case Unavailable:
		return "unavailable"
	case ShadowLimited:
		return "shadow_limited"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}
