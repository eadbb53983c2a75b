// Command container-schema prints the Go type tree of k8s.io/api/core/v1.Container, as
// reflect sees it in the k8s.io/api and k8s.io/apimachinery versions it is built with, in the
// format of hashcompat/schemas/<major>.<minor>.json. run.sh builds it once per Kubernetes minor
// version (outside the clone) and compares or writes the schema file.
//
// The walk: depth-first pre-order from v1.Container, each distinct reflect.Type once, children
// in this order: struct fields in declaration order; the element of a pointer, slice, array or
// map; then a map's key. Every entry carries reflect's String(), Kind and Size (GOARCH decides
// the sizes; the committed files are 64-bit). No array occurs in any version's tree; were one to
// appear, its entry would carry "len" after "key" (a field the committed files never needed).
//
// "methods" records, for the methods that can change how a value is encoded or printed
// (encoding/json's Marshaler/Unmarshaler, encoding's TextMarshaler/TextUnmarshaler,
// fmt.Stringer), whether the type's own method set has the method or only the method set of a
// pointer to it. Left out: the String() methods gogo-protobuf generates for every API struct
// (declared in generated.pb.go; boilerplate, not part of how the type encodes, and the
// kubelet's go-spew printer runs with DisableMethods), and the methods of unexported
// standard-library types (see internalStd).
//
// The "sources" labels default to what the binary was built with (runtime/debug build info):
// k8s.io/api v0.Y.Z is the tag kubernetes-1.Y.Z of the same repository. run.sh passes them
// explicitly, derived from what it built: the Godeps-era builds (1.8-1.14) use local copies of
// the staging trees, which build info cannot name, and inf.v0 v0.9.0 is written as its commit.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"unicode"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
)

type field struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	JSONTag  string `json:"json_tag"`
	Embedded bool   `json:"embedded"`
	Exported bool   `json:"exported"`
}

type entry struct {
	Type    string   `json:"type"`
	Kind    string   `json:"kind"`
	Name    string   `json:"name,omitempty"`
	PkgPath string   `json:"pkg_path,omitempty"`
	Elem    string   `json:"elem,omitempty"`
	Key     string   `json:"key,omitempty"`
	Len     *int     `json:"len,omitempty"`
	Size    uintptr  `json:"size_bytes"`
	Fields  *[]field `json:"fields,omitempty"`
	Methods []string `json:"methods,omitempty"`
}

type schema struct {
	K8sVersion string     `json:"k8s_version"`
	SourceTag  string     `json:"source_tag"`
	Sources    orderedMap `json:"sources"`
	Root       string     `json:"root"`
	Types      []entry    `json:"types_in_walk_order"`
}

// orderedMap is a JSON object whose keys keep their insertion order.
type orderedMap [][2]string

func (m orderedMap) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, kv := range m {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv[0])
		v, _ := json.Marshal(kv[1])
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// The methods looked for, in the order they are listed.
var methodNames = []string{"MarshalJSON", "UnmarshalJSON", "MarshalText", "UnmarshalText", "String"}

// generatedProto: the method is declared in a gogo-protobuf generated.pb.go.
func generatedProto(m reflect.Method) bool {
	fn := runtime.FuncForPC(m.Func.Pointer())
	if fn == nil {
		return false
	}
	file, _ := fn.FileLine(fn.Entry())
	return path.Base(file) == "generated.pb.go"
}

func has(t reflect.Type, name string) bool {
	m, ok := t.MethodByName(name)
	return ok && !generatedProto(m)
}

// internalStd: an unexported type of the Go standard library (big.nat). Its methods are not Go
// API and change between Go releases (math/big's nat gained String() in Go 1.20), so they are
// not recorded: the files must not depend on the Go version that generates them.
func internalStd(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer && t.Name() == "" {
		t = t.Elem()
	}
	name, pkg := t.Name(), t.PkgPath()
	if name == "" || pkg == "" || strings.Contains(strings.SplitN(pkg, "/", 2)[0], ".") {
		return false
	}
	r, _ := utf8.DecodeRuneInString(name)
	return !unicode.IsUpper(r)
}

func methods(t reflect.Type) []string {
	if internalStd(t) {
		return nil
	}
	var out []string
	for _, name := range methodNames {
		switch {
		case has(t, name):
			out = append(out, name+" (method set of this type)")
		case t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface && has(reflect.PointerTo(t), name):
			out = append(out, name+" (only method set of pointer to this type)")
		}
	}
	return out
}

func kindName(k reflect.Kind) string {
	if k == reflect.Pointer {
		return "ptr" // reflect.Ptr's historic name, as the committed files spell it
	}
	return k.String()
}

type walker struct {
	seen  map[reflect.Type]bool
	order []entry
}

func (w *walker) visit(t reflect.Type) {
	if w.seen[t] {
		return
	}
	w.seen[t] = true
	e := entry{Type: t.String(), Kind: kindName(t.Kind()), Size: t.Size()}
	if t.Name() != "" {
		e.Name = t.Name()
		e.PkgPath = t.PkgPath()
	}
	var children []reflect.Type
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map, reflect.Chan:
		e.Elem = t.Elem().String()
		children = append(children, t.Elem())
	}
	if t.Kind() == reflect.Array {
		n := t.Len()
		e.Len = &n
	}
	if t.Kind() == reflect.Map {
		e.Key = t.Key().String()
		children = append(children, t.Key())
	}
	if t.Kind() == reflect.Struct {
		fs := make([]field, 0, t.NumField())
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			fs = append(fs, field{
				Name:     f.Name,
				Type:     f.Type.String(),
				JSONTag:  f.Tag.Get("json"),
				Embedded: f.Anonymous,
				Exported: f.IsExported(),
			})
			children = append(children, f.Type)
		}
		e.Fields = &fs
	}
	e.Methods = methods(t)
	w.order = append(w.order, e)
	for _, c := range children {
		w.visit(c)
	}
}

func buildVersions() map[string]string {
	out := map[string]string{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			m := d
			if d.Replace != nil {
				m = d.Replace
			}
			out[d.Path] = m.Version
		}
	}
	return out
}

// v0.36.3 -> kubernetes-1.36.3
func kubeTag(modVersion string) string {
	if strings.HasPrefix(modVersion, "v0.") {
		return "kubernetes-1." + strings.TrimPrefix(modVersion, "v0.")
	}
	return modVersion
}

func main() {
	bv := buildVersions()
	defTag := kubeTag(bv["k8s.io/api"])
	defMinor := ""
	if parts := strings.Split(strings.TrimPrefix(defTag, "kubernetes-"), "."); len(parts) >= 2 {
		defMinor = parts[0] + "." + parts[1]
	}
	k8sVersion := flag.String("k8s-version", defMinor, "k8s_version (major.minor)")
	sourceTag := flag.String("source-tag", defTag, "source_tag")
	apiSrc := flag.String("api-source", defTag, `sources["k8s.io/api"]`)
	machSrc := flag.String("apimachinery-source", kubeTag(bv["k8s.io/apimachinery"]), `sources["k8s.io/apimachinery"]`)
	infSrc := flag.String("inf-source", bv["gopkg.in/inf.v0"], `sources["gopkg.in/inf.v0"]`)
	flag.Parse()

	bits := reflect.TypeOf(big.Word(0)).Bits()
	uintBits := reflect.TypeOf(uint(0)).Bits()
	wordNote := fmt.Sprintf("Go standard library, %d-bit platform (big.Word = uint = %d bits)", bits, uintBits)
	if bits != uintBits {
		wordNote = fmt.Sprintf("Go standard library, big.Word = %d bits, uint = %d bits", bits, uintBits)
	}

	w := &walker{seen: map[reflect.Type]bool{}}
	root := reflect.TypeOf(v1.Container{})
	w.visit(root)
	s := schema{
		K8sVersion: *k8sVersion,
		SourceTag:  *sourceTag,
		Sources: orderedMap{
			{"k8s.io/api", *apiSrc},
			{"k8s.io/apimachinery", *machSrc},
			{"gopkg.in/inf.v0", *infSrc},
			{"math/big", wordNote},
		},
		Root:  root.String(),
		Types: w.order,
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(s); err != nil {
		fmt.Fprintln(os.Stderr, "container-schema:", err)
		os.Exit(1)
	}
}
