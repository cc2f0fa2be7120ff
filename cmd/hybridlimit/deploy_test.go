package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"gopkg.in/yaml.v3"

	"github.com/hybridlimit/hybridlimit/envoyrls/config"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// deployDir holds the Kubernetes manifests docs/envoy.md offers.
const deployDir = "../../deploy/kubernetes"

// k8sObject is the part of a Kubernetes object the manifests' test reads.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name        string            `yaml:"name"`
		Namespace   string            `yaml:"namespace"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	file string
	node yaml.Node
}

type k8sDeployment struct {
	Spec struct {
		Replicas int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec struct {
				TerminationGracePeriodSeconds int            `yaml:"terminationGracePeriodSeconds"`
				Containers                    []k8sContainer `yaml:"containers"`
				Volumes                       []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom any    `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
	TCPSocket *struct {
		Port any `yaml:"port"`
	} `yaml:"tcpSocket"`
	GRPC *struct {
		Port    int    `yaml:"port"`
		Service string `yaml:"service"`
	} `yaml:"grpc"`
}

type k8sService struct {
	Spec struct {
		ClusterIP string            `yaml:"clusterIP"`
		Selector  map[string]string `yaml:"selector"`
		Ports     []struct {
			Name        string `yaml:"name"`
			Port        int    `yaml:"port"`
			TargetPort  any    `yaml:"targetPort"`
			AppProtocol string `yaml:"appProtocol"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

// port resolves a probe's or a Service's port, a number or a container
// port's name, to the number.
func (c *k8sContainer) port(p any) (int, error) {
	switch v := p.(type) {
	case int:
		return v, nil
	case string:
		for _, cp := range c.Ports {
			if cp.Name == v {
				return cp.ContainerPort, nil
			}
		}
		return 0, fmt.Errorf("container %s has no port named %q", c.Name, v)
	}
	return 0, fmt.Errorf("port %v (%T): want a number or a name", p, p)
}

// loadManifests reads every object of the files kustomization.yaml names,
// and checks it names every manifest in the directory.
func loadManifests(t *testing.T) (namespace string, objs []*k8sObject) {
	t.Helper()
	var kust struct {
		Namespace string   `yaml:"namespace"`
		Resources []string `yaml:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &kust))
	files, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			names = append(names, filepath.Base(f))
		}
	}
	assert.ElementsMatch(t, names, kust.Resources, "kustomization.yaml names every manifest, and only those")
	for _, name := range kust.Resources {
		b, err := os.ReadFile(filepath.Join(deployDir, name))
		require.NoError(t, err)
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			o := &k8sObject{file: name}
			err := dec.Decode(&o.node)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, name)
			require.NoError(t, o.node.Decode(o), name)
			require.NotEmpty(t, o.APIVersion, "%s: an object without apiVersion", name)
			require.NotEmpty(t, o.Kind, "%s: an object without kind", name)
			require.NotEmpty(t, o.Metadata.Name, "%s: a %s without a name", name, o.Kind)
			if o.Kind != "Namespace" {
				assert.Equal(t, kust.Namespace, o.Metadata.Namespace, "%s: %s %s is in the kustomization's namespace", name, o.Kind, o.Metadata.Name)
			}
			objs = append(objs, o)
		}
	}
	return kust.Namespace, objs
}

func findObject(t *testing.T, objs []*k8sObject, kind, name string, into any) *k8sObject {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			if into != nil {
				require.NoError(t, o.node.Decode(into), "%s %s", kind, name)
			}
			return o
		}
	}
	require.Failf(t, "missing", "no %s named %s in %s", kind, name, deployDir)
	return nil
}

// The manifests of deploy/kubernetes agree with the binary: the rls
// container's environment and command parse as the command's settings,
// its ports, probes and scrape annotations name the listeners those
// settings open, the configuration directory is where the ConfigMap is
// mounted and its files load, the Redis it names is the Service in the
// manifests; Envoy's ratelimit cluster is the Service's gRPC port, its
// filter asks a domain the rules have, and its routes' descriptors each
// find a rule. Then the command
// runs with that environment against a private Redis, and each probe and
// the scrape get what the manifests expect.
func TestKubernetesManifestsAgreeWithTheBinary(t *testing.T) {
	ns, objs := loadManifests(t)
	findObject(t, objs, "Namespace", ns, nil)

	var dep k8sDeployment
	findObject(t, objs, "Deployment", "ratelimit", &dep)
	pod := dep.Spec.Template
	assert.Equal(t, 3, dep.Spec.Replicas)
	for k, v := range dep.Spec.Selector.MatchLabels {
		assert.Equal(t, v, pod.Metadata.Labels[k], "the selector selects the pods: %s", k)
	}
	require.Len(t, pod.Spec.Containers, 1)
	c := &pod.Spec.Containers[0]

	// The command: the image's binary (deploy/Dockerfile), its rls command.
	dockerfile, err := os.ReadFile(filepath.Join(deployDir, "..", "Dockerfile"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(c.Command), 2)
	assert.Contains(t, string(dockerfile), fmt.Sprintf("ENTRYPOINT [%q]", c.Command[0]), "the command is the image's binary")
	assert.Equal(t, "rls", c.Command[1])
	args := append(slices.Clone(c.Command[2:]), c.Args...)
	env := map[string]string{}
	for _, e := range c.Env {
		require.Nil(t, e.ValueFrom, "%s: the test reads literal values", e.Name)
		env[e.Name] = e.Value
	}
	s, err := parseRLSFlags(args, io.Discard, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err, "the container's environment and arguments are the command's settings")

	// Listeners: gRPC and admin on every interface at the container's
	// ports; the debug listener, if any, on loopback.
	listener := func(addr, portName string) {
		t.Helper()
		host, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		assert.True(t, host == "" || net.ParseIP(host).IsUnspecified(), "%s listens on every interface: %s", portName, addr)
		want, err := c.port(portName)
		require.NoError(t, err)
		assert.Equal(t, strconv.Itoa(want), port, "%s listens on the container's port %s", addr, portName)
	}
	listener(s.grpcAddr, "grpc")
	listener(s.adminAddr, "http")
	if s.debugAddr != "" {
		host, _, err := net.SplitHostPort(s.debugAddr)
		require.NoError(t, err)
		assert.True(t, net.ParseIP(host).IsLoopback(), "the debug listener stays on loopback: %s", s.debugAddr)
	}
	assert.Equal(t, dep.Spec.Replicas, s.fleetSize, "HYBRIDLIMIT_FLEET_SIZE is the replicas")
	assert.Greater(t, time.Duration(pod.Spec.TerminationGracePeriodSeconds)*time.Second, s.drain, "the pod outlives the drain")

	// Probes and scrapes reach the admin listener.
	_, adminPort, _ := net.SplitHostPort(s.adminAddr)
	require.NotNil(t, c.ReadinessProbe)
	require.NotNil(t, c.ReadinessProbe.HTTPGet, "readiness is the admin listener's health")
	p, err := c.port(c.ReadinessProbe.HTTPGet.Port)
	require.NoError(t, err)
	assert.Equal(t, adminPort, strconv.Itoa(p))
	require.NotNil(t, c.LivenessProbe)
	switch lp := c.LivenessProbe; {
	case lp.TCPSocket != nil:
		_, err := c.port(lp.TCPSocket.Port)
		assert.NoError(t, err)
	case lp.HTTPGet != nil:
		_, err := c.port(lp.HTTPGet.Port)
		assert.NoError(t, err)
	case lp.GRPC != nil:
		_, grpcPort, _ := net.SplitHostPort(s.grpcAddr)
		assert.Equal(t, grpcPort, strconv.Itoa(lp.GRPC.Port))
	default:
		t.Error("the liveness probe checks nothing")
	}
	ann := pod.Metadata.Annotations
	assert.Equal(t, "true", ann["prometheus.io/scrape"])
	assert.Equal(t, adminPort, ann["prometheus.io/port"], "Prometheus scrapes the admin listener")
	assert.Equal(t, "/metrics", ann["prometheus.io/path"])

	// The configuration directory is the ConfigMap's mount, and loads.
	var rulesMap string
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && filepath.Clean(m.MountPath) == filepath.Clean(s.configDir) {
				rulesMap = v.ConfigMap.Name
			}
		}
	}
	require.NotEmpty(t, rulesMap, "a ConfigMap is mounted at the configuration directory %s", s.configDir)
	rulesDir := t.TempDir()
	for name, data := range findObject(t, objs, "ConfigMap", rulesMap, nil).Data {
		require.NoError(t, os.WriteFile(filepath.Join(rulesDir, name), []byte(data), 0o644))
	}
	rules, err := config.LoadDir(rulesDir, config.DirOptions{Options: config.Options{MergeDomains: s.mergeDomains}})
	require.NoError(t, err, "the ConfigMap's rules load")

	// The Service selects the pods and exposes both listeners; the gRPC
	// port is named for Istio.
	var svc k8sService
	findObject(t, objs, "Service", "ratelimit", &svc)
	for k, v := range svc.Spec.Selector {
		assert.Equal(t, v, pod.Metadata.Labels[k], "the Service selects the pods: %s", k)
	}
	servicePort := map[string]int{} // container port name → Service port
	for _, sp := range svc.Spec.Ports {
		target, err := c.port(sp.TargetPort)
		require.NoError(t, err, "Service port %s", sp.Name)
		for _, cp := range c.Ports {
			if cp.ContainerPort == target {
				servicePort[cp.Name] = sp.Port
			}
		}
		if target == mustPort(t, c, "grpc") {
			assert.True(t, strings.HasPrefix(sp.Name, "grpc"), "Istio speaks HTTP/2 to a port named grpc-*: %s", sp.Name)
			assert.Equal(t, "grpc", sp.AppProtocol)
		}
	}
	require.Contains(t, servicePort, "grpc", "the Service exposes gRPC")

	// The Redis it names is the manifests' Service.
	redisHost, redisPort, err := net.SplitHostPort(s.redisURL)
	require.NoError(t, err)
	var redisSvc k8sService
	findObject(t, objs, "Service", strings.Split(redisHost, ".")[0], &redisSvc)
	require.NotEmpty(t, redisSvc.Spec.Ports)
	assert.Equal(t, redisPort, strconv.Itoa(redisSvc.Spec.Ports[0].Port))

	// Envoy: its ratelimit cluster is the Service's gRPC port over HTTP/2,
	// its filter asks a domain of the rules within a timeout -ask-wait fits
	// in, and each route's descriptors find a rule.
	var boot envoyBootstrap
	dec := yaml.NewDecoder(strings.NewReader(findObject(t, objs, "ConfigMap", "envoy-config", nil).Data["envoy.yaml"]))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&boot), "Envoy's configuration has the fields Envoy's bootstrap has, where the test reads them")
	var rlFilter *envoyRateLimitFilter
	var routes []envoyRoute
	for _, l := range boot.StaticResources.Listeners {
		for _, fc := range l.FilterChains {
			for _, f := range fc.Filters {
				if f.Name != "envoy.filters.network.http_connection_manager" {
					continue
				}
				var hcm envoyHCM
				require.NoError(t, f.TypedConfig.Decode(&hcm))
				for _, vh := range hcm.RouteConfig.VirtualHosts {
					routes = append(routes, vh.Routes...)
				}
				for _, hf := range hcm.HTTPFilters {
					if hf.Name == "envoy.filters.http.ratelimit" {
						rlFilter = &envoyRateLimitFilter{}
						require.NoError(t, hf.TypedConfig.Decode(rlFilter))
						assert.Equal(t, "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit", rlFilter.Type)
					}
				}
			}
		}
	}
	require.NotNil(t, rlFilter, "Envoy has the rate limit filter")
	assert.Contains(t, rules.Domains(), rlFilter.Domain)
	assert.Equal(t, "V3", rlFilter.RateLimitService.TransportAPIVersion)
	timeout, err := time.ParseDuration(rlFilter.Timeout)
	require.NoError(t, err, "the filter's timeout %q", rlFilter.Timeout)
	assert.Less(t, s.askWait, timeout, "-ask-wait is under the filter's timeout")
	clusterName := rlFilter.RateLimitService.GRPCService.EnvoyGRPC.ClusterName
	var found bool
	for _, cl := range boot.StaticResources.Clusters {
		if cl.Name != clusterName {
			continue
		}
		found = true
		opts := cl.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
		assert.Equal(t, "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions", opts.Type)
		assert.NotNil(t, opts.ExplicitHTTPConfig.HTTP2ProtocolOptions, "gRPC needs HTTP/2")
		assert.Equal(t, clusterName, cl.LoadAssignment.ClusterName)
		require.NotEmpty(t, cl.LoadAssignment.Endpoints)
		require.NotEmpty(t, cl.LoadAssignment.Endpoints[0].LbEndpoints)
		addr := cl.LoadAssignment.Endpoints[0].LbEndpoints[0].Endpoint.Address.SocketAddress
		assert.Equal(t, "ratelimit."+ns+".svc.cluster.local", addr.Address)
		assert.Equal(t, servicePort["grpc"], addr.PortValue)
	}
	require.True(t, found, "Envoy has the cluster %q its filter names", clusterName)
	var envoyDescriptors []*rlsv3.RateLimitRequest
	for _, r := range routes {
		for _, rl := range r.Route.RateLimits {
			var entries []config.Entry
			for _, a := range rl.Actions {
				switch {
				case a.RemoteAddress != nil:
					entries = append(entries, config.Entry{Key: "remote_address", Value: "10.0.0.1"})
				case a.GenericKey != nil:
					entries = append(entries, config.Entry{Key: cmp.Or(a.GenericKey.DescriptorKey, "generic_key"), Value: a.GenericKey.DescriptorValue})
				case a.RequestHeaders != nil:
					entries = append(entries, config.Entry{Key: a.RequestHeaders.DescriptorKey, Value: "v"})
				default:
					t.Errorf("route %v: an action the test does not read", r.Match)
				}
			}
			_, ok := rules.Lookup(rlFilter.Domain, entries)
			assert.True(t, ok, "route %v: the descriptor %v finds a rule", r.Match, entries)
			req := &rlsv3.RateLimitRequest{Domain: rlFilter.Domain, Descriptors: []*commonv3.RateLimitDescriptor{{}}}
			for _, e := range entries {
				req.Descriptors[0].Entries = append(req.Descriptors[0].Entries, &commonv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
			}
			envoyDescriptors = append(envoyDescriptors, req)
		}
	}
	require.NotEmpty(t, envoyDescriptors)

	// The command, run with that environment (on free loopback ports, the
	// ConfigMap's files, a private Redis), answers the probes, the scrape
	// and Envoy's descriptors.
	for k, v := range env {
		t.Setenv(k, v)
	}
	srv := redistest.Start(t)
	r := startRLS(t, append(args, "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-config", rulesDir, "-redis", srv.Addr())...)
	code, _ := r.get(t, c.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, http.StatusOK, code, "readiness")
	code, body := r.get(t, ann["prometheus.io/path"])
	assert.Equal(t, http.StatusOK, code, "the scrape")
	assert.Contains(t, body, "rate_limit_config_rules ")
	conn := r.client(t)
	if lp := c.LivenessProbe.GRPC; lp != nil {
		hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: lp.Service})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, hc.GetStatus())
	}
	if lp := c.LivenessProbe.HTTPGet; lp != nil {
		code, _ := r.get(t, lp.Path)
		assert.Equal(t, http.StatusOK, code, "liveness")
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	for _, req := range envoyDescriptors {
		resp, err := client.ShouldRateLimit(context.Background(), req)
		require.NoError(t, err)
		assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.GetOverallCode())
		assert.NotNil(t, resp.GetStatuses()[0].GetCurrentLimit(), "%v is limited", req.GetDescriptors())
	}
	require.NoError(t, r.stop())
}

func mustPort(t *testing.T, c *k8sContainer, name string) int {
	t.Helper()
	p, err := c.port(name)
	require.NoError(t, err)
	return p
}

// The part of Envoy's bootstrap the manifests' test reads, by Envoy's
// field names. Its top levels are decoded with KnownFields, so a misspelt
// field there fails the test; the typed configs are read loosely (Envoy's
// own schema is not in this module's dependencies).
type envoyBootstrap struct {
	Admin           yaml.Node `yaml:"admin"`
	StaticResources struct {
		Listeners []struct {
			Name         string    `yaml:"name"`
			Address      yaml.Node `yaml:"address"`
			FilterChains []struct {
				Filters []struct {
					Name        string    `yaml:"name"`
					TypedConfig yaml.Node `yaml:"typed_config"`
				} `yaml:"filters"`
			} `yaml:"filter_chains"`
		} `yaml:"listeners"`
		Clusters []struct {
			Name                          string `yaml:"name"`
			Type                          string `yaml:"type"`
			ConnectTimeout                string `yaml:"connect_timeout"`
			TypedExtensionProtocolOptions map[string]struct {
				Type               string `yaml:"@type"`
				ExplicitHTTPConfig struct {
					HTTP2ProtocolOptions *struct{} `yaml:"http2_protocol_options"`
				} `yaml:"explicit_http_config"`
			} `yaml:"typed_extension_protocol_options"`
			LoadAssignment struct {
				ClusterName string `yaml:"cluster_name"`
				Endpoints   []struct {
					LbEndpoints []struct {
						Endpoint struct {
							Address struct {
								SocketAddress struct {
									Address   string `yaml:"address"`
									PortValue int    `yaml:"port_value"`
								} `yaml:"socket_address"`
							} `yaml:"address"`
						} `yaml:"endpoint"`
					} `yaml:"lb_endpoints"`
				} `yaml:"endpoints"`
			} `yaml:"load_assignment"`
		} `yaml:"clusters"`
	} `yaml:"static_resources"`
}

type envoyHCM struct {
	Type        string `yaml:"@type"`
	StatPrefix  string `yaml:"stat_prefix"`
	RouteConfig struct {
		VirtualHosts []struct {
			Name    string       `yaml:"name"`
			Domains []string     `yaml:"domains"`
			Routes  []envoyRoute `yaml:"routes"`
		} `yaml:"virtual_hosts"`
	} `yaml:"route_config"`
	HTTPFilters []struct {
		Name        string    `yaml:"name"`
		TypedConfig yaml.Node `yaml:"typed_config"`
	} `yaml:"http_filters"`
}

type envoyRoute struct {
	Match map[string]string `yaml:"match"`
	Route struct {
		Cluster    string `yaml:"cluster"`
		RateLimits []struct {
			Actions []struct {
				RemoteAddress *struct{} `yaml:"remote_address"`
				GenericKey    *struct {
					DescriptorKey   string `yaml:"descriptor_key"`
					DescriptorValue string `yaml:"descriptor_value"`
				} `yaml:"generic_key"`
				RequestHeaders *struct {
					HeaderName    string `yaml:"header_name"`
					DescriptorKey string `yaml:"descriptor_key"`
				} `yaml:"request_headers"`
			} `yaml:"actions"`
		} `yaml:"rate_limits"`
	} `yaml:"route"`
}

type envoyRateLimitFilter struct {
	Type                   string `yaml:"@type"`
	Domain                 string `yaml:"domain"`
	Timeout                string `yaml:"timeout"`
	FailureModeDeny        bool   `yaml:"failure_mode_deny"`
	EnableXRatelimitHeader string `yaml:"enable_x_ratelimit_headers"`
	RateLimitService       struct {
		TransportAPIVersion string `yaml:"transport_api_version"`
		GRPCService         struct {
			EnvoyGRPC struct {
				ClusterName string `yaml:"cluster_name"`
			} `yaml:"envoy_grpc"`
		} `yaml:"grpc_service"`
	} `yaml:"rate_limit_service"`
}
