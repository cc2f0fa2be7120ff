package reconcile

import "fmt"

var Debug func(string)

func dbg(format string, args ...any) {
	if Debug != nil {
		Debug(fmt.Sprintf(format, args...))
	}
}
