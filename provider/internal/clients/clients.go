// Package clients keeps one sandboxd client per sandbox, shared by every
// handle on it, so that handles reuse the daemon's connections.
package clients

import (
	"sync"

	"github.com/berth-dev/berth/sandboxd"
)

// Cache holds the clients of a provider's sandboxes, by sandbox id. The
// zero value is empty and ready.
type Cache struct {
	mu sync.Mutex
	m  map[string]*sandboxd.Client
}

// Get returns the client of sandbox id, made by dial the first time.
func (c *Cache) Get(id string, dial func() *sandboxd.Client) *sandboxd.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.m[id]
	if !ok {
		cl = dial()
		c.set(id, cl)
	}
	return cl
}

// Adopt makes cl the client of sandbox id, closing the one it replaces.
func (c *Cache) Adopt(id string, cl *sandboxd.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[id]; ok {
		old.Close()
	}
	c.set(id, cl)
}

func (c *Cache) set(id string, cl *sandboxd.Client) {
	if c.m == nil {
		c.m = map[string]*sandboxd.Client{}
	}
	c.m[id] = cl
}

// Forget closes and drops the client of sandbox id.
func (c *Cache) Forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.m[id]; ok {
		cl.Close()
		delete(c.m, id)
	}
}

// Close closes and drops every client.
func (c *Cache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, cl := range c.m {
		cl.Close()
		delete(c.m, id)
	}
}
