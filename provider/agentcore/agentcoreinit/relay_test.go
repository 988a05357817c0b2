package agentcoreinit

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// daemon is a stand-in for berth-sandboxd: /echo streams its request's
// body back as it reads it, /who says the Authorization it was given.
func daemon(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		w.WriteHeader(201)
		w.(http.Flusher).Flush()
		buf := make([]byte, 1024)
		for {
			n, err := r.Body.Read(buf)
			w.Write(buf[:n])
			w.(http.Flusher).Flush()
			if err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/who", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("Authorization")+"|"+r.Header.Get("X-Kept"))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), 3*MaxReply+5))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestTokenIsTheServers(t *testing.T) {
	s := NewServer(daemon(t), "tok", t.TempDir())
	r := s.Handle(Call{Op: OpOpen, ID: "a", Method: "GET", Target: "/who", EOF: true, Wait: time.Second,
		Header: http.Header{"Authorization": {"Bearer forged"}, "X-Kept": {"yes"}}})
	if r.Error != "" || r.Status != 200 || !r.Done || string(r.Data) != "Bearer tok|yes" {
		t.Fatalf("reply %+v (%q)", r, r.Data)
	}
}

// TestStreams: a body given in pieces (one sent twice, as after a lost
// reply) reaches the daemon once, and its answer comes back in pieces
// while the request goes on, a read sent again answering the same.
func TestStreams(t *testing.T) {
	s := NewServer(daemon(t), "tok", t.TempDir())
	r := s.Handle(Call{Op: OpOpen, ID: "e", Method: "POST", Target: "/echo", Body: []byte("hello "), Wait: time.Second})
	if r.Error != "" || r.Status != 201 || string(r.Data) != "hello " || r.Done {
		t.Fatalf("open: %+v (%q)", r, r.Data)
	}
	if r := s.Handle(Call{Op: OpWrite, ID: "e", Body: []byte("hello world"), BodyOffset: 0}); r.Error != "" || r.BodyOffset != 11 {
		t.Fatalf("write again from 0: %+v", r)
	}
	r = s.Handle(Call{Op: OpRead, ID: "e", Offset: 6, Wait: time.Second})
	if string(r.Data) != "world" {
		t.Fatalf("read at 6: %q", r.Data)
	}
	again := s.Handle(Call{Op: OpRead, ID: "e", Offset: 6, Wait: time.Second})
	if string(again.Data) != "world" {
		t.Fatalf("read at 6 again: %q", again.Data)
	}
	if r := s.Handle(Call{Op: OpWrite, ID: "e", BodyOffset: 11, EOF: true}); r.Error != "" {
		t.Fatalf("end the body: %+v", r)
	}
	r = s.Handle(Call{Op: OpRead, ID: "e", Offset: 11, Wait: time.Second})
	if r.Error != "" || !r.Done || len(r.Data) != 0 {
		t.Fatalf("read the end: %+v", r)
	}
	if r := s.Handle(Call{Op: OpRead, ID: "e", Offset: 3, Wait: time.Second}); r.Error == "" {
		t.Errorf("a read before what the server holds: %+v", r)
	}
	if r := s.Handle(Call{Op: OpWrite, ID: "e", BodyOffset: 99}); r.Error == "" {
		t.Errorf("a write past the body: %+v", r)
	}
}

// TestBounded: one reply carries at most MaxReply bytes; a read with
// nothing new ends at its Wait.
func TestBounded(t *testing.T) {
	s := NewServer(daemon(t), "tok", t.TempDir())
	var got int64
	for i := 0; ; i++ {
		op := OpRead
		if i == 0 {
			op = OpOpen
		}
		r := s.Handle(Call{Op: op, ID: "b", Method: "GET", Target: "/big", EOF: true, Offset: got, Wait: time.Second})
		if r.Error != "" || len(r.Data) > MaxReply {
			t.Fatalf("reply %d: %d bytes, error %q", i, len(r.Data), r.Error)
		}
		got += int64(len(r.Data))
		if r.Done {
			break
		}
		if i > 20 {
			t.Fatal("no end")
		}
	}
	if got != 3*MaxReply+5 {
		t.Errorf("read %d bytes", got)
	}
	s.Handle(Call{Op: OpOpen, ID: "w", Method: "POST", Target: "/echo", Wait: time.Second})
	start := time.Now()
	r := s.Handle(Call{Op: OpRead, ID: "w", Wait: 300 * time.Millisecond})
	if took := time.Since(start); r.Error != "" || took < 250*time.Millisecond || took > 5*time.Second {
		t.Errorf("an idle read took %v: %+v", took, r)
	}
	if r := s.Handle(Call{Op: OpClose, ID: "w"}); !r.Done {
		t.Errorf("close: %+v", r)
	}
	if r := s.Handle(Call{Op: OpRead, ID: "w"}); !strings.HasPrefix(r.Error, NoStream) {
		t.Errorf("read after close: %+v", r)
	}
}

// TestCall drives the call subcommand over a real socket, and the body
// file of a large piece.
func TestCall(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "relay.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go NewServer(daemon(t), "tok", dir).Serve(l)
	run := func(c Call) Reply {
		t.Helper()
		b, _ := json.Marshal(c)
		var out, errb bytes.Buffer
		if code := Run([]string{"call", "--socket", sock}, strings.NewReader(base64.StdEncoding.EncodeToString(b)+"\n"), &out, &errb); code != 0 {
			t.Fatalf("call: exit %d: %s", code, errb.String())
		}
		var r Reply
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("reply %q: %v", out.String(), err)
		}
		return r
	}
	if r := run(Call{Op: OpOpen, ID: "c", Method: "GET", Target: "/who", EOF: true, Wait: time.Second}); string(r.Data) != "Bearer tok|" {
		t.Errorf("who: %+v", r)
	}
	big := bytes.Repeat([]byte("y"), 3*MaxInline)
	if err := writeFile(filepath.Join(dir, "piece"), big); err != nil {
		t.Fatal(err)
	}
	r := run(Call{Op: OpOpen, ID: "f", Method: "POST", Target: "/echo", BodyFile: "piece", EOF: true, Wait: time.Second})
	got := r.Data
	for !r.Done && r.Error == "" {
		r = run(Call{Op: OpRead, ID: "f", Offset: int64(len(got)), Wait: time.Second})
		got = append(got, r.Data...)
	}
	if !bytes.Equal(got, big) {
		t.Errorf("echo of a body file: %d bytes, error %q", len(got), r.Error)
	}
	if r := run(Call{Op: OpOpen, ID: "g", Method: "POST", Target: "/echo", BodyFile: "../x"}); r.Error == "" {
		t.Errorf("a body file outside the directory: %+v", r)
	}
	var errb bytes.Buffer
	if code := Run([]string{"call", "--socket", sock}, strings.NewReader("not base64!"), io.Discard, &errb); code != ExitError || strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("a call that is not base64: exit %d, %q", code, errb.String())
	}
}

func writeFile(p string, b []byte) error { return os.WriteFile(p, b, 0o600) }

// TestOpenSentAgain: an open with a body file sent again (its reply
// lost) finds the request the first made, though the file is gone; an
// open whose body file is not there starts nothing.
func TestOpenSentAgain(t *testing.T) {
	dir := t.TempDir()
	s := NewServer(daemon(t), "tok", dir)
	if err := writeFile(filepath.Join(dir, "p1"), []byte("abc")); err != nil {
		t.Fatal(err)
	}
	c := Call{Op: OpOpen, ID: "o", Method: "POST", Target: "/echo", BodyFile: "p1", Wait: time.Second}
	if r := s.Handle(c); r.Error != "" || string(r.Data) != "abc" {
		t.Fatalf("open: %+v", r)
	}
	if r := s.Handle(c); r.Error != "" || r.BodyOffset != 3 || string(r.Data) != "abc" {
		t.Fatalf("the open sent again: %+v", r)
	}
	s.Handle(Call{Op: OpClose, ID: "o"})
	if r := s.Handle(Call{Op: OpOpen, ID: "n", Method: "POST", Target: "/echo", BodyFile: "none"}); r.Error == "" {
		t.Errorf("an open with no body file: %+v", r)
	}
	if r := s.Handle(Call{Op: OpRead, ID: "n"}); !strings.HasPrefix(r.Error, NoStream) {
		t.Errorf("the request of a failed open: %+v", r)
	}
}
