package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/google/nftables"
)

// Leftovers lists what the kernel and StateDir still hold of sandbox
// id's network: its veth, its table, its slot records. After Detach,
// or a Sweep that found it dead, there is nothing; providers' tests
// check that their Destroy and their sweeps leave nothing.
func (m *Manager) Leftovers(id string) ([]string, error) {
	var left []string
	if _, err := m.nl.LinkByName(vethName(id)); err == nil {
		left = append(left, "veth "+vethName(id))
	}
	c, err := m.nft()
	if err != nil {
		return nil, err
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	for _, t := range tables {
		if t.Name == tableName(id) {
			left = append(left, "table "+t.Name)
		}
	}
	if _, err := os.Stat(idFile(m.cfg.StateDir, id)); err == nil {
		left = append(left, "record "+idFile(m.cfg.StateDir, id))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	recs, err := m.records()
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if rec.ID == id {
			left = append(left, "slot "+slotFile(m.cfg.StateDir, rec.Slot))
		}
	}
	return left, nil
}
