package rlscompat

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/envoyrls/config"
)

// hybridlimit refuses exactly the files BadConfigs says it refuses, and
// loads the suite's configuration.
func TestOurRefusals(t *testing.T) {
	for _, c := range BadConfigs() {
		_, err := config.Parse("f.yaml", []byte(c.YAML))
		assert.Equal(t, c.WeRefuse, err != nil, "%s: %v", c.Name, err)
		if c.TheyRefuse != c.WeRefuse {
			assert.NotEmpty(t, c.Why, "%s: a difference is explained", c.Name)
		}
	}
	_, err := config.Parse("compat.yaml", []byte(Config))
	assert.NoError(t, err)
}
