package agentcoreinit

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/berth-dev/berth/provider/remote/remoteinit"
)

// ExitError is the exit code of a call or server that failed, with one
// line on its standard error.
const ExitError = 125

// Main runs the relay when this process was started with Arg, and then
// never returns. Otherwise it returns at once.
func Main() {
	if len(os.Args) < 2 || os.Args[1] != Arg {
		return
	}
	os.Exit(Run(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
}

// Run runs the relay's subcommand args ("serve ..." or "call ..."), and
// returns its exit code.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var err error
	switch {
	case len(args) > 0 && args[0] == "serve":
		err = serve(args[1:], stderr)
	case len(args) > 0 && args[0] == "call":
		err = call(args[1:], stdin, stdout)
	default:
		err = errors.New("usage: berth-sandboxd relay serve --socket PATH --target HOST:PORT | relay call --socket PATH")
	}
	if err != nil {
		fmt.Fprintf(stderr, "berth-sandboxd relay: %s\n", oneLine(err.Error()))
		return ExitError
	}
	return 0
}

func serve(args []string, stderr io.Writer) error {
	raw, ok := os.LookupEnv(remoteinit.ConfigEnv)
	os.Unsetenv(remoteinit.ConfigEnv)
	fl := flag.NewFlagSet("relay serve", flag.ContinueOnError)
	fl.SetOutput(stderr)
	socket := fl.String("socket", "", "the unix socket to serve calls on")
	target := fl.String("target", "", "the daemon's host:port")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *socket == "" || *target == "" || fl.NArg() != 0 {
		return errors.New("usage: relay serve --socket PATH --target HOST:PORT")
	}
	if !ok {
		return fmt.Errorf("no $%s", remoteinit.ConfigEnv)
	}
	var cfg remoteinit.Config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil || cfg.Token == "" {
		return fmt.Errorf("$%s holds no token", remoteinit.ConfigEnv)
	}
	dir := filepath.Dir(*socket)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	// A server that answers already (started by an earlier start of the
	// daemon) is the one: this one leaves it.
	if c, err := net.DialTimeout("unix", *socket, time.Second); err == nil {
		c.Close()
		return nil
	}
	_ = os.Remove(*socket)
	old := syscall.Umask(0o077)
	l, err := net.Listen("unix", *socket)
	syscall.Umask(old)
	if err != nil {
		return err
	}
	return NewServer(*target, cfg.Token, dir).Serve(l)
}

// maxReplyLine bounds the server's reply as a call reads it.
const maxReplyLine = MaxReply*4/3 + 64<<10

func call(args []string, stdin io.Reader, stdout io.Writer) error {
	fl := flag.NewFlagSet("relay call", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	socket := fl.String("socket", "", "the relay's unix socket")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *socket == "" || fl.NArg() != 0 {
		return errors.New("usage: relay call --socket PATH, a base64 call on stdin")
	}
	in, err := io.ReadAll(io.LimitReader(stdin, MaxCall*4/3+4096))
	if err != nil {
		return err
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(in)))
	if err != nil {
		return errors.New("the call is not base64")
	}
	var c Call
	if err := json.Unmarshal(raw, &c); err != nil {
		return errors.New("the call is not JSON")
	}
	conn, err := net.DialTimeout("unix", *socket, 5*time.Second)
	if err != nil {
		return fmt.Errorf("the relay does not answer: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(min(max(c.Wait, 0), MaxWait) + 15*time.Second))
	if _, err := conn.Write(append(raw, '\n')); err != nil {
		return err
	}
	out, err := io.ReadAll(io.LimitReader(conn, maxReplyLine+1))
	if err != nil {
		return err
	}
	if len(out) > maxReplyLine || !bytes.HasSuffix(out, []byte("\n")) {
		return errors.New("the relay's reply is cut short")
	}
	_, err = stdout.Write(out)
	return err
}

func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}
