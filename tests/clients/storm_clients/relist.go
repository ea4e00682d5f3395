package main

// relist is an informer stuck in a relist loop (STORMS.md §6): it LISTs a collection (pages
// of --page, as reflectors do), WATCHes from the list's resourceVersion with a short
// timeoutSeconds, and treats the end of every watch as a reason to LIST again instead of
// resuming the watch from the last resourceVersion it saw.

import (
	"context"
	"flag"
	"io"
	"net/http"
	"strconv"
)

func relistFlags(fs *flag.FlagSet) runFunc {
	ns := fs.String("namespace", "default", "namespace of the DataJobs listed and watched")
	watchTimeout := fs.Int("watch-timeout", 1, "timeoutSeconds of each WATCH")
	page := fs.Int("page", 500, "LIST limit")
	return func(ctx context.Context, cn connection, cnt *counts) error {
		c, err := cn.client(cnt)
		if err != nil {
			return err
		}
		for ctx.Err() == nil {
			rv, err := listAll(ctx, c, datajobs(*ns), *page)
			if err != nil {
				sleep(ctx, 100e6)
				continue
			}
			resp, err := c.send(ctx, http.MethodGet, datajobs(*ns)+"?watch=1&allowWatchBookmarks=true&resourceVersion="+rv+
				"&timeoutSeconds="+strconv.Itoa(*watchTimeout), "", nil)
			if err != nil {
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return nil
	}
}
