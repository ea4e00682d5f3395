package main

// Discovery as kube-apiserver 1.28 serves it:
//   - /version (indented JSON, as responsewriters.WriteRawJSON writes it);
//   - /api and /apis: aggregated discovery (apidiscovery.k8s.io/v2beta1, beta and on by default
//     in 1.28) when the Accept header asks for it, else the legacy APIVersions/APIGroupList.
//     kubectl 1.32 asks for v2 first, then v2beta1, then plain JSON: a 1.28 server answers
//     v2beta1 (v2 arrived in 1.30), so kubectl needs no per-group-version requests;
//   - /api/v1, /apis/GROUP, /apis/GROUP/VERSION: legacy APIResourceList / APIGroup;
//   - /openapi/v2 and /openapi/v3: see serveOpenAPI.

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"strings"
)

func (s *apiServer) serveVersion(w http.ResponseWriter, r *http.Request) {
	v := struct {
		Major        string `json:"major"`
		Minor        string `json:"minor"`
		GitVersion   string `json:"gitVersion"`
		GitCommit    string `json:"gitCommit"`
		GitTreeState string `json:"gitTreeState"`
		BuildDate    string `json:"buildDate"`
		GoVersion    string `json:"goVersion"`
		Compiler     string `json:"compiler"`
		Platform     string `json:"platform"`
	}{"1", "28", "v1.28.7", "c8dcb00be9961ec36d141d2e4103f85f92bcf291", "clean", "2024-02-14T10:32:39Z",
		runtime.Version(), runtime.Compiler, runtime.GOOS + "/" + runtime.GOARCH}
	b, _ := json.MarshalIndent(v, "", "  ")
	writeRaw(w, r, http.StatusOK, "application/json", b)
}

// groupVersions returns the served group versions in discovery order (core first).
func groupVersions() []string {
	var gvs []string
	seen := map[string]bool{}
	for _, rd := range resources {
		if gv := rd.groupVersion(); !seen[gv] {
			seen[gv] = true
			gvs = append(gvs, gv)
		}
	}
	return gvs
}

func resourcesOf(group, version string) []*resourceDef {
	var out []*resourceDef
	for _, rd := range resources {
		if rd.group == group && rd.version == version {
			out = append(out, rd)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].resource < out[j].resource })
	return out
}

const aggregatedV2beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"

// wantsAggregated reports whether the first media range this server can produce is the
// v2beta1 aggregated discovery document.
func wantsAggregated(r *http.Request) bool {
	for _, rng := range strings.Split(r.Header.Get("Accept"), ",") {
		fields := strings.Split(rng, ";")
		mt := strings.TrimSpace(fields[0])
		params := map[string]string{}
		for _, f := range fields[1:] {
			if kv := strings.SplitN(strings.TrimSpace(f), "=", 2); len(kv) == 2 {
				params[kv[0]] = kv[1]
			}
		}
		if mt != "application/json" && mt != "*/*" && mt != "application/*" {
			continue
		}
		switch {
		case params["as"] == "":
			return false
		case params["as"] == "APIGroupDiscoveryList" && params["g"] == "apidiscovery.k8s.io" && params["v"] == "v2beta1":
			return true
		}
	}
	return false
}

func (s *apiServer) serveDiscoveryRoot(w http.ResponseWriter, r *http.Request, p string) {
	w.Header().Set("Vary", "Accept")
	if wantsAggregated(r) {
		body, _ := json.Marshal(aggregatedDiscovery(p == "/api"))
		body = append(body, '\n')
		sum := sha256.Sum256(body)
		etag := fmt.Sprintf("%q", fmt.Sprintf("%X", sum[:]))
		w.Header().Set("Etag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		writeRaw(w, r, http.StatusOK, aggregatedV2beta1, body)
		return
	}
	if p == "/api" {
		writeDiscovery(w, r, map[string]interface{}{
			"kind": "APIVersions", "versions": []string{"v1"},
			"serverAddressByClientCIDRs": []map[string]string{{"clientCIDR": "0.0.0.0/0", "serverAddress": s.address}},
		}, []string{"kind", "versions", "serverAddressByClientCIDRs"})
		return
	}
	var groups []interface{}
	for _, gv := range groupVersions() {
		if !strings.Contains(gv, "/") {
			continue
		}
		groups = append(groups, apiGroup(gv))
	}
	writeDiscovery(w, r, map[string]interface{}{"kind": "APIGroupList", "apiVersion": "v1", "groups": groups},
		[]string{"kind", "apiVersion", "groups"})
}

func apiGroup(gv string) map[string]interface{} {
	parts := strings.SplitN(gv, "/", 2)
	ver := map[string]string{"groupVersion": gv, "version": parts[1]}
	return map[string]interface{}{"name": parts[0], "versions": []interface{}{ver}, "preferredVersion": ver}
}

// writeDiscovery writes a legacy discovery object with its fields in the apiserver's order.
func writeDiscovery(w http.ResponseWriter, r *http.Request, v map[string]interface{}, order []string) {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range order {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(v[k])
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteString("}\n")
	writeRaw(w, r, http.StatusOK, "application/json", []byte(b.String()))
}

func (s *apiServer) serveDiscoveryGroup(w http.ResponseWriter, r *http.Request, p string) {
	parts := splitPath(p)
	switch {
	case parts[0] == "api" && len(parts) == 2 && parts[1] == "v1":
		writeDiscovery(w, r, map[string]interface{}{"kind": "APIResourceList", "groupVersion": "v1",
			"resources": legacyResources("", "v1")}, []string{"kind", "groupVersion", "resources"})
		return
	case parts[0] == "apis" && len(parts) == 2:
		for _, gv := range groupVersions() {
			if strings.HasPrefix(gv, parts[1]+"/") {
				g := apiGroup(gv)
				writeDiscovery(w, r, map[string]interface{}{"kind": "APIGroup", "apiVersion": "v1", "name": g["name"],
					"versions": g["versions"], "preferredVersion": g["preferredVersion"]},
					[]string{"kind", "apiVersion", "name", "versions", "preferredVersion"})
				return
			}
		}
	case parts[0] == "apis" && len(parts) == 3:
		if rs := legacyResources(parts[1], parts[2]); len(rs) > 0 {
			writeDiscovery(w, r, map[string]interface{}{"kind": "APIResourceList", "apiVersion": "v1",
				"groupVersion": parts[1] + "/" + parts[2], "resources": rs},
				[]string{"kind", "apiVersion", "groupVersion", "resources"})
			return
		}
	}
	writeStatusError(w, r, errNotFoundPath)
}

type legacyResource struct {
	Name               string   `json:"name"`
	SingularName       string   `json:"singularName"`
	Namespaced         bool     `json:"namespaced"`
	Group              string   `json:"group,omitempty"`
	Version            string   `json:"version,omitempty"`
	Kind               string   `json:"kind"`
	Verbs              []string `json:"verbs"`
	ShortNames         []string `json:"shortNames,omitempty"`
	Categories         []string `json:"categories,omitempty"`
	StorageVersionHash string   `json:"storageVersionHash,omitempty"`
}

func legacyResources(group, version string) []legacyResource {
	var out []legacyResource
	for _, rd := range resourcesOf(group, version) {
		out = append(out, legacyResource{Name: rd.resource, SingularName: rd.singular, Namespaced: rd.namespaced,
			Kind: rd.kind, Verbs: rd.verbs, ShortNames: rd.shortNames, Categories: rd.categories,
			StorageVersionHash: rd.storageVersionHash})
		if rd.statusSubresource {
			out = append(out, legacyResource{Name: rd.resource + "/status", Namespaced: rd.namespaced,
				Kind: rd.kind, Verbs: []string{"get", "patch", "update"}})
		}
	}
	if group == "" && version == "v1" {
		out = append(out, legacyResource{Name: "serviceaccounts/token", Namespaced: true,
			Group: "authentication.k8s.io", Version: "v1", Kind: "TokenRequest", Verbs: []string{"create"}})
		sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	}
	return out
}

// aggregatedDiscovery builds the apidiscovery.k8s.io/v2beta1 APIGroupDiscoveryList.
func aggregatedDiscovery(core bool) map[string]interface{} {
	type gvk struct {
		Group   string `json:"group"`
		Version string `json:"version"`
		Kind    string `json:"kind"`
	}
	type subresource struct {
		Subresource  string   `json:"subresource"`
		ResponseKind gvk      `json:"responseKind"`
		Verbs        []string `json:"verbs"`
	}
	type resource struct {
		Resource         string        `json:"resource"`
		ResponseKind     gvk           `json:"responseKind"`
		Scope            string        `json:"scope"`
		SingularResource string        `json:"singularResource"`
		Verbs            []string      `json:"verbs"`
		ShortNames       []string      `json:"shortNames,omitempty"`
		Categories       []string      `json:"categories,omitempty"`
		Subresources     []subresource `json:"subresources,omitempty"`
	}
	items := []interface{}{}
	for _, gv := range groupVersions() {
		parts := strings.SplitN(gv, "/", 2)
		group, version := "", parts[0]
		if len(parts) == 2 {
			group, version = parts[0], parts[1]
		}
		if (group == "") != core {
			continue
		}
		var rs []resource
		for _, rd := range resourcesOf(group, version) {
			scope := "Cluster"
			if rd.namespaced {
				scope = "Namespaced"
			}
			res := resource{Resource: rd.resource, ResponseKind: gvk{group, version, rd.kind}, Scope: scope,
				SingularResource: rd.singular, Verbs: rd.verbs, ShortNames: rd.shortNames, Categories: rd.categories}
			if rd.statusSubresource {
				res.Subresources = append(res.Subresources, subresource{"status", gvk{group, version, rd.kind}, []string{"get", "patch", "update"}})
			}
			rs = append(rs, res)
		}
		meta := map[string]interface{}{"creationTimestamp": nil}
		if group != "" {
			meta["name"] = group
		}
		items = append(items, map[string]interface{}{
			"metadata": meta,
			"versions": []interface{}{map[string]interface{}{"version": version, "resources": rs, "freshness": "Current"}},
		})
	}
	return map[string]interface{}{"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2beta1",
		"metadata": map[string]interface{}{}, "items": items}
}

// serveOpenAPI publishes an OpenAPI v2 document with no definitions, and no OpenAPI v3.
//
// kubectl needs /openapi/v2: with the default --validate it loads the v2 schema for client-side
// validation and fails the command when the document cannot be fetched ("the server could not
// find the requested resource"), so a server without it breaks `kubectl create -f`. It asks
// for the protobuf form (gnostic openapi_v2.Document) and falls back to /swagger-2.0.0.pb-v1.
// A document without definitions makes client-side validation a no-op (unknown kinds are not
// validated) and leaves kubectl apply on its built-in strategic-merge metadata.
// /openapi/v3 stays 404: kubectl then neither uses server-side field validation nor v3 schemas,
// which this server does not implement. (A real 1.28 serves full documents at both.)
func (s *apiServer) serveOpenAPI(w http.ResponseWriter, r *http.Request, p string) {
	if p != "/openapi/v2" {
		writeStatusError(w, r, errNotFoundPath)
		return
	}
	const title, version = "Kubernetes", "v1.28.7"
	w.Header().Set("Etag", `"stormwatch-openapi-v2-empty"`)
	w.Header().Set("Vary", "Accept")
	if strings.Contains(r.Header.Get("Accept"), "protobuf") {
		// openapi_v2.Document{swagger: "2.0" (field 1), info: Info{title (1), version (2)} (field 2)}
		info := append(protoString(1, title), protoString(2, version)...)
		doc := append(protoString(1, "2.0"), protoBytes(2, info)...)
		writeRaw(w, r, http.StatusOK, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf", doc)
		return
	}
	writeRaw(w, r, http.StatusOK, "application/json",
		[]byte(`{"swagger":"2.0","info":{"title":"`+title+`","version":"`+version+`"},"paths":{}}`))
}

// protoBytes encodes a length-delimited protobuf field.
func protoBytes(field int, b []byte) []byte {
	out := protoVarint(nil, uint64(field<<3|2))
	out = protoVarint(out, uint64(len(b)))
	return append(out, b...)
}

func protoString(field int, s string) []byte { return protoBytes(field, []byte(s)) }

func protoVarint(out []byte, v uint64) []byte {
	for v >= 0x80 {
		out = append(out, byte(v)|0x80)
		v >>= 7
	}
	return append(out, byte(v))
}
