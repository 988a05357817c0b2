package linux

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider/linux/linuxinit"
)

// The host's side of the control protocol (see linuxinit.WarmMsg).

func sendJSON(ctl *os.File, v any, f *os.File) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > linuxinit.MaxControlMsg {
		return fmt.Errorf("control message of %d bytes is too large", len(b))
	}
	return linuxinit.Send(ctl, b, f)
}

// recvReply waits for a daemon's answer until the deadline; an answer
// other than want is the daemon's reason for failing.
func recvReply(ctl *os.File, want string, deadline time.Time) error {
	if err := waitReadable(ctl, deadline); err != nil {
		return err
	}
	msg, f, err := linuxinit.Recv(ctl)
	if f != nil {
		f.Close()
	}
	switch {
	case err != nil:
		return err
	case string(msg) == want:
		return nil
	case len(msg) == 0:
		return fmt.Errorf("daemon exited")
	}
	return fmt.Errorf("daemon: %s", msg)
}

func waitReadable(f *os.File, deadline time.Time) error {
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return fmt.Errorf("daemon did not answer in time")
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}, ms)
		if n > 0 {
			return nil
		}
		if err != nil && err != unix.EINTR {
			return err
		}
	}
}
