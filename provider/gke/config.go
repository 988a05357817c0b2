package gke

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/settings"
)

// Config sets up the API over a cluster running the agent-sandbox
// controller.
type Config struct {
	// Kubeconfig is the kubeconfig file; empty means $KUBECONFIG, else
	// ~/.kube/config, else the pod's own service account when berth runs
	// in the cluster.
	Kubeconfig string
	// Context is the kubeconfig's context; empty means its current one.
	Context string
	// Namespace holds the claims; empty means "default".
	Namespace string
	// Template is the SandboxTemplate sandboxes are made from. Required.
	Template string
	// WarmPool is the SandboxWarmPool claims name (v1beta1 claims name a
	// pool, and the pool its template); empty means one named like the
	// template. A pool of no replicas starts every sandbox cold.
	WarmPool string
	// RouterURL is the sandbox router's URL, through which the runtime
	// of each sandbox (execute, upload) is reached. Required.
	RouterURL string
	// DaemonBaked is where the template's image holds berth-sandboxd;
	// empty means berth uploads it into every sandbox.
	DaemonBaked string
	// Endpoint is how the daemon's port is reached: EndpointPortForward
	// (the API server's port forward to the sandbox's pod; the default)
	// or EndpointService (the sandbox's Service, from inside the cluster).
	Endpoint string
	// REST, when set, is the cluster's client configuration, instead of
	// Kubeconfig's (for tests and embedders).
	REST   *rest.Config
	Logger *slog.Logger
}

// Endpoint modes.
const (
	EndpointPortForward = "port-forward"
	EndpointService     = "service"
)

// ParseConfig reads the API's settings: kubeconfig, context, namespace,
// template, warm-pool, router-url, daemon-baked and endpoint.
func ParseConfig(pc provider.Config) (Config, error) {
	var c Config
	if err := settings.Decode(Name, pc, map[string]settings.Setting{
		"kubeconfig":   settings.String(&c.Kubeconfig),
		"context":      settings.String(&c.Context),
		"namespace":    settings.String(&c.Namespace),
		"template":     settings.String(&c.Template),
		"warm-pool":    settings.String(&c.WarmPool),
		"router-url":   settings.String(&c.RouterURL),
		"daemon-baked": settings.String(&c.DaemonBaked),
		"endpoint":     settings.String(&c.Endpoint),
	}); err != nil {
		return c, err
	}
	return c, c.check()
}

func badInput(format string, args ...any) error {
	return fmt.Errorf("%w: gke provider: %s", errdefs.ErrBadInput, fmt.Sprintf(format, args...))
}

// check fills the defaults of c and checks the rest.
func (c *Config) check() error {
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if len(validation.IsDNS1123Label(c.Namespace)) > 0 {
		return badInput("namespace %q is not a DNS label", c.Namespace)
	}
	if c.Template == "" {
		return badInput("setting \"template\" (a SandboxTemplate) is required")
	}
	if len(validation.IsDNS1123Subdomain(c.Template)) > 0 {
		return badInput("template %q is not a Kubernetes name", c.Template)
	}
	if c.WarmPool == "" {
		c.WarmPool = c.Template
	}
	if len(validation.IsDNS1123Subdomain(c.WarmPool)) > 0 {
		return badInput("warm-pool %q is not a Kubernetes name", c.WarmPool)
	}
	if c.RouterURL == "" {
		return badInput("setting \"router-url\" (the sandbox router) is required")
	}
	if u, err := url.Parse(c.RouterURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return badInput("router-url %q is not an http(s) URL", c.RouterURL)
	}
	if c.DaemonBaked != "" && !strings.HasPrefix(c.DaemonBaked, "/") {
		return badInput("daemon-baked %q is not an absolute path", c.DaemonBaked)
	}
	switch c.Endpoint {
	case "":
		c.Endpoint = EndpointPortForward
	case EndpointPortForward, EndpointService:
	default:
		return badInput("endpoint %q is neither %q nor %q", c.Endpoint, EndpointPortForward, EndpointService)
	}
	return nil
}

// restConfig is the cluster's client configuration: the kubeconfig's,
// or the pod's own when there is none and berth runs in a pod. Its
// credentials are never part of an error.
func (c *Config) restConfig() (*rest.Config, error) {
	if c.REST != nil {
		return rest.CopyConfig(c.REST), nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if c.Kubeconfig != "" {
		rules.ExplicitPath = c.Kubeconfig
	}
	explicit := c.Kubeconfig != "" || os.Getenv("KUBECONFIG") != ""
	if !explicit {
		home, _ := os.UserHomeDir()
		if _, err := os.Stat(filepath.Join(home, ".kube", "config")); err != nil {
			if rc, err := rest.InClusterConfig(); err == nil {
				return rc, nil
			}
		}
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.Context}).ClientConfig()
	if err != nil {
		// clientcmd's errors name files and contexts, never a token.
		return nil, fmt.Errorf("%w: gke provider: kubeconfig: %s", errdefs.ErrProviderAuth, firstLine(err.Error()))
	}
	return rc, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}
