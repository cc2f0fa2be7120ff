package config_test

import (
	"fmt"

	"github.com/hybridlimit/hybridlimit/envoyrls/config"
)

// A descriptor finds its rule as in envoyproxy/ratelimit: the key and
// value first, then the key alone; each value is counted apart.
func ExampleConfig_Lookup() {
	cfg, err := config.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, ip := range []string{"10.0.0.1", "50.0.0.5"} {
		m, _ := cfg.Lookup("edge", []config.Entry{{Key: "remote_address", Value: ip}})
		fmt.Printf("%s: %d per %s, counted as %s\n", m.Rule.Key, m.Rule.RequestsPerUnit, m.Rule.Unit, m.Counter)
	}
	// Output:
	// edge.remote_address: 10 per second, counted as edge_remote_address_10.0.0.1_
	// edge.remote_address_50.0.0.5: 0 per second, counted as edge_remote_address_50.0.0.5_
}

// A bad file is refused whole, naming the file, line, column and field.
func ExampleParse_refused() {
	_, err := config.Parse("edge.yaml", []byte(`domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: fortnight, requests_per_unit: 10}
`))
	fmt.Println(err)
	// Output:
	// config: edge.yaml: line 4, column 24: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight" (want second, minute, hour, day, week, month or year)
}
