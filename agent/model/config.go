package model

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/berth-dev/berth/agent/chat"
)

// DefaultBaseURL is OpenAI's API.
const DefaultBaseURL = "https://api.openai.com/v1"

// Defaults of Config's durations.
const (
	DefaultTimeout   = 10 * time.Minute
	DefaultHeartbeat = 5 * time.Second
	DefaultFlush     = 200 * time.Millisecond
)

// Defaults of Config's bounds on one answer. An answer past one fails
// the call with errdefs.AnswerTooLarge, not retried; the activity stops
// reading the stream there, so its memory stays about the bound.
const (
	// DefaultMaxText bounds an answer's text: some 1M tokens, far
	// more than any model writes in one answer.
	DefaultMaxText = 4 << 20
	// DefaultMaxArguments bounds each tool call's arguments (a file
	// written whole, a patch).
	DefaultMaxArguments = 256 << 10
	// DefaultMaxToolCalls bounds the tool calls of one answer.
	DefaultMaxToolCalls = 16
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

	// MaxText, MaxArguments and MaxToolCalls bound one answer: its text
	// in bytes, each tool call's arguments in bytes, and its tool calls;
	// zero means DefaultMaxText, DefaultMaxArguments and
	// DefaultMaxToolCalls. The arguments of all calls together are
	// bounded by chat.MaxCallBytes too, as they travel through history:
	// MaxArguments may not be larger, nor MaxToolCalls larger than
	// chat.MaxToolCalls.
	MaxText      int
	MaxArguments int
	MaxToolCalls int
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
	if c.MaxText < 0 || c.MaxArguments < 0 || c.MaxToolCalls < 0 {
		return fmt.Errorf("model: negative bound on an answer (text %d, arguments %d, tool calls %d)", c.MaxText, c.MaxArguments, c.MaxToolCalls)
	}
	if c.MaxToolCalls > chat.MaxToolCalls {
		return fmt.Errorf("model: MaxToolCalls %d is more than chat.MaxToolCalls (%d), what history carries of one answer's calls", c.MaxToolCalls, chat.MaxToolCalls)
	}
	if c.MaxArguments > chat.MaxCallBytes {
		return fmt.Errorf("model: MaxArguments %d is more than chat.MaxCallBytes (%d), what history carries of one answer's calls", c.MaxArguments, chat.MaxCallBytes)
	}
	return nil
}

// withDefaults fills in the zero values.
func (c Config) withDefaults() Config {
	c.Timeout = orDefault(c.Timeout, DefaultTimeout)
	c.HeartbeatEvery = orDefault(c.HeartbeatEvery, DefaultHeartbeat)
	c.FlushEvery = orDefault(c.FlushEvery, DefaultFlush)
	c.MaxText = orDefault(c.MaxText, DefaultMaxText)
	c.MaxArguments = orDefault(c.MaxArguments, DefaultMaxArguments)
	c.MaxToolCalls = orDefault(c.MaxToolCalls, DefaultMaxToolCalls)
	return c
}

func orDefault[T time.Duration | int](d, def T) T {
	if d <= 0 {
		return def
	}
	return d
}
