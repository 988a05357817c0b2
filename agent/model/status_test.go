package model_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"gocloud.dev/blob/memblob"

	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/internal/fakemodel"
)

// TestStatus checks what Status says of a server as a host finds it,
// and that a call still tries a server found down (nothing is kept).
func TestStatus(t *testing.T) {
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	tests := []struct {
		name   string
		setup  func(*fakemodel.Server)
		state  string
		reason string
	}{
		{"listed", func(*fakemodel.Server) {}, model.Ready, ""},
		{"list 404", func(s *fakemodel.Server) { s.NoModelList(http.StatusNotFound) }, model.Unknown, "the first call will tell"},
		{"list 405", func(s *fakemodel.Server) { s.NoModelList(http.StatusMethodNotAllowed) }, model.Unknown, "the first call will tell"},
		{"list 501", func(s *fakemodel.Server) { s.NoModelList(http.StatusNotImplemented) }, model.Unknown, "the first call will tell"},
		{"list not JSON", func(s *fakemodel.Server) { s.NoModelList(http.StatusOK) }, model.Unknown, "the first call will tell"},
		{"list 500", func(s *fakemodel.Server) { s.NoModelList(http.StatusInternalServerError) }, model.Unavailable, "500"},
		{"bad key", func(s *fakemodel.Server) { s.SetKey("sk-other") }, model.Unavailable, "OPENAI_API_KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakemodel.New(t)
			tt.setup(srv)
			m, err := model.New(model.Config{BaseURL: srv.URL, APIKey: fakemodel.Key, Model: fakemodel.Model}, bucket)
			if err != nil {
				t.Fatal(err)
			}
			st, _ := m.Status(t.Context())
			if st.State != tt.state || !strings.Contains(st.Reason, tt.reason) || strings.Contains(st.Reason, "\n") ||
				st.Model != fakemodel.Model || !strings.Contains(srv.URL, st.Server) {
				t.Errorf("status %+v; want state %s, a one-line reason with %q", st, tt.state, tt.reason)
			}
		})
	}

	t.Run("down, then up", func(t *testing.T) {
		srv := fakemodel.NewDown(t)
		m, err := model.New(model.Config{BaseURL: srv.URL, APIKey: fakemodel.Key, Model: fakemodel.Model}, bucket)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := m.Status(t.Context())
		if st.State != model.Unavailable || !strings.Contains(st.Reason, "unreachable") || !strings.Contains(st.Reason, "OPENAI_BASE_URL") {
			t.Errorf("down: %+v; want unavailable, unreachable, and what to set", st)
		}
		if err := m.Check(t.Context()); err == nil || errors.Is(err, model.ErrUnlisted) {
			t.Errorf("check of a server that is down: %v", err)
		}
		srv.Up(t)
		if st, _ := m.Status(t.Context()); st.State != model.Ready {
			t.Errorf("up: %+v; want ready", st)
		}
		srv.Script(fakemodel.Reply{Text: "hello"})
		resp, err := complete(t, m, chat.Request{Conversation: "c", New: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}})
		if err != nil || resp.Message.Content != "hello" {
			t.Errorf("a call once it is up: %+v, %v", resp, err)
		}
	})

	t.Run("a long answer is bounded", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, `{"error": {"message": %q}}`, strings.Repeat("é", 10000))
		}))
		defer srv.Close()
		m, err := model.New(model.Config{BaseURL: srv.URL + "/v1", Model: "m"}, bucket)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := m.Status(t.Context())
		if st.State != model.Unavailable || len(st.Reason) > 1100 || !utf8.ValidString(st.Reason) {
			t.Errorf("status of a server answering 10000 runes: %s, %d bytes, valid UTF-8 %v", st.State, len(st.Reason), utf8.ValidString(st.Reason))
		}
	})

	t.Run("none", func(t *testing.T) {
		st := model.NoStatus(model.Config{}, nil)
		if st.State != model.None || !strings.Contains(st.Reason, "BERTH_MODEL") {
			t.Errorf("no model: %+v", st)
		}
	})
}
