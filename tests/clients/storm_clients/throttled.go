package main

// throttled is a client whose requests outrun its API Priority and Fairness level: many
// goroutines GET one DataJob, each request holding its seat for --hold (the server must run
// with --test-delays, and a small --max-inflight-per-level and --request-timeout, so that
// queued requests time out into 429 Too Many Requests). Like client-go, it waits the 429's
// Retry-After before the next attempt.

import (
	"context"
	"flag"
	"net/http"
	"strconv"
	"sync"
	"time"
)

func throttledFlags(fs *flag.FlagSet) runFunc {
	ns := fs.String("namespace", "default", "namespace of the DataJob")
	target := fs.String("name", "sync-state", "DataJob read (created when absent)")
	concurrency := fs.Int("concurrency", 16, "concurrent requests")
	hold := fs.Duration("hold", 200*time.Millisecond, "X-Stormwatch-Test-Delay: server-side time each request takes")
	return func(ctx context.Context, cn connection, cnt *counts) error {
		c, err := cn.client(cnt)
		if err != nil {
			return err
		}
		if err := c.ensure(ctx, datajobs(*ns), datajob(*ns, *target)); err != nil {
			return err
		}
		c.header.Set("X-Stormwatch-Test-Delay", hold.String())
		var wg sync.WaitGroup
		for i := 0; i < *concurrency; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					resp, err := c.send(ctx, http.MethodGet, datajobs(*ns)+"/"+*target, "", nil)
					if err != nil {
						sleep(ctx, time.Second)
						continue
					}
					retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
					resp.Body.Close()
					if resp.StatusCode == http.StatusTooManyRequests {
						sleep(ctx, time.Duration(retry)*time.Second)
					}
				}
			}()
		}
		wg.Wait()
		return nil
	}
}
