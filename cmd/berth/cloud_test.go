package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider/agentcore/agentcorefake"
	"github.com/berth-dev/berth/provider/gke/gkefake"
	"github.com/berth-dev/berth/provider/modal"
	"github.com/berth-dev/berth/provider/modal/modalfake"
	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// cloudProviders are the hosted providers, each against its fake: what
// a berth dev is given to serve it. Every value of env is a secret (but
// those of variables that name paths), as is the cluster token gke's
// kubeconfig holds; not paths, AWS's region, nor its switch for the
// instance's metadata.
var cloudProviders = []struct {
	name  string
	start func(t *testing.T) (flags, env []string)
}{
	{"e2b", func(t *testing.T) ([]string, []string) { _, f, e := startE2B(t); return f, e }},
	{"daytona", func(t *testing.T) ([]string, []string) { _, f, e := startDaytona(t); return f, e }},
	{"modal", startModal},
	{"gke", startGKE},
	{"agentcore", startAgentCore},
}

// startAgentCore starts a fake AgentCore on loopback, its sessions
// containers of a farm of the test's own, and returns the flags and
// environment that make a berth dev serve it as provider agentcore: AWS
// credentials of the fake's, and none of this machine's files.
func startAgentCore(t *testing.T) (flags, env []string) {
	t.Helper()
	if err := remoteImage(); err != nil {
		t.Fatal(err)
	}
	farm, err := remotefake.NewFarm(context.WithoutCancel(t.Context()), remotefake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { farm.Close() })
	const keyID, secret = "AKIACLITESTAGENTCORE", "cli/test/agentcore/secret"
	fake, err := agentcorefake.New(context.WithoutCancel(t.Context()), agentcorefake.Options{Farm: farm, AccessKeyID: keyID, SecretAccessKey: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fake.Close()
		if v := fake.Violations(); len(v) > 0 {
			t.Errorf("berth broke AgentCore's API:\n%s", strings.Join(v, "\n"))
		}
	})
	flags = []string{"--provider-config", "agentcore.endpoint-url=" + fake.URL()}
	env = []string{"AWS_ACCESS_KEY_ID=" + keyID, "AWS_SECRET_ACCESS_KEY=" + secret, "AWS_REGION=us-west-2",
		"AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_EC2_METADATA_DISABLED=true",
		"BERTH_AGENTCORE_SECRET=the cli tests' agentcore secret"}
	return flags, env
}

// gkeToken is the bearer token the fake cluster takes.
const gkeToken = "the cli tests' cluster token"

// startGKE starts a fake cluster running agent-sandbox on loopback, its
// pods containers of a farm of the test's own, and returns the flags and
// environment that make a berth dev serve it as provider gke.
func startGKE(t *testing.T) (flags, env []string) {
	t.Helper()
	if err := remoteImage(); err != nil {
		t.Fatal(err)
	}
	farm, err := remotefake.NewFarm(context.WithoutCancel(t.Context()), remotefake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { farm.Close() })
	fake, err := gkefake.New(context.WithoutCancel(t.Context()), gkefake.Options{Farm: farm, Token: gkeToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fake.Close()
		if v := fake.Violations(); len(v) > 0 {
			t.Errorf("berth broke the Kubernetes API or the router:\n%s", strings.Join(v, "\n"))
		}
	})
	if err := fake.AddTemplate("default", "berth-runtime"); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := fake.Kubeconfig(kc, "fake"); err != nil {
		t.Fatal(err)
	}
	flags = []string{"--provider-config", "gke.kubeconfig=" + kc, "--provider-config", "gke.template=berth-runtime",
		"--provider-config", "gke.router-url=" + fake.RouterURL()}
	env = []string{"BERTH_GKE_SECRET=the cli tests' gke secret"}
	return flags, env
}

// startModal starts a fake Modal on loopback, its sandboxes containers
// of a farm of the test's own, and returns the flags and environment
// that make a berth dev serve it as provider modal.
func startModal(t *testing.T) (flags, env []string) {
	t.Helper()
	if err := remoteImage(); err != nil {
		t.Fatal(err)
	}
	farm, err := remotefake.NewFarm(context.WithoutCancel(t.Context()), remotefake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { farm.Close() })
	const id, secret = "ak-cli-test-modal", "as-cli-test-modal-secret"
	fake, err := modalfake.New(context.WithoutCancel(t.Context()), modalfake.Options{Farm: farm, TokenID: id, TokenSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fake.Close()
		if v := fake.Violations(); len(v) > 0 {
			t.Errorf("berth broke Modal's protocol:\n%s", strings.Join(v, "\n"))
		}
	})
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, fake.CAPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	flags = []string{"--provider-config", "modal.server-url=" + fake.URL(), "--provider-config", "modal.tunnel-ca-file=" + ca}
	env = []string{modal.DefaultTokenIDEnv + "=" + id, modal.DefaultTokenSecretEnv + "=" + secret,
		modal.DefaultSecretEnv + "=the cli tests' modal secret", "MODAL_CONFIG_PATH=" + filepath.Join(dir, "no-modal.toml")}
	return flags, env
}

// tourWorkspace makes, under tour/ in the workspace, what a move must
// carry file by file: a directory of its own mode, a file of mode 0640,
// an executable, a symlink, a dangling symlink, an empty file and
// 100 MiB of random bytes.
const tourWorkspace = `set -e
mkdir -p tour/d && chmod 750 tour/d
printf 'kept\n' > tour/d/f && chmod 640 tour/d/f
printf '#!/bin/sh\necho ran\n' > tour/run.sh && chmod 755 tour/run.sh
ln -s d/f tour/link && ln -s nowhere tour/dangling
: > tour/empty
head -c 104857600 /dev/urandom > tour/big`

// tourListing lists tour/ as a move must keep it: each entry's path,
// type, mode, size (not a directory's, whose size is its file
// system's) and link target, and the big file's digest.
const tourListing = `cd tour && find . -mindepth 1 -printf '%P %y %m ' -a \( -type d -printf '-' -o -printf '%s' \) -printf ' %l\n' | sort && sha256sum big && ./run.sh`

// TestCloudTour moves one workspace round every provider with berth
// sandbox switch, linux first and last, and checks it file by file at
// each step; then an agent session makes the same round, its
// conversation going on across each switch, each turn's command reading
// what the turns before wrote on other providers.
func TestCloudTour(t *testing.T) {
	t.Parallel()
	var flags, env []string
	secrets := map[string]string{"gke's cluster token": gkeToken}
	for _, p := range cloudProviders {
		f, e := p.start(t)
		flags, env = append(flags, f...), append(env, e...)
		for _, kv := range e {
			if k, v, _ := strings.Cut(kv, "="); !strings.HasSuffix(k, "_PATH") && !strings.HasSuffix(k, "_FILE") && k != "AWS_REGION" && k != "AWS_EC2_METADATA_DISABLED" {
				secrets["$"+k] = v
			}
		}
	}
	model := fakemodel.New(t)
	env = append(env, "BERTH_MODEL="+fakemodel.Model, "OPENAI_BASE_URL="+model.URL, "OPENAI_API_KEY="+fakemodel.Key)
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDevEnv(t, env, berth, data, 0, &devLog, flags...)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	dumpOnFailure(t, "berth dev", &devLog)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var printed strings.Builder // all the commands printed, to look for the secrets in
	ok := func(args ...string) string {
		t.Helper()
		out := runOK(t, berth, append([]string{"--address", addr}, args...)...)
		printed.WriteString(out)
		return out
	}
	// What a sandbox's processes can see: their environment and argv,
	// every process's that the sandbox user may read.
	const seen = `env; for p in /proc/[0-9]*; do cat $p/cmdline $p/environ; done 2>/dev/null; true`

	tour := []string{"linux"}
	for _, p := range cloudProviders {
		tour = append(tour, p.name)
	}
	tour = append(tour, "linux")

	id := strings.TrimSpace(ok("sandbox", "create", "--provider", "linux", "--no-idle-timeout"))
	// Run as the test ends, when its context is done.
	t.Cleanup(func() { exec.Command(berth, "--address", addr, "sandbox", "rm", id).Run() })
	ok("sandbox", "exec", id, "--", "sh", "-c", tourWorkspace)
	want := ok("sandbox", "exec", id, "--", "sh", "-c", tourListing)
	for _, line := range []string{"d d 750 - ", "d/f f 640 5 ", "run.sh f 755 19 ", "link l 777 3 d/f", "dangling l 777 7 nowhere", "ran"} {
		if !strings.Contains(want, line+"\n") {
			t.Fatalf("the workspace made on linux lists as\n%s\nwithout %q", want, line)
		}
	}
	for _, file := range []string{"empty f [0-7]+ 0 ", "big f [0-7]+ 104857600 "} {
		if !regexp.MustCompile("(?m)^" + file + "$").MatchString(want) {
			t.Fatalf("the workspace made on linux lists as\n%s\nwithout %q", want, file)
		}
	}
	for i, to := range tour[1:] {
		ok("sandbox", "switch", id, "--provider", to)
		if got := ok("sandbox", "exec", id, "--", "sh", "-c", tourListing); got != want {
			t.Errorf("after the switch %s to %s the workspace lists as\n%s\nwant\n%s", tour[i], to, got, want)
		}
		inSandbox := ok("sandbox", "exec", id, "--", "sh", "-c", seen)
		for what, secret := range secrets {
			if strings.Contains(inSandbox, secret) {
				t.Errorf("a process in the sandbox on %s sees %s", to, what)
			}
		}
	}

	session := strings.TrimSpace(ok("session", "new", "--provider", "linux"))
	t.Cleanup(func() { exec.Command(berth, "--address", addr, "session", "rm", session).Run() })
	for i, at := range tour {
		if i > 0 {
			ok("session", "switch", session, at)
		}
		// Each turn appends where it ran to a file and prints the file:
		// the conversation's earlier turns ran on the providers before.
		call := fmt.Sprintf("c%d", i)
		model.Script(shellCall(call, "echo "+at+" >> trail && cat trail"), fakemodel.Reply{Text: "turn " + call + " done"})
		out := ok("session", "send", session, "note where you are")
		// The command's output, as send prints it, indented.
		trail := "  " + strings.Join(tour[:i+1], "\n  ") + "\n"
		if !strings.Contains(out, trail) || !strings.Contains(out, "turn "+call+" done") {
			t.Errorf("turn %d, on %s: berth session send printed\n%s\nwant the trail\n%sand the model's answer", i, at, out, trail)
		}
	}
	// The secrets are berth dev's alone.
	for what, secret := range secrets {
		if strings.Contains(printed.String(), secret) {
			t.Errorf("a berth command printed %s", what)
		}
		if strings.Contains(devLog.String(), secret) {
			t.Errorf("berth dev's log holds %s", what)
		}
	}
	inNoHistory(t, addr, id, secrets)

	// The model saw one conversation: the last request carries every
	// turn before it.
	reqs := model.Requests()
	last := reqs[len(reqs)-1]
	for i := range tour[:len(tour)-1] {
		if !carries(last, fmt.Sprintf("turn c%d done", i)) {
			t.Errorf("the last model request lacks turn %d's answer: the conversation did not survive the switches", i)
		}
	}
}
