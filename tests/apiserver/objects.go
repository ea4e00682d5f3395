package main

// Object helpers: metadata, serialisation in the apiserver's field order, defaults, selectors.

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

func metadataOf(obj object) map[string]interface{} {
	m, ok := obj["metadata"].(map[string]interface{})
	if !ok {
		m = map[string]interface{}{}
		obj["metadata"] = m
	}
	return m
}

func metaString(obj object, field string) string {
	s, _ := metadataOf(obj)[field].(string)
	return s
}

func labelsOf(obj object) map[string]string {
	out := map[string]string{}
	if m, ok := metadataOf(obj)["labels"].(map[string]interface{}); ok {
		for k, v := range m {
			out[k], _ = v.(string)
		}
	}
	return out
}

func finalizersOf(obj object) []interface{} {
	f, _ := metadataOf(obj)["finalizers"].([]interface{})
	return f
}

func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// nowTimestamp is metav1.Now() as serialised: RFC 3339, UTC, whole seconds.
func nowTimestamp() string { return time.Now().UTC().Format(time.RFC3339) }

// deepCopy copies a JSON object (maps, slices, scalars).
func deepCopy(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		m := make(map[string]interface{}, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []interface{}:
		s := make([]interface{}, len(t))
		for i, x := range t {
			s[i] = deepCopy(x)
		}
		return s
	}
	return v
}

func jsonEqual(a, b interface{}) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func decodeJSON(data []byte, v interface{}) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("unexpected data after the JSON value")
	}
	return nil
}

// Field order of typed (core) objects: the apiserver serialises Go structs, so fields come in
// declaration order; custom resources are unstructured maps and come out sorted.
var (
	topLevelOrder   = []string{"kind", "apiVersion", "metadata", "spec", "immutable", "data", "binaryData", "status"}
	objectMetaOrder = []string{"name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
		"generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
		"annotations", "ownerReferences", "finalizers", "managedFields"}
	listMetaOrder = []string{"selfLink", "resourceVersion", "continue", "remainingItemCount"}
)

// marshalOrdered writes a JSON object with the keys in `order` first, then the rest sorted;
// sub-objects named in `nested` get their own order.
func marshalOrdered(buf *bytes.Buffer, m map[string]interface{}, order []string, nested map[string][]string) error {
	keys := make([]string, 0, len(m))
	seen := map[string]bool{}
	for _, k := range order {
		if _, ok := m[k]; ok {
			keys = append(keys, k)
			seen[k] = true
		}
	}
	var rest []string
	for k := range m {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	keys = append(keys, rest...)
	buf.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		if sub, ok := m[k].(map[string]interface{}); ok && nested[k] != nil {
			if err := marshalOrdered(buf, sub, nested[k], nil); err != nil {
				return err
			}
			continue
		}
		vb, err := json.Marshal(m[k])
		if err != nil {
			return err
		}
		buf.Write(vb)
	}
	buf.WriteByte('}')
	return nil
}

// encodeObject serialises one object for a response body (with the serializer's newline).
func encodeObject(rd *resourceDef, obj object) []byte {
	var buf bytes.Buffer
	writeObjectTo(&buf, rd, obj)
	buf.WriteByte('\n')
	return buf.Bytes()
}

func writeObjectTo(buf *bytes.Buffer, rd *resourceDef, obj object) {
	if rd == nil || rd.crd {
		b, _ := json.Marshal(obj)
		buf.Write(b)
		return
	}
	_ = marshalOrdered(buf, obj, topLevelOrder, map[string][]string{"metadata": objectMetaOrder})
}

// encodeList serialises a List. Typed lists carry no kind/apiVersion on their items;
// unstructured (CR) lists do, and their list metadata always has "continue".
func encodeList(rd *resourceDef, items []object, rv, cont string, remaining int64) []byte {
	var buf bytes.Buffer
	if rd.crd {
		meta := map[string]interface{}{"continue": cont, "resourceVersion": rv}
		if remaining > 0 {
			meta["remainingItemCount"] = remaining
		}
		if items == nil {
			items = []object{}
		}
		b, _ := json.Marshal(map[string]interface{}{
			"apiVersion": rd.groupVersion(), "kind": rd.listKind, "metadata": meta, "items": items})
		buf.Write(b)
		buf.WriteByte('\n')
		return buf.Bytes()
	}
	meta := map[string]interface{}{"resourceVersion": rv}
	if cont != "" {
		meta["continue"] = cont
	}
	if remaining > 0 {
		meta["remainingItemCount"] = remaining
	}
	fmt.Fprintf(&buf, `{"kind":%q,"apiVersion":%q,"metadata":`, rd.listKind, rd.groupVersion())
	_ = marshalOrdered(&buf, meta, listMetaOrder, nil)
	buf.WriteString(`,"items":[`)
	for i, it := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		item := make(object, len(it))
		for k, v := range it {
			if k != "kind" && k != "apiVersion" {
				item[k] = v
			}
		}
		writeObjectTo(&buf, rd, item)
	}
	buf.WriteString("]}\n")
	return buf.Bytes()
}

func newNamespaceObject(name string) object {
	return object{
		"kind": "Namespace", "apiVersion": "v1",
		"metadata": map[string]interface{}{
			"name": name, "uid": newUID(), "creationTimestamp": nowTimestamp(),
			"labels": map[string]interface{}{"kubernetes.io/metadata.name": name},
		},
		"spec":   map[string]interface{}{"finalizers": []interface{}{"kubernetes"}},
		"status": map[string]interface{}{"phase": "Active"},
	}
}

// applyCreateDefaults fills what the apiserver's defaulting and create strategies set, for
// the fields clients and tests look at.
func applyCreateDefaults(rd *resourceDef, obj object) {
	switch rd.resource {
	case "pods":
		spec, _ := obj["spec"].(map[string]interface{})
		if spec == nil {
			spec = map[string]interface{}{}
			obj["spec"] = spec
		}
		setDefault(spec, "restartPolicy", "Always")
		setDefault(spec, "terminationGracePeriodSeconds", json.Number("30"))
		setDefault(spec, "dnsPolicy", "ClusterFirst")
		setDefault(spec, "securityContext", map[string]interface{}{})
		setDefault(spec, "schedulerName", "default-scheduler")
		setDefault(spec, "serviceAccountName", "default")
		setDefault(spec, "serviceAccount", spec["serviceAccountName"])
		setDefault(spec, "enableServiceLinks", true)
		setDefault(spec, "priority", json.Number("0"))
		setDefault(spec, "preemptionPolicy", "PreemptLowerPriority")
		if containers, ok := spec["containers"].([]interface{}); ok {
			for _, c := range containers {
				cm, ok := c.(map[string]interface{})
				if !ok {
					continue
				}
				setDefault(cm, "resources", map[string]interface{}{})
				setDefault(cm, "terminationMessagePath", "/dev/termination-log")
				setDefault(cm, "terminationMessagePolicy", "File")
				image, _ := cm["image"].(string)
				if strings.HasSuffix(image, ":latest") || !strings.Contains(image[strings.LastIndex(image, "/")+1:], ":") {
					setDefault(cm, "imagePullPolicy", "Always")
				} else {
					setDefault(cm, "imagePullPolicy", "IfNotPresent")
				}
			}
		}
		// The pod create strategy resets status: a new pod is Pending until scheduled.
		obj["status"] = map[string]interface{}{"phase": "Pending", "qosClass": "BestEffort"}
	case "namespaces":
		meta := metadataOf(obj)
		labels, _ := meta["labels"].(map[string]interface{})
		if labels == nil {
			labels = map[string]interface{}{}
			meta["labels"] = labels
		}
		labels["kubernetes.io/metadata.name"] = meta["name"]
		obj["spec"] = map[string]interface{}{"finalizers": []interface{}{"kubernetes"}}
		obj["status"] = map[string]interface{}{"phase": "Active"}
	}
}

func setDefault(m map[string]interface{}, k string, v interface{}) {
	if _, ok := m[k]; !ok {
		m[k] = v
	}
}

// ---- selectors ----

type labelRequirement struct {
	key    string
	op     string // "=", "!=", "in", "notin", "exists", "!"
	values []string
}

// parseLabelSelector parses the labels.Parse syntax: a=b, a==b, a!=b, a in (x,y),
// a notin (x,y), a, !a; comma-separated (commas inside parentheses belong to the set).
func parseLabelSelector(s string) ([]labelRequirement, error) {
	var reqs []labelRequirement
	var terms []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				terms = append(terms, s[start:i])
				start = i + 1
			}
		}
	}
	terms = append(terms, s[start:])
	for _, t := range terms {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		switch {
		case strings.HasPrefix(t, "!"):
			reqs = append(reqs, labelRequirement{key: strings.TrimSpace(t[1:]), op: "!"})
		case strings.Contains(t, "!="):
			kv := strings.SplitN(t, "!=", 2)
			reqs = append(reqs, labelRequirement{strings.TrimSpace(kv[0]), "!=", []string{strings.TrimSpace(kv[1])}})
		case strings.Contains(t, "=="):
			kv := strings.SplitN(t, "==", 2)
			reqs = append(reqs, labelRequirement{strings.TrimSpace(kv[0]), "=", []string{strings.TrimSpace(kv[1])}})
		case strings.Contains(t, "="):
			kv := strings.SplitN(t, "=", 2)
			reqs = append(reqs, labelRequirement{strings.TrimSpace(kv[0]), "=", []string{strings.TrimSpace(kv[1])}})
		case strings.Contains(t, " in ") || strings.Contains(t, " notin "):
			op := "in"
			if strings.Contains(t, " notin ") {
				op = "notin"
			}
			kv := strings.SplitN(t, " "+op+" ", 2)
			set := strings.TrimSpace(kv[1])
			if !strings.HasPrefix(set, "(") || !strings.HasSuffix(set, ")") {
				return nil, fmt.Errorf("unable to parse requirement: found '%s', expected: '('", set)
			}
			var vals []string
			for _, v := range strings.Split(set[1:len(set)-1], ",") {
				vals = append(vals, strings.TrimSpace(v))
			}
			reqs = append(reqs, labelRequirement{strings.TrimSpace(kv[0]), op, vals})
		default:
			if strings.ContainsAny(t, " ()") {
				return nil, fmt.Errorf("unable to parse requirement: %q", t)
			}
			reqs = append(reqs, labelRequirement{key: t, op: "exists"})
		}
	}
	return reqs, nil
}

func labelsMatch(reqs []labelRequirement, labels map[string]string) bool {
	for _, r := range reqs {
		v, has := labels[r.key]
		switch r.op {
		case "=":
			if !has || v != r.values[0] {
				return false
			}
		case "!=":
			if has && v == r.values[0] {
				return false
			}
		case "in", "notin":
			in := false
			for _, x := range r.values {
				in = in || (has && v == x)
			}
			if (r.op == "in") != in {
				return false
			}
		case "exists":
			if !has {
				return false
			}
		case "!":
			if has {
				return false
			}
		}
	}
	return true
}

type fieldRequirement struct {
	field, value string
	negate       bool
}

// parseFieldSelector supports what every resource supports: metadata.name and
// metadata.namespace, with =, == and !=.
func parseFieldSelector(s string) ([]fieldRequirement, error) {
	var reqs []fieldRequirement
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		var r fieldRequirement
		switch {
		case strings.Contains(t, "!="):
			kv := strings.SplitN(t, "!=", 2)
			r = fieldRequirement{kv[0], kv[1], true}
		case strings.Contains(t, "=="):
			kv := strings.SplitN(t, "==", 2)
			r = fieldRequirement{kv[0], kv[1], false}
		case strings.Contains(t, "="):
			kv := strings.SplitN(t, "=", 2)
			r = fieldRequirement{kv[0], kv[1], false}
		default:
			return nil, fmt.Errorf("invalid selector: '%s'; can't understand '%s'", s, t)
		}
		if r.field != "metadata.name" && r.field != "metadata.namespace" {
			return nil, fmt.Errorf("field label not supported: %s", r.field)
		}
		reqs = append(reqs, r)
	}
	return reqs, nil
}

func fieldsMatch(reqs []fieldRequirement, obj object) bool {
	for _, r := range reqs {
		v := metaString(obj, strings.TrimPrefix(r.field, "metadata."))
		if (v == r.value) == r.negate {
			return false
		}
	}
	return true
}

// fieldSelectorExact is fields.Selector.RequiresExactMatch.
func fieldSelectorExact(s, field string) (string, bool) {
	reqs, err := parseFieldSelector(s)
	if err != nil {
		return "", false
	}
	for _, r := range reqs {
		if r.field == field && !r.negate {
			return r.value, true
		}
	}
	return "", false
}
