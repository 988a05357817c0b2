package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// maxSize bounds the daemon binary as it is installed: it runs in every
// sandbox, and is uploaded into every remote one.
const maxSize = 8 << 20

// build builds berth-sandboxd as docs/providers/README.md installs it,
// static, and returns its path.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "berth-sandboxd")
	build := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// TestSize builds berth-sandboxd and fails if it has grown past maxSize: a
// dependency of the host's (a client, a telemetry or protobuf runtime)
// linked by mistake shows here as megabytes, as internal/layers shows it
// as a package.
func TestSize(t *testing.T) {
	st, err := os.Stat(build(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("berth-sandboxd: %d bytes (%.1f MiB)", st.Size(), float64(st.Size())/(1<<20))
	if st.Size() > maxSize {
		t.Errorf("berth-sandboxd is %d bytes, more than %d: see what it links with go version -m", st.Size(), maxSize)
	}
}
