package remoteinit

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports: the daemon's remote mode imports sandboxd, x/sys and the
// standard library alone: it runs in the machine, and must link no host
// code.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(imp, "/")
		if !strings.Contains(first, ".") || imp == "golang.org/x/sys/unix" || imp == "github.com/berth-dev/berth/sandboxd" {
			continue
		}
		t.Errorf("remoteinit imports %s", imp)
	}
}
