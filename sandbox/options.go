package sandbox

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
)

// Provider chooses where a sandbox lives.
type Provider struct {
	// Type is a registered provider name ("linux").
	Type string `json:"type"`
}

// DefaultQueue is the task queue every berth worker polls for sandbox
// creation.
const DefaultQueue = "berth"

// Option configures a sandbox.
type Option func(*config)

type config struct {
	Spec  provider.Spec `json:"spec"`
	Queue string        `json:"queue"`
}

// WithResources sets the sandbox's limits.
func WithResources(r provider.Resources) Option { return func(c *config) { c.Spec.Resources = r } }

// WithEnv adds environment variables to every command. Values enter
// workflow history: pass no secrets.
func WithEnv(env map[string]string) Option { return func(c *config) { c.Spec.Env = env } }

// WithLabels adds labels to the sandbox.
func WithLabels(labels map[string]string) Option { return func(c *config) { c.Spec.Labels = labels } }

// WithMaxLifetime sets the sandbox's hard lifetime; zero means
// provider.DefaultLifetime.
func WithMaxLifetime(d time.Duration) Option { return func(c *config) { c.Spec.Lifetime = d } }

// WithQueue sends sandbox creation to another task queue than
// DefaultQueue.
func WithQueue(q string) Option { return func(c *config) { c.Queue = q } }

// ExecOption configures one command.
type ExecOption func(*execConfig)

type execConfig struct {
	timeout time.Duration
	env     map[string]string
	dir     string
	stdin   []byte
}

// WithTimeout ends the command, and every process it started, after d.
// Zero means DefaultExecTimeout.
func WithTimeout(d time.Duration) ExecOption { return func(c *execConfig) { c.timeout = d } }

// WithExecEnv adds environment variables to this command.
func WithExecEnv(env map[string]string) ExecOption { return func(c *execConfig) { c.env = env } }

// WithDir sets the command's working directory, a workspace path.
func WithDir(dir string) ExecOption { return func(c *execConfig) { c.dir = dir } }

// WithStdin gives the command a standard input. It enters workflow
// history.
func WithStdin(b []byte) ExecOption { return func(c *execConfig) { c.stdin = b } }

// DefaultExecTimeout bounds commands that name no timeout.
const DefaultExecTimeout = 10 * time.Minute

// Timeouts of the activities, in one place.
const (
	// opTimeout bounds short operations (files, create, destroy).
	opTimeout = 2 * time.Minute
	// scheduleTimeout bounds how long an operation may wait for a worker:
	// a host-bound sandbox whose host is gone is lost after this.
	scheduleTimeout = time.Minute
	// heartbeatTimeout: a command's activity heartbeats every few seconds;
	// missing this long, its worker is taken for dead and it is retried,
	// attaching to the command.
	heartbeatTimeout = 20 * time.Second
)

// activityOptions are those of the operations on a sandbox served from
// queue; runFor, when not zero, is how long the operation itself may run.
func activityOptions(queue string, runFor time.Duration) workflow.ActivityOptions {
	opts := workflow.ActivityOptions{
		TaskQueue:              queue,
		ScheduleToStartTimeout: scheduleTimeout,
		StartToCloseTimeout:    opTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    100 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    10 * time.Second,
			MaximumAttempts:    10,
		},
	}
	if runFor > 0 {
		opts.StartToCloseTimeout = runFor + opTimeout
		opts.HeartbeatTimeout = heartbeatTimeout
	}
	return opts
}
