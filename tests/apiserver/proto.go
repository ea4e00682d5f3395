package main

// Decoding of Kubernetes protobuf request bodies (Content-Type application/vnd.kubernetes.protobuf)
// for the built-in kinds real clients send that way: kubectl >= 1.30's typed clients write
// Namespaces, ConfigMaps and TokenRequests as protobuf (`kubectl create namespace|configmap|
// token`). The body is the apiserver's envelope: the magic "k8s\x00" followed by a
// runtime.Unknown {typeMeta{apiVersion=1, kind=2}=1, raw=2, contentEncoding=3, contentType=4},
// raw being the generated.proto message of the kind. Decoded here into the same JSON object
// form as a JSON body, with a small field table per message (only the fields these kinds use).
// Responses are always JSON (clients accept it: they send "protobuf,application/json").

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

const (
	pString = iota
	pInt
	pBool
	pBytes // base64 in JSON
	pTime  // metav1.Time {seconds=1, nanos=2}
	pMsg
	pMapString
	pMapBytes
	pRepString
	pRepMsg
)

type protoField struct {
	name string
	kind int
	msg  protoMsg
}

type protoMsg map[uint64]protoField

var (
	pbOwnerReference = protoMsg{1: {"kind", pString, nil}, 3: {"name", pString, nil}, 4: {"uid", pString, nil},
		5: {"apiVersion", pString, nil}, 6: {"controller", pBool, nil}, 7: {"blockOwnerDeletion", pBool, nil}}
	pbObjectMeta = protoMsg{1: {"name", pString, nil}, 2: {"generateName", pString, nil}, 3: {"namespace", pString, nil},
		5: {"uid", pString, nil}, 6: {"resourceVersion", pString, nil}, 7: {"generation", pInt, nil},
		8: {"creationTimestamp", pTime, nil}, 9: {"deletionTimestamp", pTime, nil},
		10: {"deletionGracePeriodSeconds", pInt, nil}, 11: {"labels", pMapString, nil},
		12: {"annotations", pMapString, nil}, 13: {"ownerReferences", pRepMsg, pbOwnerReference},
		14: {"finalizers", pRepString, nil}}
	protoKinds = map[string]protoMsg{
		"ConfigMap": {1: {"metadata", pMsg, pbObjectMeta}, 2: {"data", pMapString, nil},
			3: {"binaryData", pMapBytes, nil}, 4: {"immutable", pBool, nil}},
		"Namespace": {1: {"metadata", pMsg, pbObjectMeta},
			2: {"spec", pMsg, protoMsg{1: {"finalizers", pRepString, nil}}},
			3: {"status", pMsg, protoMsg{1: {"phase", pString, nil}}}},
		"TokenRequest": {1: {"metadata", pMsg, pbObjectMeta},
			2: {"spec", pMsg, protoMsg{1: {"audiences", pRepString, nil}, 4: {"expirationSeconds", pInt, nil},
				3: {"boundObjectRef", pMsg, protoMsg{1: {"kind", pString, nil}, 2: {"apiVersion", pString, nil},
					3: {"name", pString, nil}, 4: {"uid", pString, nil}}}}}},
	}
	pbTypeMeta = protoMsg{1: {"apiVersion", pString, nil}, 2: {"kind", pString, nil}}
	pbUnknown  = protoMsg{1: {"typeMeta", pMsg, pbTypeMeta}, 2: {"raw", pBytes, nil},
		3: {"contentEncoding", pString, nil}, 4: {"contentType", pString, nil}}
)

var errProtoKind = errors.New("unsupported protobuf kind")

// decodeProtobufObject decodes an enveloped protobuf body into a JSON-shaped object.
func decodeProtobufObject(body []byte) (object, error) {
	if len(body) < 4 || string(body[:4]) != "k8s\x00" {
		return nil, fmt.Errorf("provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]")
	}
	env, err := decodeProtoMsg(body[4:], pbUnknown)
	if err != nil {
		return nil, err
	}
	tm, _ := env["typeMeta"].(map[string]interface{})
	kind, _ := tm["kind"].(string)
	schema, ok := protoKinds[kind]
	if !ok {
		return nil, errProtoKind
	}
	raw, _ := base64.StdEncoding.DecodeString(fmt.Sprint(env["raw"]))
	obj, err := decodeProtoMsg(raw, schema)
	if err != nil {
		return nil, err
	}
	obj["kind"] = kind
	if av, _ := tm["apiVersion"].(string); av != "" {
		obj["apiVersion"] = av
	}
	return obj, nil
}

func decodeProtoMsg(b []byte, schema protoMsg) (map[string]interface{}, error) {
	out := map[string]interface{}{}
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errors.New("protobuf: bad tag")
		}
		b = b[n:]
		num, wire := tag>>3, tag&7
		var varint uint64
		var data []byte
		switch wire {
		case 0:
			varint, n = binary.Uvarint(b)
			if n <= 0 {
				return nil, errors.New("protobuf: bad varint")
			}
			b = b[n:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return nil, errors.New("protobuf: bad length")
			}
			data, b = b[n:n+int(l)], b[n+int(l):]
		case 1:
			if len(b) < 8 {
				return nil, errors.New("protobuf: short fixed64")
			}
			b = b[8:]
			continue
		case 5:
			if len(b) < 4 {
				return nil, errors.New("protobuf: short fixed32")
			}
			b = b[4:]
			continue
		default:
			return nil, fmt.Errorf("protobuf: unsupported wire type %d", wire)
		}
		f, known := schema[num]
		if !known {
			continue // a field this table does not model (e.g. managedFields)
		}
		// gogo-protobuf writes every non-pointer field, empty or not; JSON clients omit empty
		// ones (omitempty). Drop zero scalars so both encodings give the same object.
		if (f.kind == pString && len(data) == 0) || ((f.kind == pInt || f.kind == pBool) && varint == 0) {
			continue
		}
		switch f.kind {
		case pString:
			out[f.name] = string(data)
		case pBytes:
			out[f.name] = base64.StdEncoding.EncodeToString(data)
		case pInt:
			out[f.name] = jsonInt(int64(varint))
		case pBool:
			out[f.name] = varint != 0
		case pTime:
			t, err := decodeProtoMsg(data, protoMsg{1: {"s", pInt, nil}, 2: {"n", pInt, nil}})
			if err != nil {
				return nil, err
			}
			sec, _ := strconv.ParseInt(fmt.Sprint(t["s"]), 10, 64)
			if sec <= 0 { // the zero metav1.Time (year 1) or unset
				continue
			}
			out[f.name] = time.Unix(sec, 0).UTC().Format(time.RFC3339)
		case pMsg:
			m, err := decodeProtoMsg(data, f.msg)
			if err != nil {
				return nil, err
			}
			out[f.name] = m
		case pRepMsg:
			m, err := decodeProtoMsg(data, f.msg)
			if err != nil {
				return nil, err
			}
			list, _ := out[f.name].([]interface{})
			out[f.name] = append(list, m)
		case pRepString:
			list, _ := out[f.name].([]interface{})
			out[f.name] = append(list, string(data))
		case pMapString, pMapBytes:
			kv, err := decodeProtoMsg(data, protoMsg{1: {"k", pString, nil}, 2: {"v", pString, nil}})
			if err != nil {
				return nil, err
			}
			m, _ := out[f.name].(map[string]interface{})
			if m == nil {
				m = map[string]interface{}{}
				out[f.name] = m
			}
			k, _ := kv["k"].(string)
			v, _ := kv["v"].(string)
			if f.kind == pMapBytes {
				m[k] = base64.StdEncoding.EncodeToString([]byte(v))
			} else {
				m[k] = v
			}
		}
	}
	return out, nil
}

func jsonInt(v int64) interface{} { return json.Number(strconv.FormatInt(v, 10)) }
