package agentcoreinit

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports: the relay imports remoteinit (for the daemon's
// configuration) and the standard library alone: it runs in the
// session, and must link no host code.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(imp, "/")
		if !strings.Contains(first, ".") || imp == "github.com/berth-dev/berth/provider/remote/remoteinit" {
			continue
		}
		t.Errorf("agentcoreinit imports %s", imp)
	}
}
