package httpkey_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httpkey"
)

func TestEndpoint(t *testing.T) {
	tests := []struct {
		name, method, target, pattern, want string
	}{
		{"raw path before routing", http.MethodGet, "/x", "", "endpoint:GET /x"},
		{"query is not part of it", http.MethodPost, "/x?a=1", "", "endpoint:POST /x"},
		{"pattern with method", http.MethodGet, "/users/1", "GET /users/{id}", "endpoint:GET /users/{id}"},
		{"pattern without method takes the request's", http.MethodDelete, "/users/1", "/users/{id}", "endpoint:DELETE /users/{id}"},
		{"pattern with host", http.MethodGet, "/users/1", "GET example.com/users/{id}", "endpoint:GET example.com/users/{id}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.target, nil)
			r.Pattern = tt.pattern
			got, err := httpkey.Endpoint()(r)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestEndpointAfterRouting checks the key a handler routed by http.ServeMux
// sees: the pattern, so that every id shares one budget.
func TestEndpointAfterRouting(t *testing.T) {
	var got []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) {
		key, err := httpkey.Endpoint()(r)
		require.NoError(t, err)
		got = append(got, key)
	})
	for _, path := range []string{"/users/1", "/users/2"} {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
	}
	assert.Equal(t, []string{"endpoint:GET /users/{id}", "endpoint:GET /users/{id}"}, got)
}

func TestEndpointNoURL(t *testing.T) {
	_, err := httpkey.Endpoint()(&http.Request{Method: http.MethodGet})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "httpkey: ")
}

func TestEndpointEmptyMethodIsGET(t *testing.T) {
	got, err := httpkey.Endpoint()(&http.Request{URL: &url.URL{Path: "/x"}})
	require.NoError(t, err)
	assert.Equal(t, "endpoint:GET /x", got)
}
