package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/berth-dev/berth/provider"
)

// memWorkspace is a workspace in memory that records its writes, for
// the fuzz target: no command runs.
type memWorkspace struct {
	files  map[string]provider.File
	writes int // WriteFiles and Remove calls
}

func (m *memWorkspace) Exec(string, ExecOptions) (ExecResult, error) {
	return ExecResult{}, errors.New("no commands here")
}

func (m *memWorkspace) ReadFile(p string) ([]byte, error) {
	f, ok := m.files[path.Clean(p)]
	if !ok {
		return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	}
	return f.Data, nil
}

func (m *memWorkspace) WriteFiles(files ...provider.File) error {
	m.writes++
	for _, f := range files {
		m.files[path.Clean(f.Path)] = f
	}
	return nil
}

func (m *memWorkspace) ListFiles(dir string) ([]provider.FileInfo, error) {
	dir = path.Clean(dir)
	seen := map[string]provider.FileInfo{}
	for p, f := range m.files {
		rel := p
		if dir != "." {
			var ok bool
			if rel, ok = strings.CutPrefix(p, dir+"/"); !ok {
				continue
			}
		}
		name, rest, sub := strings.Cut(rel, "/")
		if sub && rest != "" {
			seen[name] = provider.FileInfo{Name: name, Mode: fs.ModeDir | 0o755}
		} else {
			seen[name] = provider.FileInfo{Name: name, Size: int64(len(f.Data)), Mode: f.Mode}
		}
	}
	if len(seen) == 0 && dir != "." {
		return nil, fmt.Errorf("%s: %w", dir, fs.ErrNotExist)
	}
	var out []provider.FileInfo
	for _, fi := range seen {
		out = append(out, fi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (m *memWorkspace) Remove(p string) error {
	m.writes++
	delete(m.files, path.Clean(p))
	return nil
}
