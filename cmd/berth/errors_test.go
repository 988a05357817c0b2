package main

import (
	"fmt"
	"testing"

	"go.temporal.io/api/serviceerror"
)

// An unknown namespace is the caller's mistake, said so: NotFound and
// the namespace, not the server's Internal.
func TestOneLineNamespaceNotFound(t *testing.T) {
	err := fmt.Errorf("list sandboxes: %w", serviceerror.NewNamespaceNotFound("nope"))
	want := `NotFound: namespace "nope" does not exist on the Temporal server (--namespace, $TEMPORAL_NAMESPACE, or the profile's)`
	if got := oneLine(err); got != want {
		t.Errorf("oneLine: %q, want %q", got, want)
	}
}
