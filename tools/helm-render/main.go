// helm-render renders a Helm 3 chart the way `helm template` does, for the subset of Helm the
// stormwatch chart uses. There is no helm binary on the build machines (and no network to get
// one), so CI renders the chart with this: Go's text/template + sprig (both from Debian), values
// read and merged with sigs.k8s.io/yaml exactly as Helm reads them (numbers become float64, a
// null deletes a default), and the Helm built-ins below.
//
// Supported: .Values .Release .Chart .Capabilities (KubeVersion, APIVersions.Has, HelmVersion)
// .Template .Files (Get, GetBytes, Glob-free); functions: sprig (minus env/expandenv, as Helm),
// include, tpl, required, toYaml, fromYaml, fromYamlArray, toJson, fromJson, fromJsonArray,
// lookup (always empty, as in `helm template`). Chart.yaml's apiVersion must be v2 and its
// kubeVersion constraint must accept --kube-version, as Helm checks at install.
//
// Anything else a template calls fails the render, so the chart cannot quietly start to depend
// on a Helm feature this renderer does not mirror.
//
//	helm-render [-f values.yaml]... [--set a.b=v]... [--name R] [--namespace NS]
//	            [--kube-version v1.28.7] [--api-versions monitoring.coreos.com/v1,...]
//	            [--show-only templates/x.yaml] [--notes] CHART_DIR
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/semver"
	"github.com/Masterminds/sprig"
	"sigs.k8s.io/yaml"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// ChartMeta mirrors the fields of Helm's chart.Metadata that templates can read as .Chart.X.
type ChartMeta struct {
	APIVersion   string            `json:"apiVersion"`
	Name         string            `json:"name"`
	Version      string            `json:"version"`
	AppVersion   string            `json:"appVersion"`
	KubeVersion  string            `json:"kubeVersion"`
	Description  string            `json:"description"`
	Type         string            `json:"type"`
	Home         string            `json:"home"`
	Keywords     []string          `json:"keywords"`
	Sources      []string          `json:"sources"`
	Annotations  map[string]string `json:"annotations"`
	Icon         string            `json:"icon"`
	Dependencies []interface{}     `json:"dependencies"`
	Maintainers  []interface{}     `json:"maintainers"`
}

type KubeVersion struct{ Version, Major, Minor, GitVersion string }

func (k KubeVersion) String() string { return k.Version }

type VersionSet []string

// Has mirrors chartutil.VersionSet.Has: "group/version" or "group/version/Kind".
func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
	HelmVersion map[string]string
}

type Release struct {
	Name, Namespace, Service string
	IsInstall, IsUpgrade     bool
	Revision                 int
}

// Files gives templates read access to the chart's non-template files, like Helm's .Files.
type Files struct{ dir string }

func (f Files) GetBytes(name string) []byte {
	b, err := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(name)))
	if err != nil {
		return nil // Helm returns empty for a missing file
	}
	return b
}
func (f Files) Get(name string) string { return string(f.GetBytes(name)) }

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "helm-render: "+format+"\n", a...)
	os.Exit(1)
}

func readYAMLMap(path string) map[string]interface{} {
	b, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		fail("%s: %v", path, err)
	}
	return m
}

// coalesce merges src into dst like Helm: maps merge key by key, anything else replaces,
// and an explicit null removes the key (how a user deletes a chart default).
func coalesce(dst, src map[string]interface{}) map[string]interface{} {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, sok := v.(map[string]interface{})
		dm, dok := dst[k].(map[string]interface{})
		if sok && dok {
			dst[k] = coalesce(dm, sm)
		} else {
			dst[k] = v
		}
	}
	return dst
}

// setValue applies one --set a.b.c=value; the value is parsed as a YAML scalar (so true, 3 and
// null behave as in Helm for the simple cases; lists and escapes are not supported).
func setValue(values map[string]interface{}, expr string) {
	eq := strings.Index(expr, "=")
	if eq < 0 {
		fail("--set %q: expected key=value", expr)
	}
	var v interface{}
	if err := yaml.Unmarshal([]byte(expr[eq+1:]), &v); err != nil {
		fail("--set %q: %v", expr, err)
	}
	keys := strings.Split(expr[:eq], ".")
	m := values
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			m[k] = next
		}
		m = next
	}
	if v == nil {
		delete(m, keys[len(keys)-1])
	} else {
		m[keys[len(keys)-1]] = v
	}
}

func toYAML(v interface{}) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromYAMLArray(s string) []interface{} {
	a := []interface{}{}
	if err := yaml.Unmarshal([]byte(s), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

func toJSON(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromJSONArray(s string) []interface{} {
	a := []interface{}{}
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

func main() {
	var valueFiles, sets listFlag
	flag.Var(&valueFiles, "f", "values file (repeatable; later files win)")
	flag.Var(&sets, "set", "a.b.c=value (repeatable; applied after -f)")
	name := flag.String("name", "stormwatch", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	kubeVersion := flag.String("kube-version", "v1.28.7", "Kubernetes version of .Capabilities")
	apiVersions := flag.String("api-versions", "", "extra API versions for .Capabilities.APIVersions.Has (comma-separated)")
	showOnly := flag.String("show-only", "", "render only this template (path relative to the chart, e.g. templates/x.yaml)")
	notes := flag.Bool("notes", false, "print the rendered templates/NOTES.txt instead of the manifests")
	// Like helm, accept flags before and after the chart directory.
	var positional []string
	args := os.Args[1:]
	for {
		flag.CommandLine.Parse(args)
		if flag.NArg() == 0 {
			break
		}
		positional = append(positional, flag.Arg(0))
		args = flag.Args()[1:]
	}
	if len(positional) != 1 {
		fail("usage: helm-render [flags] CHART_DIR")
	}
	chartDir := positional[0]

	var meta ChartMeta
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		fail("%v", err)
	}
	if err := yaml.Unmarshal(b, &meta); err != nil {
		fail("Chart.yaml: %v", err)
	}
	if meta.APIVersion != "v2" {
		fail("Chart.yaml: apiVersion %q, want v2 (Helm 3)", meta.APIVersion)
	}
	if meta.Name == "" || meta.Version == "" {
		fail("Chart.yaml: name and version are required")
	}
	if _, err := semver.StrictNewVersion(meta.Version); err != nil {
		fail("Chart.yaml: version %q is not SemVer 2: %v", meta.Version, err)
	}
	kv, err := semver.NewVersion(*kubeVersion)
	if err != nil {
		fail("--kube-version %q: %v", *kubeVersion, err)
	}
	if meta.KubeVersion != "" {
		c, err := semver.NewConstraint(meta.KubeVersion)
		if err != nil {
			fail("Chart.yaml: kubeVersion %q: %v", meta.KubeVersion, err)
		}
		if !c.Check(kv) {
			fail("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", meta.KubeVersion, *kubeVersion)
		}
	}

	values := readYAMLMap(filepath.Join(chartDir, "values.yaml"))
	for _, f := range valueFiles {
		values = coalesce(values, readYAMLMap(f))
	}
	for _, s := range sets {
		setValue(values, s)
	}

	apis := VersionSet{"v1", "apps/v1", "rbac.authorization.k8s.io/v1", "policy/v1", "networking.k8s.io/v1",
		"flowcontrol.apiserver.k8s.io/v1beta3"}
	if *apiVersions != "" {
		apis = append(apis, strings.Split(*apiVersions, ",")...)
	}
	top := map[string]interface{}{
		"Values":  values,
		"Release": Release{Name: *name, Namespace: *namespace, Service: "Helm", IsInstall: true, Revision: 1},
		"Chart":   meta,
		"Capabilities": Capabilities{
			KubeVersion: KubeVersion{Version: "v" + kv.String(), Major: fmt.Sprint(kv.Major()),
				Minor: fmt.Sprint(kv.Minor()), GitVersion: "v" + kv.String()},
			APIVersions: apis,
			HelmVersion: map[string]string{"version": "v3.14.0"},
		},
		"Files": Files{dir: chartDir},
	}

	// One template set for the whole chart, named <chart>/templates/<file>, as in Helm: defines
	// in _helpers.tpl are visible everywhere.
	var paths []string
	tdir := filepath.Join(chartDir, "templates")
	filepath.Walk(tdir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			paths = append(paths, p)
		}
		return nil
	})
	sort.Strings(paths)

	root := template.New("root")
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env") // removed by Helm
	delete(funcs, "expandenv")
	includeDepth := 0
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = fromYAML
	funcs["fromYamlArray"] = fromYAMLArray
	funcs["toJson"] = toJSON
	funcs["fromJson"] = fromJSON
	funcs["fromJsonArray"] = fromJSONArray
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, fmt.Errorf("%s", msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, fmt.Errorf("%s", msg)
		}
		return v, nil
	}
	funcs["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		includeDepth++
		defer func() { includeDepth-- }()
		if includeDepth > 1000 {
			return "", fmt.Errorf("include %q: recursion too deep", name)
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("tpl: %v", err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("tpl: %v", err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	root.Funcs(funcs).Option("missingkey=zero")

	names := map[string]string{} // template name -> chart-relative path
	for _, p := range paths {
		rel, _ := filepath.Rel(chartDir, p)
		rel = filepath.ToSlash(rel)
		tname := meta.Name + "/" + rel
		src, err := os.ReadFile(p)
		if err != nil {
			fail("%v", err)
		}
		if _, err := root.New(tname).Parse(string(src)); err != nil {
			fail("%v", err)
		}
		names[tname] = rel
	}

	var tnames []string
	for n := range names {
		tnames = append(tnames, n)
	}
	sort.Strings(tnames)
	out := &bytes.Buffer{}
	rendered := 0
	for _, tname := range tnames {
		rel := names[tname]
		base := filepath.Base(rel)
		isNotes := base == "NOTES.txt"
		if strings.HasPrefix(base, "_") || isNotes != *notes {
			continue
		}
		if !isNotes && !strings.HasSuffix(base, ".yaml") && !strings.HasSuffix(base, ".yml") {
			continue
		}
		if *showOnly != "" && rel != *showOnly {
			continue
		}
		data := map[string]interface{}{}
		for k, v := range top {
			data[k] = v
		}
		data["Template"] = map[string]string{"Name": tname, "BasePath": meta.Name + "/templates"}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, tname, data); err != nil {
			fail("%v", err)
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		rendered++
		if strings.TrimSpace(text) == "" {
			continue
		}
		if isNotes {
			out.WriteString(text)
			continue
		}
		fmt.Fprintf(out, "---\n# Source: %s\n%s\n", tname, strings.TrimRight(text, "\n"))
	}
	if *showOnly != "" && rendered == 0 {
		fail("--show-only %s: no such template", *showOnly)
	}
	os.Stdout.Write(out.Bytes())
}
