package main

// The handler chain, in the apiserver's order where it shows on the wire:
// Cache-Control and Audit-Id (set before authentication, so a 401 carries them),
// authentication (client certificate, then bearer token: auth.go; 401 before APF, so a 401
// has no X-Kubernetes-PF-* headers), API Priority and Fairness (apf.go: classification
// headers, then a seat or a 429), then routing to discovery or the REST handlers.

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

type apiServer struct {
	st      *store
	signer  *tokenSigner
	counts  *requestCounts
	address string // host:port advertised in /api's serverAddressByClientCIDRs

	x509  *x509Authenticator // nil without --client-ca-file
	apf   *apfController
	cache *watchCache // nil: every read goes to etcd
	// testDelays: honour the X-Stormwatch-Test-Delay request header (a Go duration, at most
	// 60 s), slept while holding the APF seat. Test-only (--test-delays), to make requests slow.
	testDelays bool
	reads      readCounts
}

// readCounts says where reads were served from (the test oracle for the LIST semantics:
// resourceVersion="" from etcd, "0" from the watch cache), at /debug/storage.
type readCounts struct {
	EtcdList, CacheList, EtcdGet, CacheGet int64
}

func newAPIServer(st *store, signer *tokenSigner, counts *requestCounts, address string) *apiServer {
	return &apiServer{st: st, signer: signer, counts: counts, address: address}
}

// ---- entry point ----

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.counts.sawWriter(r.Proto, w)
	info := parseRequestInfo(r)
	rec := &statusRecorder{ResponseWriter: w}
	h := w.Header()
	h.Set("Audit-Id", newUID())
	h.Set("Cache-Control", "no-cache, private")

	client := "system:anonymous"
	if u := s.authenticate(r); u == nil {
		writeStatusError(rec, r, errUnauthorized)
	} else {
		client = u.Name
		s.serveWithAPF(rec, r, info, u)
	}

	key := countKey{Client: client, Verb: info.metricVerb(r), Scope: info.scope(), Code: rec.status(), Proto: r.Proto}
	if info.isResourceRequest {
		key.Group, key.Version, key.Resource, key.Subresource = info.group, info.version, info.resource, info.subresource
	}
	s.counts.add(key)
}

// serveWithAPF classifies the request, sets the X-Kubernetes-PF-* headers, and serves it in a
// seat of its priority level, or answers 429 when APF rejects it.
func (s *apiServer) serveWithAPF(rec *statusRecorder, r *http.Request, info *requestInfo, u *userInfo) {
	fs, pl, hash := s.apf.classify(info, u)
	h := rec.Header()
	h.Set("X-Kubernetes-Pf-Flowschema-Uid", fs.uid)
	h.Set("X-Kubernetes-Pf-Prioritylevel-Uid", pl.pl.uid)
	// Test knob: N more response headers, so the agent's walk of the handler's header map meets a
	// map past one Swiss-table group or bucket (8 entries), as kube-apiserver's maps with
	// Warning, Audit-Id, Cache-Control and friends can be.
	if n, err := strconv.Atoi(r.Header.Get("X-Stormwatch-Test-Response-Headers")); err == nil && n > 0 && n <= 64 {
		for i := 0; i < n; i++ {
			h.Set(fmt.Sprintf("X-Test-Extra-%02d", i), "x")
		}
	}
	release := pl.acquire(r.Context(), hash, s.apf.cfg.waitLimit)
	if release == nil {
		writeTooManyRequests(rec, s.apf.cfg.retryAfterSec)
		return
	}
	defer release()
	if info.isResourceRequest && info.verb == "watch" {
		rec.onHeader = release // a watch leaves APF once it is established
	}
	if s.testDelays {
		if d, err := time.ParseDuration(r.Header.Get("X-Stormwatch-Test-Delay")); err == nil && d > 0 && d <= time.Minute {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
			}
		}
	}
	if info.isResourceRequest {
		s.serveResource(rec, r, info, u)
	} else {
		s.serveNonResource(rec, r)
	}
}

func (s *apiServer) serveNonResource(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeStatusError(w, r, errMethodNotAllowed())
		return
	}
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case p == "/healthz" || p == "/livez" || p == "/readyz":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write([]byte("ok"))
	case p == "/version":
		s.serveVersion(w, r)
	case p == "/api" || p == "/apis":
		s.serveDiscoveryRoot(w, r, p)
	case strings.HasPrefix(p, "/api/") || strings.HasPrefix(p, "/apis/"):
		s.serveDiscoveryGroup(w, r, p)
	case p == "/openapi/v2" || strings.HasPrefix(p, "/openapi/v3"):
		s.serveOpenAPI(w, r, p)
	default:
		writeStatusError(w, r, errNotFoundPath)
	}
}

func (s *apiServer) serveResource(w http.ResponseWriter, r *http.Request, info *requestInfo, u *userInfo) {
	if info.group == "" && info.apiPrefix != "api" || info.group != "" && info.apiPrefix != "apis" {
		writeStatusError(w, r, errNotFoundPath)
		return
	}
	if info.resource == "serviceaccounts" && info.subresource == "token" && info.group == "" && info.version == "v1" {
		if info.verb != "create" {
			writeStatusError(w, r, errMethodNotAllowed())
			return
		}
		s.serveTokenRequest(w, r, info)
		return
	}
	rd := findResource(info.group, info.version, info.resource)
	if rd == nil {
		writeStatusError(w, r, errNotFoundPath)
		return
	}
	if rd.readOnly && info.verb != "get" && info.verb != "list" && info.verb != "watch" {
		writeStatusError(w, r, errMethodNotAllowed())
		return
	}
	// Routes that do not exist for this resource's scope are 404s, as in the go-restful
	// route table (e.g. /api/v1/pods/NAME, or /namespaces/NS/namespaces).
	ns := info.namespace
	if rd.resource == "namespaces" {
		if len(info.parts) == 0 || info.parts[0] != "namespaces" || (ns != "" && ns != info.name) {
			writeStatusError(w, r, errNotFoundPath)
			return
		}
		ns = ""
	} else if !rd.namespaced && ns != "" || rd.namespaced && ns == "" && info.name != "" && len(info.parts) > 1 {
		writeStatusError(w, r, errNotFoundPath)
		return
	}
	switch info.subresource {
	case "":
	case "status":
		if !rd.statusSubresource {
			writeStatusError(w, r, errNotFoundPath)
			return
		}
	default:
		writeStatusError(w, r, errNotFoundPath)
		return
	}
	// A collection route addressed with a subresource is meaningless.
	if info.subresource != "" && len(info.parts) < 3 {
		writeStatusError(w, r, errNotFoundPath)
		return
	}
	named := len(info.parts) >= 2 // the URL names the object (a fieldSelector name does not)
	req := &restRequest{w: w, r: r, info: info, rd: rd, ns: ns, user: u}
	switch info.verb {
	case "get":
		s.handleGet(req)
	case "list":
		s.handleList(req)
	case "watch":
		s.handleWatch(req)
	case "create":
		if named || (rd.namespaced && ns == "") {
			writeStatusError(w, r, errMethodNotAllowed())
			return
		}
		s.handleCreate(req)
	case "update":
		if !named {
			writeStatusError(w, r, errMethodNotAllowed())
			return
		}
		s.handleUpdate(req)
	case "patch":
		if !named {
			writeStatusError(w, r, errMethodNotAllowed())
			return
		}
		s.handlePatch(req)
	case "delete":
		if info.subresource != "" {
			writeStatusError(w, r, errMethodNotAllowed())
			return
		}
		s.handleDelete(req)
	case "deletecollection":
		if rd.resource == "namespaces" || info.subresource != "" {
			writeStatusError(w, r, errMethodNotAllowed())
			return
		}
		s.handleDeleteCollection(req)
	default:
		writeStatusError(w, r, errMethodNotAllowed())
	}
}
