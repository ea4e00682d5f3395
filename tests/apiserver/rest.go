package main

// REST handlers: get, list, create, update, patch, delete, deletecollection, TokenRequest.
// Semantics follow the apiserver's generic registry store (staging/src/k8s.io/apiserver/
// pkg/registry/generic/registry/store.go) over storage/etcd3: optimistic concurrency on the
// etcd mod revision, 409 Conflict for stale resourceVersions, internal retries for
// unconditional writes (GuaranteedUpdate), no-op updates that do not write, finalizers that
// turn a delete into setting deletionTimestamp.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/etcdserver/api/v3rpc/rpctypes"
	"sigs.k8s.io/yaml"
)

type restRequest struct {
	w    http.ResponseWriter
	r    *http.Request
	info *requestInfo
	rd   *resourceDef
	ns   string
	user *userInfo
}

func (q *restRequest) ctx() context.Context { return q.r.Context() }
func (q *restRequest) key() string          { return q.rd.storageKey(q.ns, q.info.name) }
func (q *restRequest) fail(err error)       { writeStatusError(q.w, q.r, err) }

// respond writes one object, or a one-row Table when the client asked for one.
func (q *restRequest) respond(code int, obj object) {
	if tv, ok := wantsTable(q.r); ok {
		writeRaw(q.w, q.r, code, tableContentType(tv), encodeTable(q.rd, q.r, tv, []object{obj}, metaString(obj, "resourceVersion"), ""))
		return
	}
	writeRaw(q.w, q.r, code, "application/json", encodeObject(q.rd, obj))
}

// storageError maps etcd failures to Status errors.
func (q *restRequest) storageError(err error) error {
	switch err {
	case errNotFound:
		return errNotFoundFor(q.rd, q.info.name)
	case errExists:
		return errAlreadyExistsFor(q.rd, q.info.name)
	case errConflict:
		return errConflictFor(q.rd, q.info.name)
	}
	return errInternal(err)
}

const maxRequestBodyBytes = 3 * 1024 * 1024 // the apiserver's MaxRequestBodyBytes

func (q *restRequest) readBody() ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(q.r.Body, maxRequestBodyBytes+1))
	if err != nil {
		return nil, errBadRequest(err.Error())
	}
	if len(body) > maxRequestBodyBytes {
		return nil, &statusError{413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728", nil}
	}
	return body, nil
}

// decodeBodyObject decodes a JSON (or YAML) object body, as the apiserver's serializers accept.
func (q *restRequest) decodeBodyObject() (object, error) {
	body, err := q.readBody()
	if err != nil {
		return nil, err
	}
	ct := mediaType(q.r.Header.Get("Content-Type"))
	switch ct {
	case "application/vnd.kubernetes.protobuf":
		if q.rd.crd {
			return nil, errUnsupportedMediaType([]string{"application/json", "application/yaml"})
		}
		obj, err := decodeProtobufObject(body)
		if err == errProtoKind {
			return nil, errUnsupportedMediaType([]string{"application/json", "application/yaml"})
		} else if err != nil {
			return nil, errBadRequest(err.Error())
		}
		return obj, nil
	case "", "application/json", "*/*":
	case "application/yaml", "application/apply-patch+yaml":
		if body, err = yaml.YAMLToJSON(body); err != nil {
			return nil, errBadRequest(err.Error())
		}
	default:
		accepted := []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"}
		if q.rd.crd {
			accepted = accepted[:2]
		}
		return nil, errUnsupportedMediaType(accepted)
	}
	var obj object
	if err := decodeJSON(body, &obj); err != nil {
		return nil, errBadRequest(fmt.Sprintf("couldn't get version/kind; json parse error: %v", err))
	}
	return obj, nil
}

// checkBodyIdentity applies the checks the apiserver makes between URL and body.
func (q *restRequest) checkBodyIdentity(obj object) error {
	if av, _ := obj["apiVersion"].(string); av != "" && av != q.rd.groupVersion() {
		return errBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", av, q.rd.groupVersion()))
	}
	if k, _ := obj["kind"].(string); k != "" && k != q.rd.kind {
		return errBadRequest(fmt.Sprintf("the kind in the data (%s) does not match the expected kind (%s)", k, q.rd.kind))
	}
	obj["apiVersion"], obj["kind"] = q.rd.groupVersion(), q.rd.kind
	meta := metadataOf(obj)
	if q.rd.namespaced {
		if ns := metaString(obj, "namespace"); ns != "" && ns != q.ns {
			return errBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
		meta["namespace"] = q.ns
	} else {
		delete(meta, "namespace")
	}
	return nil
}

var dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func validateName(rd *resourceDef, name string) error {
	if name == "" {
		return errInvalid(rd, name, "metadata.name", "Required value", "name or generateName is required")
	}
	if len(name) > 253 || !dns1123Subdomain.MatchString(name) {
		return errInvalid(rd, name, "metadata.name", "Invalid value",
			fmt.Sprintf("%q: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "+
				"and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "+
				"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')", name))
	}
	return nil
}

// ---- get / list ----

// handleGet reads from etcd for resourceVersion="" and from the watch cache otherwise, as the
// cacher does: "0" = whatever the cache holds, N = once the cache has seen N.
func (s *apiServer) handleGet(q *restRequest) {
	rv := q.r.URL.Query().Get("resourceVersion")
	var obj object
	var err error
	if rv == "" || s.cache == nil {
		atomic.AddInt64(&s.reads.EtcdGet, 1)
		obj, _, err = s.st.get(q.ctx(), q.key())
	} else {
		atomic.AddInt64(&s.reads.CacheGet, 1)
		n, perr := strconv.ParseInt(rv, 10, 64)
		if perr != nil {
			q.fail(errInvalidRV(rv))
			return
		}
		if cur, ok := s.cache.waitFresh(n); !ok {
			q.fail(errTooLargeRV(n, cur))
			return
		}
		obj, err = s.cache.get(q.key())
	}
	if err != nil {
		q.fail(q.storageError(err))
		return
	}
	q.respond(http.StatusOK, obj)
}

type listParams struct {
	labels  []labelRequirement
	fields  []fieldRequirement
	limit   int64
	rv      string
	rvMatch string
	cont    string
	timeout time.Duration
}

func parseListParams(r *http.Request) (*listParams, error) {
	q := r.URL.Query()
	p := &listParams{rv: q.Get("resourceVersion"), rvMatch: q.Get("resourceVersionMatch"), cont: q.Get("continue")}
	var err error
	if p.labels, err = parseLabelSelector(q.Get("labelSelector")); err != nil {
		return nil, errBadRequest(err.Error())
	}
	if p.fields, err = parseFieldSelector(q.Get("fieldSelector")); err != nil {
		return nil, errBadRequest(err.Error())
	}
	if v := q.Get("limit"); v != "" {
		if p.limit, err = strconv.ParseInt(v, 10, 64); err != nil || p.limit < 0 {
			return nil, errBadRequest(fmt.Sprintf("invalid limit %q", v))
		}
	}
	if v := q.Get("timeoutSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, errBadRequest(fmt.Sprintf("invalid timeoutSeconds %q", v))
		}
		p.timeout = time.Duration(n) * time.Second
	}
	if p.rv != "" && p.rv != "0" {
		if _, err := strconv.ParseInt(p.rv, 10, 64); err != nil {
			return nil, errInvalidRV(p.rv)
		}
	}
	if err := validateListOptions(p, isTrue(q.Get("watch")) || strings.Contains(r.URL.Path, "/watch/"), q); err != nil {
		return nil, err
	}
	return p, nil
}

// validateListOptions is apimachinery's ValidateListOptions (1.28, WatchList gate off); its
// errors are a 422 on ListOptions.meta.k8s.io, as the list and watch handlers return them.
func validateListOptions(p *listParams, watch bool, q url.Values) error {
	var errs []fieldErr
	forbidden := func(field, detail string) {
		errs = append(errs, fieldErr{field, "Forbidden", detail})
	}
	_, sendInitial := q["sendInitialEvents"]
	if watch {
		if sendInitial {
			forbidden("sendInitialEvents", "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")
		}
		if p.rvMatch != "" {
			forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
		}
	} else {
		if m := p.rvMatch; m != "" {
			if p.rv == "" {
				forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden unless resourceVersion is provided")
			}
			if p.cont != "" {
				forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided")
			}
			if m != "Exact" && m != "NotOlderThan" {
				errs = append(errs, fieldErr{"resourceVersionMatch", "Unsupported value",
					fmt.Sprintf(`%q: supported values: "Exact", "NotOlderThan", ""`, m)})
			}
			if m == "Exact" && p.rv == "0" {
				forbidden("resourceVersionMatch", `resourceVersionMatch "exact" is forbidden for resourceVersion "0"`)
			}
		}
		if sendInitial {
			forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list")
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errInvalidFields("ListOptions", "meta.k8s.io", "", errs)
}

// errTooLargeRV is storage.NewTooLargeResourceVersionError as the handlers return it: a 504
// Timeout that tells the client to retry in 1 s.
func errTooLargeRV(want, cur int64) error {
	return &statusError{504, "Timeout", fmt.Sprintf("Too large resource version: %d, current: %d", want, cur),
		map[string]interface{}{"causes": []map[string]string{{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}},
			"retryAfterSeconds": 1}}
}

func errInvalidRV(rv string) error {
	return &statusError{500, "InternalError", fmt.Sprintf("Internal error occurred: invalid resource version: %q", rv), nil}
}

func (p *listParams) match(obj object) bool {
	return labelsMatch(p.labels, labelsOf(obj)) && fieldsMatch(p.fields, obj)
}

// continueToken is the apiserver's: base64 of {"v":"meta.k8s.io/v1","rv":N,"start":KEY}
// where KEY is relative to the list's key prefix.
type continueToken struct {
	APIVersion      string `json:"v"`
	ResourceVersion int64  `json:"rv"`
	StartKey        string `json:"start"`
}

func errExpiredContinue() error {
	return &statusError{410, "Expired", "The provided continue parameter is too old to display a consistent list result. " +
		"You can start a new list without the continue parameter, or use the continue token in this response to retrieve " +
		"the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that " +
		"were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.", nil}
}

// handleList serves a LIST the way 1.28's cacher and etcd3 store split the work
// (cacher.GetList / shouldDelegateList, etcd3 store.GetList):
//   - from the watch cache: resourceVersion "0" (limit ignored, never paginated), or N with
//     match ""/NotOlderThan and no limit (after the cache has seen N);
//   - from etcd: resourceVersion "" (a consistent read: a range read at the current
//     revision), any continue, any limit with resourceVersion != "0", match Exact. There
//     N with Exact, or with no match and a limit (the legacy case), reads at revision N;
//     N with NotOlderThan reads the latest and fails with 504 if N is in the future.
func (s *apiServer) handleList(q *restRequest) {
	p, err := parseListParams(q.r)
	if err != nil {
		q.fail(err)
		return
	}
	prefix := q.rd.storagePrefix(q.ns)
	fromEtcd := p.rv == "" || p.cont != "" || (p.limit > 0 && p.rv != "0") ||
		(p.rvMatch != "" && p.rvMatch != "NotOlderThan") || s.cache == nil
	if !fromEtcd {
		atomic.AddInt64(&s.reads.CacheList, 1)
		if p.rv != "0" {
			n, _ := strconv.ParseInt(p.rv, 10, 64)
			if cur, ok := s.cache.waitFresh(n); !ok {
				q.fail(errTooLargeRV(n, cur))
				return
			}
		}
		items, rev, err := s.cache.list(prefix, p.match)
		if err != nil {
			q.fail(errInternal(err))
			return
		}
		q.writeList(items, rev, "", 0)
		return
	}

	atomic.AddInt64(&s.reads.EtcdList, 1)
	var start string
	var rev, notOlderThan int64
	if p.cont != "" {
		if p.rv != "" && p.rv != "0" {
			q.fail(errBadRequest("specifying resource version is not allowed when using continue"))
			return
		}
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(p.cont, "="))
		var tok continueToken
		if err != nil {
			q.fail(errBadRequest(fmt.Sprintf("invalid continue token: continue key is not valid: %v", err)))
			return
		}
		if json.Unmarshal(raw, &tok) != nil || tok.APIVersion != "meta.k8s.io/v1" {
			q.fail(errBadRequest("invalid continue token: continue key is not valid: server does not recognize this encoded version"))
			return
		}
		if tok.ResourceVersion == 0 {
			q.fail(errBadRequest("invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))
			return
		}
		start, rev = prefix+strings.TrimPrefix(tok.StartKey, "/"), tok.ResourceVersion
	} else if p.rv != "" && p.rv != "0" {
		n, _ := strconv.ParseInt(p.rv, 10, 64)
		switch {
		case p.rvMatch == "NotOlderThan":
			notOlderThan = n
		case p.rvMatch == "Exact" || p.limit > 0:
			rev = n
		}
	}
	items, rev, next, remaining, err := s.st.listPage(q.ctx(), prefix, start, rev, p.limit, p.match)
	if err == rpctypes.ErrCompacted {
		if p.cont != "" {
			q.fail(errExpiredContinue())
		} else {
			q.fail(&statusError{410, "Expired", fmt.Sprintf("too old resource version: %s (%d)", p.rv, rev), nil})
		}
		return
	}
	if err != nil {
		q.fail(errInternal(err))
		return
	}
	if notOlderThan > rev {
		q.fail(errTooLargeRV(notOlderThan, rev))
		return
	}
	cont := ""
	if next != "" {
		b, _ := json.Marshal(continueToken{"meta.k8s.io/v1", rev, strings.TrimPrefix(next, prefix)})
		cont = base64.RawURLEncoding.EncodeToString(b)
	}
	q.writeList(items, rev, cont, remaining)
}

func (q *restRequest) writeList(items []object, rev int64, cont string, remaining int64) {
	rvs := strconv.FormatInt(rev, 10)
	if tv, ok := wantsTable(q.r); ok {
		writeRaw(q.w, q.r, http.StatusOK, tableContentType(tv), encodeTable(q.rd, q.r, tv, items, rvs, cont))
		return
	}
	writeRaw(q.w, q.r, http.StatusOK, "application/json", encodeList(q.rd, items, rvs, cont, remaining))
}

// ---- create ----

func (s *apiServer) namespaceExists(ctx context.Context, ns string) (bool, error) {
	_, _, err := s.st.get(ctx, "/registry/namespaces/"+ns)
	if err == errNotFound {
		return false, nil
	}
	return err == nil, err
}

func (s *apiServer) handleCreate(q *restRequest) {
	obj, err := q.decodeBodyObject()
	if err != nil {
		q.fail(err)
		return
	}
	if err := q.checkBodyIdentity(obj); err != nil {
		q.fail(err)
		return
	}
	if code, err := s.createObject(q, obj); err != nil {
		q.fail(err)
	} else {
		q.respond(code, obj)
	}
}

// createObject stores a new object (filled in place) and returns the status code (201).
func (s *apiServer) createObject(q *restRequest, obj object) (int, error) {
	meta := metadataOf(obj)
	name := metaString(obj, "name")
	if name == "" {
		if gen := metaString(obj, "generateName"); gen != "" {
			name = gen + randomSuffix(5)
			meta["name"] = name
		}
	}
	q.info.name = name
	if err := validateName(q.rd, name); err != nil {
		return 0, err
	}
	if rv := metaString(obj, "resourceVersion"); rv != "" {
		// storage/etcd3 refuses it; the client sees an internal error, as from the apiserver.
		return 0, errInternal(fmt.Errorf("resourceVersion should not be set on objects to be created"))
	}
	// NamespaceLifecycle admission: no objects in a namespace that does not exist.
	if q.rd.namespaced {
		ok, err := s.namespaceExists(q.ctx(), q.ns)
		if err != nil {
			return 0, errInternal(err)
		}
		if !ok {
			return 0, &statusError{404, "NotFound", fmt.Sprintf("namespaces %q not found", q.ns),
				map[string]interface{}{"name": q.ns, "kind": "namespaces"}}
		}
	}
	// BeforeCreate + the type's PrepareForCreate.
	meta["uid"] = newUID()
	meta["creationTimestamp"] = nowTimestamp()
	delete(meta, "deletionTimestamp")
	delete(meta, "deletionGracePeriodSeconds")
	delete(meta, "generation")
	delete(meta, "selfLink")
	if q.rd.tracksGeneration {
		meta["generation"] = json.Number("1")
	}
	if q.rd.crd && q.rd.statusSubresource {
		delete(obj, "status") // status is written through /status only
	}
	applyCreateDefaults(q.rd, obj)
	key := q.rd.storageKey(q.ns, name)
	rev, err := s.st.create(q.ctx(), key, obj)
	if err != nil {
		return 0, q.storageError(err)
	}
	meta["resourceVersion"] = strconv.FormatInt(rev, 10)
	return http.StatusCreated, nil
}

func randomSuffix(n int) string {
	// utilrand.String: consonants and digits without vowels and confusable characters.
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := []byte(newUID())
	out := make([]byte, n)
	for i := range out {
		out[i] = alphabet[int(b[i*3])%len(alphabet)]
	}
	return string(out)
}

// ---- update / patch ----

// prepareUpdate builds the object to store from the stored one and the client's, as
// BeforeUpdate and the type's PrepareForUpdate do: identity and system metadata come from
// the stored object; a main-resource write cannot change status (when there is a status
// subresource); a /status write changes only status; generation is bumped when anything
// outside metadata (and status) changed.
func prepareUpdate(rd *resourceDef, subresource string, old, in object) object {
	var out object
	if subresource == "status" {
		out = deepCopy(old).(map[string]interface{})
		if st, ok := in["status"]; ok {
			out["status"] = st
		} else {
			delete(out, "status")
		}
		return out
	}
	out = deepCopy(in).(map[string]interface{})
	out["apiVersion"], out["kind"] = old["apiVersion"], old["kind"]
	oldMeta, meta := metadataOf(old), metadataOf(out)
	for _, f := range []string{"name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
		"deletionGracePeriodSeconds", "generation", "resourceVersion"} {
		if v, ok := oldMeta[f]; ok {
			meta[f] = v
		} else {
			delete(meta, f)
		}
	}
	delete(meta, "selfLink")
	if rd.statusSubresource {
		if st, ok := old["status"]; ok {
			out["status"] = st
		} else {
			delete(out, "status")
		}
	}
	if rd.resource == "namespaces" {
		out["spec"] = old["spec"]
	}
	if rd.tracksGeneration && !jsonEqual(withoutMetaStatus(old, rd), withoutMetaStatus(out, rd)) {
		g, _ := strconv.ParseInt(fmt.Sprint(oldMeta["generation"]), 10, 64)
		meta["generation"] = json.Number(strconv.FormatInt(g+1, 10))
	}
	return out
}

func withoutMetaStatus(obj object, rd *resourceDef) object {
	c := object{}
	for k, v := range obj {
		if k == "metadata" || (k == "status" && rd.statusSubresource) {
			continue
		}
		c[k] = v
	}
	return c
}

// guaranteedUpdate reads the object, lets mutate build the new one, and writes it with a
// compare-and-swap on the mod revision it read. A conflict is returned to the client when
// the caller pinned a resourceVersion (mutate returns pinned=true), and retried otherwise,
// like storage.GuaranteedUpdate. It returns the stored object.
func (s *apiServer) guaranteedUpdate(q *restRequest, mutate func(cur object, curRev int64) (next object, pinned bool, err error)) (object, error) {
	key := q.key()
	for attempt := 0; ; attempt++ {
		cur, curRev, err := s.st.get(q.ctx(), key)
		if err != nil {
			return nil, q.storageError(err)
		}
		next, pinned, err := mutate(cur, curRev)
		if err != nil {
			return nil, err
		}
		if pinned && metaString(next, "resourceVersion") != strconv.FormatInt(curRev, 10) {
			return nil, errConflictFor(q.rd, q.info.name)
		}
		if err := validateNoNewFinalizers(q.rd, cur, next); err != nil {
			return nil, err
		}
		metadataOf(next)["resourceVersion"] = strconv.FormatInt(curRev, 10)
		// A write that changes nothing is not written (GuaranteedUpdate compares the bytes):
		// the client gets the stored object back, resourceVersion unchanged.
		if jsonEqual(cur, next) {
			return cur, nil
		}
		// The last finalizer removed from an object being deleted: the update deletes it.
		if metaString(next, "deletionTimestamp") != "" && len(finalizersOf(next)) == 0 {
			if _, err := s.st.delete(q.ctx(), key, curRev); err == errConflict {
				if pinned || attempt > 1000 {
					return nil, errConflictFor(q.rd, q.info.name)
				}
				continue
			} else if err != nil {
				return nil, errInternal(err)
			}
			return next, nil
		}
		rev, err := s.st.update(q.ctx(), key, next, curRev)
		if err == errConflict {
			if pinned || attempt > 1000 {
				return nil, errConflictFor(q.rd, q.info.name)
			}
			continue
		}
		if err != nil {
			return nil, errInternal(err)
		}
		metadataOf(next)["resourceVersion"] = strconv.FormatInt(rev, 10)
		return next, nil
	}
}

// validateNoNewFinalizers is ValidateObjectMetaUpdate's rule for objects being deleted:
// finalizers can be removed, not added.
func validateNoNewFinalizers(rd *resourceDef, old, next object) error {
	if metaString(old, "deletionTimestamp") == "" {
		return nil
	}
	had := map[string]bool{}
	for _, f := range finalizersOf(old) {
		had[fmt.Sprint(f)] = true
	}
	var extra []string
	for _, f := range finalizersOf(next) {
		if s := fmt.Sprint(f); !had[s] {
			extra = append(extra, s)
			had[s] = true
		}
	}
	if len(extra) == 0 {
		return nil
	}
	sort.Strings(extra)
	return errInvalid(rd, metaString(old, "name"), "metadata.finalizers", "Forbidden",
		fmt.Sprintf("no new finalizers can be added if the object is being deleted, found new finalizers %#v", extra))
}

func (s *apiServer) handleUpdate(q *restRequest) {
	in, err := q.decodeBodyObject()
	if err != nil {
		q.fail(err)
		return
	}
	if err := q.checkBodyIdentity(in); err != nil {
		q.fail(err)
		return
	}
	if name := metaString(in, "name"); name != q.info.name {
		q.fail(errBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", name, q.info.name)))
		return
	}
	// Every type here allows unconditional update: with no resourceVersion in the body the
	// write applies to whatever is stored; with one, it must still be current (else 409).
	pinned := metaString(in, "resourceVersion") != ""
	out, err := s.guaranteedUpdate(q, func(cur object, curRev int64) (object, bool, error) {
		next := prepareUpdate(q.rd, q.info.subresource, cur, in)
		metadataOf(next)["resourceVersion"] = metaString(in, "resourceVersion")
		return next, pinned, nil
	})
	if err != nil {
		q.fail(err)
		return
	}
	q.respond(http.StatusOK, out)
}

func (s *apiServer) handlePatch(q *restRequest) {
	ct := mediaType(q.r.Header.Get("Content-Type"))
	accepted := []string{"application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"}
	if !q.rd.crd {
		// Built-in types also take strategic merge patches; custom resources do not (415).
		accepted = []string{"application/json-patch+json", "application/merge-patch+json",
			"application/strategic-merge-patch+json", "application/apply-patch+yaml"}
	}
	known := false
	for _, a := range accepted {
		known = known || a == ct
	}
	if !known {
		q.fail(errUnsupportedMediaType(accepted))
		return
	}
	body, err := q.readBody()
	if err != nil {
		q.fail(err)
		return
	}
	if ct == "application/apply-patch+yaml" {
		s.handleApply(q, body)
		return
	}
	var patch interface{}
	if err := decodeJSON(body, &patch); err != nil {
		q.fail(errBadRequest(fmt.Sprintf("error decoding patch: %v", err)))
		return
	}
	out, err := s.guaranteedUpdate(q, func(cur object, curRev int64) (object, bool, error) {
		var patched interface{}
		var perr error
		if ct == "application/json-patch+json" {
			patched, perr = applyJSONPatch(deepCopy(cur), patch)
		} else {
			// Merge and strategic merge patches are applied as RFC 7386 merge patches: the same
			// result for maps and scalars; strategic lists merge by key, these replace.
			patched = mergePatch(deepCopy(cur), patch)
		}
		if perr != nil {
			return nil, false, &statusError{422, "Invalid", perr.Error(), nil}
		}
		pm, ok := patched.(map[string]interface{})
		if !ok {
			return nil, false, errBadRequest("patch did not produce an object")
		}
		if name := metaString(pm, "name"); name != q.info.name {
			return nil, false, errBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", name, q.info.name))
		}
		// A resourceVersion the patch sets is a precondition; one it leaves alone is the
		// current one, and conflicts are retried.
		rv := metaString(pm, "resourceVersion")
		pinned := rv != strconv.FormatInt(curRev, 10)
		next := prepareUpdate(q.rd, q.info.subresource, cur, pm)
		metadataOf(next)["resourceVersion"] = rv
		return next, pinned, nil
	})
	if err != nil {
		q.fail(err)
		return
	}
	q.respond(http.StatusOK, out)
}

// handleApply is a simplified server-side apply: it needs a fieldManager like the real one,
// creates the object when absent (201) and otherwise merges the applied configuration into it
// (no field ownership: fields dropped from the configuration are not removed).
func (s *apiServer) handleApply(q *restRequest, body []byte) {
	if q.r.URL.Query().Get("fieldManager") == "" {
		q.fail(&statusError{422, "Invalid", `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`, nil})
		return
	}
	jsonBody, err := yaml.YAMLToJSON(body)
	if err != nil {
		q.fail(errBadRequest(err.Error()))
		return
	}
	var applied object
	if err := decodeJSON(jsonBody, &applied); err != nil {
		q.fail(errBadRequest(err.Error()))
		return
	}
	if err := q.checkBodyIdentity(applied); err != nil {
		q.fail(err)
		return
	}
	if _, _, err := s.st.get(q.ctx(), q.key()); err == errNotFound {
		if q.info.subresource != "" {
			q.fail(errNotFoundFor(q.rd, q.info.name))
			return
		}
		if code, err := s.createObject(q, applied); err != nil {
			q.fail(err)
		} else {
			q.respond(code, applied)
		}
		return
	}
	out, err := s.guaranteedUpdate(q, func(cur object, curRev int64) (object, bool, error) {
		pm := mergePatch(deepCopy(cur), deepCopy(applied)).(map[string]interface{})
		rv := metaString(applied, "resourceVersion")
		next := prepareUpdate(q.rd, q.info.subresource, cur, pm)
		metadataOf(next)["resourceVersion"] = rv
		return next, rv != "", nil
	})
	if err != nil {
		q.fail(err)
		return
	}
	q.respond(http.StatusOK, out)
}

// ---- delete ----

type deleteOptions struct {
	Preconditions *struct {
		UID             *string `json:"uid"`
		ResourceVersion *string `json:"resourceVersion"`
	} `json:"preconditions"`
}

func (s *apiServer) readDeleteOptions(q *restRequest) (*deleteOptions, error) {
	body, err := q.readBody()
	if err != nil {
		return nil, err
	}
	opts := &deleteOptions{}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, opts); err != nil {
			return nil, errBadRequest(err.Error())
		}
	}
	return opts, nil
}

func (s *apiServer) handleDelete(q *restRequest) {
	if q.rd.resource == "namespaces" {
		switch q.info.name {
		case "default", "kube-system", "kube-public": // NamespaceLifecycle's immortal namespaces
			q.fail(&statusError{403, "Forbidden", fmt.Sprintf("namespaces %q is forbidden: this namespace may not be deleted", q.info.name),
				map[string]interface{}{"name": q.info.name, "kind": "namespaces"}})
			return
		}
	}
	opts, err := s.readDeleteOptions(q)
	if err != nil {
		q.fail(err)
		return
	}
	out, deleted, err := s.deleteObject(q, q.info.name, opts)
	if err != nil {
		q.fail(err)
		return
	}
	if q.rd.returnDeletedObject || !deleted {
		q.respond(http.StatusOK, out)
		return
	}
	writeRaw(q.w, q.r, http.StatusOK, "application/json", successStatus(q.rd, out))
}

func successStatus(rd *resourceDef, obj object) []byte {
	details := map[string]interface{}{"name": metaString(obj, "name"), "kind": rd.resource, "uid": metaString(obj, "uid")}
	if rd.group != "" {
		details["group"] = rd.group
	}
	var buf strings.Builder
	d, _ := json.Marshal(details)
	fmt.Fprintf(&buf, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":%s}`+"\n", d)
	return []byte(buf.String())
}

// deleteObject deletes one object, or, when it has finalizers, marks it with
// deletionTimestamp and leaves it for its finalizers. deleted reports which.
func (s *apiServer) deleteObject(q *restRequest, name string, opts *deleteOptions) (object, bool, error) {
	key := q.rd.storageKey(q.ns, name)
	for {
		cur, curRev, err := s.st.get(q.ctx(), key)
		if err == errNotFound {
			return nil, false, errNotFoundFor(q.rd, name)
		} else if err != nil {
			return nil, false, errInternal(err)
		}
		if pc := opts.Preconditions; pc != nil {
			if pc.UID != nil && *pc.UID != metaString(cur, "uid") {
				return nil, false, &statusError{409, "Conflict", fmt.Sprintf("Operation cannot be fulfilled on %s %q: Precondition failed: UID in precondition: %s, UID in object meta: %s",
					q.rd.groupResource(), name, *pc.UID, metaString(cur, "uid")), resourceDetails(q.rd, name)}
			}
			if pc.ResourceVersion != nil && *pc.ResourceVersion != metaString(cur, "resourceVersion") {
				return nil, false, &statusError{409, "Conflict", fmt.Sprintf("Operation cannot be fulfilled on %s %q: Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s",
					q.rd.groupResource(), name, *pc.ResourceVersion, metaString(cur, "resourceVersion")), resourceDetails(q.rd, name)}
			}
		}
		if len(finalizersOf(cur)) > 0 {
			if metaString(cur, "deletionTimestamp") != "" {
				return cur, false, nil // already being deleted: nothing changes
			}
			// markAsDeleting: deletionTimestamp now, grace period 0, and generation bumped for
			// types that track it (the object's spec is, in effect, "deleted").
			next := deepCopy(cur).(map[string]interface{})
			meta := metadataOf(next)
			meta["deletionTimestamp"] = nowTimestamp()
			meta["deletionGracePeriodSeconds"] = json.Number("0")
			if g, err := strconv.ParseInt(fmt.Sprint(meta["generation"]), 10, 64); err == nil && g > 0 {
				meta["generation"] = json.Number(strconv.FormatInt(g+1, 10))
			}
			rev, err := s.st.update(q.ctx(), key, next, curRev)
			if err == errConflict {
				continue
			} else if err != nil {
				return nil, false, errInternal(err)
			}
			metadataOf(next)["resourceVersion"] = strconv.FormatInt(rev, 10)
			return next, false, nil
		}
		if q.rd.resource == "namespaces" {
			// The namespace controller's job, done synchronously: delete what the namespace holds.
			if err := s.deleteNamespaceContents(q.ctx(), name); err != nil {
				return nil, false, errInternal(err)
			}
		}
		if _, err := s.st.delete(q.ctx(), key, curRev); err == errConflict {
			continue
		} else if err != nil {
			return nil, false, errInternal(err)
		}
		if q.rd.resource == "namespaces" {
			metadataOf(cur)["deletionTimestamp"] = nowTimestamp()
			cur["status"] = map[string]interface{}{"phase": "Terminating"}
		}
		return cur, true, nil
	}
}

func (s *apiServer) deleteNamespaceContents(ctx context.Context, ns string) error {
	for _, rd := range resources {
		if rd.namespaced {
			if _, err := s.st.cli.Delete(ctx, rd.storagePrefix(ns), clientv3.WithPrefix()); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *apiServer) handleDeleteCollection(q *restRequest) {
	opts, err := s.readDeleteOptions(q)
	if err != nil {
		q.fail(err)
		return
	}
	p, err := parseListParams(q.r)
	if err != nil {
		q.fail(err)
		return
	}
	items, rev, _, _, err := s.st.listPage(q.ctx(), q.rd.storagePrefix(q.ns), "", 0, 0, p.match)
	if err != nil {
		q.fail(errInternal(err))
		return
	}
	var out []object
	for _, it := range items {
		sub := *q
		sub.ns = metaString(it, "namespace")
		obj, _, err := s.deleteObject(&sub, metaString(it, "name"), opts)
		if se, ok := err.(*statusError); ok && se.code == 404 {
			continue // deleted meanwhile
		} else if err != nil {
			q.fail(err)
			return
		}
		out = append(out, obj)
	}
	writeRaw(q.w, q.r, http.StatusOK, "application/json", encodeList(q.rd, out, strconv.FormatInt(rev, 10), "", 0))
}

// ---- TokenRequest (POST /api/v1/namespaces/NS/serviceaccounts/NAME/token) ----

func (s *apiServer) serveTokenRequest(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBodyBytes))
	if err != nil {
		writeStatusError(w, r, errBadRequest(err.Error()))
		return
	}
	var tr struct {
		Spec struct {
			Audiences         []string `json:"audiences"`
			ExpirationSeconds *int64   `json:"expirationSeconds"`
			BoundObjectRef    *struct {
				Kind string `json:"kind"`
				Name string `json:"name"`
				UID  string `json:"uid"`
			} `json:"boundObjectRef"`
		} `json:"spec"`
	}
	if mediaType(r.Header.Get("Content-Type")) == "application/vnd.kubernetes.protobuf" {
		obj, err := decodeProtobufObject(body)
		if err != nil {
			writeStatusError(w, r, errBadRequest(err.Error()))
			return
		}
		body, _ = json.Marshal(obj)
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &tr); err != nil {
			writeStatusError(w, r, errBadRequest(err.Error()))
			return
		}
	}
	exp := int64(3600)
	if tr.Spec.ExpirationSeconds != nil {
		exp = *tr.Spec.ExpirationSeconds
	}
	if exp < 600 {
		writeStatusError(w, r, &statusError{422, "Invalid", fmt.Sprintf(`TokenRequest.authentication.k8s.io %q is invalid: spec.expirationSeconds: Invalid value: %d: may not specify a duration less than 10 minutes`, info.name, exp), nil})
		return
	}
	auds := tr.Spec.Audiences
	if len(auds) == 0 {
		auds = []string{defaultIssuer}
	}
	var pod *objectRef
	if ref := tr.Spec.BoundObjectRef; ref != nil && ref.Kind == "Pod" {
		uid := ref.UID
		if uid == "" {
			uid = stableUID("pod", info.namespace, ref.Name)
		}
		pod = &objectRef{Name: ref.Name, UID: uid}
	}
	tok, expiry, err := s.signer.mint(info.namespace, info.name, pod, time.Duration(exp)*time.Second, auds)
	if err != nil {
		writeStatusError(w, r, errInternal(err))
		return
	}
	spec := map[string]interface{}{"audiences": auds, "expirationSeconds": exp, "boundObjectRef": tr.Spec.BoundObjectRef}
	resp := map[string]interface{}{
		"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
		"metadata": map[string]interface{}{"name": info.name, "namespace": info.namespace, "creationTimestamp": nil},
		"spec":     spec,
		"status":   map[string]interface{}{"token": tok, "expirationTimestamp": expiry.UTC().Format(time.RFC3339)},
	}
	b, _ := json.Marshal(resp)
	writeRaw(w, r, http.StatusCreated, "application/json", append(b, '\n'))
}
