package main

// conflict reproduces seed 004's 409 storm: several workers reconcile the same DataJobs and
// write their status with client.Status().Update() from a shared cache that a LIST refreshes
// only every --cache-refresh (an informer that lags). Per object, the first write after a
// refresh wins; every other worker's write carries the stale resourceVersion and gets 409
// Conflict, and is simply retried at the next tick from the same stale cache. Per object the
// write rate stays at workers x rate (3/s by default, below update_loop's 5/s).

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"net/http"
	"sync"
	"time"
)

func conflictFlags(fs *flag.FlagSet) runFunc {
	ns := fs.String("namespace", "default", "namespace of the DataJobs")
	objects := fs.Int("objects", 12, "DataJobs written (report-00 ...), created when absent")
	workers := fs.Int("workers-per-object", 2, "workers writing each object")
	rate := fs.Float64("rate", 1.5, "status writes/s of each worker")
	refresh := fs.Duration("cache-refresh", time.Second, "how often the shared cache is re-listed")
	return func(ctx context.Context, cn connection, cnt *counts) error {
		c, err := cn.client(cnt)
		if err != nil {
			return err
		}
		var names []string
		for i := 0; i < *objects; i++ {
			names = append(names, fmt.Sprintf("report-%02d", i))
			if err := c.ensure(ctx, datajobs(*ns), datajob(*ns, names[i])); err != nil {
				return err
			}
		}
		cache := &listCache{}
		if err := cache.refresh(ctx, c, datajobs(*ns)+"?resourceVersion=0"); err != nil {
			return err
		}
		go func() {
			for sleep(ctx, *refresh) {
				_ = cache.refresh(ctx, c, datajobs(*ns)+"?resourceVersion=0")
			}
		}()
		var wg sync.WaitGroup
		for _, n := range names {
			for w := 0; w < *workers; w++ {
				wg.Add(1)
				go func(name string, worker int) {
					defer wg.Done()
					period := time.Duration(float64(time.Second) / *rate)
					if !sleep(ctx, time.Duration(rand.Int63n(int64(period)))) {
						return
					}
					for {
						obj := cache.get(name)
						if obj != nil {
							obj["status"] = object{"lastReconciled": time.Now().UTC().Format(time.RFC3339Nano),
								"reconciledBy": fmt.Sprintf("worker-%d", worker)}
							body, _ := json.Marshal(obj)
							// 200 or 409 alike: the cache is not updated until the next refresh.
							_, _, _ = c.do(ctx, http.MethodPut, datajobs(*ns)+"/"+name+"/status", "application/json", body)
						}
						if !sleep(ctx, period) {
							return
						}
					}
				}(n, w)
			}
		}
		wg.Wait()
		return nil
	}
}

// listCache holds the items of the last LIST by name; get returns a private copy.
type listCache struct {
	mu    sync.Mutex
	items map[string][]byte
}

func (lc *listCache) refresh(ctx context.Context, c *client, path string) error {
	code, list, err := c.getJSON(ctx, path)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("LIST %s: HTTP %d", path, code)
	}
	fresh := map[string][]byte{}
	for _, it := range items(list) {
		fresh[name(it)], _ = json.Marshal(it)
	}
	lc.mu.Lock()
	lc.items = fresh
	lc.mu.Unlock()
	return nil
}

func (lc *listCache) get(name string) object {
	lc.mu.Lock()
	raw := lc.items[name]
	lc.mu.Unlock()
	var obj object
	if json.Unmarshal(raw, &obj) != nil {
		return nil
	}
	return obj
}
