// Command runaway-operator reproduces the runaway UPDATE loop of STORMS.md §1: an operator
// whose Reconcile writes `batch.company.com/lastSyncTime` into its own DataJobs' annotations
// with client.Update() and is re-triggered by its own writes, with no backoff.
//
// Like a controller, it reads each object once (its informer's initial state), then PUTs each
// object back in a tight loop, using the object the previous PUT returned as its cache; a 409
// Conflict makes it re-read that object (a requeue with a fresh cache) and carry on. All
// requests go over ONE HTTP/2 connection (golang.org/x/net/http2.Transport, never HTTP/1.1),
// with its own service-account token and a controller-like User-Agent.
//
// With --wait-file, it opens the connection (the initial GETs), then waits until the file
// exists before starting the loop on the same connection: a test starts the agent in between,
// so the agent meets a connection whose HPACK state began before it was attached.
//
// On exit it prints one JSON line: {"requests":{"GET 200":n,"PUT 200":n,"PUT 409":n,...},"connections":k}.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
)

const annotation = "batch.company.com/lastSyncTime"

type client struct {
	server, token, userAgent string
	http                     *http.Client

	mu          sync.Mutex
	counts      map[string]int64
	connections int
}

func (c *client) count(key string) {
	c.mu.Lock()
	c.counts[key]++
	c.mu.Unlock()
}

// do sends one request and returns the status code and body; transport errors are counted
// as "METHOD error".
func (c *client) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.count(method + " error")
		return 0, nil, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.count(fmt.Sprintf("%s %d", method, resp.StatusCode))
	return resp.StatusCode, data, err
}

func main() {
	server := flag.String("server", "", "API server URL, e.g. https://127.0.0.1:6443")
	caFile := flag.String("ca", "", "CA certificate of the API server")
	tokenFile := flag.String("token-file", "", "file holding the service-account token")
	namespace := flag.String("namespace", "default", "namespace of the DataJobs")
	names := flag.String("names", "job-1", "comma-separated DataJob names (created first if absent)")
	duration := flag.Duration("duration", 10*time.Second, "how long to run the loop")
	maxWrites := flag.Int64("max-writes", 0, "stop after this many PUTs (0 = no limit)")
	userAgent := flag.String("user-agent", "datajob-operator/v1.4.2 (linux/amd64) kubernetes/4c1e2a7", "User-Agent header")
	waitFile := flag.String("wait-file", "", "after the initial GETs, wait until this file exists before looping")
	workers := flag.Int("workers", 1, "concurrent reconcile workers (objects are split among them), one connection")
	flag.Parse()
	if *server == "" || *caFile == "" || *tokenFile == "" {
		fmt.Fprintln(os.Stderr, "runaway-operator: --server, --ca and --token-file are required")
		os.Exit(2)
	}
	tok, err := os.ReadFile(*tokenFile)
	if err != nil {
		fatal(err)
	}
	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		fatal(fmt.Errorf("%s: no certificates", *caFile))
	}

	c := &client{server: strings.TrimRight(*server, "/"), token: strings.TrimSpace(string(tok)),
		userAgent: *userAgent, counts: map[string]int64{}}
	tlsCfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	c.http = &http.Client{Transport: &http2.Transport{
		TLSClientConfig: tlsCfg,
		// The dial hook counts connections: the test requires exactly one.
		DialTLS: func(network, addr string, cfg *tls.Config) (net.Conn, error) {
			c.mu.Lock()
			c.connections++
			c.mu.Unlock()
			d := &net.Dialer{Timeout: 10 * time.Second}
			conn, err := tls.DialWithDialer(d, network, addr, cfg)
			if err != nil {
				return nil, err
			}
			if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
				conn.Close()
				return nil, fmt.Errorf("server negotiated %q, not h2", p)
			}
			return conn, nil
		},
	}}

	ctx, cancel := context.WithCancel(context.Background())
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sigc; cancel() }()

	exit := 0
	if err := run(ctx, c, *namespace, strings.Split(*names, ","), *duration, *maxWrites, *waitFile, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "runaway-operator:", err)
		exit = 1
	}
	c.mu.Lock()
	out, _ := json.Marshal(map[string]interface{}{"requests": c.counts, "connections": c.connections})
	c.mu.Unlock()
	fmt.Println(string(out))
	os.Exit(exit)
}

func run(ctx context.Context, c *client, ns string, names []string, duration time.Duration, maxWrites int64, waitFile string, workers int) error {
	if workers < 1 {
		workers = 1
	}
	if workers > len(names) {
		workers = len(names)
	}
	base := "/apis/batch.company.com/v1/namespaces/" + ns + "/datajobs"
	cache := map[string]map[string]interface{}{}

	// Initial state, like an informer's: read every object, create the missing ones.
	for _, name := range names {
		obj, err := getOrCreate(ctx, c, base, ns, name)
		if err != nil {
			return err
		}
		cache[name] = obj
	}

	if waitFile != "" {
		for {
			if _, err := os.Stat(waitFile); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	// Like controller-runtime's MaxConcurrentReconciles: each worker owns some of the
	// objects and loops over them; all workers share the one HTTP/2 connection.
	deadline := time.Now().Add(duration)
	var writes int64
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		var mine []string
		for i := w; i < len(names); i += workers {
			mine = append(mine, names[i])
		}
		own := map[string]map[string]interface{}{}
		for _, name := range mine {
			own[name] = cache[name]
		}
		go func() { errs <- reconcileLoop(ctx, c, base, ns, mine, own, deadline, maxWrites, &writes) }()
	}
	var firstErr error
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// reconcileLoop writes the lastSyncTime annotation into each object and PUTs it back, as fast
// as the server answers: the runaway Reconcile of seed 000.
func reconcileLoop(ctx context.Context, c *client, base, ns string, names []string,
	cache map[string]map[string]interface{}, deadline time.Time, maxWrites int64, writes *int64) error {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, name := range names {
			if maxWrites > 0 && atomic.AddInt64(writes, 1) > maxWrites {
				return nil
			}
			obj := cache[name]
			meta, _ := obj["metadata"].(map[string]interface{})
			ann, _ := meta["annotations"].(map[string]interface{})
			if ann == nil {
				ann = map[string]interface{}{}
				meta["annotations"] = ann
			}
			ann[annotation] = time.Now().UTC().Format(time.RFC3339Nano)
			body, _ := json.Marshal(obj)
			code, data, err := c.do(ctx, http.MethodPut, base+"/"+name, body)
			switch {
			case err != nil:
				if ctx.Err() != nil {
					return nil
				}
				return err
			case code == http.StatusOK:
				var updated map[string]interface{}
				if err := json.Unmarshal(data, &updated); err != nil {
					return err
				}
				cache[name] = updated // the watch would deliver exactly this version
			case code == http.StatusConflict:
				// Requeue with a fresh read: no backoff, which is the bug being reproduced.
				fresh, err := getOrCreate(ctx, c, base, ns, name)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				cache[name] = fresh
			default:
				return fmt.Errorf("PUT %s: HTTP %d: %s", name, code, truncate(data))
			}
		}
	}
	return nil
}

func getOrCreate(ctx context.Context, c *client, base, ns, name string) (map[string]interface{}, error) {
	code, data, err := c.do(ctx, http.MethodGet, base+"/"+name, nil)
	if err != nil {
		return nil, err
	}
	if code == http.StatusNotFound {
		body, _ := json.Marshal(map[string]interface{}{
			"apiVersion": "batch.company.com/v1", "kind": "DataJob",
			"metadata": map[string]interface{}{"name": name, "namespace": ns},
			"spec":     map[string]interface{}{"image": "registry.company.com/datajob:1.4.2", "schedule": "*/5 * * * *"},
		})
		code, data, err = c.do(ctx, http.MethodPost, base, body)
		if err != nil {
			return nil, err
		}
		if code == http.StatusConflict { // created meanwhile by someone else
			code, data, err = c.do(ctx, http.MethodGet, base+"/"+name, nil)
			if err != nil {
				return nil, err
			}
		}
	}
	if code != http.StatusOK && code != http.StatusCreated {
		return nil, fmt.Errorf("reading %s: HTTP %d: %s", name, code, truncate(data))
	}
	var obj map[string]interface{}
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, err
	}
	return obj, nil
}

func truncate(b []byte) string {
	if len(b) > 300 {
		b = b[:300]
	}
	return string(b)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "runaway-operator:", err)
	os.Exit(1)
}
