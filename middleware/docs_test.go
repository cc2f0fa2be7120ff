package middleware

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/middleware.md names the codes the middleware sends, and only those.
func TestDocsNameTheCodes(t *testing.T) {
	raw, err := os.ReadFile("../docs/middleware.md")
	require.NoError(t, err)
	doc := string(raw)
	codes := []string{CodeRateLimited, CodeBanned, CodePenalty, CodeUnavailable, CodeBadRequest, CodeInternal}
	for _, c := range codes {
		assert.Contains(t, doc, `"error": "`+c+`"`, "docs/middleware.md shows %s", c)
	}
	for _, m := range regexp.MustCompile(`"error": "([a-z_]+)"`).FindAllStringSubmatch(doc, -1) {
		assert.Contains(t, codes, m[1], "docs/middleware.md names a code the middleware never sends")
	}
}
