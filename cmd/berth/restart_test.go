package main

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/testkit"
)

// TestClientsRideOutRestarts SIGKILLs berth dev, server and worker, at
// random moments while sandbox exec clients wait on their commands, and
// starts it again: every client gets its command's whole output and exit
// code, and every command ran exactly once.
func TestClientsRideOutRestarts(t *testing.T) {
	t.Parallel()
	berth, data := berthBinary(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDev(t, berth, data, 0, &devLog)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	logs := []*testkit.SyncBuffer{&devLog}
	t.Cleanup(func() {
		stopDev(t, dev, logs[len(logs)-1])
		destroyLeftovers(t, data)
		if t.Failed() {
			for i, l := range logs {
				t.Logf("berth dev, life %d:\n%s", i, l.String())
			}
		}
	})
	id, errOut, code := runBerth(t, berth, "sandbox", "create", "--address", addr, "--no-idle-timeout")
	if code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	id = strings.TrimSpace(id)

	const rounds, perRound = 5, 4
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var clients []*process
	for r := range rounds {
		for i := range perRound {
			k := r*perRound + i
			// Each command notes that it ran, takes its time, and exits
			// with a code of its own.
			script := fmt.Sprintf("echo %d >> runs.log; sleep %.1f; echo out-%d; exit %d", k, 0.5+2*rng.Float64(), k, k%7)
			clients = append(clients, startBerth(t, berth, "sandbox", "exec", "--address", addr, "--retry-for", "3m", id, "--", "sh", "-c", script))
		}
		// Kill at a random moment: as the commands reach the sandbox,
		// while they run, or after. Not before the clients have had a
		// second to connect: one that finds no server at its start fails
		// at once, by design.
		time.Sleep(time.Second + time.Duration(rng.IntN(2000))*time.Millisecond)
		if err := dev.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "berth dev to die", time.Minute, func() bool { return syscall.Kill(dev.Process.Pid, 0) != nil })
		var again testkit.SyncBuffer
		logs = append(logs, &again)
		dev, _ = startDev(t, berth, data, port, &again)
	}
	for k, c := range clients {
		code := c.wait(t, 4*time.Minute)
		if want := fmt.Sprintf("out-%d\n", k); code != k%7 || c.stdout.String() != want {
			t.Errorf("client %d: exit %d, stdout %q, stderr %q; want exit %d, stdout %q", k, code, c.stdout.String(), c.stderr.String(), k%7, want)
		}
	}
	out, errOut, code := runBerth(t, berth, "sandbox", "exec", "--address", addr, id, "--", "cat", "runs.log")
	if code != 0 {
		t.Fatalf("cat runs.log: exit %d: %s", code, errOut)
	}
	runs := strings.Fields(out)
	sort.Slice(runs, func(i, j int) bool { return runs[i] < runs[j] })
	if len(runs) != rounds*perRound {
		t.Errorf("%d commands ran (%v), want %d, each once", len(runs), runs, rounds*perRound)
	}
	for i := 1; i < len(runs); i++ {
		if runs[i] == runs[i-1] {
			t.Errorf("command %s ran twice", runs[i])
		}
	}
}
