package rules

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The complete example in docs/rules.md is valid, and uses every block.
func TestDocsExampleIsValid(t *testing.T) {
	raw, err := os.ReadFile("../docs/rules.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)## A complete file.*?```yaml\n(.*?)```").FindSubmatch(raw)
	require.NotNil(t, m, "docs/rules.md has a complete YAML example")
	cfg, err := Parse(m[1])
	require.NoError(t, err)
	rs, err := Compile(cfg)
	require.NoError(t, err)
	assert.True(t, rs.Enabled())
	for name, set := range map[string]bool{
		"default": cfg.Default != nil, "global": cfg.Global != nil, "per_ip": cfg.PerIP != nil, "per_user": cfg.PerUser != nil,
		"endpoints": len(cfg.Endpoints) > 0, "tiers": len(cfg.Tiers) > 0, "ban": len(cfg.Ban) > 0,
		"penalty": cfg.Penalty != nil, "priority": cfg.Reserve > 0,
	} {
		assert.True(t, set, "the example sets %s", name)
	}
}
