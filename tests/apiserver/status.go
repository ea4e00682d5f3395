package main

// metav1.Status error bodies and response writing, as k8s.io/apimachinery/pkg/api/errors and
// the apiserver's responsewriters produce them.

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

type statusError struct {
	code    int
	reason  string
	message string
	details map[string]interface{} // name, group, kind (= resource), causes
}

func (e *statusError) Error() string { return e.message }

// body renders the error as the apiserver does, field order included.
func (e *statusError) body() []byte {
	type details struct {
		Name   string      `json:"name,omitempty"`
		Group  string      `json:"group,omitempty"`
		Kind   string      `json:"kind,omitempty"`
		UID    string      `json:"uid,omitempty"`
		Causes interface{} `json:"causes,omitempty"`
		Retry  int         `json:"retryAfterSeconds,omitempty"`
	}
	type status struct {
		Kind       string            `json:"kind"`
		APIVersion string            `json:"apiVersion"`
		Metadata   map[string]string `json:"metadata"`
		Status     string            `json:"status"`
		Message    string            `json:"message"`
		Reason     string            `json:"reason,omitempty"`
		Details    *details          `json:"details,omitempty"`
		Code       int               `json:"code"`
	}
	s := status{Kind: "Status", APIVersion: "v1", Metadata: map[string]string{}, Status: "Failure",
		Message: e.message, Reason: e.reason, Code: e.code}
	if e.details != nil {
		d := &details{}
		d.Name, _ = e.details["name"].(string)
		d.Group, _ = e.details["group"].(string)
		d.Kind, _ = e.details["kind"].(string)
		d.Causes = e.details["causes"]
		d.Retry, _ = e.details["retryAfterSeconds"].(int)
		s.Details = d
	}
	b, _ := json.Marshal(s)
	return b
}

func resourceDetails(rd *resourceDef, name string) map[string]interface{} {
	return map[string]interface{}{"name": name, "group": rd.group, "kind": rd.resource}
}

func errNotFoundFor(rd *resourceDef, name string) *statusError {
	return &statusError{404, "NotFound", fmt.Sprintf("%s %q not found", rd.groupResource(), name), resourceDetails(rd, name)}
}

func errAlreadyExistsFor(rd *resourceDef, name string) *statusError {
	return &statusError{409, "AlreadyExists", fmt.Sprintf("%s %q already exists", rd.groupResource(), name), resourceDetails(rd, name)}
}

func errConflictFor(rd *resourceDef, name string) *statusError {
	return &statusError{409, "Conflict", fmt.Sprintf("Operation cannot be fulfilled on %s %q: "+
		"the object has been modified; please apply your changes to the latest version and try again",
		rd.groupResource(), name), resourceDetails(rd, name)}
}

func errBadRequest(msg string) *statusError {
	return &statusError{400, "BadRequest", msg, nil}
}

// fieldErr is one field.Error: its path, type ("Required value", "Forbidden", ...) and detail.
type fieldErr struct{ field, errType, detail string }

// causeReasons maps a field.ErrorType's string to its CauseType.
var causeReasons = map[string]string{
	"Required value": "FieldValueRequired", "Invalid value": "FieldValueInvalid", "Forbidden": "FieldValueForbidden",
	"Unsupported value": "FieldValueNotSupported", "Duplicate value": "FieldValueDuplicate", "Not found": "FieldValueNotFound",
}

// errInvalidFields is apierrors.NewInvalid: `Kind.group "name" is invalid: field: Type: detail`,
// several errors bracketed and comma-separated.
func errInvalidFields(kind, group, name string, errs []fieldErr) *statusError {
	qualifiedKind := kind
	if group != "" {
		qualifiedKind = kind + "." + group
	}
	var msgs []string
	var causes []map[string]string
	for _, e := range errs {
		msgs = append(msgs, fmt.Sprintf("%s: %s: %s", e.field, e.errType, e.detail))
		causes = append(causes, map[string]string{"reason": causeReasons[e.errType], "message": e.errType + ": " + e.detail, "field": e.field})
	}
	msg := msgs[0]
	if len(msgs) > 1 {
		msg = "[" + strings.Join(msgs, ", ") + "]"
	}
	return &statusError{422, "Invalid", fmt.Sprintf("%s %q is invalid: %s", qualifiedKind, name, msg),
		map[string]interface{}{"name": name, "group": group, "kind": kind, "causes": causes}}
}

// errInvalid is a 422 for one field error, e.g. `DataJob.batch.company.com "" is invalid:
// metadata.name: Required value: name or generateName is required`.
func errInvalid(rd *resourceDef, name, field, errType, detail string) *statusError {
	return errInvalidFields(rd.kind, rd.group, name, []fieldErr{{field, errType, detail}})
}

func errMethodNotAllowed() *statusError {
	return &statusError{405, "MethodNotAllowed", "the server does not allow this method on the requested resource", map[string]interface{}{}}
}

func errUnsupportedMediaType(accepted []string) *statusError {
	return &statusError{415, "UnsupportedMediaType",
		"the body of the request was in an unknown format - accepted media types include: " + strings.Join(accepted, ", "), nil}
}

func errInternal(err error) *statusError {
	return &statusError{500, "InternalError", fmt.Sprintf("Internal error occurred: %v", err), nil}
}

// errUnauthorized is what the authentication filter writes (responsewriters.Unauthorized).
var errUnauthorized = &statusError{401, "Unauthorized", "Unauthorized", nil}

// errNotFoundPath is the 404 for an unknown URL: the apiserver's NotFound handler writes a
// Status with reason NotFound and message "the server could not find the requested resource".
var errNotFoundPath = &statusError{404, "NotFound", "the server could not find the requested resource",
	map[string]interface{}{}}

func writeStatusError(w http.ResponseWriter, r *http.Request, err error) {
	se, ok := err.(*statusError)
	if !ok {
		se = errInternal(err)
	}
	// A retry period in the details is also a Retry-After header (responsewriters.ErrorNegotiated).
	if n, ok := se.details["retryAfterSeconds"].(int); ok && n > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(n))
	}
	// An empty details map renders as "details":{}, as in the NotFound handler's body.
	writeRaw(w, r, se.code, "application/json", se.body())
}

// gzipThreshold is the apiserver's defaultGzipThresholdBytes: responses of at least 128 KiB
// are gzip-compressed for clients that accept it (APIResponseCompression, on by default).
const gzipThreshold = 128 * 1024

// writeRaw writes a complete, non-streaming response the way the apiserver's
// deferredResponseWriter does: Content-Length for small bodies, gzip for large ones.
func writeRaw(w http.ResponseWriter, r *http.Request, code int, contentType string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	if len(body) >= gzipThreshold && acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		h.Set("Vary", "Accept-Encoding")
		w.WriteHeader(code)
		gz, _ := gzip.NewWriterLevel(w, gzip.DefaultCompression)
		_, _ = gz.Write(body)
		_ = gz.Close()
		return
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func acceptsGzip(r *http.Request) bool {
	for _, enc := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if strings.TrimSpace(strings.SplitN(enc, ";", 2)[0]) == "gzip" {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, r *http.Request, code int, v interface{}) {
	body, err := json.Marshal(v)
	if err != nil {
		writeStatusError(w, r, errInternal(err))
		return
	}
	writeRaw(w, r, code, "application/json", body)
}
