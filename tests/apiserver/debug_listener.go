package main

// The debug listener answers the test harness (counts, APF, storage, health). It is served
// without net/http's server on purpose: the agent under test captures every HTTP/1.1 exchange
// that passes through net/http's server connections of this process, and the harness's own
// polling must not show up in the traffic it checks the agent against.

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"time"
)

func serveDebug(ln net.Listener, handler http.Handler) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go serveDebugConn(c, handler)
	}
}

// One request per connection (Connection: close), which every HTTP client handles.
func serveDebugConn(c net.Conn, handler http.Handler) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	res := rec.Result()
	defer res.Body.Close()
	res.Close = true
	res.ContentLength = int64(rec.Body.Len())
	w := bufio.NewWriter(c)
	if err := res.Write(w); err != nil {
		fmt.Fprintf(w, "HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\n")
	}
	_ = w.Flush()
}
