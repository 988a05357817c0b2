package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/testkit"
)

// testImage is the Docker image the docker provider's tests build
// (provider/docker/testdata/build-image.sh; .ci/run builds it).
const testImage = "berth-test:1"

// TestAcrossBackends moves one workspace between providers through the
// CLI, in every direction among linux, docker and gvisor: switch and
// fork, with files, modes, symlinks, an empty file and 256 MiB of data
// checked at each step.
func TestAcrossBackends(t *testing.T) {
	t.Parallel()
	if out, err := exec.Command("docker", "image", "inspect", testImage).CombinedOutput(); err != nil {
		t.Skipf("needs the Docker engine and the image %s (.ci/run builds it): %v %s", testImage, err, out)
	}
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDev(t, berth, data, 0, &devLog)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Cleanups run after t.Context() is done: they do without it.
	rm := func(id string) { exec.Command(berth, "--address", addr, "sandbox", "rm", id).Run() }
	ok := func(args ...string) string {
		t.Helper()
		out, errOut, code := runBerth(t, berth, append([]string{"--address", addr}, args...)...)
		if code != 0 {
			t.Fatalf("berth %s: exit %d\n%s%s\n%s", strings.Join(args, " "), code, out, errOut, devLog.String())
		}
		return out
	}

	id := strings.TrimSpace(ok("sandbox", "create", "--no-idle-timeout", "--memory", "256Mi"))
	t.Cleanup(func() { rm(id) })
	// 256 MiB in 8 files that compress and deduplicate well, so that the
	// test measures correctness rather than the disk: as much as the
	// sandbox's memory, each file many snapshot chunks long.
	ok("sandbox", "exec", id, "--", "sh", "-c", `set -e
mkdir -p src/pkg data empty-dir
printf 'print("hi")\n' > src/main.py; chmod 755 src/main.py
printf 'secret' > src/pkg/key; chmod 600 src/pkg/key
: > src/empty
ln -s pkg/key src/link; ln -s /etc/hostname src/abs-link
for i in 1 2 3 4 5 6 7 8; do yes "berth block $i" | head -c 33554432 > data/part$i; done`)
	manifest := func(sb string) string {
		t.Helper()
		return ok("sandbox", "exec", sb, "--", "sh", "-c",
			`find . -path ./lost+found -prune -o -printf '%p %y %m %s %l\n' | sort; find . -type f -path './[sd]*' | sort | xargs sha256sum`)
	}
	want := manifest(id)
	if !strings.Contains(want, "./data/part8 f 644 33554432") || !strings.Contains(want, "./src/link l 777 7 pkg/key") {
		t.Fatalf("the workspace was not made:\n%s", want)
	}
	check := func(sb, step string) {
		t.Helper()
		if got := manifest(sb); got != want {
			t.Fatalf("%s: the workspace changed:\n%s\nwant:\n%s", step, got, want)
		}
	}
	provider := func(sb string) string {
		t.Helper()
		return decode[struct {
			Provider string `json:"provider"`
			Image    string `json:"image"`
		}](t, "inspect", ok("sandbox", "inspect", sb, "-o", "json")).Provider
	}

	ok("sandbox", "switch", id, "--provider", "docker", "--image", testImage)
	if p := provider(id); p != "docker" {
		t.Fatalf("after switch --provider docker: provider %q", p)
	}
	check(id, "linux to docker")
	// An image a command can tell apart: the test image has no
	// /usr/bin/perl, which the host has.
	if out, _, code := runBerth(t, berth, "--address", addr, "sandbox", "exec", id, "--", "sh", "-c", "test -e /usr/bin/perl && echo host"); code == 0 || strings.Contains(out, "host") {
		t.Errorf("the docker sandbox runs on the host's root, not the image's")
	}

	fork := strings.TrimSpace(ok("sandbox", "fork", id, "--provider", "linux"))
	t.Cleanup(func() { rm(fork) })
	if p := provider(fork); p != "linux" {
		t.Fatalf("fork --provider linux: provider %q", p)
	}
	check(fork, "docker to linux (fork)")

	ok("sandbox", "switch", id, "--provider", "linux")
	check(id, "docker to linux (switch)")
	fork2 := strings.TrimSpace(ok("sandbox", "fork", fork, "--provider", "docker"))
	t.Cleanup(func() { rm(fork2) })
	check(fork2, "linux to docker (fork)")
	// gVisor, where runsc is installed (.ci/run installs it): from linux,
	// from docker, and back to docker.
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Logf("gvisor not tried: runsc is not installed here (%v)", err)
	} else {
		ok("sandbox", "switch", id, "--provider", "gvisor")
		check(id, "linux to gvisor (switch)")
		ok("sandbox", "switch", fork2, "--provider", "gvisor")
		check(fork2, "docker to gvisor (switch)")
		// The image is named, as on the first switch to docker.
		ok("sandbox", "switch", id, "--provider", "docker", "--image", testImage)
		check(id, "gvisor to docker (switch)")
		if p := provider(fork2); p != "gvisor" {
			t.Errorf("after switch --provider gvisor: provider %q", p)
		}
	}
	if out := ok("sandbox", "rm", id, fork, fork2); len(lines(out)) != 3 {
		t.Errorf("rm printed %q, want the three ids", out)
	}
}
