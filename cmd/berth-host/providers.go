package main

// The providers a host can serve: each registers itself by name with
// provider.Register, and `berth worker --provider NAME` opens it.
import (
	_ "github.com/berth-dev/berth/provider/agentcore"
	_ "github.com/berth-dev/berth/provider/daytona"
	_ "github.com/berth-dev/berth/provider/docker"
	_ "github.com/berth-dev/berth/provider/e2b"
	_ "github.com/berth-dev/berth/provider/gke"
	_ "github.com/berth-dev/berth/provider/gvisor"
	_ "github.com/berth-dev/berth/provider/linux"
	_ "github.com/berth-dev/berth/provider/modal"
)
