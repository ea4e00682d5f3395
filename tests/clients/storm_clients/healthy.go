package main

// The healthy traffic every control plane carries, which no detector may flag: a
// controller-manager's periodic resync, kubelets' lease heartbeats, an informer's start-up.

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// resync creates --pods pods, then every --interval lists them from the watch cache and
// writes each one's status once, back to back: the burst of a controller's periodic resync.
func resyncFlags(fs *flag.FlagSet) runFunc {
	ns := fs.String("namespace", "default", "namespace of the pods")
	pods := fs.Int("pods", 50, "pods (web-00 ...), created when absent")
	interval := fs.Duration("interval", 30*time.Second, "resync period")
	return func(ctx context.Context, cn connection, cnt *counts) error {
		c, err := cn.client(cnt)
		if err != nil {
			return err
		}
		collection := "/api/v1/namespaces/" + *ns + "/pods"
		for i := 0; i < *pods; i++ {
			pod := object{"apiVersion": "v1", "kind": "Pod", "metadata": object{"name": fmt.Sprintf("web-%02d", i)},
				"spec": object{"containers": []object{{"name": "web", "image": "nginx:1.25"}}}}
			if err := c.ensure(ctx, collection, pod); err != nil {
				return err
			}
		}
		for {
			code, list, err := c.getJSON(ctx, collection+"?resourceVersion=0")
			if err == nil && code == http.StatusOK {
				for _, pod := range items(list) {
					pod["status"] = object{"phase": "Running", "conditions": []object{{"type": "Ready", "status": "True",
						"lastProbeTime": time.Now().UTC().Format(time.RFC3339)}}}
					body, _ := json.Marshal(pod)
					_, _, _ = c.do(ctx, http.MethodPut, collection+"/"+name(pod)+"/status", "application/json", body)
				}
			}
			if !sleep(ctx, *interval) {
				return nil
			}
		}
	}
}

// kubelets runs one heartbeat per --node NAME=CERT:KEY, each with its own client certificate
// and connection: register the Node, then renew its Lease in kube-node-lease every --interval
// (PUT with the last Lease the server returned), starting at a random point of the period.
func kubeletsFlags(fs *flag.FlagSet) runFunc {
	var nodes stringList
	fs.Var(&nodes, "node", "NAME=CERT:KEY of one node (repeatable)")
	interval := fs.Duration("interval", 10*time.Second, "lease renewal period")
	return func(ctx context.Context, cn connection, cnt *counts) error {
		var wg sync.WaitGroup
		errs := make(chan error, len(nodes))
		for _, spec := range nodes {
			nodeName, files, ok := strings.Cut(spec, "=")
			cert, key, ok2 := strings.Cut(files, ":")
			if !ok || !ok2 {
				return fmt.Errorf("--node %q: expected NAME=CERT:KEY", spec)
			}
			node := cn
			node.tokenFile, node.certFile, node.keyFile = "", cert, key
			c, err := node.client(cnt)
			if err != nil {
				return err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := heartbeat(ctx, c, nodeName, *interval); err != nil && ctx.Err() == nil {
					errs <- fmt.Errorf("%s: %w", nodeName, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
}

func heartbeat(ctx context.Context, c *client, nodeName string, interval time.Duration) error {
	if !sleep(ctx, time.Duration(rand.Int63n(int64(interval)))) {
		return nil
	}
	if err := c.ensure(ctx, "/api/v1/nodes", object{"apiVersion": "v1", "kind": "Node", "metadata": object{"name": nodeName}}); err != nil {
		return err
	}
	leases := "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
	lease := object{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": object{"name": nodeName},
		"spec": object{"holderIdentity": nodeName, "leaseDurationSeconds": 40}}
	if err := c.ensure(ctx, leases, lease); err != nil {
		return err
	}
	code, cur, err := c.getJSON(ctx, leases+"/"+nodeName)
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("GET lease: HTTP %d %v", code, err)
	}
	for sleep(ctx, interval) {
		spec, _ := cur["spec"].(object)
		if spec == nil {
			spec = object{}
			cur["spec"] = spec
		}
		spec["renewTime"] = time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00")
		body, _ := json.Marshal(cur)
		code, data, err := c.do(ctx, http.MethodPut, leases+"/"+nodeName, "application/json", body)
		switch {
		case err != nil:
			continue
		case code == http.StatusOK:
			_ = json.Unmarshal(data, &cur)
		default: // e.g. 409: re-read, as the kubelet's lease controller does
			if code, fresh, err := c.getJSON(ctx, leases+"/"+nodeName); err == nil && code == http.StatusOK {
				cur = fresh
			}
		}
	}
	return nil
}

// informer starts one reflector per --collection: a LIST in pages of --page, then one WATCH
// from the list's resourceVersion with a timeoutSeconds of 5-10 min (client-go's choice),
// resumed from the last resourceVersion it saw if it ever ends.
func informerFlags(fs *flag.FlagSet) runFunc {
	var collections stringList
	fs.Var(&collections, "collection", "collection path to list and watch, e.g. /api/v1/configmaps (repeatable)")
	page := fs.Int("page", 500, "LIST limit")
	return func(ctx context.Context, cn connection, cnt *counts) error {
		c, err := cn.client(cnt)
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		for _, path := range collections {
			wg.Add(1)
			go func(path string) {
				defer wg.Done()
				rv, err := listAll(ctx, c, path, *page)
				if err != nil {
					return
				}
				for ctx.Err() == nil {
					timeout := 300 + rand.Intn(300)
					rv = watchFrom(ctx, c, fmt.Sprintf("%s?watch=1&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%d",
						path, rv, timeout), rv)
				}
			}(path)
		}
		wg.Wait()
		return nil
	}
}

// listAll LISTs a collection in pages and returns the list's resourceVersion.
func listAll(ctx context.Context, c *client, path string, page int) (string, error) {
	cont := ""
	for {
		q := fmt.Sprintf("%s?limit=%d", path, page)
		if cont != "" {
			q += "&continue=" + url.QueryEscape(cont)
		}
		code, list, err := c.getJSON(ctx, q)
		if err != nil {
			return "", err
		}
		if code != http.StatusOK {
			return "", fmt.Errorf("LIST %s: HTTP %d", path, code)
		}
		meta := metadata(list)
		cont, _ = meta["continue"].(string)
		if cont == "" {
			rv, _ := meta["resourceVersion"].(string)
			return rv, nil
		}
	}
}

// watchFrom streams one WATCH and returns the last resourceVersion seen (rv if none).
func watchFrom(ctx context.Context, c *client, path, rv string) string {
	resp, err := c.send(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		sleep(ctx, time.Second)
		return rv
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Object object `json:"object"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			if v, ok := metadata(ev.Object)["resourceVersion"].(string); ok {
				rv = v
			}
		}
	}
	return rv
}
