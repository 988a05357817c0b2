package e2bfake

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestAnswersValidated proves the fake's answers are checked against the
// spec: one that names a field in the wrong case is replaced by a 500
// and recorded; the right one passes untouched.
func TestAnswersValidated(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler), requests: map[string]int{}}
	router, err := loadRouter(t.Context(), "../testdata/openapi.yml", "http://e2b.test")
	if err != nil {
		t.Fatal(err)
	}
	detail := func(idKey string) map[string]any {
		now := time.Now().UTC().Format(time.RFC3339)
		return map[string]any{
			"templateID": "base", idKey: "i1", "clientID": "c", "startedAt": now, "endAt": now,
			"cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024, "state": "running", "envdVersion": "0.2.0",
		}
	}
	for _, tc := range []struct {
		idKey string
		want  int
	}{
		{"sandboxID", http.StatusOK},
		{"sandboxId", http.StatusInternalServerError},
	} {
		req := httptest.NewRequest("GET", "http://e2b.test/sandboxes/i1", nil)
		req.Header.Set("X-API-Key", "k")
		rec := httptest.NewRecorder()
		s.validated(rec, req, router, func(w http.ResponseWriter, _ *http.Request, p map[string]string) {
			if p["sandboxID"] != "i1" {
				t.Errorf("path parameters %v", p)
			}
			writeJSON(w, http.StatusOK, detail(tc.idKey))
		})
		body, _ := io.ReadAll(rec.Body)
		v := s.Violations()
		if rec.Code != tc.want {
			t.Errorf("%s: answered %d %s, want %d", tc.idKey, rec.Code, body, tc.want)
		}
		if wantV := tc.want != http.StatusOK; (len(v) == 1) != wantV || len(v) > 1 {
			t.Errorf("%s: violations %q", tc.idKey, v)
		} else if wantV && !strings.Contains(v[0], "sandboxId") {
			t.Errorf("%s: the violation does not name the field: %q", tc.idKey, v[0])
		}
	}
	// An operation the spec does not have is a violation too.
	rec := httptest.NewRecorder()
	s.validated(rec, httptest.NewRequest("GET", "http://e2b.test/sandbox/i1", nil), router, nil)
	if rec.Code != http.StatusNotFound || len(s.Violations()) != 1 {
		t.Errorf("an operation not in the spec: %d", rec.Code)
	}
}
