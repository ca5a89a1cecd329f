// helmrender renders a Helm chart the way `helm template` does, for tests on
// machines without Helm. It implements the subset of Helm 3's engine the
// Aside chart uses: Go text/template with the sprig functions (minus env and
// expandenv, as Helm removes them), include, tpl, required, toYaml, fromYaml,
// fromYamlArray, toJson, fromJson, lookup (always empty, as in `helm
// template`), the .Release, .Chart, .Values, .Capabilities, .Template and
// .Files objects, `_*.tpl` partials, NOTES.txt, -f values files coalesced
// over values.yaml (later files win, null deletes a key), and `--set` for
// simple dotted keys. Values are decoded as Helm decodes them (through JSON:
// every number is a float64), so a chart that prints a large number without
// `int` shows the same scientific notation here as under Helm.
//
// With --lint it also checks what `helm lint --strict` checks: Chart.yaml
// (apiVersion v2, name, SemVer 2 version), strict rendering (a missing value
// is an error), and that every rendered document is YAML with apiVersion,
// kind and a DNS-1123 metadata.name.
//
// Usage:
//
//	helmrender [--lint] [--strict] [--notes] [--name R] [--namespace NS]
//	           [-f values.yaml]... [--set a.b=c]... CHART_DIR
//
// prints the manifests as `helm template` does ("---", "# Source: ...",
// the document), or with --notes only the rendered NOTES.txt.
//
// Built offline in GOPATH mode against Debian's golang-*-dev packages; run by
// the chart tests (tests/helm). Exit status 0 on success, 1 on a render or
// lint error (printed to stderr), 2 on bad usage.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/semver"
	"github.com/Masterminds/sprig"
	"github.com/ghodss/yaml"
)

// Metadata mirrors the fields of Helm's chart.Metadata that templates read
// as .Chart.X.
type Metadata struct {
	Name         string            `json:"name"`
	Home         string            `json:"home,omitempty"`
	Sources      []string          `json:"sources,omitempty"`
	Version      string            `json:"version"`
	Description  string            `json:"description,omitempty"`
	Keywords     []string          `json:"keywords,omitempty"`
	Maintainers  []interface{}     `json:"maintainers,omitempty"`
	Icon         string            `json:"icon,omitempty"`
	APIVersion   string            `json:"apiVersion"`
	Condition    string            `json:"condition,omitempty"`
	Tags         string            `json:"tags,omitempty"`
	AppVersion   string            `json:"appVersion,omitempty"`
	Deprecated   bool              `json:"deprecated,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	KubeVersion  string            `json:"kubeVersion,omitempty"`
	Dependencies []interface{}     `json:"dependencies,omitempty"`
	Type         string            `json:"type,omitempty"`
}

// KubeVersion mirrors Helm's chartutil.KubeVersion.
type KubeVersion struct {
	Version string
	Major   string
	Minor   string
}

func (k KubeVersion) String() string     { return k.Version }
func (k KubeVersion) GitVersion() string { return k.Version }

// VersionSet mirrors Helm's chartutil.VersionSet.
type VersionSet []string

// Has reports whether the API version (or "group/version/Kind") is known.
func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

// Capabilities mirrors Helm's chartutil.Capabilities.
type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
	HelmVersion map[string]string
}

// Files mirrors the read-only parts of Helm's .Files.
type Files map[string][]byte

// Get returns a file's contents as a string ("" when missing).
func (f Files) Get(name string) string { return string(f[name]) }

// GetBytes returns a file's contents.
func (f Files) GetBytes(name string) []byte { return f[name] }

// Template is .Template.
type Template struct {
	Name     string
	BasePath string
}

// The API versions a current cluster serves (what `helm template` assumes
// without --api-versions), plus what --api-versions adds.
var defaultAPIVersions = []string{
	"v1", "apps/v1", "batch/v1", "policy/v1", "autoscaling/v1",
	"autoscaling/v2", "networking.k8s.io/v1", "rbac.authorization.k8s.io/v1",
	"storage.k8s.io/v1", "coordination.k8s.io/v1", "discovery.k8s.io/v1",
}

type stringList []string

func (s *stringList) add(v string) { *s = append(*s, v) }

type options struct {
	chartDir    string
	name        string
	namespace   string
	valueFiles  stringList
	sets        stringList
	apiVersions stringList
	kubeVersion string
	strict      bool
	lint        bool
	notes       bool
	isUpgrade   bool
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: helmrender [--lint] [--strict] [--notes] [--is-upgrade] "+
		"[--name R] [--namespace NS] [--kube-version V] [--api-versions G/V]... "+
		"[-f values.yaml]... [--set a.b=c]... CHART_DIR")
	os.Exit(2)
}

func parseArgs(args []string) options {
	o := options{name: "release-name", namespace: "default", kubeVersion: "v1.28.0"}
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func() string {
			if eq := strings.IndexByte(a, '='); eq >= 0 && strings.HasPrefix(a, "--") {
				return a[eq+1:]
			}
			if i+1 >= len(args) {
				usage()
			}
			i++
			return args[i]
		}
		name := a
		if eq := strings.IndexByte(a, '='); eq >= 0 && strings.HasPrefix(a, "--") {
			name = a[:eq]
		}
		switch name {
		case "--lint":
			o.lint, o.strict = true, true
		case "--strict":
			o.strict = true
		case "--notes":
			o.notes = true
		case "--is-upgrade":
			o.isUpgrade = true
		case "--name":
			o.name = value()
		case "--namespace", "-n":
			o.namespace = value()
		case "--kube-version":
			o.kubeVersion = value()
		case "--api-versions", "-a":
			o.apiVersions.add(value())
		case "-f", "--values":
			o.valueFiles.add(value())
		case "--set":
			o.sets.add(value())
		default:
			if strings.HasPrefix(a, "-") || o.chartDir != "" {
				usage()
			}
			o.chartDir = a
		}
	}
	if o.chartDir == "" {
		usage()
	}
	return o
}

// readValues decodes YAML as Helm does (sigs.k8s.io/yaml: through JSON).
func readValues(data []byte) (map[string]interface{}, error) {
	vals := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &vals); err != nil {
		return nil, err
	}
	if vals == nil {
		vals = map[string]interface{}{}
	}
	return vals, nil
}

// coalesce merges `src` (chart defaults) under `dst` (user values): maps
// merge recursively, a user null deletes the key, anything else the user
// gives wins. Like Helm's chartutil.CoalesceTables.
func coalesce(dst, src map[string]interface{}) map[string]interface{} {
	if dst == nil {
		dst = map[string]interface{}{}
	}
	for key, sv := range src {
		dv, ok := dst[key]
		if !ok {
			dst[key] = sv
			continue
		}
		if dv == nil {
			delete(dst, key)
			continue
		}
		dm, dIsMap := dv.(map[string]interface{})
		sm, sIsMap := sv.(map[string]interface{})
		if dIsMap && sIsMap {
			dst[key] = coalesce(dm, sm)
		}
	}
	// Nulls the user gave for keys the chart does not have are dropped too.
	for key, dv := range dst {
		if dv == nil {
			delete(dst, key)
		}
	}
	return dst
}

// mergeMaps merges `b` over `a` (later -f files win), like Helm's mergeMaps.
func mergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]interface{}); ok {
			if am, ok := out[k].(map[string]interface{}); ok {
				out[k] = mergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// parseSet applies one `--set a.b.c=value` (dotted keys only, no lists),
// typed as Helm's strvals types it: int64, bool, null, else string.
func parseSet(vals map[string]interface{}, expr string) error {
	eq := strings.IndexByte(expr, '=')
	if eq <= 0 {
		return fmt.Errorf("--set %q: expected key=value", expr)
	}
	keys := strings.Split(expr[:eq], ".")
	raw := expr[eq+1:]
	var v interface{} = raw
	if n, err := strconv.ParseInt(raw, 10, 64); err == nil && (raw == "0" || !strings.HasPrefix(raw, "0")) {
		v = n
	} else if raw == "true" || raw == "false" {
		v = raw == "true"
	} else if raw == "null" {
		v = nil
	}
	m := vals
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
	return nil
}

func toYAML(v interface{}) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

func fromYAML(str string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(str), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromYAMLArray(str string) []interface{} {
	a := []interface{}{}
	if err := yaml.Unmarshal([]byte(str), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func fromJSON(str string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(str), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

// engine renders one chart.
type engine struct {
	root   *template.Template
	strict bool
	lint   bool
	depth  map[string]int
}

const recursionMaxNums = 1000

func (e *engine) funcMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = toYAML
	f["fromYaml"] = fromYAML
	f["fromYamlArray"] = fromYAMLArray
	f["toJson"] = toJSON
	f["fromJson"] = fromJSON
	f["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	f["required"] = func(warn string, val interface{}) (interface{}, error) {
		if val == nil {
			return val, errors.New(warn)
		}
		if s, ok := val.(string); ok && s == "" {
			return val, errors.New(warn)
		}
		return val, nil
	}
	f["include"] = func(name string, data interface{}) (string, error) {
		if e.depth[name] > recursionMaxNums {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		e.depth[name]++
		defer func() { e.depth[name]-- }()
		var buf strings.Builder
		if err := e.root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := e.root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %w", text, err)
		}
		var buf strings.Builder
		if err := t.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %w", text, err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	return f
}

type renderedFile struct {
	name    string
	content string
}

func loadChart(o options) (*Metadata, map[string]interface{}, map[string]string, Files, error) {
	chartYAML, err := os.ReadFile(filepath.Join(o.chartDir, "Chart.yaml"))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	meta := &Metadata{}
	if err := yaml.Unmarshal(chartYAML, meta); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	defaults := map[string]interface{}{}
	if data, err := os.ReadFile(filepath.Join(o.chartDir, "values.yaml")); err == nil {
		if defaults, err = readValues(data); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("values.yaml: %w", err)
		}
	}
	templates := map[string]string{}
	files := Files{}
	err = filepath.WalkDir(o.chartDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(o.chartDir, p)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.HasPrefix(rel, "templates/") {
			templates[path.Join(meta.Name, rel)] = string(data)
		} else {
			files[rel] = data
		}
		return nil
	})
	return meta, defaults, templates, files, err
}

func userValues(o options) (map[string]interface{}, error) {
	user := map[string]interface{}{}
	for _, f := range o.valueFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		v, err := readValues(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		user = mergeMaps(user, v)
	}
	for _, s := range o.sets {
		if err := parseSet(user, s); err != nil {
			return nil, err
		}
	}
	return user, nil
}

func render(o options) ([]renderedFile, string, error) {
	meta, defaults, templates, files, err := loadChart(o)
	if err != nil {
		return nil, "", err
	}
	user, err := userValues(o)
	if err != nil {
		return nil, "", err
	}
	values := coalesce(user, defaults)

	kv, err := semver.NewVersion(o.kubeVersion)
	if err != nil {
		return nil, "", fmt.Errorf("--kube-version: %w", err)
	}
	if meta.KubeVersion != "" {
		constraint, err := semver.NewConstraint(meta.KubeVersion)
		if err != nil {
			return nil, "", fmt.Errorf("Chart.yaml: kubeVersion %q: %w", meta.KubeVersion, err)
		}
		if !constraint.Check(kv) {
			return nil, "", fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s",
				meta.KubeVersion, o.kubeVersion)
		}
	}
	caps := Capabilities{
		KubeVersion: KubeVersion{Version: "v" + kv.String(),
			Major: strconv.FormatUint(kv.Major(), 10), Minor: strconv.FormatUint(kv.Minor(), 10)},
		APIVersions: append(VersionSet(defaultAPIVersions), o.apiVersions...),
		HelmVersion: map[string]string{"Version": "v3.12.0"},
	}
	release := map[string]interface{}{
		"Name": o.name, "Namespace": o.namespace, "IsUpgrade": o.isUpgrade,
		"IsInstall": !o.isUpgrade, "Revision": 1, "Service": "Helm",
	}

	e := &engine{strict: o.strict, lint: o.lint, depth: map[string]int{}}
	e.root = template.New("gotpl")
	if o.strict {
		e.root.Option("missingkey=error")
	} else {
		e.root.Option("missingkey=zero")
	}
	e.root.Funcs(e.funcMap())
	names := make([]string, 0, len(templates))
	for name := range templates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := e.root.New(name).Parse(templates[name]); err != nil {
			return nil, "", fmt.Errorf("parse error in %s: %w", name, err)
		}
	}

	var out []renderedFile
	notes := ""
	for _, name := range names {
		if strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		data := map[string]interface{}{
			"Values":       values,
			"Release":      release,
			"Chart":        meta,
			"Capabilities": caps,
			"Files":        files,
			"Subcharts":    map[string]interface{}{},
			"Template":     Template{Name: name, BasePath: path.Join(meta.Name, "templates")},
		}
		var buf bytes.Buffer
		if err := e.root.ExecuteTemplate(&buf, name, data); err != nil {
			return nil, "", fmt.Errorf("render error in %s: %w", name, err)
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if strings.HasSuffix(name, "/NOTES.txt") {
			notes = text
			continue
		}
		out = append(out, renderedFile{name: name, content: text})
	}
	return out, notes, nil
}

var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
var dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// lintChart checks Chart.yaml and the rendered documents.
func lintChart(o options, files []renderedFile) []string {
	var problems []string
	meta, _, _, _, err := loadChart(o)
	if err != nil {
		return []string{err.Error()}
	}
	if meta.APIVersion != "v2" {
		problems = append(problems, fmt.Sprintf("Chart.yaml: apiVersion %q (expected v2)", meta.APIVersion))
	}
	if meta.Name == "" {
		problems = append(problems, "Chart.yaml: name is required")
	} else if abs, _ := filepath.Abs(o.chartDir); filepath.Base(abs) != meta.Name {
		problems = append(problems, fmt.Sprintf("Chart.yaml: name %q differs from the directory %q", meta.Name, filepath.Base(abs)))
	}
	if _, err := semver.StrictNewVersion(meta.Version); err != nil {
		problems = append(problems, fmt.Sprintf("Chart.yaml: version %q is not SemVer 2: %v", meta.Version, err))
	}
	if meta.Type != "" && meta.Type != "application" && meta.Type != "library" {
		problems = append(problems, fmt.Sprintf("Chart.yaml: type %q", meta.Type))
	}
	for _, f := range files {
		for i, doc := range strings.Split(f.content, "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var obj map[string]interface{}
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				problems = append(problems, fmt.Sprintf("%s (document %d): invalid YAML: %v", f.name, i, err))
				continue
			}
			if obj == nil {
				continue
			}
			if obj["apiVersion"] == nil || obj["apiVersion"] == "" {
				problems = append(problems, fmt.Sprintf("%s: object has no apiVersion", f.name))
			}
			if obj["kind"] == nil || obj["kind"] == "" {
				problems = append(problems, fmt.Sprintf("%s: object has no kind", f.name))
			}
			md, _ := obj["metadata"].(map[string]interface{})
			name, _ := md["name"].(string)
			if name == "" {
				problems = append(problems, fmt.Sprintf("%s: object has no metadata.name", f.name))
			} else if len(name) > 253 || !dns1123Subdomain.MatchString(name) {
				problems = append(problems, fmt.Sprintf("%s: metadata.name %q is not a DNS-1123 subdomain", f.name, name))
			}
			if kind, _ := obj["kind"].(string); (kind == "Service" || kind == "StatefulSet") && (len(name) > 63 || !dns1123Label.MatchString(name)) {
				problems = append(problems, fmt.Sprintf("%s: %s name %q is not a DNS-1123 label", f.name, kind, name))
			}
		}
	}
	return problems
}

func main() {
	o := parseArgs(os.Args[1:])
	files, notes, err := render(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
	if o.lint {
		if problems := lintChart(o, files); len(problems) > 0 {
			for _, p := range problems {
				fmt.Fprintf(os.Stderr, "[ERROR] %s\n", p)
			}
			os.Exit(1)
		}
		if notes == "" {
			fmt.Fprintln(os.Stderr, "[WARNING] templates/NOTES.txt is missing or empty")
		}
		fmt.Println("1 chart(s) linted, 0 chart(s) failed")
		return
	}
	var w strings.Builder
	for _, f := range files {
		if strings.TrimSpace(f.content) == "" {
			continue
		}
		fmt.Fprintf(&w, "---\n# Source: %s\n%s\n", f.name, strings.TrimSpace(f.content))
	}
	if o.notes {
		os.Stdout.WriteString(notes)
		return
	}
	os.Stdout.WriteString(w.String())
}
