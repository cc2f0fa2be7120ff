package observe

import "testing"

func TestOutcomeString(t *testing.T) {
	for _, tc := range []struct {
		o    Outcome
		want string
	}{
		{Passed, "passed"},
		{Limited, "limited"},
		{Banned, "banned"},
		{Unavailable, "unavailable"},
		{ShadowLimited, "shadow_limited"},
		{Failed, "failed"},
		{Outcome(6), "outcome(6)"},
	} {
		if got := tc.o.String(); got != tc.want {
			t.Errorf("Outcome(%d).String() = %q, want %q", int(tc.o), got, tc.want)
		}
	}
}
