package protodoc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the module's root, from this package's directory.
const root = "../.."

// protocolName says which constants declare a name of the protocol: a
// workflow type, an Update, a Query or a Signal.
var protocolName = regexp.MustCompile(`^(Update|Query|Signal)|(Query|WorkflowName)$`)

// registrations are the workflow calls whose first name argument is a
// handler's or a signal's name, for names given as literals.
var registrations = map[string]bool{
	"SetUpdateHandler": true, "SetUpdateHandlerWithOptions": true, "SetQueryHandler": true,
	"SetQueryHandlerWithOptions": true, "GetSignalChannel": true, "SignalExternalWorkflow": true,
}

// declaredNames collects, from the module's non-test Go files, the
// protocol names: string constants named as protocolName says whose
// value is a berth name, and string literals passed to the
// registrations. The value is where each is declared.
func declaredNames(t *testing.T) map[string]string {
	t.Helper()
	names := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		add := func(lit *ast.BasicLit) {
			if lit == nil || lit.Kind != token.STRING {
				return
			}
			s, err := strconv.Unquote(lit.Value)
			if err == nil && strings.HasPrefix(s, "berth.") {
				names[s] = fset.Position(lit.Pos()).String()
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GenDecl:
				if n.Tok != token.CONST {
					return true
				}
				for _, spec := range n.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i < len(vs.Values) && protocolName.MatchString(name.Name) {
							lit, _ := vs.Values[i].(*ast.BasicLit)
							add(lit)
						}
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || !registrations[sel.Sel.Name] {
					return true
				}
				for _, a := range n.Args {
					if lit, ok := a.(*ast.BasicLit); ok {
						add(lit)
						break
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// missing lists the names doc does not mention, each as code
// (`berth.exec`), sorted.
func missing(doc string, names map[string]string) []string {
	var out []string
	for name := range names {
		if !strings.Contains(doc, "`"+name+"`") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func readProtocol(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestProtocolDocNamesAll fails when a workflow type, Update, Query or
// Signal of the code is not in docs/protocol.md.
func TestProtocolDocNamesAll(t *testing.T) {
	names := declaredNames(t)
	doc := readProtocol(t)
	for _, name := range missing(doc, names) {
		t.Errorf("docs/protocol.md does not name `%s` (declared at %s)", name, names[name])
	}
}

// TestProtocolCheckBites shows the check finds what it must: the names
// it knows include each kind, and a name taken out of the doc is missed.
func TestProtocolCheckBites(t *testing.T) {
	names := declaredNames(t)
	for _, want := range []string{
		"berth.Sandbox", "berth.agent.Session", "berth.session.Manager", // workflow types
		"berth.exec", "berth.snapshot", "berth.blob.write", "berth.session.create", // Updates
		"berth.sandbox", "berth.blob.read", "berth.run", // Queries
		"berth.reaper.reap", "berth.agent.message", "berth.session.ended", // Signals
	} {
		if _, ok := names[want]; !ok {
			t.Errorf("the names collected from the code lack %s", want)
		}
	}
	doc := strings.ReplaceAll(readProtocol(t), "`berth.exec`", "berth.exec")
	if got := missing(doc, names); !slices.Contains(got, "berth.exec") {
		t.Errorf("a doc without `berth.exec`: missing = %v, want it listed", got)
	}
}
