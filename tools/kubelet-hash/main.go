// kubelet-hash computes the container hash of every golden spec with the real kubelet code of one
// Kubernetes version: HashContainer (k8s.io/kubernetes/pkg/kubelet/container, helpers.go) and,
// for the versions whose package has it (1.27-1.30), HashContainerWithoutResources, over the spec
// decoded with encoding/json into that version's k8s.io/api v1.Container, as the kubelet decodes
// a pod the API server sends.
//
// Usage: kubelet-hash -version 1.36 [SPECS.jsonl]   (stdin when no path is given)
//
// stdout: one line per spec in the format of fixtures/golden/hashes.jsonl, e.g.
//
//	{"id": "f001-minimal", "version": "1.36", "hash": "e324a2d6"}
//	{"id": "f001-minimal", "version": "1.30", "hash": "809b3ff5", "hash_without_resources": "809b3ff5"}
//
// Built by run.sh in a module that requires k8s.io/kubernetes at the version; the file
// without_resources.go (build tag withoutresources) is compiled in only for versions whose
// pkg/kubelet/container has HashContainerWithoutResources.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	v1 "k8s.io/api/core/v1"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
)

// hashWithoutResources is kubecontainer.HashContainerWithoutResources where the package has it
// (set by without_resources.go), nil otherwise.
var hashWithoutResources func(*v1.Container) uint64

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "kubelet-hash: "+format+"\n", args...)
	os.Exit(1)
}

// jsonString is s as a JSON string the way Python's json.dumps writes the committed file for the
// ASCII ids it holds (no HTML escaping).
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		fail("%v", err)
	}
	return string(bytes.TrimRight(b.Bytes(), "\n"))
}

func main() {
	version := flag.String("version", "", "the version string written into each line (e.g. 1.36)")
	flag.Parse()
	if *version == "" || flag.NArg() > 1 {
		fail("usage: kubelet-hash -version 1.36 [SPECS.jsonl]")
	}
	var input io.Reader = os.Stdin
	if flag.NArg() == 1 {
		f, err := os.Open(flag.Arg(0))
		if err != nil {
			fail("%v", err)
		}
		defer f.Close()
		input = f
	}
	in := bufio.NewScanner(input)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	ver := jsonString(*version)
	for n := 1; in.Scan(); n++ {
		if len(bytes.TrimSpace(in.Bytes())) == 0 {
			continue
		}
		var rec struct {
			ID        string          `json:"id"`
			Container json.RawMessage `json:"container"`
		}
		if err := json.Unmarshal(in.Bytes(), &rec); err != nil {
			fail("line %d: %v", n, err)
		}
		// The container's raw bytes, decoded as the kubelet decodes them: encoding/json into
		// this version's v1.Container (unknown fields dropped, Quantity/IntOrString UnmarshalJSON).
		var c v1.Container
		if err := json.Unmarshal(rec.Container, &c); err != nil {
			fail("%s (line %d): this version's v1.Container cannot decode the spec: %v", rec.ID, n, err)
		}
		line := fmt.Sprintf("{\"id\": %s, \"version\": %s, \"hash\": \"%s\"", jsonString(rec.ID), ver,
			strconv.FormatUint(kubecontainer.HashContainer(&c), 16))
		if hashWithoutResources != nil {
			line += fmt.Sprintf(", \"hash_without_resources\": \"%s\"", strconv.FormatUint(hashWithoutResources(&c), 16))
		}
		fmt.Fprintln(out, line+"}")
	}
	if err := in.Err(); err != nil {
		fail("%v", err)
	}
}
