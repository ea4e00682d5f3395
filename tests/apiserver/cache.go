package main

// The watch cache: what kube-apiserver's cacher (k8s.io/apiserver/pkg/storage/cacher) serves
// LIST and GET with a non-empty resourceVersion from. One etcd watch on /registry/ (the
// apiserver has one per resource; one for all is the same data) feeds an in-memory copy of
// every key, and the cache's resourceVersion is the revision of the last event it applied.
//
//   - resourceVersion="0": whatever the cache holds now, at the cache's resourceVersion
//     (possibly behind etcd: that is the point of rv=0), never paginated (limit is ignored,
//     no continue token: the 1.28 cacher cannot page);
//   - resourceVersion=N (match "" or NotOlderThan, no limit): waits until the cache has seen
//     revision N, at most 3 s (waitUntilFreshAndBlock), else 504 "Too large resource version".
//
// 1.28's cacher returns a LIST's items in its store's (map) order; this one sorts them by key,
// like etcd, so tests are deterministic.

import (
	"context"
	"log"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/mvcc/mvccpb"
)

type cachedKV struct {
	value  []byte
	modRev int64
}

type watchCache struct {
	mu   sync.Mutex
	cond *sync.Cond
	rev  int64
	kvs  map[string]cachedKV
}

const registryPrefix = "/registry/"

// startWatchCache lists /registry/ and keeps the copy current with a watch, re-listing if
// the watch fails (e.g. compaction). It returns once the first list is loaded.
func startWatchCache(ctx context.Context, st *store) (*watchCache, error) {
	c := &watchCache{kvs: map[string]cachedKV{}}
	c.cond = sync.NewCond(&c.mu)
	rev, err := c.relist(ctx, st)
	if err != nil {
		return nil, err
	}
	go func() {
		for ctx.Err() == nil {
			c.follow(ctx, st, rev)
			if ctx.Err() != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
			if rev, err = c.relist(ctx, st); err != nil {
				log.Printf("watch cache: relist: %v", err)
			}
		}
	}()
	return c, nil
}

func (c *watchCache) relist(ctx context.Context, st *store) (int64, error) {
	resp, err := st.cli.Get(ctx, registryPrefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	kvs := make(map[string]cachedKV, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		kvs[string(kv.Key)] = cachedKV{kv.Value, kv.ModRevision}
	}
	c.mu.Lock()
	c.kvs, c.rev = kvs, resp.Header.Revision
	c.cond.Broadcast()
	c.mu.Unlock()
	return resp.Header.Revision, nil
}

// follow applies watch events after rev until the watch ends.
func (c *watchCache) follow(ctx context.Context, st *store, rev int64) {
	wch := st.cli.Watch(clientv3.WithRequireLeader(ctx), registryPrefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for resp := range wch {
		if err := resp.Err(); err != nil {
			log.Printf("watch cache: %v", err)
			return
		}
		c.mu.Lock()
		for _, ev := range resp.Events {
			k := string(ev.Kv.Key)
			if ev.Type == mvccpb.DELETE {
				delete(c.kvs, k)
			} else {
				c.kvs[k] = cachedKV{ev.Kv.Value, ev.Kv.ModRevision}
			}
			if ev.Kv.ModRevision > c.rev {
				c.rev = ev.Kv.ModRevision
			}
		}
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

// waitFresh waits until the cache has seen revision rev (at most 3 s, as the cacher's
// blockTimeout). It returns the cache's revision and whether it got there.
func (c *watchCache) waitFresh(rev int64) (int64, bool) {
	deadline := time.Now().Add(3 * time.Second)
	timer := time.AfterFunc(3*time.Second, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer timer.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.rev < rev && time.Now().Before(deadline) {
		c.cond.Wait()
	}
	return c.rev, c.rev >= rev
}

// list returns the objects under prefix accepted by keep, sorted by key, and the cache's
// revision.
func (c *watchCache) list(prefix string, keep func(object) bool) ([]object, int64, error) {
	c.mu.Lock()
	rev := c.rev
	var keys []string
	for k := range c.kvs {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	vals := make([]cachedKV, len(keys))
	for i, k := range keys {
		vals[i] = c.kvs[k]
	}
	c.mu.Unlock()
	var out []object
	for _, kv := range vals {
		obj, err := decodeObject(kv.value, kv.modRev)
		if err != nil {
			return nil, 0, err
		}
		if keep(obj) {
			out = append(out, obj)
		}
	}
	return out, rev, nil
}

// get returns one object from the cache.
func (c *watchCache) get(key string) (object, error) {
	c.mu.Lock()
	kv, ok := c.kvs[key]
	c.mu.Unlock()
	if !ok {
		return nil, errNotFound
	}
	return decodeObject(kv.value, kv.modRev)
}
