package untar

import (
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// dirs resolves directories of the tree one component at a time, never
// following a link, and keeps open the chain of directories leading to
// the last one: tar streams list a directory's entries together, so most
// entries need no lookup at all, and at most one fd per level is open.
type dirs struct {
	root  string // the tree's path on the host, for messages
	stack []openDirEnt
	// strict: a component that is not a directory is an error rather
	// than replaced by one.
	strict bool
	// made, if not nil, is called with each directory made on the way.
	made func(fd int) error
}

type openDirEnt struct {
	rel string // "." for the tree's top
	fd  int
}

func newDirs(fd int, root string) *dirs {
	return &dirs{root: root, stack: []openDirEnt{{rel: ".", fd: fd}}}
}

func (d *dirs) close() {
	for _, e := range d.stack {
		unix.Close(e.fd)
	}
	d.stack = nil
}

func (d *dirs) path(rel string) string { return filepath.Join(d.root, filepath.FromSlash(rel)) }

// open returns the directory rel of the tree, made where missing. The fd
// stays owned by d: it is valid until the next call.
func (d *dirs) open(rel string) (int, error) {
	// Keep the longest open prefix of rel.
	keep := 1
	for keep < len(d.stack) && within(rel, d.stack[keep].rel) {
		keep++
	}
	for _, e := range d.stack[keep:] {
		unix.Close(e.fd)
	}
	d.stack = d.stack[:keep]
	cur := d.stack[keep-1]
	if cur.rel == rel {
		return cur.fd, nil
	}
	rest := rel
	if cur.rel != "." {
		rest = rel[len(cur.rel)+1:]
	}
	for _, name := range strings.Split(rest, "/") {
		next := name
		if cur.rel != "." {
			next = cur.rel + "/" + name
		}
		fd, made, err := openDir(cur.fd, name, d.strict)
		if err == nil && made && d.made != nil {
			if err = d.made(fd); err != nil {
				unix.Close(fd)
			}
		}
		if err != nil {
			return -1, &os.PathError{Op: "mkdir", Path: d.path(next), Err: err}
		}
		cur = openDirEnt{rel: next, fd: fd}
		d.stack = append(d.stack, cur)
	}
	return cur.fd, nil
}

// openFresh opens the directory rel of the tree on an fd of the caller's,
// leaving the chain d keeps as it is.
func (d *dirs) openFresh(rel string) (int, error) {
	fd, err := unix.Dup(d.stack[0].fd)
	if err != nil {
		return -1, err
	}
	if rel == "." {
		return fd, nil
	}
	for _, name := range strings.Split(rel, "/") {
		next, _, err := openDir(fd, name, d.strict)
		unix.Close(fd)
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: d.path(rel), Err: err}
		}
		fd = next
	}
	return fd, nil
}

// within reports whether rel is dir or below it.
func within(rel, dir string) bool {
	return rel == dir || strings.HasPrefix(rel, dir+"/") || dir == "."
}
