// Package calls holds the session manager's activities: what its
// workflow cannot do itself. A workflow can only signal another, so the
// manager sends its sessions Updates and Queries and asks their status
// through the server here; and it copies and deletes its sessions'
// stored conversations here, within the prefixes the agent owns.
//
// Register an Activities value on the manager's worker; the methods are
// the activities, under their names (UpdateWorkflow, QueryWorkflow,
// WorkflowStatuses, CopyBlobs, DeleteBlobs), which are in the histories
// of running managers. Errors go through temporalerr.To, the one
// place where they become Temporal errors.
package calls

import (
	"go.temporal.io/sdk/client"
	"gocloud.dev/blob"
)

// Activities are the session manager's activities on one worker.
type Activities struct {
	// Client sends Updates and Queries to other workflows.
	Client client.Client
	// Outputs is the blob store the agent's conversations are kept in.
	Outputs *blob.Bucket
}
