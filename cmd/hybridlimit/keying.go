package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"

	"github.com/hybridlimit/hybridlimit/httpkey"
	"github.com/hybridlimit/hybridlimit/middleware"
)

// keying is who the gateway takes a request's client to be: its flags
// -trusted-proxies, -client, -api-key-header and -hash-api-keys. explain
// and replay take the same flags, read by the same code, so that they key
// clients as the gateway does.
type keying struct {
	trustedProxies string
	proxies        []netip.Prefix // trustedProxies, parsed
	client         clientKeying
	apiKeyHeader   string
	hashAPIKeys    bool
}

// clientKeying is how the gateway tells clients apart.
type clientKeying string

const (
	keyByIP          clientKeying = "ip"
	keyByAPIKey      clientKeying = "api-key"
	keyByAPIKeyOrIP  clientKeying = "api-key-or-ip"
	keyByIPAndAPIKey clientKeying = "ip-and-api-key"
)

var clientKeyings = []clientKeying{keyByIP, keyByAPIKey, keyByAPIKeyOrIP, keyByIPAndAPIKey}

// register defines the keying flags on fs, with the gateway's defaults.
func (k *keying) register(fs *flag.FlagSet) {
	k.client = keyByIP
	fs.StringVar(&k.trustedProxies, "trusted-proxies", "", "proxies whose X-Forwarded-For is believed: addresses and CIDRs, comma-separated")
	fs.Func("client", "how clients are keyed: ip, api-key, api-key-or-ip or ip-and-api-key (default ip)", func(s string) error {
		for _, c := range clientKeyings {
			if s == string(c) {
				k.client = c
				return nil
			}
		}
		return fmt.Errorf("unknown client keying %q (want ip, api-key, api-key-or-ip or ip-and-api-key)", s)
	})
	fs.StringVar(&k.apiKeyHeader, "api-key-header", httpkey.DefaultAPIKeyHeader, "the header holding a client's API key")
	fs.BoolVar(&k.hashAPIKeys, "hash-api-keys", true, "key clients by a hash of their API key, so raw keys never reach Redis or logs")
}

// check parses the trusted proxies and checks the API key header; its
// errors start with cmd's name.
func (k *keying) check(cmd string) error {
	var errs []error
	var err error
	if k.proxies, err = httpkey.ParseTrustedProxies(k.trustedProxies); err != nil {
		errs = append(errs, fmt.Errorf("%s: -trusted-proxies: %w", cmd, err))
	}
	if err := (httpkey.APIKeyConfig{Header: k.apiKeyHeader}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%s: -api-key-header: %w", cmd, err))
	}
	return errors.Join(errs...)
}

// ipResolver believes X-Forwarded-For from the trusted proxies only.
func (k *keying) ipResolver() httpkey.IPResolver {
	return httpkey.IPResolver{TrustedProxies: k.proxies, Header: httpkey.XForwardedForOnly}
}

// clientExtractor keys clients as -client says.
func (k *keying) clientExtractor() httpkey.Extractor {
	ip := httpkey.IP(k.ipResolver())
	key := httpkey.APIKey(httpkey.APIKeyConfig{Header: k.apiKeyHeader, Hash: k.hashAPIKeys})
	switch k.client {
	case keyByAPIKey:
		return key
	case keyByAPIKeyOrIP:
		return httpkey.First(key, ip)
	case keyByIPAndAPIKey:
		return httpkey.All(ip, key)
	}
	return ip
}

// middleware is the part of a middleware.Config the keying sets: the
// gateway's, and what explain and replay plan requests with.
func (k *keying) middleware() middleware.Config {
	return middleware.Config{IP: k.ipResolver(), Client: k.clientExtractor()}
}
