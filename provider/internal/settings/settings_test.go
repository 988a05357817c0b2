package settings

import (
	"errors"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// TestDecode: each known setting's text lands in its typed field, from
// any of the tables given; an unknown setting or a value that does not
// decode is bad input, named.
func TestDecode(t *testing.T) {
	var (
		dir  string
		idle time.Duration
		res  provider.Resources
	)
	own := map[string]Setting{"state_dir": String(&dir), "idle": Duration(&idle)}
	err := Decode("linux", provider.Config{"state_dir": "/var/lib/x", "idle": "90s", "memory": "1048576", "cpu": "1.5"},
		own, Resources(&res))
	if err != nil {
		t.Fatal(err)
	}
	if dir != "/var/lib/x" || idle != 90*time.Second || res.Memory != 1<<20 || res.CPU != 1.5 {
		t.Errorf("decoded state_dir %q, idle %v, memory %d, cpu %v", dir, idle, res.Memory, res.CPU)
	}
	for name, pc := range map[string]provider.Config{
		"unknown":      {"colour": "blue"},
		"not a number": {"memory": "lots"},
		"bad duration": {"idle": "soon"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := Decode("linux", pc, own, Resources(&res)); !errors.Is(err, errdefs.ErrBadInput) {
				t.Errorf("Decode(%v) = %v, want bad input", pc, err)
			}
		})
	}
}

// TestFill: a limit left zero takes the default; one set stays.
func TestFill(t *testing.T) {
	got := Fill(provider.Resources{Memory: 5}, provider.Resources{Memory: 1, Pids: 2, CPU: 3, Disk: 4})
	if want := (provider.Resources{Memory: 5, Pids: 2, CPU: 3, Disk: 4}); got != want {
		t.Errorf("Fill = %+v, want %+v", got, want)
	}
}
