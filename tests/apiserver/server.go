package main

// The handler chain, in the apiserver's order where it shows on the wire:
// Cache-Control and Audit-Id (set before authentication, so a 401 carries them), bearer
// token authentication (401 before APF, so a 401 has no X-Kubernetes-PF-* headers),
// APF classification headers, then routing to discovery or the REST handlers.

import (
	"net/http"
	"strings"
)

type apiServer struct {
	st      *store
	signer  *tokenSigner
	counts  *requestCounts
	address string // host:port advertised in /api's serverAddressByClientCIDRs
}

func newAPIServer(st *store, signer *tokenSigner, counts *requestCounts, address string) *apiServer {
	return &apiServer{st: st, signer: signer, counts: counts, address: address}
}

// ---- API Priority and Fairness headers ----
//
// kube-apiserver answers every authenticated request (exempt ones and 429s included) with the
// UIDs of the FlowSchema that matched and of its PriorityLevelConfiguration. The UIDs are
// random per cluster; here they are fixed, in this one table, and the matching follows the
// 1.28 suggested configuration for the identities this server can authenticate.
// (A later task grows real APF with concurrency limits and 429s.)

type apfLevel struct{ name, uid string }
type apfSchema struct {
	name, uid string
	level     apfLevel
}

var (
	plExempt        = apfLevel{"exempt", "5c8f9bde-7c4a-4a4b-9b4f-3a7d2b0e1c01"}
	plWorkloadHigh  = apfLevel{"workload-high", "5c8f9bde-7c4a-4a4b-9b4f-3a7d2b0e1c02"}
	plWorkloadLow   = apfLevel{"workload-low", "5c8f9bde-7c4a-4a4b-9b4f-3a7d2b0e1c03"}
	plGlobalDefault = apfLevel{"global-default", "5c8f9bde-7c4a-4a4b-9b4f-3a7d2b0e1c04"}

	fsExempt                    = apfSchema{"exempt", "8a1f3c2e-2b9d-4e57-a0c6-6f0d9e1b2a01", plExempt}
	fsProbes                    = apfSchema{"probes", "8a1f3c2e-2b9d-4e57-a0c6-6f0d9e1b2a02", plExempt}
	fsKubeSystemServiceAccounts = apfSchema{"kube-system-service-accounts", "8a1f3c2e-2b9d-4e57-a0c6-6f0d9e1b2a03", plWorkloadHigh}
	fsServiceAccounts           = apfSchema{"service-accounts", "8a1f3c2e-2b9d-4e57-a0c6-6f0d9e1b2a04", plWorkloadLow}
	fsGlobalDefault             = apfSchema{"global-default", "8a1f3c2e-2b9d-4e57-a0c6-6f0d9e1b2a05", plGlobalDefault}
)

func classifyAPF(r *http.Request, u *userInfo) apfSchema {
	switch r.URL.Path {
	case "/healthz", "/livez", "/readyz":
		return fsProbes
	}
	for _, g := range u.Groups {
		switch g {
		case "system:masters":
			return fsExempt
		case "system:serviceaccounts:kube-system":
			return fsKubeSystemServiceAccounts
		}
	}
	for _, g := range u.Groups {
		if g == "system:serviceaccounts" {
			return fsServiceAccounts
		}
	}
	return fsGlobalDefault
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
		fs := classifyAPF(r, u)
		h.Set("X-Kubernetes-Pf-Flowschema-Uid", fs.uid)
		h.Set("X-Kubernetes-Pf-Prioritylevel-Uid", fs.level.uid)
		if info.isResourceRequest {
			s.serveResource(rec, r, info, u)
		} else {
			s.serveNonResource(rec, r)
		}
	}

	key := countKey{Client: client, Verb: info.metricVerb(r), Scope: info.scope(), Code: rec.status(), Proto: r.Proto}
	if info.isResourceRequest {
		key.Group, key.Version, key.Resource, key.Subresource = info.group, info.version, info.resource, info.subresource
	}
	s.counts.add(key)
}

// authenticate returns nil for a missing or invalid bearer token: this server runs like an
// apiserver with --anonymous-auth=false, where both get 401.
func (s *apiServer) authenticate(r *http.Request) *userInfo {
	auth := strings.TrimSpace(r.Header.Get("Authorization"))
	if len(auth) < 7 || !strings.EqualFold(auth[:7], "bearer ") {
		return nil
	}
	u, err := s.signer.verify(strings.TrimSpace(auth[7:]))
	if err != nil {
		return nil
	}
	return u
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
