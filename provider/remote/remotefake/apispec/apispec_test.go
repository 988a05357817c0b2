package apispec

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
)

const doc = `openapi: 3.0.0
info: {title: t, version: "1"}
paths:
  /things:
    post:
      requestBody:
        content:
          application/json:
            schema:
              type: object
              properties:
                sandboxId: {type: string}
      responses:
        "200": {description: ok}
`

// TestStrict: a property the document does not name is refused, one it
// names passes.
func TestStrict(t *testing.T) {
	router, err := Load(t.Context(), "t", []byte(doc), "http://svc.test")
	if err != nil {
		t.Fatal(err)
	}
	check := func(body string) error {
		req, _ := http.NewRequest("POST", "http://svc.test/things", bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/json")
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Fatal(err)
		}
		return openapi3filter.ValidateRequest(t.Context(), &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route})
	}
	if err := check(`{"sandboxId": "x"}`); err != nil {
		t.Errorf("a named property: %v", err)
	}
	if err := check(`{"sandbox_id": "x"}`); err == nil {
		t.Error("a property of the wrong case passed")
	}
	if _, err := Load(t.Context(), "bad", []byte("openapi: [nope"), "http://x"); err == nil {
		t.Error("a document that does not parse loaded")
	}
}
