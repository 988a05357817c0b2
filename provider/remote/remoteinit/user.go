package remoteinit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// DefaultUser is the sandbox user of a Config that names none: the
// hosted services' templates name their unprivileged user so, whatever
// its uid.
const DefaultUser = "user"

// passwdFile is where the machine's users are named.
const passwdFile = "/etc/passwd"

// maxPasswd bounds what is read of passwdFile.
const maxPasswd = 1 << 20

// lookupUser resolves user, a name in the machine's passwd file or
// "UID:GID", to its uid and gid.
func lookupUser(user, passwd string) (uid, gid int, err error) {
	if u, g, ok := strings.Cut(user, ":"); ok {
		uid, err1 := strconv.Atoi(u)
		gid, err2 := strconv.Atoi(g)
		if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
			return 0, 0, fmt.Errorf("the user %q is neither a name nor UID:GID", user)
		}
		return uid, gid, nil
	}
	if user == "" || strings.ContainsAny(user, "\n\x00") {
		return 0, 0, fmt.Errorf("the user %q is neither a name nor UID:GID", user)
	}
	f, err := os.Open(passwd)
	if err != nil {
		return 0, 0, fmt.Errorf("look up the user %q: %w", user, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPasswd+1))
	if err != nil {
		return 0, 0, fmt.Errorf("look up the user %q: %w", user, err)
	}
	if len(b) > maxPasswd {
		return 0, 0, fmt.Errorf("look up the user %q: %s is larger than %d bytes", user, passwd, maxPasswd)
	}
	for line := range strings.Lines(string(b)) {
		// name:password:uid:gid:gecos:home:shell
		fields := strings.Split(strings.TrimRight(line, "\n"), ":")
		if len(fields) < 4 || fields[0] != user {
			continue
		}
		uid, err1 := strconv.Atoi(fields[2])
		gid, err2 := strconv.Atoi(fields[3])
		if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
			return 0, 0, fmt.Errorf("look up the user %q: a bad line in %s", user, passwd)
		}
		return uid, gid, nil
	}
	return 0, 0, fmt.Errorf("look up the user %q: %w in %s", user, errNoUser, passwd)
}

var errNoUser = errors.New("no such user")
