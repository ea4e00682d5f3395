package main

// Storage in a real etcd, the way kube-apiserver's storage/etcd3 package uses it:
//   - keys /registry/<resource>/<namespace>/<name> for core types and
//     /registry/<group>/<resource>/<namespace>/<name> for custom resources (the CRD storage
//     prefix), /registry/namespaces/<name> for cluster-scoped namespaces;
//   - an object's resourceVersion is the key's mod revision, a list's is the read's header
//     revision; resourceVersion is cleared before an object is written (PrepareObjectForStorage);
//   - create is a Txn guarded by CreateRevision == 0, update and delete are Txns guarded by
//     ModRevision == the revision the caller read (GuaranteedUpdate's optimistic concurrency),
//     so concurrent writers get exactly the conflicts the apiserver produces.
// Values are JSON for every type (the apiserver stores core types as protobuf; on the wire to
// clients this makes no difference).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/pkg/transport"
)

type object = map[string]interface{}

var (
	errNotFound = errors.New("not found")
	errExists   = errors.New("already exists")
	errConflict = errors.New("conflict")
)

type store struct {
	cli *clientv3.Client
}

func newStore(endpoints, caFile, certFile, keyFile string) (*store, error) {
	cfg := clientv3.Config{
		Endpoints:   strings.Split(endpoints, ","),
		DialTimeout: 5 * time.Second,
	}
	if caFile != "" || certFile != "" {
		tlsInfo := transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: caFile}
		tlsCfg, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, err
		}
		cfg.TLS = tlsCfg
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, err
	}
	// clientv3.New does not block on the connection; fail early if etcd is not answering.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, "/registry/health-probe"); err != nil {
		cli.Close()
		return nil, err
	}
	return &store{cli: cli}, nil
}

func (s *store) close() { s.cli.Close() }

// decodeObject parses a stored value and stamps resourceVersion = the key's mod revision.
func decodeObject(value []byte, modRev int64) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber() // keep integers exact (no float64 round trip)
	var obj object
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	meta := metadataOf(obj)
	meta["resourceVersion"] = strconv.FormatInt(modRev, 10)
	return obj, nil
}

// encodeForStorage serialises obj without its resourceVersion (the etcd revision is the truth).
func encodeForStorage(obj object) ([]byte, error) {
	meta := metadataOf(obj)
	rv, had := meta["resourceVersion"]
	delete(meta, "resourceVersion")
	data, err := json.Marshal(obj)
	if had {
		meta["resourceVersion"] = rv
	}
	return data, err
}

func (s *store) get(ctx context.Context, key string) (object, int64, error) {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, errNotFound
	}
	kv := resp.Kvs[0]
	obj, err := decodeObject(kv.Value, kv.ModRevision)
	return obj, kv.ModRevision, err
}

// listPage reads up to limit objects (0 = all) under prefix starting at key start (inclusive),
// at revision rev (0 = latest), keeping those accepted by keep. It returns the objects, the
// revision read at, the key to continue from ("" when done) and, when keep accepted every
// object, how many objects remain after the page.
func (s *store) listPage(ctx context.Context, prefix, start string, rev int64, limit int64,
	keep func(object) bool) ([]object, int64, string, int64, error) {
	if start == "" {
		start = prefix
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	var out []object
	filtered := false
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		if limit > 0 {
			// Like the apiserver, read pages of `limit` from etcd until enough objects match.
			opts = append(opts, clientv3.WithLimit(limit))
		}
		resp, err := s.cli.Get(ctx, start, opts...)
		if err != nil {
			return nil, 0, "", 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for i, kv := range resp.Kvs {
			obj, err := decodeObject(kv.Value, kv.ModRevision)
			if err != nil {
				return nil, 0, "", 0, err
			}
			if !keep(obj) {
				filtered = true
				continue
			}
			out = append(out, obj)
			if limit > 0 && int64(len(out)) == limit {
				more := resp.More || i < len(resp.Kvs)-1
				if !more {
					return out, rev, "", 0, nil
				}
				next := string(kv.Key) + "\x00"
				remaining := int64(-1)
				if !filtered {
					remaining = resp.Count - int64(i) - 1
				}
				return out, rev, next, remaining, nil
			}
		}
		if limit == 0 || !resp.More || len(resp.Kvs) == 0 {
			return out, rev, "", 0, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// create writes obj at key if the key does not exist; it returns the new revision.
func (s *store) create(ctx context.Context, key string, obj object) (int64, error) {
	data, err := encodeForStorage(obj)
	if err != nil {
		return 0, err
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(data))).
		Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, errExists
	}
	return resp.Header.Revision, nil
}

// update replaces the value at key if its mod revision is still expectedRev.
func (s *store) update(ctx context.Context, key string, obj object, expectedRev int64) (int64, error) {
	data, err := encodeForStorage(obj)
	if err != nil {
		return 0, err
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", expectedRev)).
		Then(clientv3.OpPut(key, string(data))).
		Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, errConflict
	}
	return resp.Header.Revision, nil
}

// delete removes key if its mod revision is still expectedRev; it returns the revision of
// the deletion (the resourceVersion a DELETED watch event carries).
func (s *store) delete(ctx context.Context, key string, expectedRev int64) (int64, error) {
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", expectedRev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, errConflict
	}
	return resp.Header.Revision, nil
}

// currentRevision is the store's latest revision (an empty read's header).
func (s *store) currentRevision(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, "/registry/health-probe")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// ensureSystemNamespaces creates the namespaces every cluster has, like the apiserver's
// system namespaces controller does at start-up.
func (s *store) ensureSystemNamespaces(ctx context.Context) error {
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		obj := newNamespaceObject(ns)
		if _, err := s.create(ctx, "/registry/namespaces/"+ns, obj); err != nil && err != errExists {
			return err
		}
	}
	return nil
}
