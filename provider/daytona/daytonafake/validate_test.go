package daytonafake

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAnswersValidated proves the fake's answers are checked against the
// document: one that names a field in the wrong case is replaced by a
// 500 and recorded; the right one passes untouched.
func TestAnswersValidated(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler), requests: map[string]int{}, srv: httptest.NewUnstartedServer(nil)}
	defer s.srv.Close()
	router, err := loadRouter(t.Context(), "api", apiSpec, "http://daytona.test/api")
	if err != nil {
		t.Fatal(err)
	}
	sb := &sandbox{id: "i1", orgID: "o", name: "n", user: UserName, env: map[string]string{}, labels: map[string]string{},
		cpu: 1, mem: 1, disk: 3, state: stateStarted, desired: stateStarted}
	for _, tc := range []struct {
		idKey string
		want  int
	}{
		{"id", http.StatusOK},
		{"Id", http.StatusInternalServerError},
	} {
		req := httptest.NewRequest("GET", "http://daytona.test/api/sandbox/i1", nil)
		rec := httptest.NewRecorder()
		s.validated(rec, req, router, "", writeAPIError, func(w http.ResponseWriter, _ *http.Request, p map[string]string) {
			if p["sandboxIdOrName"] != "i1" {
				t.Errorf("path parameters %v", p)
			}
			v := s.sandboxJSON(sb)
			v[tc.idKey] = v["id"]
			if tc.idKey != "id" {
				delete(v, "id")
			}
			writeJSON(w, http.StatusOK, v)
		})
		body, _ := io.ReadAll(rec.Body)
		v := s.Violations()
		if rec.Code != tc.want {
			t.Errorf("%s: answered %d %s, want %d", tc.idKey, rec.Code, body, tc.want)
		}
		if wantV := tc.want != http.StatusOK; (len(v) == 1) != wantV || len(v) > 1 {
			t.Errorf("%s: violations %q", tc.idKey, v)
		} else if wantV && !strings.Contains(v[0], "Id") {
			t.Errorf("%s: the violation does not name the field: %q", tc.idKey, v[0])
		}
	}
	// An operation the document does not have is a violation too.
	rec := httptest.NewRecorder()
	s.validated(rec, httptest.NewRequest("GET", "http://daytona.test/api/sandboxes/i1", nil), router, "", writeAPIError, nil)
	if rec.Code != http.StatusNotFound || len(s.Violations()) != 1 {
		t.Errorf("an operation not in the document: %d", rec.Code)
	}
}

// TestRequestsValidated proves a request that breaks the document, a
// field of the wrong case, is refused and recorded, before it does
// anything.
func TestRequestsValidated(t *testing.T) {
	s := newFake(t, Options{})
	for _, body := range []string{`{"Name":"x"}`, `{"cpu":"2"}`} {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", s.APIURL()+"/sandbox", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		v := s.Violations()
		if resp.StatusCode != http.StatusBadRequest || len(v) != 1 || !strings.Contains(string(b), "does not follow the spec") {
			t.Errorf("%s: answered %d %s, violations %q", body, resp.StatusCode, b, v)
		}
	}
	if n := len(s.Sandboxes()); n != 0 {
		t.Fatalf("a refused request made %d sandboxes", n)
	}
}

// TestSpecsUnmodified checks the documents in testdata against the
// modules' own, in the module cache.
func TestSpecsUnmodified(t *testing.T) {
	for file, module := range map[string]string{
		"api-openapi.yaml":     "github.com/daytonaio/daytona/libs/api-client-go",
		"toolbox-openapi.yaml": "github.com/daytonaio/daytona/libs/toolbox-api-client-go",
	} {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", module, err)
		}
		theirs, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "api", "openapi.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		ours, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours, theirs) {
			t.Errorf("testdata/%s differs from %s's api/openapi.yaml", file, module)
		}
	}
}
