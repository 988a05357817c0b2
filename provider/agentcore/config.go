package agentcore

import (
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/settings"
)

// Config sets up the API over AgentCore's Code Interpreter.
type Config struct {
	// Region is the AWS region; empty means the default chain's
	// (AWS_REGION, the shared config's profile).
	Region string
	// Profile is the shared config's profile to take credentials and
	// region from; empty means the default chain's.
	Profile string
	// Identifier is the code interpreter sessions are started in; empty
	// means DefaultIdentifier, the one AWS provides.
	Identifier string
	// EndpointURL replaces the service's endpoint (a fake's); empty
	// means the region's.
	EndpointURL string
	// DaemonPath is where package remote uploads the daemon in a session
	// (remote.Config.RemotePath), which every relayed call runs; empty
	// means remote.DefaultRemotePath.
	DaemonPath string
	// UploadChunk bounds the bytes of one writeFiles of an Upload; a
	// larger file goes in pieces joined in the session. Zero means
	// DefaultUploadChunk.
	UploadChunk int
	// MaxLifetime is the longest session, which a session's timeout is
	// capped at; zero, or more than the service's, means MaxLifetime
	// (8 h). It is the provider's MaxLifetime: a berth sandbox that lives
	// longer moves to a new session before it.
	MaxLifetime time.Duration
	Logger      *slog.Logger
}

// Defaults of Config.
const (
	DefaultIdentifier = "aws.codeinterpreter.v1"
	// DefaultUploadChunk keeps one writeFiles, in JSON's base64, well
	// within the 100 MB the service takes inline.
	DefaultUploadChunk = 32 << 20
)

// ParseConfig reads the API's settings: region, profile,
// code-interpreter, endpoint-url and max-lifetime (a session timeout
// shorter than the service's 8 h, where an account's policy sets one). Credentials come from the AWS
// default chain (environment, shared config and credentials files,
// the profile, SSO, the instance's role), never from a setting.
func ParseConfig(pc provider.Config) (Config, error) {
	var c Config
	if err := settings.Decode(Name, pc, map[string]settings.Setting{
		"region":           settings.String(&c.Region),
		"profile":          settings.String(&c.Profile),
		"code-interpreter": settings.String(&c.Identifier),
		"endpoint-url":     settings.String(&c.EndpointURL),
		"max-lifetime":     settings.Duration(&c.MaxLifetime),
	}); err != nil {
		return c, err
	}
	if c.EndpointURL != "" {
		u, err := url.Parse(c.EndpointURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("%w: %s provider: setting \"endpoint-url\": not an http(s) URL", errdefs.ErrBadInput, Name)
		}
	}
	if c.Identifier != "" && !identifierRE.MatchString(c.Identifier) {
		return c, fmt.Errorf("%w: %s provider: setting \"code-interpreter\": %q is no code interpreter's identifier", errdefs.ErrBadInput, Name, c.Identifier)
	}
	return c, nil
}
