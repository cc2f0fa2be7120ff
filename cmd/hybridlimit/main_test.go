package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUsageListsCommands(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), nil, &out))
	assert.Contains(t, out.String(), "demo")
	assert.Error(t, run(context.Background(), []string{"nope"}, &out))
}

func TestDemoShowsBurstThenLimit(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"demo", "-rate", "5", "-burst", "10", "-burst-requests", "15", "-steady", "50ms"}, &out)
	require.NoError(t, err)
	text := out.String()
	burst := text[strings.Index(text, "-- a burst"):strings.Index(text, "-- then")]
	assert.Equal(t, 10, strings.Count(burst, "allowed"), "the whole burst is admitted:\n%s", text)
	assert.Equal(t, 5, strings.Count(burst, "limited"), "the rest is limited:\n%s", text)
	assert.Contains(t, burst, "200ms", "a limited request is told when to retry")
}

func TestDemoRejectsAnInvalidLimit(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"demo", "-rate", "0"}, &out)
	assert.ErrorContains(t, err, "rate 0 must be positive")
}
