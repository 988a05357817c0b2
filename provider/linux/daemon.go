package linux

import "github.com/berth-dev/berth/provider/linux/linuxinit"

// Main runs the sandbox daemon when this process was started as one by
// the provider, and then never returns. Otherwise it returns at once.
// Programs that create linux sandboxes call it first thing in main and
// in TestMain: without a berth-sandboxd beside them, their own binary is
// the daemon (see Config.DaemonPath). It is [linuxinit.Main], which
// berth-sandboxd calls without linking the provider.
func Main() { linuxinit.Main() }
