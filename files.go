package berth

import (
	"context"
	"io"

	"github.com/berth-dev/berth/transfer"
	"github.com/berth-dev/berth/workflows"
)

// importTree unpacks the tar stream r into the workspace of sandbox
// sandboxID, over what is there: how directories and large files get
// in, whatever their size. The stream goes to the worker through the
// server, in parts; the sandbox's workflow then imports it whole, or
// nothing of it when any entry is bad.
func (c *Client) importTree(ctx context.Context, sandboxID string, r io.Reader) error {
	key, parts, err := c.Upload(ctx, sandboxID, r)
	if err != nil {
		return err
	}
	defer c.DeleteStream(context.WithoutCancel(ctx), sandboxID, key)
	return c.update(ctx, sandboxID, "", workflows.UpdateImport, nil, workflows.ImportRequest{Blob: key, Parts: parts})
}

// exportTree writes a tar stream of the file or directory at path in the
// workspace of sandbox sandboxID to w, its entries named from path's base
// name (see provider.PathExporter). The caller must treat it as hostile.
func (c *Client) exportTree(ctx context.Context, sandboxID, path string, w io.Writer) error {
	var out transfer.Output
	if err := c.update(ctx, sandboxID, "", workflows.UpdateExport, &out, workflows.PathRequest{Path: path}); err != nil {
		return err
	}
	if out.Blob != "" {
		defer c.DeleteStream(context.WithoutCancel(ctx), sandboxID, out.Blob)
	}
	return c.WriteOutput(ctx, sandboxID, out, 0, w)
}

// readFile writes the file at path in the workspace of sandbox sandboxID
// to w, whole.
func (c *Client) readFile(ctx context.Context, sandboxID, path string, w io.Writer) error {
	var out transfer.Output
	if err := c.update(ctx, sandboxID, "", workflows.UpdateReadFile, &out, workflows.PathRequest{Path: path}); err != nil {
		return err
	}
	return c.WriteOutput(ctx, sandboxID, out, 0, w)
}
