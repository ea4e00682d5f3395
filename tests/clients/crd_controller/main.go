// Command crd-controller is a client-go controller of CustomResourceDefinitions (the
// apiextensions clientset, as an operator that installs its own CRDs has) speaking
// application/vnd.kubernetes.protobuf by default, as kube-controller-manager, the scheduler and
// operators built on client-go do for built-in types. Against k8s.io/apiextensions-apiserver it
// reproduces two incidents of STORMS.md with protobuf bodies:
//
//	crd-controller update-loop  --name N       §1: Update() of one CRD's annotation in a tight
//	                                            loop with the object each Update returned (the
//	                                            spec never changes: metadata.generation stays)
//	crd-controller finalizer    --prefix P     §5: creates --objects CRDs carrying its finalizer,
//	                                            releases the ones being deleted every --interval and
//	                                            writes one live CRD (its steady traffic); blocked
//	                                            while --pause-file exists
//	crd-controller delete       --prefix P     deletes --count CRDs P-<from>... one per --interval
//
// --content-type json makes the same client speak JSON. Every subcommand takes --kubeconfig,
// runs for --duration or until SIGTERM, and prints one JSON line on exit:
// {"requests":{"PUT 200":n,...},"generations":[...],"content_type":"..."}.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	finalizer  = "stormwatch.test/cleanup"
	annotation = "stormwatch.test/last-sync"
	group      = "stormwatch.test"
)

type counts struct {
	mu          sync.Mutex
	requests    map[string]int64
	generations map[int64]bool
}

func (c *counts) add(method string, err error) {
	code := 200
	if err != nil {
		if s, ok := err.(apierrors.APIStatus); ok {
			code = int(s.Status().Code)
		} else {
			code = 0
		}
	} else if method == "POST" {
		code = 201
	}
	c.mu.Lock()
	c.requests[fmt.Sprintf("%s %d", method, code)]++
	c.mu.Unlock()
}

func (c *counts) generation(g int64) {
	c.mu.Lock()
	c.generations[g] = true
	c.mu.Unlock()
}

// crd is a minimal CRD of the stormwatch.test group: plural <name>s, any schema.
func crd(plural string, finalizers ...string) *apiextensionsv1.CustomResourceDefinition {
	kind := strings.ToUpper(plural[:1]) + plural[1:]
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "s." + group, Finalizers: finalizers},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: plural + "s", Singular: plural, Kind: kind, ListKind: kind + "List",
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
			}},
		},
	}
}

func hasFinalizer(o *apiextensionsv1.CustomResourceDefinition) bool {
	for _, f := range o.Finalizers {
		if f == finalizer {
			return true
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// Each subcommand runs while ctx lives; its requests use rctx, which outlives ctx: a request
// in flight at the end of the run completes and is counted, as the server counts it.

func updateLoop(ctx, rctx context.Context, cs clientset.Interface, cnt *counts, name string) error {
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	obj, err := api.Get(rctx, name, metav1.GetOptions{})
	cnt.add("GET", err)
	if err != nil {
		return err
	}
	for i := 0; ctx.Err() == nil; i++ {
		if obj.Annotations == nil {
			obj.Annotations = map[string]string{}
		}
		obj.Annotations[annotation] = fmt.Sprintf("%s-%d", time.Now().UTC().Format(time.RFC3339Nano), i)
		out, err := api.Update(rctx, obj, metav1.UpdateOptions{})
		cnt.add("PUT", err)
		switch {
		case err == nil:
			cnt.generation(out.Generation)
			obj = out
		case apierrors.IsConflict(err): // a requeue with a fresh cache
			fresh, gerr := api.Get(rctx, name, metav1.GetOptions{})
			cnt.add("GET", gerr)
			if gerr == nil {
				obj = fresh
			}
		default:
			sleep(ctx, 50*time.Millisecond)
		}
	}
	return nil
}

func finalizerController(ctx, rctx context.Context, cs clientset.Interface, cnt *counts, prefix string,
	objects int, interval time.Duration, pauseFile string) error {
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	for i := 0; i < objects; i++ {
		_, err := api.Create(rctx, crd(fmt.Sprintf("%s%02d", prefix, i), finalizer), metav1.CreateOptions{})
		cnt.add("POST", err)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	next := 0
	for sleep(ctx, interval) {
		if _, err := os.Stat(pauseFile); pauseFile != "" && err == nil {
			continue // blocked on an external call: no request at all
		}
		list, err := api.List(rctx, metav1.ListOptions{ResourceVersion: "0"})
		cnt.add("LIST", err)
		if err != nil {
			continue
		}
		var live []*apiextensionsv1.CustomResourceDefinition
		for i := range list.Items {
			o := &list.Items[i]
			if !strings.HasPrefix(o.Name, prefix) {
				continue
			}
			if o.DeletionTimestamp == nil {
				live = append(live, o)
				continue
			}
			if hasFinalizer(o) { // the clean-up is done: release it
				var keep []string
				for _, f := range o.Finalizers {
					if f != finalizer {
						keep = append(keep, f)
					}
				}
				o.Finalizers = keep
				out, err := api.Update(rctx, o, metav1.UpdateOptions{})
				cnt.add("PUT", err)
				if err == nil {
					cnt.generation(out.Generation)
				}
			}
		}
		if len(live) > 0 { // steady reconcile traffic: one live object's annotation
			next = (next + 1) % len(live)
			o := live[next]
			if o.Annotations == nil {
				o.Annotations = map[string]string{}
			}
			o.Annotations[annotation] = time.Now().UTC().Format(time.RFC3339Nano)
			out, err := api.Update(rctx, o, metav1.UpdateOptions{})
			cnt.add("PUT", err)
			if err == nil {
				cnt.generation(out.Generation)
			}
		}
	}
	return nil
}

func deleteSome(ctx, rctx context.Context, cs clientset.Interface, cnt *counts, prefix string, from, count int,
	interval time.Duration) error {
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	start := time.Now()
	for i := 0; i < count && ctx.Err() == nil; i++ {
		err := api.Delete(rctx, fmt.Sprintf("%s%02ds.%s", prefix, from+i, group), metav1.DeleteOptions{})
		cnt.add("DELETE", err)
		if !sleep(ctx, time.Until(start.Add(time.Duration(i+1)*interval))) {
			break
		}
	}
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: crd-controller update-loop|finalizer|delete [flags]")
		os.Exit(2)
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the identity to act as")
	contentType := fs.String("content-type", "protobuf", "protobuf or json")
	duration := fs.Duration("duration", 30*time.Second, "run for this long")
	userAgent := fs.String("user-agent", "crd-controller/v0.3.0 (linux/amd64) client-go", "User-Agent")
	name := fs.String("name", "", "update-loop: the CRD")
	prefix := fs.String("prefix", "cleanup", "finalizer, delete: CRD plurals are <prefix><NN>s")
	objects := fs.Int("objects", 20, "finalizer: CRDs to create")
	interval := fs.Duration("interval", 500*time.Millisecond, "finalizer: reconcile period; delete: period")
	pauseFile := fs.String("pause-file", "", "finalizer: blocked while this file exists")
	from := fs.Int("from", 0, "delete: first index")
	count := fs.Int("count", 1, "delete: how many")
	_ = fs.Parse(os.Args[2:])

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	switch *contentType {
	case "protobuf":
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	case "json":
		cfg.ContentType = "application/json"
		cfg.AcceptContentTypes = "application/json"
	default:
		fmt.Fprintln(os.Stderr, "--content-type must be protobuf or json")
		os.Exit(2)
	}
	cfg.UserAgent = *userAgent
	cfg.QPS, cfg.Burst = -1, 0 // a runaway controller: no client-side rate limit
	cs, err := clientset.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	rctx, rcancel := context.WithTimeout(context.Background(), *duration+30*time.Second)
	defer rcancel()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; cancel() }()

	cnt := &counts{requests: map[string]int64{}, generations: map[int64]bool{}}
	switch cmd {
	case "update-loop":
		err = updateLoop(ctx, rctx, cs, cnt, *name)
	case "finalizer":
		err = finalizerController(ctx, rctx, cs, cnt, *prefix, *objects, *interval, *pauseFile)
	case "delete":
		err = deleteSome(ctx, rctx, cs, cnt, *prefix, *from, *count, *interval)
	default:
		fmt.Fprintln(os.Stderr, "unknown subcommand", cmd)
		os.Exit(2)
	}
	var gens []int64
	for g := range cnt.generations {
		gens = append(gens, g)
	}
	sort.Slice(gens, func(i, j int) bool { return gens[i] < gens[j] })
	out, _ := json.Marshal(map[string]any{"requests": cnt.requests, "generations": gens, "content_type": *contentType})
	fmt.Println(string(out))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
