package main

// Watch: a streaming 200 response of newline-delimited JSON events
// {"type":"ADDED|MODIFIED|DELETED|ERROR","object":{...}}, flushed per event, fed by an etcd
// watch on the resource's key prefix. Like the apiserver:
//   - resourceVersion "" or "0": synthetic ADDED events for the current state, then changes;
//   - resourceVersion N: changes after N; a compacted N gives an ERROR event with a 410
//     Expired Status ("too old resource version");
//   - label/field selectors filter, and an object moving out of (into) the selection is sent
//     as DELETED (ADDED);
//   - a DELETED event carries the last state with the deletion's revision as resourceVersion;
//   - timeoutSeconds ends the stream cleanly (default: a random 30-60 min, as
//     --min-request-timeout=1800 gives).

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"strconv"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/etcdserver/api/v3rpc/rpctypes"
	"go.etcd.io/etcd/mvcc/mvccpb"
)

func (s *apiServer) handleWatch(q *restRequest) {
	p, err := parseListParams(q.r)
	if err != nil {
		q.fail(err)
		return
	}
	timeout := p.timeout
	if timeout <= 0 {
		timeout = time.Duration(1800+rand.Intn(1800)) * time.Second
	}
	ctx, cancel := context.WithTimeout(q.ctx(), timeout)
	defer cancel()

	prefix := q.rd.storagePrefix(q.ns)
	tableVersion, asTable := wantsTable(q.r)

	var initial []object
	var startRev int64
	if p.rv == "" || p.rv == "0" {
		items, rev, _, _, err := s.st.listPage(ctx, prefix, "", 0, 0, p.match)
		if err != nil {
			q.fail(errInternal(err))
			return
		}
		initial, startRev = items, rev+1
	} else {
		rv, _ := strconv.ParseInt(p.rv, 10, 64)
		startRev = rv + 1
	}

	// Open the etcd watch before answering, so that the 200 means the watch is established.
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	wch := s.st.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(startRev), clientv3.WithPrevKV())

	w := q.w
	ct := "application/json"
	if asTable {
		ct = tableContentType(tableVersion)
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}

	send := func(typ string, obj object) bool {
		var buf bytes.Buffer
		buf.WriteString(`{"type":"` + typ + `","object":`)
		if asTable {
			buf.Write(bytes.TrimSpace(encodeTable(q.rd, q.r, tableVersion, []object{obj}, metaString(obj, "resourceVersion"), "")))
		} else {
			buf.Write(bytes.TrimSpace(encodeObject(q.rd, obj)))
		}
		buf.WriteString("}\n")
		if _, err := w.Write(buf.Bytes()); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	sendError := func(se *statusError) {
		line := fmt.Sprintf(`{"type":"ERROR","object":%s}`+"\n", bytes.TrimSpace(se.body()))
		_, _ = w.Write([]byte(line))
		if flusher != nil {
			flusher.Flush()
		}
	}

	for _, obj := range initial {
		if !send("ADDED", obj) {
			return
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case resp, ok := <-wch:
			if !ok {
				return
			}
			if resp.CompactRevision != 0 || resp.Err() == rpctypes.ErrCompacted {
				sendError(&statusError{410, "Expired", fmt.Sprintf("too old resource version: %s (%d)", p.rv, resp.CompactRevision), nil})
				return
			}
			if err := resp.Err(); err != nil {
				if ctx.Err() == nil {
					sendError(errInternal(err))
				}
				return
			}
			for _, ev := range resp.Events {
				typ, obj := s.translateEvent(ev, p)
				if typ == "" {
					continue
				}
				if !send(typ, obj) {
					return
				}
			}
		}
	}
}

// translateEvent turns an etcd event into a watch event type and object ("" to skip),
// applying the selectors to both the old and new state.
func (s *apiServer) translateEvent(ev *clientv3.Event, p *listParams) (string, object) {
	var cur, prev object
	if ev.Type == mvccpb.PUT {
		cur, _ = decodeObject(ev.Kv.Value, ev.Kv.ModRevision)
	}
	if ev.PrevKv != nil {
		// The previous state, stamped with this event's revision when it is what a DELETED
		// event (or a selector exit) reports.
		prev, _ = decodeObject(ev.PrevKv.Value, ev.Kv.ModRevision)
	}
	curMatch := cur != nil && p.match(cur)
	prevMatch := prev != nil && p.match(prev)
	switch {
	case ev.Type == mvccpb.DELETE:
		if prevMatch {
			return "DELETED", prev
		}
	case curMatch && prevMatch:
		return "MODIFIED", cur
	case curMatch:
		return "ADDED", cur
	case prevMatch:
		return "DELETED", prev
	}
	return "", nil
}
