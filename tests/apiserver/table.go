package main

// Server-side printing: kubectl get asks for
//   Accept: application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json
// and the apiserver answers with a meta.k8s.io Table whose columns come from the type's printer
// (core types) or the CRD's printer columns (Name + Age by default), each row carrying the
// object's metadata as a PartialObjectMetadata (includeObject=Metadata, the default).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// wantsTable returns the Table version ("v1" or "v1beta1") when the first acceptable media
// range of the Accept header is a meta.k8s.io Table.
func wantsTable(r *http.Request) (string, bool) {
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
		as := params["as"]
		if as == "" {
			return "", false // plain JSON acceptable first
		}
		if as == "Table" && params["g"] == "meta.k8s.io" && (params["v"] == "v1" || params["v"] == "v1beta1") {
			return params["v"], true
		}
	}
	return "", false
}

func tableContentType(v string) string {
	return "application/json;as=Table;v=" + v + ";g=meta.k8s.io"
}

type tableColumn struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Format      string `json:"format"`
	Description string `json:"description"`
	Priority    int    `json:"priority"`
}

const (
	nameDescription = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
	ageDescription  = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)

func tableColumns(rd *resourceDef) []tableColumn {
	name := tableColumn{Name: "Name", Type: "string", Format: "name", Description: nameDescription}
	age := tableColumn{Name: "Age", Type: "string", Description: ageDescription}
	switch rd.resource {
	case "pods":
		return []tableColumn{name,
			{Name: "Ready", Type: "string", Description: "The aggregate readiness state of this pod for accepting traffic."},
			{Name: "Status", Type: "string", Description: "The aggregate status of the containers in this pod."},
			{Name: "Restarts", Type: "string", Description: "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."},
			age,
			{Name: "IP", Type: "string", Description: "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.", Priority: 1},
			{Name: "Node", Type: "string", Description: "NodeName is a request to schedule this pod onto a specific node. If it is non-empty, the scheduler simply schedules this pod onto that node, assuming that it fits resource requirements.", Priority: 1},
			{Name: "Nominated Node", Type: "string", Description: "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.", Priority: 1},
			{Name: "Readiness Gates", Type: "string", Description: "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates", Priority: 1},
		}
	case "configmaps":
		return []tableColumn{name, {Name: "Data", Type: "string", Description: "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process."}, age}
	case "namespaces":
		return []tableColumn{name, {Name: "Status", Type: "string", Description: "The status of the namespace"}, age}
	}
	// A CRD without additionalPrinterColumns: Name and a date-typed Age.
	return []tableColumn{name, {Name: "Age", Type: "date", Description: ageDescription}}
}

func tableCells(rd *resourceDef, obj object) []interface{} {
	name := metaString(obj, "name")
	age := humanAge(metaString(obj, "creationTimestamp"))
	switch rd.resource {
	case "pods":
		spec, _ := obj["spec"].(map[string]interface{})
		status, _ := obj["status"].(map[string]interface{})
		containers, _ := spec["containers"].([]interface{})
		phase, _ := status["phase"].(string)
		if metaString(obj, "deletionTimestamp") != "" {
			phase = "Terminating"
		}
		ip, _ := status["podIP"].(string)
		node, _ := spec["nodeName"].(string)
		return []interface{}{name, fmt.Sprintf("0/%d", len(containers)), phase, "0", age,
			orNone(ip), orNone(node), "<none>", "<none>"}
	case "configmaps":
		data, _ := obj["data"].(map[string]interface{})
		bin, _ := obj["binaryData"].(map[string]interface{})
		return []interface{}{name, len(data) + len(bin), age}
	case "namespaces":
		status, _ := obj["status"].(map[string]interface{})
		phase, _ := status["phase"].(string)
		return []interface{}{name, phase, age}
	}
	return []interface{}{name, age}
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func encodeTable(rd *resourceDef, r *http.Request, version string, items []object, rv, cont string) []byte {
	include := r.URL.Query().Get("includeObject")
	rows := make([]map[string]interface{}, 0, len(items))
	for _, it := range items {
		row := map[string]interface{}{"cells": tableCells(rd, it)}
		switch include {
		case "None":
		case "Object":
			row["object"] = json.RawMessage(bytes.TrimSpace(encodeObject(rd, it)))
		default:
			row["object"] = map[string]interface{}{
				"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/" + version, "metadata": it["metadata"]}
		}
		rows = append(rows, row)
	}
	meta := map[string]interface{}{"resourceVersion": rv}
	if cont != "" {
		meta["continue"] = cont
	}
	var buf bytes.Buffer
	cols, _ := json.Marshal(tableColumns(rd))
	rowsJSON, _ := json.Marshal(rows)
	metaJSON, _ := json.Marshal(meta)
	fmt.Fprintf(&buf, `{"kind":"Table","apiVersion":"meta.k8s.io/%s","metadata":%s,"columnDefinitions":%s,"rows":%s}`+"\n",
		version, metaJSON, cols, rowsJSON)
	return buf.Bytes()
}

// humanAge is duration.HumanDuration(time.Since(creationTimestamp)), as printers show Age.
func humanAge(ts string) string {
	t, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return "<unknown>"
	}
	return humanDuration(time.Since(t))
}

func humanDuration(d time.Duration) string {
	if seconds := int(d.Seconds()); seconds < -1 {
		return "<invalid>"
	} else if seconds < 0 {
		return "0s"
	} else if seconds < 60*2 {
		return fmt.Sprintf("%ds", seconds)
	}
	minutes := int(d / time.Minute)
	if minutes < 10 {
		if s := int(d/time.Second) % 60; s != 0 {
			return fmt.Sprintf("%dm%ds", minutes, s)
		}
		return fmt.Sprintf("%dm", minutes)
	} else if minutes < 60*3 {
		return fmt.Sprintf("%dm", minutes)
	}
	hours := int(d / time.Hour)
	if hours < 8 {
		if m := int(d/time.Minute) % 60; m != 0 {
			return fmt.Sprintf("%dh%dm", hours, m)
		}
		return fmt.Sprintf("%dh", hours)
	} else if hours < 48 {
		return fmt.Sprintf("%dh", hours)
	} else if hours < 24*8 {
		if h := hours % 24; h != 0 {
			return fmt.Sprintf("%dd%dh", hours/24, h)
		}
		return fmt.Sprintf("%dd", hours/24)
	} else if hours < 24*365*2 {
		return fmt.Sprintf("%dd", hours/24)
	} else if hours < 24*365*8 {
		if dy := (hours / 24) % 365; dy != 0 {
			return fmt.Sprintf("%dy%dd", hours/24/365, dy)
		}
		return fmt.Sprintf("%dy", hours/24/365)
	}
	return fmt.Sprintf("%dy", hours/24/365)
}
