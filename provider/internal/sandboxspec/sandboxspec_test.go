package sandboxspec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const minDisk = 16 << 20
	all := Offer{Name: "all", MinDisk: minDisk, RootFS: true, Network: true}
	bare := Offer{Name: "bare", MinDisk: minDisk}
	tests := []struct {
		name  string
		offer Offer
		spec  provider.Spec
		want  error // nil: accepted
	}{
		{"empty spec", bare, provider.Spec{}, nil},
		{"invalid spec", all, provider.Spec{ID: "-x"}, errdefs.ErrBadInput},
		{"rootfs offered", all, provider.Spec{RootFS: dir}, nil},
		{"rootfs not offered", bare, provider.Spec{RootFS: dir}, errdefs.ErrUnsupported},
		{"rootfs and image", all, provider.Spec{RootFS: dir, Image: "alpine"}, errdefs.ErrBadInput},
		{"rootfs relative, though a directory", all, provider.Spec{RootFS: "."}, errdefs.ErrBadInput},
		{"rootfs a file", all, provider.Spec{RootFS: file}, errdefs.ErrBadInput},
		{"rootfs missing", all, provider.Spec{RootFS: filepath.Join(dir, "none")}, errdefs.ErrBadInput},
		{"network offered", all, provider.Spec{Network: provider.Network{Mode: provider.NetworkOpen}}, nil},
		{"network not offered", bare, provider.Spec{Network: provider.Network{Mode: provider.NetworkOpen}}, errdefs.ErrUnsupported},
		{"disk at the minimum", bare, provider.Spec{Resources: provider.Resources{Disk: minDisk}}, nil},
		{"disk below the minimum", bare, provider.Spec{Resources: provider.Resources{Disk: minDisk - 1}}, errdefs.ErrBadInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.offer.Check(tt.spec)
			if tt.want == nil {
				if err != nil {
					t.Errorf("Check = %v, want accepted", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("Check = %v, want %v", err, tt.want)
			}
			if errors.Is(tt.want, errdefs.ErrUnsupported) && !strings.Contains(err.Error(), tt.offer.Name) {
				t.Errorf("Check = %v does not name the provider", err)
			}
		})
	}
}

func TestEnv(t *testing.T) {
	tests := []struct {
		name string
		env  func(map[string]string) map[string]string
		spec map[string]string
		want map[string]string
	}{
		{"image defaults", Env, nil, map[string]string{"HOME": provider.Workspace, "USER": "sandbox", "LOGNAME": "sandbox", "TMPDIR": "/tmp"}},
		{"spec has the last word", Env, map[string]string{"HOME": "/h", "X": "1"}, map[string]string{"HOME": "/h", "USER": "sandbox", "X": "1"}},
		{"host adds a path and locale", HostEnv, nil, map[string]string{"HOME": provider.Workspace, "LANG": "C.UTF-8", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
		{"host spec has the last word", HostEnv, map[string]string{"PATH": "/p", "LANG": "fr", "USER": "u"}, map[string]string{"PATH": "/p", "LANG": "fr", "USER": "u", "TMPDIR": "/tmp"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var spec map[string]string
			if tt.spec != nil {
				spec = map[string]string{}
				for k, v := range tt.spec {
					spec[k] = v
				}
			}
			got := tt.env(spec)
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			for k, v := range tt.spec {
				if spec[k] != v || len(spec) != len(tt.spec) {
					t.Errorf("the spec's environment was changed: %v", spec)
				}
			}
		})
	}
}

func TestEtc(t *testing.T) {
	etc := Etc()
	host, _ := os.Hostname()
	for _, name := range []string{"passwd", "group", "hostname", "hosts"} {
		if etc[name] == "" {
			t.Errorf("no %s", name)
		}
	}
	if !strings.Contains(etc["passwd"], "sandbox:x:1000:1000:sandbox:"+provider.Workspace+":") {
		t.Errorf("passwd has no sandbox user at uid 1000 with the workspace as home:\n%s", etc["passwd"])
	}
	if host != "" && host != "sandbox" && strings.Contains(etc["hosts"]+etc["hostname"], host) {
		t.Errorf("the host's name %q shows through", host)
	}
	etc["passwd"] = "changed"
	if Etc()["passwd"] == "changed" {
		t.Error("Etc returns a map callers share")
	}
}
