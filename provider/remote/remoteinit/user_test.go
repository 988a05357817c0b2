package remoteinit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLookupUser: a name resolves to its uid and gid in the machine's
// passwd file, UID:GID is taken as it is, and anything else is refused.
func TestLookupUser(t *testing.T) {
	passwd := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:23456:23457:user:/home/user:/bin/sh\nbad:x:a:1:::\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		user     string
		uid, gid int
		err      string
	}{
		{user: "user", uid: 23456, gid: 23457},
		{user: "root", uid: 0, gid: 0},
		{user: "1000:1001", uid: 1000, gid: 1001},
		{user: "nobody", err: "no such user"},
		{user: "bad", err: "a bad line"},
		{user: "1000:", err: "neither"},
		{user: "-1:0", err: "neither"},
		{user: "", err: "neither"},
	} {
		uid, gid, err := lookupUser(tt.user, passwd)
		switch {
		case tt.err == "" && (err != nil || uid != tt.uid || gid != tt.gid):
			t.Errorf("lookupUser(%q) = %d, %d, %v; want %d, %d", tt.user, uid, gid, err, tt.uid, tt.gid)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("lookupUser(%q) = %d, %d, %v; want an error with %q", tt.user, uid, gid, err, tt.err)
		}
	}
	if _, _, err := lookupUser("user", filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lookupUser without a passwd file: %v", err)
	}
}

// TestParseConfigUser: a configuration without a user is DefaultUser's,
// resolved by name.
func TestParseConfigUser(t *testing.T) {
	passwd := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(passwd, []byte("user:x:21000:21000::/home/user:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseConfig(`{"token":"t"}`, passwd)
	if os.Geteuid() != 0 {
		if err == nil {
			t.Fatal("a daemon that is not root took another user's configuration")
		}
		return
	}
	if err != nil || cfg.User != DefaultUser || cfg.uid != 21000 || cfg.gid != 21000 || cfg.Workspace != DefaultWorkspace {
		t.Fatalf("parseConfig: %+v, %v; want user %q as 21000:21000", cfg, err, DefaultUser)
	}
}
