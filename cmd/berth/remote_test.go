package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/testkit"
)

// remoteArgs wraps a berth command so that it runs as a client on
// another machine would: in a mount namespace of its own where the
// worker's data directory is an empty tmpfs, from another working
// directory, with nothing but the server's address.
func remoteArgs(data, berth string, args ...string) (string, []string) {
	script := `mount -t tmpfs none "$0" && cd / && exec "$@"`
	return "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, data, berth}, args...)
}

// TestRemoteClient drives berth dev from a client that cannot see the
// worker's disk: a 32 MiB output comes whole, output is live, and a
// 64 MiB directory goes in and out intact: over 130 relay chunks
// (transfer.MaxChunk) each way, in 16 windows of the 8 calls kept in
// flight, two files of sizes no chunk divides, a small one and an empty
// one.
func TestRemoteClient(t *testing.T) {
	t.Parallel()
	berth, data := berthBinary(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDev(t, berth, data, 0, &devLog)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	remote := func(args ...string) *exec.Cmd {
		name, argv := remoteArgs(data, berth, args...)
		return exec.CommandContext(t.Context(), name, argv...)
	}
	ok := func(args ...string) string {
		t.Helper()
		var out, errOut strings.Builder
		cmd := remote(args...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("berth %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
		return out.String()
	}
	id := strings.TrimSpace(ok("sandbox", "create", "--address", addr, "--no-idle-timeout"))

	t.Run("32MiB output", func(t *testing.T) {
		const size = 32 << 20
		h := &countingHash{Hash: sha256.New()}
		var errOut testkit.SyncBuffer
		cmd := remote("sandbox", "exec", "--address", addr, id, "--", "sh", "-c", fmt.Sprintf("seq 1 100000000 | head -c %d", size))
		cmd.Stdout, cmd.Stderr = h, &errOut
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("exec: %v; stderr %q", err, errOut.String())
		}
		if sum := hex.EncodeToString(h.Sum(nil)); h.n != size || sum != seqHash(size) {
			t.Fatalf("got %d bytes, sha256 %s; want %d bytes, sha256 %s", h.n, sum, size, seqHash(size))
		}
		t.Logf("32 MiB through the server in %v", time.Since(start).Round(time.Millisecond))
	})

	t.Run("live output", func(t *testing.T) {
		// The command prints its second line only once the test has
		// seen its first.
		cmd := remote("sandbox", "exec", "--address", addr, id, "--", "sh", "-c", "echo first; "+waitGo+"; echo second")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(stdout)
		wantLiveFirstLine(t, r)
		touchRunningSandboxes(t, data, "go")
		rest, _ := io.ReadAll(r)
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		if string(rest) != "second\n" {
			t.Fatalf("after the first line, got %q, want second", rest)
		}
	})

	t.Run("64MiB directory in and out", func(t *testing.T) {
		src := filepath.Join(t.TempDir(), "tree")
		want := writeTree(t, src, map[string]int64{
			"big1": 32 << 20, "sub/big2": 32<<20 - 4096, "sub/small": 4096, "sub/deeper/empty": 0,
		})
		start := time.Now()
		ok("sandbox", "cp", "--address", addr, src, id+":/workspace/tree/")
		t.Logf("64 MiB in through the server in %v", time.Since(start).Round(time.Millisecond))
		inside := ok("sandbox", "exec", "--address", addr, id, "--", "sh", "-c", "cd tree/tree && sha256sum big1 sub/big2 sub/small sub/deeper/empty")
		for name, sum := range want {
			if !strings.Contains(inside, sum+"  "+name) {
				t.Errorf("in the sandbox, %s: want sha256 %s in\n%s", name, sum, inside)
			}
		}
		dst := t.TempDir()
		start = time.Now()
		ok("sandbox", "cp", "--address", addr, id+":tree/tree", dst)
		t.Logf("64 MiB out through the server in %v", time.Since(start).Round(time.Millisecond))
		for name, sum := range want {
			if got := fileHash(t, filepath.Join(dst, "tree", name)); got != sum {
				t.Errorf("copied out, %s: sha256 %s, want %s", name, got, sum)
			}
		}
	})
	ok("sandbox", "rm", "--address", addr, id)
}

// writeTree writes files of pseudo-random bytes and returns their
// sha256 by name.
func writeTree(t *testing.T, root string, sizes map[string]int64) map[string]string {
	t.Helper()
	sums := map[string]string{}
	for name, size := range sizes {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		src := rand.NewChaCha8([32]byte{byte(len(name)), byte(size)})
		if _, err := io.CopyN(io.MultiWriter(f, h), src, size); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		sums[name] = hex.EncodeToString(h.Sum(nil))
	}
	return sums
}

func fileHash(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Error(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
