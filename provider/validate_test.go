package provider

import (
	"errors"
	"math"
	"testing"

	"github.com/berth-dev/berth/errdefs"
)

func TestValidateResources(t *testing.T) {
	tests := []struct {
		name string
		r    Resources
		ok   bool
	}{
		{"defaults", Resources{}, true},
		{"minimums", Resources{Memory: MinMemory, Pids: MinPids, CPU: MinCPU, Disk: MinDisk}, true},
		{"typical", Resources{Memory: 512 << 20, Pids: 256, CPU: 1.5}, true},
		{"1 MiB memory", Resources{Memory: 1 << 20}, false},
		{"memory just below the minimum", Resources{Memory: MinMemory - 1}, false},
		{"2 pids", Resources{Pids: 2}, false},
		{"tiny CPU", Resources{CPU: 0.001}, false},
		{"tiny disk", Resources{Disk: 4096}, false},
		{"negative CPU", Resources{CPU: -1}, false},
		{"NaN CPU", Resources{CPU: math.NaN()}, false},
		{"negative memory", Resources{Memory: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateResources(tt.r)
			if tt.ok && err != nil {
				t.Fatalf("ValidateResources(%+v) = %v, want nil", tt.r, err)
			}
			if !tt.ok && !errors.Is(err, errdefs.ErrBadInput) {
				t.Fatalf("ValidateResources(%+v) = %v, want bad input", tt.r, err)
			}
			if spec := (Spec{Resources: tt.r}); (ValidateSpec(spec) == nil) != tt.ok {
				t.Errorf("ValidateSpec disagrees with ValidateResources on %+v", tt.r)
			}
		})
	}
}

func TestEscapes(t *testing.T) {
	for p, want := range map[string]bool{
		"a": false, "a/b": false, ".": false, "./a": false, "a/..": false, "a/../b": false, "..a": false, "a/..b": false,
		"..": true, "../a": true, "a/../..": true, "./../a": true, "/a": true, "/": true, "a/../../b": true, "../": true,
	} {
		if got := Escapes(p); got != want {
			t.Errorf("Escapes(%q) = %v, want %v", p, got, want)
		}
	}
}
