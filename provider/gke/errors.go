package gke

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/internal/svcerr"
)

// Error is a call the cluster, or a sandbox's runtime, refused or could
// not answer. It wraps the errdefs kind the answer means, and its
// message is one line that never holds the credential.
type Error = svcerr.Error

// classify turns an error of the Kubernetes clients, or of the runtime
// client, into an Error of berth's kinds.
func classify(op string, err error, secret string) error {
	if err == nil {
		return nil
	}
	e := &Error{Service: Name, Op: op}
	var status apierrors.APIStatus
	var he *sandbox.HTTPError
	switch {
	case errors.As(err, &status) && status.Status().Code != 0:
		st := status.Status()
		e.Status, e.Message = int(st.Code), st.Message
		if d, ok := apierrors.SuggestsClientDelay(err); ok {
			e.RetryAfter = min(time.Duration(d)*time.Second, svcerr.MaxRetryAfter)
		}
		e.Kind = kindOf(st, err)
	case errors.As(err, &he):
		e.Status, e.Message = he.StatusCode, he.Body
		e.Kind = kindOfStatus(he.StatusCode, he.Body)
	case errors.Is(err, context.Canceled):
		e.Message, e.Kind = err.Error(), errdefs.ErrCanceled
	default:
		// No answer: a connection refused or dropped, a timeout.
		e.Message, e.Kind = err.Error(), errdefs.ErrProviderUnavailable
	}
	e.Message = svcerr.OneLine(svcerr.Scrub(e.Message, secret))
	return e
}

// kindOf is the berth kind of the API server's Status.
func kindOf(st metav1.Status, err error) error {
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsGone(err):
		return errdefs.ErrNotFound
	case apierrors.IsForbidden(err) && strings.Contains(strings.ToLower(st.Message), "exceeded quota"):
		return errdefs.ErrQuota
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		return errdefs.ErrProviderAuth
	case apierrors.IsAlreadyExists(err):
		return errdefs.ErrAlreadyExists
	case apierrors.IsTooManyRequests(err) || apierrors.IsConflict(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) ||
		apierrors.IsUnexpectedServerError(err) || st.Code >= 500:
		return errdefs.ErrProviderUnavailable
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err) ||
		apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsNotAcceptable(err) || apierrors.IsUnsupportedMediaType(err):
		return errdefs.ErrBadInput
	}
	return kindOfStatus(int(st.Code), st.Message)
}

// kindOfStatus is the berth kind of an HTTP answer, the runtime's or the
// router's.
func kindOfStatus(code int, msg string) error {
	switch {
	case code == http.StatusNotFound:
		return errdefs.ErrNotFound
	case code == http.StatusForbidden && strings.Contains(strings.ToLower(msg), "exceeded quota"):
		return errdefs.ErrQuota
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return errdefs.ErrProviderAuth
	case code == http.StatusConflict:
		return errdefs.ErrAlreadyExists
	case code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code >= 500:
		return errdefs.ErrProviderUnavailable
	}
	return errdefs.ErrBadInput
}
