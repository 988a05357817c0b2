package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/berth-dev/berth"

// pkg is what go list says of a package.
type pkg struct {
	ImportPath string
	Imports    []string // direct, not counting tests
	Deps       []string // transitive, not counting tests
	Export     string
}

// goList runs go list -json with args over the module's packages.
func goList(t *testing.T, args ...string) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.Bytes())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// berth says whether path is one of berth's packages.
func berth(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

// within says whether path is the berth package rel or one below it.
func within(path, rel string) bool {
	full := module + "/" + rel
	return path == full || strings.HasPrefix(path, full+"/")
}

// A rule forbids the packages matching from to depend on those matching
// to: directly, or through any chain of imports.
type rule struct {
	from, to   func(string) bool
	transitive bool
	why        string
}

// exactly matches one package, not those below it.
func exactly(rel string) func(string) bool {
	return func(path string) bool { return path == module+"/"+rel }
}

// under matches the packages at or below each rel; "." is the module's
// root package alone (the SDK), not the whole module.
func under(rels ...string) func(string) bool {
	return func(path string) bool {
		for _, rel := range rels {
			if rel == "." && path == module || rel != "." && within(path, rel) {
				return true
			}
		}
		return false
	}
}

func prefix(p string) func(string) bool {
	return func(path string) bool { return strings.HasPrefix(path, p) }
}

// providerImpl matches the providers themselves, not their interface or
// its conformance suite.
func providerImpl(path string) bool {
	return within(path, "provider") && !under("provider/providertest")(path) && path != module+"/provider"
}

// hostSide matches what runs on a host and never inside a sandbox: the
// providers' host sides and the heavy clients they link (Docker's,
// containerd's cgroups with eBPF, OpenTelemetry, protobuf, Temporal).
func hostSide(path string) bool {
	for _, p := range []string{"github.com/moby/", "github.com/docker/", "github.com/containerd/",
		"github.com/cilium/ebpf", "go.opentelemetry.io/", "google.golang.org/protobuf/", "go.temporal.io/"} {
		if prefix(p)(path) {
			return true
		}
	}
	for _, rel := range []string{"provider/linux", "provider/gvisor", "provider/docker", "provider/image"} {
		if exactly(rel)(path) {
			return true
		}
	}
	return false
}

// std matches the standard library's packages: their paths have no dot
// in their first element.
func std(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

var rules = []rule{
	{exactly("errdefs"), berth, true,
		"errdefs is the leaf every layer names its errors with (providers and the in-sandbox daemon too): it imports nothing of berth"},
	{exactly("errdefs"), func(path string) bool { return !std(path) }, true,
		"errdefs imports only the standard library, so that any program, and layer 1, can use it without linking Temporal"},
	{under("errdefs/temporalerr"), func(path string) bool { return berth(path) && path != module+"/errdefs" }, true,
		"temporalerr converts between errdefs and Temporal: of berth it knows errdefs alone"},
	{under("provider", "sandboxd", "snapshot", "internal/untar", "internal/sparsetar", "cmd/berth-sandboxd"),
		prefix("go.temporal.io/"), true,
		"layer 1 (providers, the in-sandbox daemon, snapshots) is plain Go: it knows nothing of Temporal"},
	{exactly("cmd/berth-sandboxd"), hostSide, true,
		"berth-sandboxd runs in every sandbox (and is uploaded into remote ones): it links the providers' in-sandbox packages, no host code"},
	{under("provider", "sandboxd", "snapshot", "transfer", "activities", "sandbox", "workflows"),
		under(".", "cmd", "hostworker", "devserver"), true,
		"layers 1 to 4 know nothing of the front ends and hosts built on them"},
	{under("transfer"), func(path string) bool { return berth(path) && !under("internal", "transfer")(path) }, true,
		"transfer is the output and transfer format, and its relay: they stand below every layer that moves bytes"},
	{exactly("transfer"), prefix("go.temporal.io/"), true,
		"transfer is the output and transfer format: a program that only reads it links no Temporal SDK (the relay is transfer/relay)"},
	{under("refs"), func(path string) bool { return prefix("go.temporal.io/")(path) || berth(path) }, true,
		"refs is plain data that the handle and its activities both hold: no Temporal, no berth package"},
	{under("activities"), under("sandbox", "workflows"), true,
		"activities (layer 2) know nothing of the handle or the workflows above them"},
	{under("sandbox"), under("workflows"), true,
		"the handle (layer 3) knows nothing of the ready-made workflows"},
	{under("sandbox/ops"), under("activities"), false,
		"the Updates a sandbox's owner serves (layer 3, beside the handle) drive the sandbox through the handle alone"},
	{under("workflows"), under("activities"), false,
		"workflows (layer 4) are built from the sandbox handle alone"},
	{under("cmd/berth", "."), under("activities"), false,
		"front ends reach sandboxes through workflows, never through activities"},
	{under("cmd/berth"), func(path string) bool {
		return prefix("go.temporal.io/server")(path) || under("devserver", "hostworker")(path) || providerImpl(path)
	}, true,
		"the berth command links neither the Temporal server, nor a host, nor a provider: it starts in milliseconds, and hands dev and worker to berth-host"},
	{under("cmd/berth"), under("workflows", "sandbox"), false,
		"the berth command is a thin layer over the SDK (package berth): it names no workflow, Update or wire type itself, so that what it does any Go program can do, and a change of the wire stays behind the SDK"},
	{under("."), providerImpl, true,
		"the SDK (the module's root package, every front end's library) links no provider: providers live in workers"},
	{under("sandbox", "workflows", "activities"), providerImpl, true,
		"layers 2 to 4 reach providers only through the provider interface and the registry"},
	{under("agent/chat"), func(path string) bool {
		return prefix("go.temporal.io/")(path) || prefix("github.com/openai/")(path) || berth(path)
	}, true,
		"agent/chat is plain data shared by the agent's workflow and activities: no Temporal, no model client, no berth package"},
	{under("agent/model"), under("sandbox", "workflows", "activities", "provider", "agent/tools"), true,
		"the model activity (layer 2, beside activities) knows nothing of sandboxes, their handle or the workflows"},
	{under("agent/tools"), under("activities"), false,
		"the agent's tools (layer 3, above the handle) reach sandboxes through the sandbox handle alone"},
	{under("agent/tools"), func(path string) bool {
		return prefix("github.com/openai/")(path) || under("agent/model")(path) || providerImpl(path)
	}, true,
		"the agent's tools know nothing of the model or of any provider"},
	{under("agent", "session"), under(".", "cmd", "hostworker", "devserver"), true,
		"the agent's packages and its session manager know nothing of the front ends and hosts built on them"},
	{under("agent"), under("session"), true,
		"the agent knows nothing of the session manager built on it (their signals are held equal by session's tests)"},
	{exactly("session"), under("activities"), false,
		"the session manager reaches sandboxes through the agent's workflow and other workflows through its own activities (session/calls), never berth's sandbox activities"},
	{exactly("session"), providerImpl, true,
		"the session manager reaches providers only through the agent's workflow and the sandbox handle"},
	{exactly("agent"), under("activities", "workflows"), false,
		"the agent's workflow (layer 4, beside workflows) reaches sandboxes through the handle and the tools alone"},
	{exactly("agent"), providerImpl, true,
		"the agent's workflow reaches providers only through the provider interface and the registry"},
	{under("agent/chat", "agent/model", "agent/tools"), exactly("agent"), true,
		"the agent's data, model and tools know nothing of the workflow built on them"},
	{under("provider", "sandboxd", "snapshot", "transfer", "activities", "sandbox", "workflows"), under("agent", "session"), true,
		"berth's sandbox layers know nothing of the coding agent built on them"},
	{under("tui"), func(path string) bool {
		return prefix("go.temporal.io/")(path) || under(".", "cmd", "activities", "workflows", "sandbox", "provider", "hostworker")(path)
	}, false,
		"berth chat's terminal UI reaches berth through its Backend interface alone, never Temporal or berth's layers"},
	{func(path string) bool { return prefix(module+"/")(path) && !under("cmd", "tui")(path) }, under("tui"), true,
		"only the berth command builds on the terminal UI"},
}

func TestLayers(t *testing.T) {
	pkgs := goList(t, module+"/...")
	for _, r := range rules {
		for _, p := range pkgs {
			if !r.from(p.ImportPath) {
				continue
			}
			deps := p.Imports
			if r.transitive {
				deps = p.Deps
			}
			for _, d := range deps {
				if r.to(d) && d != p.ImportPath {
					t.Errorf("%s depends on %s: %s", p.ImportPath, d, r.why)
				}
			}
		}
	}
}

// TestRulesBite checks that each rule applies to some package, so that a
// package renamed or moved cannot leave a rule that no longer checks
// anything.
func TestRulesBite(t *testing.T) {
	pkgs := goList(t, module+"/...")
	for _, r := range rules {
		n := 0
		for path := range pkgs {
			if r.from(path) {
				n++
			}
		}
		if n == 0 {
			t.Errorf("no package is subject to the rule %q", r.why)
		}
	}
}

// TestHostSideBites checks that hostSide matches what it names: packages
// the module links today, so that a renamed module or package cannot
// leave the daemon's rule matching nothing.
func TestHostSideBites(t *testing.T) {
	linked := map[string]bool{}
	for _, p := range goList(t, module+"/...") {
		linked[p.ImportPath] = true
		for _, d := range p.Deps {
			linked[d] = true
		}
	}
	for _, path := range []string{
		"github.com/moby/moby/client", "github.com/containerd/cgroups/v3/cgroup2", "github.com/cilium/ebpf",
		"go.opentelemetry.io/otel", "google.golang.org/protobuf/proto", "go.temporal.io/sdk/client",
		module + "/provider/linux", module + "/provider/gvisor", module + "/provider/docker", module + "/provider/image",
	} {
		if !linked[path] {
			t.Errorf("%s: no package of the module links it any more: name what hostSide should keep out now", path)
		}
		if !hostSide(path) {
			t.Errorf("hostSide does not match %s", path)
		}
	}
	for _, path := range []string{module + "/provider/linux/linuxinit", module + "/provider/gvisor/gvisorinit",
		module + "/provider/docker/dockerinit", module + "/sandboxd"} {
		if hostSide(path) {
			t.Errorf("hostSide matches %s, which runs in the sandbox", path)
		}
	}
}

// TestSandboxAPI checks that nothing the sandbox package exports (its
// functions, types, their exported fields and methods) names a type of
// package activities: workflows use the handle without knowing the
// activities behind it, which may change without breaking them.
func TestSandboxAPI(t *testing.T) {
	for _, bad := range exposed(t, module+"/sandbox", exactly("activities")) {
		t.Error(bad)
	}
}

// TestSDKAPI checks that nothing the SDK (the module's root package)
// exports names a type of workflows, sandbox or activities: a program
// sees the SDK's own types, and the wire beneath may change without
// breaking it.
func TestSDKAPI(t *testing.T) {
	for _, bad := range exposed(t, module, under("workflows", "sandbox", "activities")) {
		t.Error(bad)
	}
}

// exposed lists where the exported API of package path names a type of
// a package hidden matches.
func exposed(t *testing.T, path string, hidden func(string) bool) []string {
	t.Helper()
	deps := goList(t, "-export", "-deps", path)
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(p string) (io.ReadCloser, error) {
		d, ok := deps[p]
		if !ok || d.Export == "" {
			return nil, fmt.Errorf("no export data for %s", p)
		}
		return os.Open(d.Export)
	})
	api, err := imp.Import(path)
	if err != nil {
		t.Fatal(err)
	}
	w := walker{pkg: api, hidden: hidden, seen: map[types.Type]bool{}}
	scope := api.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		w.where = name
		if tn, ok := obj.(*types.TypeName); ok {
			if n, ok := types.Unalias(tn.Type()).(*types.Named); ok && n.Obj().Pkg() == api {
				// Walked here, each method under its own name.
				w.seen[n] = true
				w.walk(n.Underlying())
				for m := range n.Methods() {
					if m.Exported() {
						w.where = name + "." + m.Name()
						w.walk(m.Type())
					}
				}
			}
		}
		w.where = name
		w.walk(obj.Type())
	}
	return w.found
}

// walker finds the types of the packages hidden matches in a type,
// following what a user of package pkg sees: exported fields and
// methods of pkg's own types, and the type arguments of others.
type walker struct {
	pkg    *types.Package
	hidden func(string) bool
	where  string
	seen   map[types.Type]bool
	found  []string
}

func (w *walker) walk(t types.Type) {
	if t == nil || w.seen[t] {
		return
	}
	w.seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		if t.Obj().Pkg() != nil && w.hidden(t.Obj().Pkg().Path()) {
			w.found = append(w.found, fmt.Sprintf("%s shows %s", w.where, t))
		}
		w.walk(types.Unalias(t))
	case *types.Named:
		if t.Obj().Pkg() != nil && w.hidden(t.Obj().Pkg().Path()) {
			w.found = append(w.found, fmt.Sprintf("%s shows %s", w.where, t))
			return
		}
		for a := range t.TypeArgs().Types() {
			w.walk(a)
		}
		if t.Obj().Pkg() == w.pkg {
			w.walk(t.Underlying())
			for m := range t.Methods() {
				if m.Exported() {
					w.walk(m.Type())
				}
			}
		}
	case *types.Pointer:
		w.walk(t.Elem())
	case *types.Slice:
		w.walk(t.Elem())
	case *types.Array:
		w.walk(t.Elem())
	case *types.Map:
		w.walk(t.Key())
		w.walk(t.Elem())
	case *types.Chan:
		w.walk(t.Elem())
	case *types.Signature:
		w.walk(t.Params())
		w.walk(t.Results())
	case *types.Tuple:
		for v := range t.Variables() {
			w.walk(v.Type())
		}
	case *types.Struct:
		for f := range t.Fields() {
			if f.Exported() {
				w.walk(f.Type())
			}
		}
	case *types.Interface:
		for m := range t.Methods() {
			if m.Exported() {
				w.walk(m.Type())
			}
		}
	}
}
