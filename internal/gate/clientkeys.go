package gate

import (
	"hash/maphash"
	"net/netip"
	"sync"
)

// clientKeys are the in-memory and counter keys a client network is known
// by, derived from the HMAC of its address: one HMAC and a few strings per
// address, kept for the next request from it rather than made anew.
type clientKeys struct {
	digest   string // the address's HMAC, or "unresolved"
	pre      string // the pre-authentication bucket
	authFail string // keys that failed to authenticate
	check    string // the per-IP ceiling of /v1/check
}

func newClientKeys(digest string) *clientKeys {
	return &clientKeys{digest: digest, pre: "pre:" + digest, authFail: "authfail:" + digest, check: "ip:check:" + digest}
}

// route is the per-IP ceiling's key for route.
func (k *clientKeys) route(route string) string {
	if route == "check" {
		return k.check
	}
	return "ip:" + route + ":" + k.digest
}

// clientKeyCache holds clientKeys by address, bounded (clientKeyShards ×
// clientKeysPerShard entries, an arbitrary one dropped when a shard is
// full) whatever the number of addresses seen. Safe for concurrent use.
type clientKeyCache struct {
	seed       maphash.Seed
	unresolved *clientKeys
	shards     [clientKeyShards]struct {
		mu sync.RWMutex // a hit only reads: one client's requests never wait for each other
		m  map[netip.Addr]*clientKeys
	}
}

const (
	clientKeyShards    = 16
	clientKeysPerShard = 1024
)

func newClientKeyCache() *clientKeyCache {
	c := &clientKeyCache{seed: maphash.MakeSeed(), unresolved: newClientKeys("unresolved")}
	for i := range c.shards {
		c.shards[i].m = make(map[netip.Addr]*clientKeys)
	}
	return c
}

// get returns ip's keys, making them with digest when they are not held.
func (c *clientKeyCache) get(ip netip.Addr, digest func(netip.Addr) string) *clientKeys {
	if !ip.IsValid() {
		return c.unresolved
	}
	a := ip.As16()
	sh := &c.shards[maphash.Bytes(c.seed, a[:])%clientKeyShards]
	sh.mu.RLock()
	k := sh.m[ip]
	sh.mu.RUnlock()
	if k != nil {
		return k
	}
	k = newClientKeys(digest(ip))
	sh.mu.Lock()
	if len(sh.m) >= clientKeysPerShard {
		for old := range sh.m {
			delete(sh.m, old)
			break
		}
	}
	sh.m[ip] = k
	sh.mu.Unlock()
	return k
}
