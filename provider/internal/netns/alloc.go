package netns

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// record is what StateDir keeps of one sandbox's link: the slot file
// slot-<n> holds it, and the file id-<sandbox id> names the slot. The
// slot file is made first and removed last.
type record struct {
	ID     string           `json:"id"`
	Slot   int              `json:"slot"`
	Policy provider.Network `json:"policy"`
}

func slotFile(dir string, slot int) string {
	return filepath.Join(dir, "slot-"+strconv.Itoa(slot))
}
func idFile(dir, id string) string { return filepath.Join(dir, "id-"+id) }

// slots is how many /30s the pool holds, the first (kept) included.
func (m *Manager) slots() int {
	return 1 << (32 - m.cfg.Pool.Bits() - 2)
}

// addrs are slot's uplink and sandbox addresses.
func (m *Manager) addrs(slot int) (uplink, sandbox netip.Addr) {
	base := m.cfg.Pool.Addr().As4()
	n := binary.BigEndian.Uint32(base[:]) + uint32(slot)*4
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], n+1)
	uplink = netip.AddrFrom4(b)
	binary.BigEndian.PutUint32(b[:], n+2)
	return uplink, netip.AddrFrom4(b)
}

// slotOf is the slot whose sandbox end is addr, or -1.
func (m *Manager) slotOf(addr netip.Addr) int {
	if !addr.Is4() || !m.cfg.Pool.Contains(addr) {
		return -1
	}
	a, b := addr.As4(), m.cfg.Pool.Addr().As4()
	off := binary.BigEndian.Uint32(a[:]) - binary.BigEndian.Uint32(b[:])
	if off%4 != 2 || off < 4 {
		return -1
	}
	return int(off / 4)
}

// claim takes a free slot for id and records it with policy.
func (m *Manager) claim(id string, policy provider.Network) (*record, error) {
	data := func(slot int) []byte {
		b, _ := json.Marshal(record{ID: id, Slot: slot, Policy: policy})
		return b
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.slots()
	for i := range n - 1 {
		slot := 1 + (m.next+i)%(n-1)
		f, err := os.OpenFile(slotFile(m.cfg.StateDir, slot), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		_, err = f.Write(data(slot))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = writeAtomic(idFile(m.cfg.StateDir, id), []byte(strconv.Itoa(slot)))
		}
		if err != nil {
			os.Remove(slotFile(m.cfg.StateDir, slot))
			return nil, err
		}
		m.next = slot
		return &record{ID: id, Slot: slot, Policy: policy}, nil
	}
	return nil, fmt.Errorf("%w: network address pool %s is full (%d sandboxes)", errdefs.ErrQuota, m.cfg.Pool, n-1)
}

// lookup reads the record of id; ErrNotFound when it has none.
func (m *Manager) lookup(id string) (*record, error) {
	b, err := os.ReadFile(idFile(m.cfg.StateDir, id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: sandbox %s has no network link", errdefs.ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	slot, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("network record of %s: %w", id, err)
	}
	rec, err := m.readSlot(slot)
	if err != nil {
		return nil, err
	}
	if rec.ID != id {
		return nil, fmt.Errorf("%w: sandbox %s has no network link (its slot is %s's)", errdefs.ErrNotFound, id, rec.ID)
	}
	return rec, nil
}

func (m *Manager) readSlot(slot int) (*record, error) {
	b, err := os.ReadFile(slotFile(m.cfg.StateDir, slot))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: network slot %d is free", errdefs.ErrNotFound, slot)
	}
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("network slot %d: %w", slot, err)
	}
	return &rec, nil
}

// records are every slot taken.
func (m *Manager) records() ([]*record, error) {
	entries, err := os.ReadDir(m.cfg.StateDir)
	if err != nil {
		return nil, err
	}
	var recs []*record
	for _, e := range entries {
		s, ok := strings.CutPrefix(e.Name(), "slot-")
		if !ok {
			continue
		}
		slot, err := strconv.Atoi(s)
		if err != nil {
			continue
		}
		if rec, err := m.readSlot(slot); err == nil {
			recs = append(recs, rec)
		} else {
			// A slot file that cannot be read is one a crash cut short.
			recs = append(recs, &record{Slot: slot})
		}
	}
	return recs, nil
}

// release frees rec's slot.
func (m *Manager) release(rec *record) error {
	if rec.ID != "" {
		if err := os.Remove(idFile(m.cfg.StateDir, rec.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(slotFile(m.cfg.StateDir, rec.Slot)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// rewrite records rec's new policy.
func (m *Manager) rewrite(rec *record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return writeAtomic(slotFile(m.cfg.StateDir, rec.Slot), b)
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
