package provider

import "github.com/berth-dev/berth/errdefs"

// Until every package of berth names them in errdefs: removed at the end
// of this series.
var (
	ErrNotFound        = errdefs.ErrNotFound
	ErrLost            = errdefs.ErrSandboxLost
	ErrPaused          = errdefs.ErrSandboxPaused
	ErrBadInput        = errdefs.ErrBadInput
	ErrCommandNotFound = errdefs.ErrCommandNotFound
	ErrTimeout         = errdefs.ErrTimeout
	ErrOutOfMemory     = errdefs.ErrOutOfMemory
	ErrUnsupported     = errdefs.ErrUnsupported
	ErrAlreadyExists   = errdefs.ErrAlreadyExists
	KindOf             = errdefs.KindOf
	Errorf             = errdefs.Errorf
)

type Kind = errdefs.Kind

const (
	KindNotFound        = errdefs.NotFound
	KindLost            = errdefs.SandboxLost
	KindPaused          = errdefs.SandboxPaused
	KindBadInput        = errdefs.BadInput
	KindCommandNotFound = errdefs.CommandNotFound
	KindTimeout         = errdefs.Timeout
	KindOutOfMemory     = errdefs.OutOfMemory
	KindUnsupported     = errdefs.Unsupported
	KindFileNotFound    = errdefs.FileNotFound
	KindAlreadyExists   = errdefs.AlreadyExists
	KindCanceled        = errdefs.Canceled
	KindTerminated      = errdefs.Terminated
	KindInternal        = errdefs.Internal
)
