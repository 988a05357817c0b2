package agentcore

import (
	"context"
	"errors"
	"net/http"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/internal/svcerr"
)

// Error is a call AgentCore refused or could not answer. It wraps the
// errdefs kind the answer means, so errors.Is(err, errdefs.ErrQuota) and
// the like classify it, and its message is one line that never holds a
// credential.
type Error = svcerr.Error

// throttleWait is how long a throttled call asks to wait when the
// service says nothing of it.
const throttleWait = time.Second

// kinds are the service's errors by name, as berth sees them.
var kinds = map[string]error{
	"ThrottlingException":                 errdefs.ErrProviderUnavailable,
	"TooManyRequestsException":            errdefs.ErrProviderUnavailable,
	"ServiceUnavailableException":         errdefs.ErrProviderUnavailable,
	"InternalServerException":             errdefs.ErrProviderUnavailable,
	"ServiceQuotaExceededException":       errdefs.ErrQuota,
	"AccessDeniedException":               errdefs.ErrProviderAuth,
	"UnauthorizedException":               errdefs.ErrProviderAuth,
	"UnrecognizedClientException":         errdefs.ErrProviderAuth,
	"InvalidSignatureException":           errdefs.ErrProviderAuth,
	"SignatureDoesNotMatch":               errdefs.ErrProviderAuth,
	"ExpiredTokenException":               errdefs.ErrProviderAuth,
	"InvalidClientTokenId":                errdefs.ErrProviderAuth,
	"MissingAuthenticationTokenException": errdefs.ErrProviderAuth,
	"ResourceNotFoundException":           errdefs.ErrNotFound,
	"ValidationException":                 errdefs.ErrBadInput,
	"ConflictException":                   errdefs.ErrAlreadyExists,
}

// classify turns an error of the SDK into an Error of berth's kinds,
// scrubbed of the secrets.
func classify(op string, err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	e := &Error{Service: Name, Op: op}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.Response != nil {
		e.Status = re.HTTPStatusCode()
		if e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable {
			e.RetryAfter = svcerr.RetryAfter(re.Response.Header, time.Now())
		}
	}
	var ae smithy.APIError
	msg := err.Error()
	if errors.As(err, &ae) {
		msg = ae.ErrorCode()
		if m := ae.ErrorMessage(); m != "" {
			msg += ": " + m
		}
	}
	for _, s := range secrets {
		msg = svcerr.Scrub(msg, s)
	}
	e.Message = svcerr.OneLine(msg)
	switch {
	case ae != nil && kinds[ae.ErrorCode()] != nil:
		e.Kind = kinds[ae.ErrorCode()]
	case errors.Is(err, context.Canceled):
		e.Kind = errdefs.ErrCanceled
	case e.Status == 0 || e.Status == http.StatusTooManyRequests || e.Status >= 500:
		// No answer (a dropped connection, a timeout), a rate limit, the
		// service's failure.
		e.Kind = errdefs.ErrProviderUnavailable
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		e.Kind = errdefs.ErrProviderAuth
	case e.Status == http.StatusNotFound:
		e.Kind = errdefs.ErrNotFound
	case e.Status == http.StatusPaymentRequired:
		e.Kind = errdefs.ErrQuota
	default:
		e.Kind = errdefs.ErrBadInput
	}
	if e.Kind == errdefs.ErrProviderUnavailable && ae != nil && ae.ErrorCode() == "ThrottlingException" && e.RetryAfter == 0 {
		e.RetryAfter = throttleWait
	}
	return e
}
