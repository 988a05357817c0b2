package runkey

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// supervisorLock is the descriptor on which the supervisor inherits the
// entry's locked lock file.
const supervisorLock = 3

// options are run's flags.
type options struct {
	key       string
	dir       string
	timeout   time.Duration
	cap       int64
	supervise bool
	argv      []string
}

// Main runs `berth-sandboxd run` with args, the arguments after "run",
// writing the command's output to os.Stdout and os.Stderr, and returns the
// exit code for the process.
func Main(args []string) int {
	return run(args, os.Stdout, os.Stderr)
}

func run(args []string, stdout, stderr io.Writer) int {
	opt, err := parse(args)
	if err != nil {
		return fail(stderr, "%v", err)
	}
	entry := filepath.Join(opt.dir, opt.key)
	if opt.supervise {
		return supervise(entry, opt)
	}
	won, err := begin(opt)
	if err != nil {
		return fail(stderr, "%s: %v", opt.key, err)
	}
	if won {
		prune(opt.dir, Keep, MaxAge, time.Now())
	}
	return attach(entry, opt, stdout, stderr)
}

func parse(args []string) (options, error) {
	var opt options
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&opt.key, "key", "", "")
	fs.StringVar(&opt.dir, "dir", "", "")
	fs.DurationVar(&opt.timeout, "timeout", 0, "")
	fs.Int64Var(&opt.cap, "cap", DefaultCap, "")
	fs.BoolVar(&opt.supervise, "supervise", false, "")
	if err := fs.Parse(args); err != nil {
		return opt, fmt.Errorf("%v (usage: berth-sandboxd run --key KEY [--dir DIR] [--timeout D] [--cap BYTES] -- CMD ARGS...)", err)
	}
	opt.argv = fs.Args()
	if err := ValidKey(opt.key); err != nil {
		return opt, fmt.Errorf("--key: %v", err)
	}
	if len(opt.argv) == 0 {
		return opt, errors.New("no command after --key (usage: berth-sandboxd run --key KEY -- CMD ARGS...)")
	}
	if opt.timeout < 0 || opt.cap < 0 {
		return opt, errors.New("--timeout and --cap cannot be negative")
	}
	if opt.dir == "" {
		opt.dir = os.Getenv(DirEnv)
	}
	if opt.dir == "" {
		opt.dir = DefaultDir
	}
	return opt, nil
}

// fail prints berth's own error in one line and returns ExitBerth.
func fail(stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "berth-sandboxd run: "+format+"\n", a...)
	return ExitBerth
}

// begin makes the key's entry and starts its supervisor if no call has
// before, and reports whether this call did. The entry is built and locked
// under a temporary name and renamed into place, so it is never seen
// unlocked before its supervisor starts, nor half made.
func begin(opt options) (bool, error) {
	if err := os.MkdirAll(opt.dir, 0o700); err != nil {
		return false, fmt.Errorf("the journal: %w", err)
	}
	entry := filepath.Join(opt.dir, opt.key)
	if _, err := os.Lstat(entry); err == nil {
		return false, nil // a retry: skip building an entry to throw away
	}
	tmp, err := os.MkdirTemp(opt.dir, prefixNew)
	if err != nil {
		return false, fmt.Errorf("the journal: %w", err)
	}
	lock, err := build(tmp, opt.argv)
	if err != nil {
		os.RemoveAll(tmp)
		return false, fmt.Errorf("the journal: %w", err)
	}
	defer lock.Close() // the supervisor holds its own copy
	if err := os.Rename(tmp, entry); err != nil {
		os.RemoveAll(tmp)
		if errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) {
			return false, nil // another first call won the race
		}
		return false, fmt.Errorf("the journal: %w", err)
	}
	if err := startSupervisor(entry, opt, lock); err != nil {
		if werr := writeStatus(entry, status{Error: err.Error()}); werr != nil {
			return true, fmt.Errorf("%v, and recording it: %v", err, werr)
		}
	}
	return true, nil
}

// build fills a new entry and returns its lock file, locked.
func build(tmp string, argv []string) (*os.File, error) {
	lock, err := os.OpenFile(filepath.Join(tmp, fileLock), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return nil, err
	}
	b, err := json.Marshal(argv)
	if err == nil {
		err = os.WriteFile(filepath.Join(tmp, fileArgv), b, 0o600)
	}
	for _, name := range []string{fileStdout, fileStderr} {
		if err == nil {
			err = os.WriteFile(filepath.Join(tmp, name), nil, 0o600)
		}
	}
	if err != nil {
		lock.Close()
		return nil, err
	}
	return lock, nil
}

// startSupervisor re-executes this binary in a session of its own to run
// the command, handing it the entry's lock.
func startSupervisor(entry string, opt options, lock *os.File) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find berth-sandboxd to start the supervisor: %w", err)
	}
	args := append([]string{"run", "--supervise",
		"--dir", filepath.Dir(entry), "--key", opt.key,
		"--timeout", opt.timeout.String(), "--cap", strconv.FormatInt(opt.cap, 10), "--"}, opt.argv...)
	cmd := exec.Command(exe, args...)
	cmd.ExtraFiles = []*os.File{lock} // descriptor supervisorLock
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start the supervisor: %w", err)
	}
	return cmd.Process.Release()
}

// attach streams the entry's output to stdout and stderr as it grows, until
// the run's status is written, and returns the exit code it gives.
func attach(entry string, opt options, stdout, stderr io.Writer) int {
	b, err := os.ReadFile(filepath.Join(entry, fileArgv))
	if err != nil {
		return fail(stderr, "%s: the journal: %v", opt.key, err)
	}
	var journaled []string
	if err := json.Unmarshal(b, &journaled); err != nil {
		return fail(stderr, "%s: the journal's argv: %v", opt.key, err)
	}
	if !slices.Equal(journaled, opt.argv) {
		return fail(stderr, "%s: the key was used for another command, %q", opt.key, journaled)
	}
	outs := [2]io.Writer{stdout, stderr}
	var ins [2]*os.File
	for i, name := range []string{fileStdout, fileStderr} {
		if ins[i], err = os.Open(filepath.Join(entry, name)); err != nil {
			return fail(stderr, "%s: the journal: %v", opt.key, err)
		}
		defer ins[i].Close()
	}
	drain := func() (bool, error) {
		var moved bool
		for i := range ins {
			n, err := io.Copy(outs[i], ins[i])
			if err != nil {
				return moved, err
			}
			moved = moved || n > 0
		}
		return moved, nil
	}
	const minPoll, maxPoll = time.Millisecond, 50 * time.Millisecond
	poll := minPoll
	for {
		moved, err := drain()
		if err != nil {
			return fail(stderr, "%s: copying its output: %v", opt.key, err)
		}
		st, done, err := readStatus(entry)
		if err != nil {
			return fail(stderr, "%s: %v", opt.key, err)
		}
		if !done {
			// Looked at before the status again: a supervisor that
			// wrote it and exited leaves the lock free.
			alive, err := held(entry)
			if err != nil {
				return fail(stderr, "%s: the journal: %v", opt.key, err)
			}
			if !alive {
				if st, done, err = readStatus(entry); err != nil {
					return fail(stderr, "%s: %v", opt.key, err)
				}
				if !done {
					return died(entry, opt.key, stderr)
				}
			}
		}
		if done {
			if _, err := drain(); err != nil {
				return fail(stderr, "%s: copying its output: %v", opt.key, err)
			}
			return report(st, opt.key, stderr)
		}
		if moved {
			poll = minPoll
		} else {
			poll = min(2*poll, maxPoll)
		}
		time.Sleep(poll)
	}
}

// died explains an entry with no status whose supervisor is gone.
func died(entry, key string, stderr io.Writer) int {
	if _, err := os.Stat(filepath.Join(entry, fileStarted)); err == nil {
		return fail(stderr, "%s: its supervisor died before the command finished (the sandbox restarted?): the command may have run in part, and is not run again under this key", key)
	}
	return fail(stderr, "%s: the first call died before starting the command: it never ran, and is not run under this key", key)
}

// report prints what the status says beyond the output and returns the
// command's exit code.
func report(st status, key string, stderr io.Writer) int {
	for i, name := range []string{"stdout", "stderr"} {
		if st.Dropped[i] > 0 {
			fmt.Fprintf(stderr, "berth-sandboxd run: %s: %d bytes of %s dropped beyond the first %d\n", key, st.Dropped[i], name, st.Cap)
		}
	}
	if st.TimedOut {
		fmt.Fprintf(stderr, "berth-sandboxd run: %s: killed when its --timeout passed\n", key)
	}
	switch {
	case st.Error != "":
		return fail(stderr, "%s: %s", key, st.Error)
	case st.StartError != "":
		fmt.Fprintf(stderr, "berth-sandboxd run: %s: %s\n", key, st.StartError)
		if st.NotFound {
			return 127
		}
		return 126
	case st.Signal != 0:
		return 128 + st.Signal
	case st.Exit != nil:
		return *st.Exit
	}
	return fail(stderr, "%s: the journal's status says nothing of how the command ended", key)
}
