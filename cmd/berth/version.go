package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// versionInfo is what berth version says, from the build information
// the Go toolchain stamps into the binary: nothing is dialled, nothing
// read but the binary's own memory.
type versionInfo struct {
	// Version is the version -ldflags set (main.version), else the
	// module's (a tag, a pseudo-version), else devVersion.
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	// Dirty says the work tree had changes not committed.
	Dirty     bool   `json:"dirty"`
	GoVersion string `json:"go_version"`
	SDK       string `json:"temporal_sdk_version,omitempty"`
	// Server is the Temporal server linked in for berth dev; empty when
	// the binary does not link it.
	Server string `json:"temporal_server_version,omitempty"`
}

// version, when set at link time (go build -ldflags "-X
// main.version=v0.3.0"), is berth's version whatever the build
// information says.
var version string

// devVersion is the version of a build whose build information has none
// ("(devel)": a build from a work tree with -buildvcs=false, say) and
// that -ldflags did not name: the version under development.
const devVersion = "v0.1.0-dev"

func readVersion() versionInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{}
	}
	return versionFrom(bi, version)
}

// versionFrom reads a binary's build information; linked, when not
// empty, is the version -ldflags set.
func versionFrom(bi *debug.BuildInfo, linked string) versionInfo {
	v := versionInfo{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	switch {
	case linked != "":
		v.Version = linked
	case v.Version == "" || v.Version == "(devel)":
		v.Version = devVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.modified":
			v.Dirty = s.Value == "true"
		}
	}
	for _, d := range bi.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		switch d.Path {
		case "go.temporal.io/sdk":
			v.SDK = d.Version
		case "go.temporal.io/server":
			v.Server = d.Version
		}
	}
	return v
}

func (v versionInfo) write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "berth %s", v.Version)
	if v.Commit != "" {
		fmt.Fprintf(&b, " (commit %s", v.Commit)
		if v.Dirty {
			b.WriteString(", dirty")
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, "\ngo: %s\n", v.GoVersion)
	if v.SDK != "" {
		fmt.Fprintf(&b, "temporal sdk: %s\n", v.SDK)
	}
	if v.Server != "" {
		fmt.Fprintf(&b, "temporal server: %s\n", v.Server)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// newVersion makes berth version, and gives the root its --version.
func newVersion(root *cobra.Command) *cobra.Command {
	var b strings.Builder
	readVersion().write(&b)
	root.Version = b.String()
	root.SetVersionTemplate("{{.Version}}")
	var outFmt *format
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print berth's version, commit, and the Go and Temporal versions it was built with",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if *outFmt == formatJSON {
				return writeJSON(os.Stdout, readVersion())
			}
			return readVersion().write(os.Stdout)
		},
	}
	outFmt = addFormat(cmd.Flags(), formatJSON)
	return cmd
}
