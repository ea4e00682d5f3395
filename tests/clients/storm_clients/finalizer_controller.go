package main

// finalizer-controller reproduces seed 003's starved controller. It creates --objects
// DataJobs carrying its finalizer, then reconciles every --interval: it lists the namespace
// (from the watch cache, as an informer does), removes its finalizer from every DataJob being
// deleted (the object then goes away) and writes one live object's status (its steady
// reconcile traffic). While --pause-file exists it is blocked, as on an HTTP call without a
// timeout: no request at all. When the file goes away it catches up on the backlog.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"
)

const cleanupFinalizer = "batch.company.com/cleanup"

func finalizerControllerFlags(fs *flag.FlagSet) runFunc {
	ns := fs.String("namespace", "default", "namespace of the DataJobs")
	objects := fs.Int("objects", 40, "DataJobs created with the finalizer (export-00 ...)")
	interval := fs.Duration("interval", 500*time.Millisecond, "reconcile period")
	pauseFile := fs.String("pause-file", "", "blocked while this file exists")
	return func(ctx context.Context, cn connection, cnt *counts) error {
		c, err := cn.client(cnt)
		if err != nil {
			return err
		}
		for i := 0; i < *objects; i++ {
			if err := c.ensure(ctx, datajobs(*ns), datajob(*ns, fmt.Sprintf("export-%02d", i), cleanupFinalizer)); err != nil {
				return err
			}
		}
		next := 0 // round-robin over live objects for the status write
		for sleep(ctx, *interval) {
			if _, err := os.Stat(*pauseFile); *pauseFile != "" && err == nil {
				continue
			}
			code, list, err := c.getJSON(ctx, datajobs(*ns)+"?resourceVersion=0")
			if err != nil || code != http.StatusOK {
				continue
			}
			var live []string
			for _, it := range items(list) {
				meta := metadata(it)
				if _, deleting := meta["deletionTimestamp"]; !deleting {
					live = append(live, name(it))
					continue
				}
				if hasFinalizer(meta, cleanupFinalizer) {
					// The external clean-up is done: release the object.
					patch := []byte(`{"metadata":{"finalizers":null}}`)
					_, _, _ = c.do(ctx, http.MethodPatch, datajobs(*ns)+"/"+name(it), "application/merge-patch+json", patch)
				}
			}
			if len(live) > 0 {
				next = (next + 1) % len(live)
				status, _ := json.Marshal(object{"status": object{"lastReconciled": time.Now().UTC().Format(time.RFC3339Nano)}})
				_, _, _ = c.do(ctx, http.MethodPatch, datajobs(*ns)+"/"+live[next]+"/status", "application/merge-patch+json", status)
			}
		}
		return nil
	}
}

func hasFinalizer(meta object, f string) bool {
	list, _ := meta["finalizers"].([]interface{})
	for _, x := range list {
		if x == f {
			return true
		}
	}
	return false
}
