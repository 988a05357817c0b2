package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"gocloud.dev/blob"
)

// ActivityName is the name Complete is registered under.
const ActivityName = "berth.model.complete"

// Model calls one model. It is safe for concurrent use.
type Model struct {
	cfg      Config
	client   openai.Client
	bucket   *blob.Bucket
	segments *segmentCache
}

// New returns a Model calling cfg's model, keeping conversations and
// streamed answers in bucket (the worker's output store). A
// configuration missing what it needs is a one-line error saying what
// to set.
func New(cfg Config, bucket *blob.Bucket) (*Model, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if bucket == nil {
		return nil, errors.New("model: a blob store is required")
	}
	cfg = cfg.withDefaults()
	client := openai.NewClient(
		option.WithBaseURL(cfg.baseURL()+"/"),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(0), // Temporal retries, once, by its policy
		option.WithMiddleware(boundEvents(cfg.maxEvent())),
	)
	return &Model{cfg: cfg, client: client, bucket: bucket, segments: newSegmentCache(segmentCacheBytes)}, nil
}

// Register registers Complete on w as ActivityName, and Status as
// StatusActivityName.
func (m *Model) Register(w worker.ActivityRegistry) {
	w.RegisterActivityWithOptions(m.Complete, activity.RegisterOptions{Name: ActivityName})
	RegisterStatus(w, m.Status)
}

// ErrUnlisted says that the server lists no models (GET /models
// answered 404, 405 or 501, or not with JSON): whether it serves the
// model, the first call will tell.
var ErrUnlisted = errors.New("the server lists no models")

// checkTimeout bounds Check.
const checkTimeout = 10 * time.Second

// Check asks the server whether it can be reached with the key and
// serves the model: nil if it lists the model, ErrUnlisted (wrapped)
// if it lists no models, otherwise a one-line error saying what is
// wrong and how to fix it. It keeps nothing: a model that is down now
// may be up at the next call, which is what counts.
func (m *Model) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	var resp *http.Response
	page, err := m.client.Models.List(ctx, option.WithResponseInto(&resp))
	var apiErr *openai.Error
	switch {
	case errors.As(err, &apiErr) && slices.Contains([]int{http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented}, apiErr.StatusCode),
		err != nil && !errors.As(err, &apiErr) && resp != nil && resp.StatusCode/100 == 2: // an answer that is no list
		return fmt.Errorf("model: %s: %w", m.cfg.host(), ErrUnlisted)
	case errors.As(err, &apiErr):
		return m.describe(err, false)
	case err != nil:
		return fmt.Errorf("%w: start it, or set OPENAI_BASE_URL to one that runs", m.describe(err, false))
	}
	var ids []string
	for _, mod := range page.Data {
		ids = append(ids, mod.ID)
	}
	if !slices.Contains(ids, m.cfg.Model) {
		served := strings.Join(ids, ", ")
		if len(served) > 200 {
			served = served[:200] + "..."
		}
		return fmt.Errorf("model: %s does not serve model %q (BERTH_MODEL); it serves: %s", m.cfg.host(), m.cfg.Model, served)
	}
	return nil
}

// Activity timeouts and retries.
const (
	// StartToClose bounds one attempt: the call's timeout, with room to
	// store its result.
	startToClose = DefaultTimeout + time.Minute
	// heartbeatTimeout: a worker that stops heartbeating for this long
	// is gone, and the call is retried elsewhere.
	heartbeatTimeout = 30 * time.Second
)

// ActivityOptions are the options a workflow calls Complete with: its
// timeouts, and a retry policy that retries ModelUnavailable only, with
// backoff, up to 20 attempts.
func ActivityOptions() workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout: startToClose,
		HeartbeatTimeout:    heartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        time.Minute,
			MaximumAttempts:        20,
			NonRetryableErrorTypes: nonRetryable(),
		},
	}
}
