package main

// The test oracle: every request the secure listener handled, counted when its handler
// returns (a watch when it ends), by the labels of apiserver_request_total plus the client
// identity and the protocol. Served as JSON on the plain-HTTP debug listener.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
)

type countKey struct {
	Client      string `json:"client"`
	Verb        string `json:"verb"`
	Group       string `json:"group"`
	Version     string `json:"version"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource"`
	Scope       string `json:"scope"`
	Code        string `json:"code"`
	Proto       string `json:"proto"`
}

type requestCounts struct {
	mu sync.Mutex
	m  map[countKey]int64
	// writers records, per protocol, the Go type of the ResponseWriter the server handed the
	// handler: proof that HTTP/2 is served by golang.org/x/net/http2 (*http2.responseWriter),
	// not by net/http's bundled copy (*http.http2responseWriter).
	writers map[string]string
}

func newRequestCounts() *requestCounts {
	return &requestCounts{m: map[countKey]int64{}, writers: map[string]string{}}
}

func (c *requestCounts) sawWriter(proto string, w http.ResponseWriter) {
	c.mu.Lock()
	if _, ok := c.writers[proto]; !ok {
		c.writers[proto] = fmt.Sprintf("%T", w)
	}
	c.mu.Unlock()
}

func (c *requestCounts) add(k countKey) {
	c.mu.Lock()
	c.m[k]++
	c.mu.Unlock()
}

type countRow struct {
	countKey
	Count int64 `json:"count"`
}

func (c *requestCounts) snapshot() []countRow {
	c.mu.Lock()
	rows := make([]countRow, 0, len(c.m))
	for k, n := range c.m {
		rows = append(rows, countRow{k, n})
	}
	c.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i].countKey, rows[j].countKey
		for _, p := range [][2]string{{a.Client, b.Client}, {a.Resource, b.Resource}, {a.Verb, b.Verb},
			{a.Code, b.Code}, {a.Scope, b.Scope}, {a.Subresource, b.Subresource}, {a.Group, b.Group},
			{a.Version, b.Version}, {a.Proto, b.Proto}} {
			if p[0] != p[1] {
				return p[0] < p[1]
			}
		}
		return false
	})
	return rows
}

// statusRecorder remembers the status code for counting. It forwards Flush so watch streams
// are flushed per event.
//
// onHeader, when set, runs once when the response starts: APF releases a watch's seat then.
type statusRecorder struct {
	http.ResponseWriter
	code     int
	onHeader func()
}

func (s *statusRecorder) started() {
	if s.onHeader != nil {
		f := s.onHeader
		s.onHeader = nil
		f()
	}
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
	s.started()
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
		s.started()
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) status() string {
	if s.code == 0 {
		return "200"
	}
	return strconv.Itoa(s.code)
}

// newDebugMux serves the oracle. extra adds handlers (e.g. /debug/apf) by path.
func newDebugMux(counts *requestCounts, extra ...map[string]http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	for _, m := range extra {
		for path, h := range m {
			mux.HandleFunc(path, h)
		}
	}
	mux.HandleFunc("/debug/counts", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(counts.snapshot())
	})
	mux.HandleFunc("/debug/writers", func(w http.ResponseWriter, r *http.Request) {
		counts.mu.Lock()
		b, _ := json.Marshal(counts.writers)
		counts.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(b, '\n'))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}
