package main

// Patch formats: RFC 7386 JSON merge patch and RFC 6902 JSON patch (with RFC 6901 pointers).

import (
	"fmt"
	"strconv"
	"strings"
)

// mergePatch applies an RFC 7386 merge patch: objects merge recursively, null deletes, any
// other value (arrays included) replaces.
func mergePatch(target, patch interface{}) interface{} {
	pm, ok := patch.(map[string]interface{})
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]interface{})
	if !ok {
		tm = map[string]interface{}{}
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
			continue
		}
		tm[k] = mergePatch(tm[k], v)
	}
	return tm
}

// applyJSONPatch applies an RFC 6902 patch (add, remove, replace, move, copy, test).
func applyJSONPatch(doc interface{}, patch interface{}) (interface{}, error) {
	ops, ok := patch.([]interface{})
	if !ok {
		return nil, fmt.Errorf("json patch must be an array of operations")
	}
	for _, o := range ops {
		op, ok := o.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("invalid json patch operation")
		}
		kind, _ := op["op"].(string)
		path, _ := op["path"].(string)
		var err error
		switch kind {
		case "add":
			doc, err = pointerSet(doc, path, deepCopy(op["value"]), true)
		case "replace":
			if _, err = pointerGet(doc, path); err == nil {
				doc, err = pointerSet(doc, path, deepCopy(op["value"]), false)
			}
		case "remove":
			doc, _, err = pointerRemove(doc, path)
		case "move", "copy":
			from, _ := op["from"].(string)
			var v interface{}
			if kind == "move" {
				doc, v, err = pointerRemove(doc, from)
			} else {
				v, err = pointerGet(doc, from)
				v = deepCopy(v)
			}
			if err == nil {
				doc, err = pointerSet(doc, path, v, true)
			}
		case "test":
			var v interface{}
			if v, err = pointerGet(doc, path); err == nil && !jsonEqual(v, op["value"]) {
				err = fmt.Errorf("testing value %s failed", path)
			}
		default:
			err = fmt.Errorf("Unexpected kind: %s", kind)
		}
		if err != nil {
			return nil, err
		}
	}
	return doc, nil
}

func pointerTokens(path string) ([]string, error) {
	if path == "" {
		return nil, nil
	}
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("invalid JSON pointer %q", path)
	}
	toks := strings.Split(path[1:], "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, nil
}

func pointerGet(doc interface{}, path string) (interface{}, error) {
	toks, err := pointerTokens(path)
	if err != nil {
		return nil, err
	}
	cur := doc
	for _, t := range toks {
		switch c := cur.(type) {
		case map[string]interface{}:
			v, ok := c[t]
			if !ok {
				return nil, fmt.Errorf("doc is missing path: %q", path)
			}
			cur = v
		case []interface{}:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("doc is missing path: %q", path)
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("doc is missing path: %q", path)
		}
	}
	return cur, nil
}

// pointerSet sets (insert=true: adds, inserting into arrays) the value at path and returns
// the possibly new root.
func pointerSet(doc interface{}, path string, value interface{}, insert bool) (interface{}, error) {
	toks, err := pointerTokens(path)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return value, nil
	}
	parentPath := "/" + strings.Join(escapeTokens(toks[:len(toks)-1]), "/")
	if len(toks) == 1 {
		parentPath = ""
	}
	parent, err := pointerGet(doc, parentPath)
	if err != nil {
		return nil, err
	}
	last := toks[len(toks)-1]
	switch p := parent.(type) {
	case map[string]interface{}:
		p[last] = value
		return doc, nil
	case []interface{}:
		var n []interface{}
		if last == "-" && insert {
			n = append(p, value)
		} else {
			i, err := strconv.Atoi(last)
			if err != nil || i < 0 || i > len(p) || (!insert && i == len(p)) {
				return nil, fmt.Errorf("index out of bounds: %q", path)
			}
			if insert {
				n = append(append(append([]interface{}{}, p[:i]...), value), p[i:]...)
			} else {
				p[i] = value
				return doc, nil
			}
		}
		return pointerSet(doc, parentPath, n, false)
	}
	return nil, fmt.Errorf("doc is missing path: %q", path)
}

func pointerRemove(doc interface{}, path string) (interface{}, interface{}, error) {
	toks, err := pointerTokens(path)
	if err != nil || len(toks) == 0 {
		return nil, nil, fmt.Errorf("invalid path %q", path)
	}
	parentPath := ""
	if len(toks) > 1 {
		parentPath = "/" + strings.Join(escapeTokens(toks[:len(toks)-1]), "/")
	}
	parent, err := pointerGet(doc, parentPath)
	if err != nil {
		return nil, nil, err
	}
	last := toks[len(toks)-1]
	switch p := parent.(type) {
	case map[string]interface{}:
		v, ok := p[last]
		if !ok {
			return nil, nil, fmt.Errorf("Unable to remove nonexistent key: %s: missing value", last)
		}
		delete(p, last)
		return doc, v, nil
	case []interface{}:
		i, err := strconv.Atoi(last)
		if err != nil || i < 0 || i >= len(p) {
			return nil, nil, fmt.Errorf("index out of bounds: %q", path)
		}
		v := p[i]
		n := append(append([]interface{}{}, p[:i]...), p[i+1:]...)
		doc, err = pointerSet(doc, parentPath, n, false)
		return doc, v, err
	}
	return nil, nil, fmt.Errorf("doc is missing path: %q", path)
}

func escapeTokens(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
	}
	return out
}
