package main

// API Priority and Fairness, as kube-apiserver 1.28 does it (k8s.io/apiserver/pkg/util/flowcontrol
// and pkg/server/filters/priority-and-fairness.go), reduced to what shows on the wire:
//
//   - the configuration is the apiserver's bootstrap one (apis/flowcontrol/bootstrap/default.go):
//     the mandatory PriorityLevelConfigurations exempt and catch-all and FlowSchemas exempt and
//     catch-all, plus the suggested ones. They are stored in etcd as real objects (keys
//     /registry/prioritylevelconfigurations/NAME and /registry/flowschemas/NAME, as the
//     apiserver's APF bootstrap post-start hook writes them) and served read-only at
//     /apis/flowcontrol.apiserver.k8s.io/v1beta3. Their UIDs are stable (derived from the
//     name), so tests and the agent's static fallback mapping can know them in advance;
//   - every authenticated request is classified: FlowSchemas in order of matchingPrecedence
//     (ties by name), the first whose rules match the user and the RequestInfo wins, catch-all
//     when none does (apf_controller.go startRequest, matching.go);
//   - the response carries X-Kubernetes-PF-FlowSchema-UID and X-Kubernetes-PF-PriorityLevel-UID,
//     for exempt requests and 429s too;
//   - the exempt level is never limited; every other level has a concurrency limit of
//     ceil(ServerCL * nominalConcurrencyShares / sum of shares), ServerCL being
//     --max-requests-inflight + --max-mutating-requests-inflight (600 by default), or an explicit
//     one from --max-inflight-per-level. A request that finds no free seat waits in one of its
//     flow's queues (shuffle sharding over queues/handSize, flow = FlowSchema + distinguisher),
//     and is rejected when its queue already holds queueLengthLimit requests, when it waited
//     longer than --request-timeout/4 (the apiserver's requestWaitLimit), or at once on a level
//     whose limitResponse is Reject (catch-all);
//   - a rejection is the APF filter's 429: plain text "Too many requests, please try again
//     later." written by http.Error, with Retry-After;
//   - a WATCH holds its seat only until its response starts (the apiserver releases it when the
//     watch is initialised), then runs outside APF's accounting.
//
// Not modelled: borrowing between levels (lendablePercent is served, not used), work
// estimation (every request takes one seat; the apiserver gives big LISTs up to 10), the
// dynamic Retry-After (the apiserver raises it above 1 s under sustained rejection), fair
// queuing's virtual time (waiting queues are served round-robin), and changes to the objects
// (they are read-only here).

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ---- configuration ----

type apfSubject struct {
	kind      string // User, Group or ServiceAccount
	name      string // "*" = all
	namespace string // ServiceAccount only
}

type apfResourceRule struct {
	verbs, apiGroups, resources, namespaces []string
	clusterScope                            bool
}

type apfNonResourceRule struct{ verbs, urls []string }

type apfRule struct {
	subjects         []apfSubject
	resourceRules    []apfResourceRule
	nonResourceRules []apfNonResourceRule
}

type apfFlowSchema struct {
	name          string
	level         string
	precedence    int
	distinguisher string // "", ByUser or ByNamespace
	rules         []apfRule
	uid           string
}

type apfPriorityLevel struct {
	name     string
	exempt   bool
	shares   int // nominalConcurrencyShares
	lendable int // lendablePercent
	// queuing; queues == 0 means limitResponse Reject
	queues, handSize, queueLengthLimit int
	uid                                string
}

var (
	ruleAllResources    = []apfResourceRule{{verbs: []string{"*"}, apiGroups: []string{"*"}, resources: []string{"*"}, namespaces: []string{"*"}, clusterScope: true}}
	ruleAllNonResources = []apfNonResourceRule{{verbs: []string{"*"}, urls: []string{"*"}}}
)

func groups(names ...string) []apfSubject {
	var out []apfSubject
	for _, n := range names {
		out = append(out, apfSubject{kind: "Group", name: n})
	}
	return out
}

func users(names ...string) []apfSubject {
	var out []apfSubject
	for _, n := range names {
		out = append(out, apfSubject{kind: "User", name: n})
	}
	return out
}

func kubeSystemSAs(names ...string) []apfSubject {
	var out []apfSubject
	for _, n := range names {
		out = append(out, apfSubject{kind: "ServiceAccount", name: n, namespace: "kube-system"})
	}
	return out
}

// fsAll is bootstrap.NewFSAll: the subjects, any verb on anything.
func fsAll(name, level string, precedence int, dm string, subjects []apfSubject) *apfFlowSchema {
	return &apfFlowSchema{name: name, level: level, precedence: precedence, distinguisher: dm,
		rules: []apfRule{{subjects: subjects, resourceRules: ruleAllResources, nonResourceRules: ruleAllNonResources}}}
}

// bootstrapPriorityLevels is the 1.28 mandatory + suggested configuration (v1beta3 values).
func bootstrapPriorityLevels() []*apfPriorityLevel {
	return []*apfPriorityLevel{
		{name: "exempt", exempt: true},
		{name: "catch-all", shares: 5},
		{name: "system", shares: 30, lendable: 33, queues: 64, handSize: 6, queueLengthLimit: 50},
		{name: "node-high", shares: 40, lendable: 25, queues: 64, handSize: 6, queueLengthLimit: 50},
		{name: "leader-election", shares: 10, queues: 16, handSize: 4, queueLengthLimit: 50},
		{name: "workload-high", shares: 40, lendable: 50, queues: 128, handSize: 6, queueLengthLimit: 50},
		{name: "workload-low", shares: 100, lendable: 90, queues: 128, handSize: 6, queueLengthLimit: 50},
		{name: "global-default", shares: 20, lendable: 50, queues: 128, handSize: 6, queueLengthLimit: 50},
	}
}

func bootstrapFlowSchemas() []*apfFlowSchema {
	leaseRule := apfResourceRule{verbs: []string{"get", "create", "update"}, apiGroups: []string{"coordination.k8s.io"},
		resources: []string{"leases"}, namespaces: []string{"*"}}
	return []*apfFlowSchema{
		// mandatory
		fsAll("exempt", "exempt", 1, "", groups("system:masters")),
		fsAll("catch-all", "catch-all", 10000, "ByUser", groups("system:unauthenticated", "system:authenticated")),
		// suggested
		{name: "probes", level: "exempt", precedence: 2, rules: []apfRule{{
			subjects:         groups("system:unauthenticated", "system:authenticated"),
			nonResourceRules: []apfNonResourceRule{{verbs: []string{"get"}, urls: []string{"/healthz", "/readyz", "/livez"}}}}}},
		{name: "system-leader-election", level: "leader-election", precedence: 100, distinguisher: "ByUser", rules: []apfRule{{
			subjects:      append(users("system:kube-controller-manager", "system:kube-scheduler"), kubeSystemSAs("*")...),
			resourceRules: []apfResourceRule{leaseRule}}}},
		{name: "endpoint-controller", level: "workload-high", precedence: 150, distinguisher: "ByUser", rules: []apfRule{{
			subjects: append(users("system:kube-controller-manager"), kubeSystemSAs("endpoint-controller", "endpointslicemirroring-controller")...),
			resourceRules: []apfResourceRule{{verbs: []string{"get", "create", "update"}, apiGroups: []string{""},
				resources: []string{"endpoints"}, namespaces: []string{"*"}}}}}},
		{name: "workload-leader-election", level: "leader-election", precedence: 200, distinguisher: "ByUser", rules: []apfRule{{
			subjects: kubeSystemSAs("*"), resourceRules: []apfResourceRule{leaseRule}}}},
		{name: "system-node-high", level: "node-high", precedence: 400, distinguisher: "ByUser", rules: []apfRule{{
			subjects: groups("system:nodes"),
			resourceRules: []apfResourceRule{
				{verbs: []string{"*"}, apiGroups: []string{""}, resources: []string{"nodes", "nodes/status"}, namespaces: []string{"*"}, clusterScope: true},
				{verbs: []string{"*"}, apiGroups: []string{"coordination.k8s.io"}, resources: []string{"leases"}, namespaces: []string{"*"}},
			}}}},
		fsAll("system-nodes", "system", 500, "ByUser", groups("system:nodes")),
		fsAll("kube-controller-manager", "workload-high", 800, "ByNamespace", users("system:kube-controller-manager")),
		fsAll("kube-scheduler", "workload-high", 800, "ByNamespace", users("system:kube-scheduler")),
		fsAll("kube-system-service-accounts", "workload-high", 900, "ByNamespace", kubeSystemSAs("*")),
		fsAll("service-accounts", "workload-low", 9000, "ByUser", groups("system:serviceaccounts")),
		fsAll("global-default", "global-default", 9900, "ByUser", groups("system:unauthenticated", "system:authenticated")),
	}
}

// ---- the objects, as the apiserver serves them ----

func strList(s []string) []interface{} {
	out := make([]interface{}, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func bootstrapMeta(name, uid string) map[string]interface{} {
	return map[string]interface{}{
		"name": name, "uid": uid, "generation": json.Number("1"), "creationTimestamp": nowTimestamp(),
		"annotations": map[string]interface{}{"apf.kubernetes.io/autoupdate-spec": "true"},
	}
}

func (pl *apfPriorityLevel) object() object {
	spec := map[string]interface{}{}
	if pl.exempt {
		spec["type"] = "Exempt"
		spec["exempt"] = map[string]interface{}{"nominalConcurrencyShares": json.Number("0"), "lendablePercent": json.Number("0")}
	} else {
		lr := map[string]interface{}{"type": "Reject"}
		if pl.queues > 0 {
			lr = map[string]interface{}{"type": "Queue", "queuing": map[string]interface{}{
				"queues": json.Number(strconv.Itoa(pl.queues)), "handSize": json.Number(strconv.Itoa(pl.handSize)),
				"queueLengthLimit": json.Number(strconv.Itoa(pl.queueLengthLimit))}}
		}
		spec["type"] = "Limited"
		spec["limited"] = map[string]interface{}{"nominalConcurrencyShares": json.Number(strconv.Itoa(pl.shares)),
			"lendablePercent": json.Number(strconv.Itoa(pl.lendable)), "limitResponse": lr}
	}
	return object{"apiVersion": flowcontrolGV, "kind": "PriorityLevelConfiguration",
		"metadata": bootstrapMeta(pl.name, pl.uid), "spec": spec, "status": map[string]interface{}{}}
}

func (fs *apfFlowSchema) object() object {
	var rules []interface{}
	for _, r := range fs.rules {
		var subjects, rrs, nrrs []interface{}
		for _, s := range r.subjects {
			switch s.kind {
			case "User":
				subjects = append(subjects, map[string]interface{}{"kind": "User", "user": map[string]interface{}{"name": s.name}})
			case "Group":
				subjects = append(subjects, map[string]interface{}{"kind": "Group", "group": map[string]interface{}{"name": s.name}})
			case "ServiceAccount":
				subjects = append(subjects, map[string]interface{}{"kind": "ServiceAccount",
					"serviceAccount": map[string]interface{}{"namespace": s.namespace, "name": s.name}})
			}
		}
		for _, rr := range r.resourceRules {
			m := map[string]interface{}{"verbs": strList(rr.verbs), "apiGroups": strList(rr.apiGroups), "resources": strList(rr.resources)}
			if rr.clusterScope {
				m["clusterScope"] = true
			}
			if len(rr.namespaces) > 0 {
				m["namespaces"] = strList(rr.namespaces)
			}
			rrs = append(rrs, m)
		}
		for _, nr := range r.nonResourceRules {
			nrrs = append(nrrs, map[string]interface{}{"verbs": strList(nr.verbs), "nonResourceURLs": strList(nr.urls)})
		}
		rule := map[string]interface{}{"subjects": subjects}
		if rrs != nil {
			rule["resourceRules"] = rrs
		}
		if nrrs != nil {
			rule["nonResourceRules"] = nrrs
		}
		rules = append(rules, rule)
	}
	spec := map[string]interface{}{
		"priorityLevelConfiguration": map[string]interface{}{"name": fs.level},
		"matchingPrecedence":         json.Number(strconv.Itoa(fs.precedence)),
		"rules":                      rules,
	}
	if fs.distinguisher != "" {
		spec["distinguisherMethod"] = map[string]interface{}{"type": fs.distinguisher}
	}
	// The configuration controller maintains the Dangling condition.
	status := map[string]interface{}{"conditions": []interface{}{map[string]interface{}{
		"type": "Dangling", "status": "False", "lastTransitionTime": nowTimestamp(), "reason": "Found",
		"message": fmt.Sprintf("This FlowSchema references the PriorityLevelConfiguration object named %q and it exists", fs.level),
	}}}
	return object{"apiVersion": flowcontrolGV, "kind": "FlowSchema", "metadata": bootstrapMeta(fs.name, fs.uid),
		"spec": spec, "status": status}
}

const flowcontrolGV = "flowcontrol.apiserver.k8s.io/v1beta3"

// ---- the controller ----

type apfConfig struct {
	serverCL      int            // --max-requests-inflight + --max-mutating-requests-inflight
	levelLimits   map[string]int // --max-inflight-per-level overrides
	waitLimit     time.Duration  // --request-timeout / 4
	retryAfterSec int
}

type apfController struct {
	schemas []*apfFlowSchema // in matching order
	levels  map[string]*plState
	cfg     apfConfig
}

// plState is one priority level's seats and queues.
type plState struct {
	pl        *apfPriorityLevel
	limit     int
	mu        sync.Mutex
	executing int
	waiting   int
	queues    [][]*apfWaiter
	robin     int
	rejected  int64
}

type apfWaiter struct {
	ready      chan struct{}
	dispatched bool
}

// parseLevelLimits parses "workload-low=2,global-default=1".
func parseLevelLimits(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		kv := strings.SplitN(part, "=", 2)
		n, err := strconv.Atoi(strings.TrimSpace(kv[len(kv)-1]))
		if len(kv) != 2 || err != nil || n < 1 {
			return nil, fmt.Errorf("--max-inflight-per-level: %q is not LEVEL=N with N >= 1", part)
		}
		out[strings.TrimSpace(kv[0])] = n
	}
	return out, nil
}

// newAPFController stores the bootstrap objects in etcd (creating those that are missing, as
// the apiserver's bootstrap hook does) and takes their UIDs from what is stored.
func newAPFController(ctx context.Context, st *store, cfg apfConfig) (*apfController, error) {
	c := &apfController{levels: map[string]*plState{}, cfg: cfg}
	pls := bootstrapPriorityLevels()
	shares := 0
	for _, pl := range pls {
		shares += pl.shares
	}
	for _, pl := range pls {
		pl.uid = stableUID("prioritylevelconfiguration", pl.name)
		uid, err := ensureBootstrapObject(ctx, st, "/registry/prioritylevelconfigurations/"+pl.name, pl.object())
		if err != nil {
			return nil, err
		}
		pl.uid = uid
		ps := &plState{pl: pl}
		if !pl.exempt {
			ps.limit = (cfg.serverCL*pl.shares + shares - 1) / shares // ceil, as the apiserver computes nominalCL
			if n, ok := cfg.levelLimits[pl.name]; ok {
				ps.limit = n
			}
			if ps.limit < 1 {
				ps.limit = 1
			}
			ps.queues = make([][]*apfWaiter, pl.queues)
		}
		c.levels[pl.name] = ps
	}
	for name := range cfg.levelLimits {
		if c.levels[name] == nil {
			return nil, fmt.Errorf("--max-inflight-per-level: no priority level %q", name)
		}
	}
	c.schemas = bootstrapFlowSchemas()
	for _, fs := range c.schemas {
		fs.uid = stableUID("flowschema", fs.name)
		uid, err := ensureBootstrapObject(ctx, st, "/registry/flowschemas/"+fs.name, fs.object())
		if err != nil {
			return nil, err
		}
		fs.uid = uid
	}
	sort.SliceStable(c.schemas, func(i, j int) bool {
		a, b := c.schemas[i], c.schemas[j]
		if a.precedence != b.precedence {
			return a.precedence < b.precedence
		}
		return a.name < b.name
	})
	return c, nil
}

func ensureBootstrapObject(ctx context.Context, st *store, key string, obj object) (string, error) {
	if _, err := st.create(ctx, key, obj); err != nil && err != errExists {
		return "", err
	}
	stored, _, err := st.get(ctx, key)
	if err != nil {
		return "", err
	}
	return metaString(stored, "uid"), nil
}

// ---- classification (matching.go) ----

func containsOrAll(list []string, v, all string) bool {
	for _, s := range list {
		if s == v || s == all {
			return true
		}
	}
	return false
}

func (sub apfSubject) matches(u *userInfo) bool {
	switch sub.kind {
	case "User":
		return sub.name == "*" || sub.name == u.Name
	case "Group":
		if sub.name == "*" {
			return true
		}
		for _, g := range u.Groups {
			if g == sub.name {
				return true
			}
		}
	case "ServiceAccount":
		if sub.name == "*" {
			return strings.HasPrefix(u.Name, "system:serviceaccount:"+sub.namespace+":")
		}
		return u.Name == serviceAccountUser(sub.namespace, sub.name)
	}
	return false
}

func (rr apfResourceRule) matches(info *requestInfo) bool {
	res := info.resource
	if info.subresource != "" {
		res += "/" + info.subresource
	}
	if !containsOrAll(rr.verbs, info.verb, "*") || !containsOrAll(rr.resources, res, "*") ||
		!containsOrAll(rr.apiGroups, info.group, "*") {
		return false
	}
	if info.namespace == "" {
		return rr.clusterScope
	}
	return containsOrAll(rr.namespaces, info.namespace, "*")
}

func (nr apfNonResourceRule) matches(info *requestInfo) bool {
	if !containsOrAll(nr.verbs, info.verb, "*") {
		return false
	}
	for _, p := range nr.urls {
		if p == "*" || p == info.path {
			return true
		}
		prefix := strings.TrimSuffix(p, "*")
		if !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		if strings.HasPrefix(info.path, prefix) {
			return true
		}
	}
	return false
}

func (fs *apfFlowSchema) matches(info *requestInfo, u *userInfo) bool {
	for _, r := range fs.rules {
		subj := false
		for _, s := range r.subjects {
			subj = subj || s.matches(u)
		}
		if !subj {
			continue
		}
		if info.isResourceRequest {
			for _, rr := range r.resourceRules {
				if rr.matches(info) {
					return true
				}
			}
		} else {
			for _, nr := range r.nonResourceRules {
				if nr.matches(info) {
					return true
				}
			}
		}
	}
	return false
}

// classify returns the FlowSchema and priority level of a request, and the flow's hash.
func (c *apfController) classify(info *requestInfo, u *userInfo) (*apfFlowSchema, *plState, uint64) {
	var chosen *apfFlowSchema
	for _, fs := range c.schemas {
		if fs.matches(info, u) {
			chosen = fs
			break
		}
	}
	if chosen == nil {
		for _, fs := range c.schemas {
			if fs.name == "catch-all" {
				chosen = fs
			}
		}
	}
	var distinguisher string
	switch chosen.distinguisher {
	case "ByUser":
		distinguisher = u.Name
	case "ByNamespace":
		distinguisher = info.namespace
	}
	// hashFlowID: sha256 of FlowSchema name, a zero byte and the distinguisher.
	h := sha256.Sum256([]byte(chosen.name + "\x00" + distinguisher))
	return chosen, c.levels[chosen.level], binary.LittleEndian.Uint64(h[:8])
}

// ---- seats and queues ----

// deal is shufflesharding.Dealer.Deal: handSize distinct queue indices from the hash.
func deal(hash uint64, deckSize, handSize int) []int {
	if handSize > deckSize {
		handSize = deckSize
	}
	rem := make([]int, handSize)
	for i := 0; i < handSize; i++ {
		next := hash / uint64(deckSize-i)
		rem[i] = int(hash - uint64(deckSize-i)*next)
		hash = next
	}
	hand := make([]int, handSize)
	for i := 0; i < handSize; i++ {
		card := rem[i]
		for j := i; j > 0; j-- {
			if card >= rem[j-1] {
				card++
			}
		}
		hand[i] = card
	}
	return hand
}

// acquire takes a seat on the level, waiting in a queue when none is free. It returns a
// release function, or nil when the request is rejected.
func (ps *plState) acquire(ctx context.Context, hash uint64, waitLimit time.Duration) func() {
	if ps.pl.exempt {
		return func() {}
	}
	ps.mu.Lock()
	if ps.executing < ps.limit && ps.waiting == 0 {
		ps.executing++
		ps.mu.Unlock()
		return ps.releaser()
	}
	if len(ps.queues) == 0 { // limitResponse Reject
		ps.rejected++
		ps.mu.Unlock()
		return nil
	}
	// Shuffle sharding: the shortest queue of the flow's hand.
	best := -1
	for _, qi := range deal(hash, len(ps.queues), ps.pl.handSize) {
		if best < 0 || len(ps.queues[qi]) < len(ps.queues[best]) {
			best = qi
		}
	}
	if len(ps.queues[best]) >= ps.pl.queueLengthLimit {
		ps.rejected++
		ps.mu.Unlock()
		return nil // queue-full
	}
	w := &apfWaiter{ready: make(chan struct{})}
	ps.queues[best] = append(ps.queues[best], w)
	ps.waiting++
	ps.mu.Unlock()

	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case <-w.ready:
		return ps.releaser()
	case <-timer.C:
	case <-ctx.Done():
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if w.dispatched { // a seat came at the last moment
		return ps.releaser()
	}
	q := ps.queues[best]
	for i, x := range q {
		if x == w {
			ps.queues[best] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	ps.waiting--
	ps.rejected++
	return nil // time-out (or cancelled)
}

func (ps *plState) releaser() func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			ps.mu.Lock()
			defer ps.mu.Unlock()
			ps.executing--
			// Dispatch waiting requests round-robin over the non-empty queues.
			for ps.waiting > 0 && ps.executing < ps.limit {
				for {
					ps.robin = (ps.robin + 1) % len(ps.queues)
					if len(ps.queues[ps.robin]) > 0 {
						break
					}
				}
				q := ps.queues[ps.robin]
				w := q[0]
				ps.queues[ps.robin] = q[1:]
				ps.waiting--
				ps.executing++
				w.dispatched = true
				close(w.ready)
			}
		})
	}
}

// writeTooManyRequests is the APF filter's rejection (filters/maxinflight.go tooManyRequests).
func writeTooManyRequests(w http.ResponseWriter, retryAfter int) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
}

// snapshot is for /debug/apf: each level's limit, seats in use, waiting and rejected counts.
func (c *apfController) snapshot() map[string]interface{} {
	out := map[string]interface{}{}
	for name, ps := range c.levels {
		ps.mu.Lock()
		out[name] = map[string]interface{}{"uid": ps.pl.uid, "exempt": ps.pl.exempt, "limit": ps.limit,
			"executing": ps.executing, "waiting": ps.waiting, "rejected": ps.rejected}
		ps.mu.Unlock()
	}
	fss := map[string]interface{}{}
	for _, fs := range c.schemas {
		fss[fs.name] = map[string]interface{}{"uid": fs.uid, "priorityLevel": fs.level, "matchingPrecedence": fs.precedence}
	}
	return map[string]interface{}{"priorityLevels": out, "flowSchemas": fss}
}

func (s *apiServer) serveDebugAPF(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.apf.snapshot())
}

func (s *apiServer) serveDebugStorage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int64{
		"etcdList": atomic.LoadInt64(&s.reads.EtcdList), "cacheList": atomic.LoadInt64(&s.reads.CacheList),
		"etcdGet": atomic.LoadInt64(&s.reads.EtcdGet), "cacheGet": atomic.LoadInt64(&s.reads.CacheGet)})
}
