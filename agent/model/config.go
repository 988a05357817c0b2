package model

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"
)

// DefaultBaseURL is OpenAI's API.
const DefaultBaseURL = "https://api.openai.com/v1"

// Defaults of Config's durations.
const (
	DefaultTimeout   = 10 * time.Minute
	DefaultHeartbeat = 5 * time.Second
	DefaultFlush     = 200 * time.Millisecond
)

// Config says which model to call, and how.
type Config struct {
	// BaseURL is the API's base URL, with its /v1; empty means
	// DefaultBaseURL.
	BaseURL string
	// APIKey is sent as a bearer token. A local server may need none.
	APIKey string
	// Model is the model's name at the server.
	Model string
	// Timeout bounds one call, from request to last chunk; zero means
	// DefaultTimeout. A call past it is ModelUnavailable, and retried.
	Timeout time.Duration
	// HeartbeatEvery is how often a call heartbeats, even while the model
	// sends nothing; zero means DefaultHeartbeat.
	HeartbeatEvery time.Duration
	// FlushEvery is how often the streamed text is stored for front ends;
	// zero means DefaultFlush.
	FlushEvery time.Duration
}

// ConfigFromEnv reads OPENAI_API_KEY, OPENAI_BASE_URL and BERTH_MODEL.
func ConfigFromEnv() Config {
	return Config{
		APIKey:  os.Getenv("OPENAI_API_KEY"),
		BaseURL: os.Getenv("OPENAI_BASE_URL"),
		Model:   os.Getenv("BERTH_MODEL"),
	}
}

// String describes the configuration without its key.
func (c Config) String() string {
	key := "none"
	if c.APIKey != "" {
		key = "set"
	}
	return fmt.Sprintf("model %q at %s (API key %s)", c.Model, c.baseURL(), key)
}

func (c Config) baseURL() string {
	if c.BaseURL == "" {
		return DefaultBaseURL
	}
	return strings.TrimRight(c.BaseURL, "/")
}

// host is the server's host, to name it in errors without its path.
func (c Config) host() string {
	u, err := url.Parse(c.baseURL())
	if err != nil || u.Host == "" {
		return c.baseURL()
	}
	return u.Host
}

// validate says what is missing, in one line.
func (c Config) validate() error {
	if c.Model == "" {
		return fmt.Errorf("model: no model set: set BERTH_MODEL to a model %s serves", c.host())
	}
	if c.APIKey == "" && c.baseURL() == DefaultBaseURL {
		return fmt.Errorf("model: OPENAI_API_KEY is not set: set it, or OPENAI_BASE_URL to a compatible server (vLLM, Ollama, llama.cpp)")
	}
	if u, err := url.Parse(c.baseURL()); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("model: OPENAI_BASE_URL %q is not an http(s) URL", c.BaseURL)
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
