package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// What users read spells "canceled" one way, as Go and Temporal do:
// every string literal of berth's code, README and docs (tests and the test
// kits aside: their messages are for berth's developers; and the fakes of
// hosted services, which answer in the services' words).
func TestOneSpellingOfCanceled(t *testing.T) {
	british := regexp.MustCompile(`(?i)cancell(ed|ing)`)
	root := filepath.Join("..", "..")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		text, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if m := british.FindString(string(text)); m != "" {
			t.Errorf("%s spells %q; want canceled", name, m)
		}
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" ||
			strings.HasSuffix(d.Name(), "test") || d.Name() == "testkit" ||
			// A fake answers in its service's words ("session cancelled").
			strings.HasSuffix(d.Name(), "fake")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && british.MatchString(lit.Value) {
				t.Errorf("%s: %s; want canceled", fset.Position(lit.Pos()), lit.Value)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
