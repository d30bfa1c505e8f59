package cache

import (
	"sync"

	"github.com/navemesh/nave/xds/mesh"
	"github.com/navemesh/nave/xds/proxy"
	"github.com/navemesh/nave/xds/resource"
)

// resultCache holds, per cache key, the newest result generated for the
// mesh in any State, so that generation can start from it even when the
// State just before skipped that key (States published faster than
// proxies asked). Entries of keys nobody asked for lately are dropped.
type resultCache struct {
	mu    sync.Mutex
	byKey map[proxy.Key]cachedResult
}

type cachedResult struct {
	version uint64
	snap    *mesh.Snapshot
	res     *resource.ProxyResources
}

func (c *resultCache) get(k proxy.Key) (cachedResult, bool) {
	if c == nil {
		return cachedResult{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.byKey[k]
	return r, ok
}

func (c *resultCache) put(k proxy.Key, r cachedResult) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey = map[proxy.Key]cachedResult{}
	}
	if old, ok := c.byKey[k]; !ok || old.version < r.version {
		c.byKey[k] = r
	}
}

// prune drops entries older than version minus keep.
func (c *resultCache) prune(version, keep uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, r := range c.byKey {
		if r.version+keep < version {
			delete(c.byKey, k)
		}
	}
}
