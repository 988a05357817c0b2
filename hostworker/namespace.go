package hostworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// Bounds of the wait between two tries while the server does not know
// the workers' namespace yet.
const (
	namespaceRetryFirst = 250 * time.Millisecond
	namespaceRetryMax   = 10 * time.Second
)

// namespaceProbe is the workflow id and task queue a host asks about to
// learn whether the server serves its namespace; neither exists.
const namespaceProbe = "berth-namespace-probe"

// startWaitingForNamespace starts the workers once every service of
// the server knows their namespace: a worker started with a new cluster
// comes up before the namespace is registered, and a namespace just
// registered reaches the server's services one by one, at each
// registry's refresh (the frontend, which a worker's start asks;
// matching, which serves its polls and drops a poller for good with
// NamespaceNotFound; history, which starts the host's reaper). Until
// then it tries again, with backoff, logging each try, until ctx ends.
// Only NamespaceNotFound is waited for: any other error is start's,
// at once. A worker whose start failed cannot start again: start makes
// new ones each time.
func startWaitingForNamespace(ctx context.Context, c client.Client, log *slog.Logger, start func() (*Worker, error)) (*Worker, error) {
	if err := retryNamespace(ctx, log, "ask the server about the namespace", func() error { return namespaceServed(ctx, c) }); err != nil {
		return nil, err
	}
	var w *Worker
	err := retryNamespace(ctx, log, "start the workers", func() (err error) {
		w, err = start()
		return err
	})
	return w, err
}

// namespaceServed asks matching and history about things that do not
// exist in the client's namespace: each answers NamespaceNotFound while
// it does not know the namespace, NotFound once it does. Other answers
// (an API key that may not describe task queues) are for the workers'
// start to meet.
func namespaceServed(ctx context.Context, c client.Client) error {
	_, err := c.DescribeTaskQueue(ctx, namespaceProbe, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if isNamespaceNotFound(err) {
		return err
	}
	_, err = c.DescribeWorkflowExecution(ctx, namespaceProbe, "")
	if isNamespaceNotFound(err) {
		return err
	}
	return nil
}

func isNamespaceNotFound(err error) bool {
	var missing *serviceerror.NamespaceNotFound
	return errors.As(err, &missing)
}

// retryNamespace runs f until it returns anything but NamespaceNotFound,
// waiting between tries, or until ctx ends.
func retryNamespace(ctx context.Context, log *slog.Logger, what string, f func() error) error {
	delay := namespaceRetryFirst
	for attempt := 1; ; attempt++ {
		err := f()
		if !isNamespaceNotFound(err) {
			return err
		}
		log.Warn("the server does not know the namespace yet: waiting for it", "step", what, "attempt", attempt, "retry-in", delay, "error", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("hostworker: %s: %w (waited for the namespace until: %w)", what, err, context.Cause(ctx))
		case <-t.C:
		}
		delay = min(2*delay, namespaceRetryMax)
	}
}
