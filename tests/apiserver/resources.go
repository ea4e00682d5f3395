package main

// The resources this server serves, in one table: everything discovery, storage keys, Status
// messages and strategies need to know about a type.

import (
	"net/http"
	"strings"
)

type resourceDef struct {
	group, version string
	resource       string // plural, as in URLs
	singular       string
	kind, listKind string
	namespaced     bool
	shortNames     []string
	categories     []string
	verbs          []string // discovery order, as the apiserver lists them
	crd            bool     // a custom resource: JSON field order is sorted (unstructured)
	// tracksGeneration: metadata.generation is set to 1 on create and bumped when the object
	// changes outside metadata (and status, when there is a status subresource), as the
	// strategies of CRDs and most workload types do. Pods, configmaps and namespaces have no
	// generation in 1.28.
	tracksGeneration  bool
	statusSubresource bool
	// returnDeletedObject: DELETE answers with the object (pods, CRs, namespaces) rather than
	// a Status of success (configmaps), as each registry store is configured.
	returnDeletedObject bool
	storageVersionHash  string
	// readOnly: served for get/list/watch only (the APF objects, which this server's
	// classifier does not re-read); writes get 405.
	readOnly bool
}

func (r *resourceDef) groupVersion() string {
	if r.group == "" {
		return r.version
	}
	return r.group + "/" + r.version
}

// groupResource is how the apiserver names a resource in messages: "pods",
// "datajobs.batch.company.com".
func (r *resourceDef) groupResource() string {
	if r.group == "" {
		return r.resource
	}
	return r.resource + "." + r.group
}

// storageKey follows the apiserver's etcd layout.
func (r *resourceDef) storageKey(ns, name string) string {
	return r.storagePrefix(ns) + name
}

// storagePrefix is the key prefix of a namespace's objects ("" = all namespaces). Built-in
// types are stored under /registry/<resource>/ whatever their group (/registry/flowschemas/);
// custom resources under /registry/<group>/<resource>/.
func (r *resourceDef) storagePrefix(ns string) string {
	p := "/registry/" + r.resource + "/"
	if r.group != "" && r.crd {
		p = "/registry/" + r.group + "/" + r.resource + "/"
	}
	if r.namespaced && ns != "" {
		p += ns + "/"
	}
	return p
}

var standardVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

var resources = []*resourceDef{
	{
		group: "", version: "v1", resource: "pods", singular: "pod", kind: "Pod", listKind: "PodList",
		namespaced: true, shortNames: []string{"po"}, categories: []string{"all"}, verbs: standardVerbs,
		statusSubresource: true, returnDeletedObject: true, storageVersionHash: "xPOwRZ+Yhw8=",
	},
	{
		group: "", version: "v1", resource: "configmaps", singular: "configmap", kind: "ConfigMap", listKind: "ConfigMapList",
		namespaced: true, shortNames: []string{"cm"}, verbs: standardVerbs, storageVersionHash: "qFsyl6wFWjQ=",
	},
	{
		group: "", version: "v1", resource: "namespaces", singular: "namespace", kind: "Namespace", listKind: "NamespaceList",
		namespaced: false, shortNames: []string{"ns"},
		verbs:             []string{"create", "delete", "get", "list", "patch", "update", "watch"},
		statusSubresource: true, returnDeletedObject: true, storageVersionHash: "Q3oi5N2YM8M=",
	},
	{
		group: "batch.company.com", version: "v1", resource: "datajobs", singular: "datajob", kind: "DataJob", listKind: "DataJobList",
		namespaced: true, shortNames: []string{"dj"}, categories: []string{"all"},
		// CRD handlers list verbs in this order.
		verbs: []string{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"},
		crd:   true, tracksGeneration: true, statusSubresource: true, returnDeletedObject: true,
		storageVersionHash: "d0bPcdg2HJA=",
	},
	// Nodes and their leases: what kubelets write and seed 002's client listed.
	{
		group: "", version: "v1", resource: "nodes", singular: "node", kind: "Node", listKind: "NodeList",
		shortNames: []string{"no"}, verbs: standardVerbs, statusSubresource: true,
		returnDeletedObject: true, storageVersionHash: "XwShjMxG9Fs=",
	},
	{
		group: "coordination.k8s.io", version: "v1", resource: "leases", singular: "lease", kind: "Lease",
		listKind: "LeaseList", namespaced: true, verbs: standardVerbs, storageVersionHash: "gqkMMb/YqFM=",
	},
	// API Priority and Fairness configuration (apf.go), v1beta3 as 1.28 prefers it.
	{
		group: "flowcontrol.apiserver.k8s.io", version: "v1beta3", resource: "flowschemas", singular: "flowschema",
		kind: "FlowSchema", listKind: "FlowSchemaList", verbs: []string{"get", "list", "watch"},
		tracksGeneration: true, returnDeletedObject: true, readOnly: true,
	},
	{
		group: "flowcontrol.apiserver.k8s.io", version: "v1beta3", resource: "prioritylevelconfigurations",
		singular: "prioritylevelconfiguration", kind: "PriorityLevelConfiguration", listKind: "PriorityLevelConfigurationList",
		verbs: []string{"get", "list", "watch"}, tracksGeneration: true, returnDeletedObject: true,
		readOnly: true,
	},
}

func findResource(group, version, resource string) *resourceDef {
	for _, r := range resources {
		if r.group == group && r.version == version && r.resource == resource {
			return r
		}
	}
	return nil
}

// requestInfo mirrors k8s.io/apiserver/pkg/endpoints/request.RequestInfo.
type requestInfo struct {
	isResourceRequest bool
	path              string
	verb              string // lower-case apiserver verb: get list watch create update patch delete deletecollection
	apiPrefix         string
	group, version    string
	namespace         string
	resource          string
	subresource       string
	name              string
	parts             []string
}

// parseRequestInfo follows requestinfo.go (RequestInfoFactory.NewRequestInfo) rule for rule:
// /api and /apis prefixes, the /watch/ and /proxy/ special verbs, namespaces as a resource
// and as a scope, "status"/"finalize" namespace subresources, list vs get, watch via the
// ?watch= parameter, a metadata.name field selector naming the object, deletecollection.
func parseRequestInfo(r *http.Request) *requestInfo {
	info := &requestInfo{path: r.URL.Path, verb: strings.ToLower(r.Method)}
	parts := splitPath(r.URL.Path)
	if len(parts) < 3 || (parts[0] != "api" && parts[0] != "apis") {
		return info // non-resource request (/version, /api, /apis/g, ...)
	}
	info.apiPrefix = parts[0]
	parts = parts[1:]
	if info.apiPrefix == "apis" {
		if len(parts) < 3 {
			return info // /apis/group/version is discovery
		}
		info.group = parts[0]
		parts = parts[1:]
	}
	info.isResourceRequest = true
	info.version = parts[0]
	parts = parts[1:]

	if parts[0] == "watch" || parts[0] == "proxy" {
		if len(parts) < 2 {
			info.isResourceRequest = false // the apiserver rejects these as malformed
			return info
		}
		info.verb = parts[0]
		parts = parts[1:]
	} else {
		switch r.Method {
		case "POST":
			info.verb = "create"
		case "GET", "HEAD":
			info.verb = "get"
		case "PUT":
			info.verb = "update"
		case "PATCH":
			info.verb = "patch"
		case "DELETE":
			info.verb = "delete"
		default:
			info.verb = ""
		}
	}
	if parts[0] == "namespaces" {
		if len(parts) > 1 {
			info.namespace = parts[1]
			if len(parts) > 2 && parts[2] != "status" && parts[2] != "finalize" {
				parts = parts[2:]
			}
		}
	}
	info.parts = parts
	switch {
	case len(parts) >= 3 && info.verb != "proxy":
		info.subresource = parts[2]
		fallthrough
	case len(parts) >= 2:
		info.name = parts[1]
		fallthrough
	case len(parts) >= 1:
		info.resource = parts[0]
	}

	if info.name == "" && info.verb == "get" {
		q := r.URL.Query()
		if isTrue(q.Get("watch")) {
			info.verb = "watch"
		} else {
			info.verb = "list"
		}
		if name, ok := fieldSelectorExact(q.Get("fieldSelector"), "metadata.name"); ok && name != "" {
			info.name = name
		}
	}
	if info.name == "" && info.verb == "delete" {
		info.verb = "deletecollection"
	}
	return info
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// isTrue is apimachinery's Convert_Slice_string_To_bool: anything but "", "false", "0" is true.
func isTrue(v string) bool {
	switch strings.ToLower(v) {
	case "", "false", "0":
		return false
	}
	return true
}

// scope is the scope label of apiserver_request_total. It comes from the route that served
// the request (installer.go: "resource" when the route has {name} or the verb is POST,
// "cluster" for all-namespaces routes, else "namespace"/"cluster" by the resource's scope),
// not from RequestInfo: a LIST narrowed by fieldSelector=metadata.name= stays a LIST route.
func (info *requestInfo) scope() string {
	if !info.isResourceRequest {
		return ""
	}
	if info.pathName() != "" || info.verb == "create" {
		return "resource"
	}
	if info.namespace != "" && info.resource != "namespaces" {
		return "namespace"
	}
	return "cluster"
}

// pathName is the object name taken from the URL path only (a route with {name}).
func (info *requestInfo) pathName() string {
	if len(info.parts) >= 2 {
		return info.parts[1]
	}
	return ""
}

// metricVerb is the verb label of apiserver_request_total, as MonitorRequest computes it:
// CanonicalVerb(HTTP method, scope) (GET/HEAD -> LIST unless the scope is "resource"), then
// cleanVerb: WATCH for watches (?watch= or the /watch/ route), APPLY for apply patches,
// CONNECT for connect subresources. A collection DELETE is reported as DELETE.
func (info *requestInfo) metricVerb(r *http.Request) string {
	verb := strings.ToUpper(r.Method)
	if verb == "GET" || verb == "HEAD" {
		verb = "GET"
		if scope := info.scope(); scope != "resource" && scope != "" {
			verb = "LIST"
		}
	}
	if !info.isResourceRequest {
		return verb
	}
	if info.verb == "watch" {
		verb = "WATCH"
	}
	if verb == "PATCH" && r.Header.Get("Content-Type") == "application/apply-patch+yaml" {
		verb = "APPLY"
	}
	switch info.subresource {
	case "proxy", "exec", "attach", "portforward", "log":
		verb = "CONNECT"
	}
	return verb
}

func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(strings.TrimSpace(ct))
}
