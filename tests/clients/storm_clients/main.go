// Command storm-clients runs the clients of stormwatch's storm scenarios (STORMS.md) against
// an API server: each subcommand reproduces one incident's client, or one kind of healthy
// traffic the detectors must stay quiet on.
//
//	storm-clients conflict              many workers PUT /status from a lagging cache: 409 storm (§4)
//	storm-clients throttled             concurrent slow GETs against a small APF level: 429s (§4)
//	storm-clients finalizer-controller  a controller whose finalizer stops being removed (§5)
//	storm-clients relist                an informer that relists after every short watch (§6)
//	storm-clients resync                controller-manager-like status resync bursts (healthy)
//	storm-clients kubelets              node lease heartbeats, one client certificate per node (healthy)
//	storm-clients informer              a paginated LIST, then one long WATCH (healthy)
//
// Every subcommand takes --server, --ca and either --token-file or --cert/--key, speaks
// HTTP/2 only (golang.org/x/net/http2.Transport, as client-go does over TLS), runs for
// --duration or until SIGTERM, and prints one JSON line on exit:
// {"requests":{"PUT 409":n,...}}.
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
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http2"
)

// client is one identity's connection to the server, counting every response by method and
// code.
type client struct {
	server, token, userAgent string
	header                   http.Header // sent with every request (e.g. a test delay)
	http                     *http.Client
	counts                   *counts
}

type counts struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *counts) add(key string) {
	c.mu.Lock()
	c.m[key]++
	c.mu.Unlock()
}

// connection says how to reach and authenticate to the server.
type connection struct {
	server, caFile, tokenFile, certFile, keyFile, userAgent string
}

func (cn *connection) register(fs *flag.FlagSet, defaultUserAgent string) {
	fs.StringVar(&cn.server, "server", "", "API server URL, e.g. https://127.0.0.1:6443")
	fs.StringVar(&cn.caFile, "ca", "", "CA certificate of the API server")
	fs.StringVar(&cn.tokenFile, "token-file", "", "file holding a bearer token")
	fs.StringVar(&cn.certFile, "cert", "", "client certificate (instead of a token)")
	fs.StringVar(&cn.keyFile, "key", "", "client key of --cert")
	fs.StringVar(&cn.userAgent, "user-agent", defaultUserAgent, "User-Agent header")
}

func (cn connection) client(cnt *counts) (*client, error) {
	if cn.server == "" || cn.caFile == "" || (cn.tokenFile == "") == (cn.certFile == "") {
		return nil, fmt.Errorf("--server, --ca and one of --token-file or --cert/--key are required")
	}
	caPEM, err := os.ReadFile(cn.caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no certificates", cn.caFile)
	}
	tlsCfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	c := &client{server: strings.TrimRight(cn.server, "/"), userAgent: cn.userAgent, header: http.Header{}, counts: cnt}
	if cn.tokenFile != "" {
		tok, err := os.ReadFile(cn.tokenFile)
		if err != nil {
			return nil, err
		}
		c.token = strings.TrimSpace(string(tok))
	} else {
		pair, err := tls.LoadX509KeyPair(cn.certFile, cn.keyFile)
		if err != nil {
			return nil, err
		}
		tlsCfg.Certificates = []tls.Certificate{pair}
	}
	c.http = &http.Client{Transport: &http2.Transport{TLSClientConfig: tlsCfg}}
	return c, nil
}

// do sends one request and returns the status code and body.
func (c *client) do(ctx context.Context, method, path, contentType string, body []byte) (int, []byte, error) {
	resp, err := c.send(ctx, method, path, contentType, body)
	if err != nil {
		return 0, nil, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, data, err
}

// send starts one request; the caller reads and closes the body (a watch streams it).
func (c *client) send(ctx context.Context, method, path, contentType string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			c.counts.add(method + " error")
		}
		return nil, err
	}
	c.counts.add(fmt.Sprintf("%s %d", method, resp.StatusCode))
	return resp, nil
}

// object is a decoded JSON object.
type object = map[string]interface{}

func (c *client) getJSON(ctx context.Context, path string) (int, object, error) {
	code, data, err := c.do(ctx, http.MethodGet, path, "", nil)
	if err != nil || code != http.StatusOK {
		return code, nil, err
	}
	var obj object
	return code, obj, json.Unmarshal(data, &obj)
}

// ensure creates obj at collection unless it exists.
func (c *client) ensure(ctx context.Context, collection string, obj object) error {
	body, _ := json.Marshal(obj)
	code, data, err := c.do(ctx, http.MethodPost, collection, "application/json", body)
	if err != nil {
		return err
	}
	if code != http.StatusCreated && code != http.StatusConflict {
		return fmt.Errorf("POST %s: HTTP %d: %s", collection, code, truncate(data))
	}
	return nil
}

func metadata(obj object) object {
	m, _ := obj["metadata"].(object)
	if m == nil {
		m = object{}
		obj["metadata"] = m
	}
	return m
}

func name(obj object) string {
	n, _ := metadata(obj)["name"].(string)
	return n
}

func items(list object) []object {
	raw, _ := list["items"].([]interface{})
	out := make([]object, 0, len(raw))
	for _, it := range raw {
		if o, ok := it.(object); ok {
			out = append(out, o)
		}
	}
	return out
}

func datajob(ns, name string, finalizers ...string) object {
	meta := object{"name": name, "namespace": ns}
	if len(finalizers) > 0 {
		meta["finalizers"] = finalizers
	}
	return object{"apiVersion": "batch.company.com/v1", "kind": "DataJob", "metadata": meta,
		"spec": object{"image": "registry.company.com/report:2.3.1", "schedule": "*/10 * * * *"}}
}

func datajobs(ns string) string { return "/apis/batch.company.com/v1/namespaces/" + ns + "/datajobs" }

// sleep waits d, or less when ctx ends; it reports whether ctx is still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func truncate(b []byte) string {
	if len(b) > 300 {
		b = b[:300]
	}
	return string(b)
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// runFunc runs one subcommand: it makes its clients from the connection flags (most make
// one; kubelets one per node).
type runFunc func(ctx context.Context, cn connection, cnt *counts) error

type command struct {
	userAgent string
	flags     func(fs *flag.FlagSet) runFunc
}

// Each subcommand registers its flags and returns its run function.
var commands = map[string]command{
	"conflict":             {"report-operator/v0.9.0 (linux/amd64) kubernetes/v0.28.4", conflictFlags},
	"throttled":            {"batch-sync/v2.1.0 (linux/amd64) kubernetes/v0.28.4", throttledFlags},
	"finalizer-controller": {"cleanup-controller/v1.2.0 (linux/amd64) kubernetes/v0.28.4", finalizerControllerFlags},
	"relist":               {"flaky-informer/v0.3.0 (linux/amd64) kubernetes/v0.28.4", relistFlags},
	"resync":               {"kube-controller-manager/v1.28.7 (linux/amd64) kubernetes/c8dcb00/system:serviceaccount:kube-system:replicaset-controller", resyncFlags},
	"kubelets":             {"kubelet/v1.28.7 (linux/amd64) kubernetes/c8dcb00", kubeletsFlags},
	"informer":             {"metrics-collector/v0.14.0 (linux/amd64) kubernetes/v0.28.4", informerFlags},
}

func main() {
	if len(os.Args) < 2 || commands[os.Args[1]].flags == nil {
		var names []string
		for n := range commands {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintln(os.Stderr, "usage: storm-clients {"+strings.Join(names, "|")+"} [flags]")
		os.Exit(2)
	}
	cmd := commands[os.Args[1]]
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var cn connection
	cn.register(fs, cmd.userAgent)
	duration := fs.Duration("duration", 30*time.Second, "how long to run")
	run := cmd.flags(fs)
	_ = fs.Parse(os.Args[2:])

	cnt := &counts{m: map[string]int64{}}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sigc; cancel() }()

	exit := 0
	if err := run(ctx, cn, cnt); err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "storm-clients %s: %v\n", os.Args[1], err)
		exit = 1
	}
	cnt.mu.Lock()
	out, _ := json.Marshal(map[string]interface{}{"requests": cnt.m})
	cnt.mu.Unlock()
	fmt.Println(string(out))
	os.Exit(exit)
}
