package remoteinit

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
)

// scrubEnviron overwrites the value of name in the environment the
// kernel gave the process, which os.Unsetenv leaves as it was: a process
// of the daemon's user could read it in /proc/PID/environ. It writes
// through /proc/self/mem, which a process may always do to itself.
func scrubEnviron(name string) error {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return err
	}
	// Fields 50 and 51 (env_start, env_end) count from the state, the
	// third field, after the command's name, which may hold anything.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return errors.New("unreadable /proc/self/stat")
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 49 {
		return errors.New("no environment's bounds in /proc/self/stat")
	}
	start, err1 := strconv.ParseInt(f[47], 10, 64)
	end, err2 := strconv.ParseInt(f[48], 10, 64)
	if err1 != nil || err2 != nil || end <= start || end-start > 16<<20 {
		return errors.New("bad environment bounds in /proc/self/stat")
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer mem.Close()
	env := make([]byte, end-start)
	if _, err := mem.ReadAt(env, start); err != nil {
		return err
	}
	prefix := []byte(name + "=")
	for off := 0; off < len(env); {
		entry := env[off:]
		if n := bytes.IndexByte(entry, 0); n >= 0 {
			entry = entry[:n]
		}
		if bytes.HasPrefix(entry, prefix) {
			value := len(entry) - len(prefix)
			if _, err := mem.WriteAt(make([]byte, value), start+int64(off+len(prefix))); err != nil {
				return err
			}
		}
		off += len(entry) + 1
	}
	return nil
}
