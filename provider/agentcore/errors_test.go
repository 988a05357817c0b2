package agentcore

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/berth-dev/berth/errdefs"
)

func apiErr(code string, status int, msg string) error {
	return &smithy.OperationError{ServiceID: "Bedrock AgentCore", OperationName: "X", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status, Header: http.Header{}}},
			Err: &smithy.GenericAPIError{Code: code, Message: msg}},
	}}
}

// TestClassify: every error of the service, and the SDK's failures to
// reach it, in berth's kinds, one line, the secrets scrubbed.
func TestClassify(t *testing.T) {
	const secret = "sEcReT/key"
	for _, tt := range []struct {
		err  error
		kind error
	}{
		{apiErr("ThrottlingException", 429, "Rate exceeded"), errdefs.ErrProviderUnavailable},
		{apiErr("ServiceQuotaExceededException", 402, "too many sessions"), errdefs.ErrQuota},
		{apiErr("AccessDeniedException", 403, "not allowed"), errdefs.ErrProviderAuth},
		{apiErr("UnrecognizedClientException", 403, "The security token included in the request is invalid."), errdefs.ErrProviderAuth},
		{apiErr("ResourceNotFoundException", 404, "no session"), errdefs.ErrNotFound},
		{apiErr("ValidationException", 400, "bad\nsecond line"), errdefs.ErrBadInput},
		{apiErr("ConflictException", 409, "conflict"), errdefs.ErrAlreadyExists},
		{apiErr("InternalServerException", 500, "oops"), errdefs.ErrProviderUnavailable},
		{apiErr("SomethingNew", 503, "down"), errdefs.ErrProviderUnavailable},
		{apiErr("SomethingNew", 400, "echo "+secret), errdefs.ErrBadInput},
		{errors.New("dial tcp: connection refused " + secret), errdefs.ErrProviderUnavailable},
		{context.DeadlineExceeded, errdefs.ErrProviderUnavailable},
		{context.Canceled, errdefs.ErrCanceled},
	} {
		err := classify("op", tt.err, secret)
		if !errors.Is(err, tt.kind) {
			t.Errorf("%v: %v, want %v", tt.err, err, tt.kind)
		}
		if s := err.Error(); strings.Contains(s, "\n") || strings.Contains(s, secret) {
			t.Errorf("%q: more than a line, or the secret", s)
		}
	}
	var e *Error
	if err := classify("op", apiErr("ThrottlingException", 429, "slow"), secret); !errors.As(err, &e) || e.RetryAfter <= 0 {
		t.Errorf("throttling: %#v, want a RetryAfter", err)
	}
}
