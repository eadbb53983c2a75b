// kubelet-1.20-hash computes the container hash of every golden spec with the real kubelet code
// of Kubernetes 1.20: HashContainer (pkg/kubelet/container/helpers.go) over the spec decoded into
// 1.20's v1.Container by encoding/json, as the kubelet decodes a pod from the API server.
//
// Usage: kubelet-1.20-hash SPECS.jsonl OUTDIR
//
//   - stdout: one line per spec in the format of fixtures/golden/hashes.jsonl;
//   - OUTDIR/spew/1.20/<id>.txt and OUTDIR/json/1.20/<id>.json for the first 20 specs: the bytes
//     DeepHashObject writes into the hasher and the JSON inside them, as in fixtures/golden.
//
// Built by run.sh inside Debian's kubernetes source tree (GOPATH mode, its vendor/ tree).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"hash"
	"hash/fnv"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	hashutil "k8s.io/kubernetes/pkg/util/hash"
)

// The golden README promises reference bytes for the first 20 specs of specs.jsonl.
const referenceFiles = 20

// recorder is an FNV-1a hasher that also keeps what was written, so the reference bytes come
// from the same DeepHashObject call that the kubelet makes.
type recorder struct {
	hash.Hash32
	text bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.text.Write(p)
	return r.Hash32.Write(p)
}

func (r *recorder) Reset() {
	r.text.Reset()
	r.Hash32.Reset()
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "kubelet-1.20-hash: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 3 {
		fail("usage: kubelet-1.20-hash SPECS.jsonl OUTDIR")
	}
	specs, err := os.Open(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	outDir := os.Args[2]
	for _, d := range []string{"spew/1.20", "json/1.20"} {
		if err := os.MkdirAll(filepath.Join(outDir, d), 0o755); err != nil {
			fail("%v", err)
		}
	}
	in := bufio.NewScanner(specs)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for n := 0; in.Scan(); n++ {
		var rec struct {
			ID        string          `json:"id"`
			Container json.RawMessage `json:"container"`
		}
		if err := json.Unmarshal(in.Bytes(), &rec); err != nil {
			fail("line %d: %v", n+1, err)
		}
		var c v1.Container
		if err := json.Unmarshal(rec.Container, &c); err != nil {
			// Every golden spec decodes for every version; a failure here is a finding.
			fail("%s: kubelet 1.20 cannot decode the spec: %v", rec.ID, err)
		}
		sum := kubecontainer.HashContainer(&c)
		id, _ := json.Marshal(rec.ID)
		fmt.Fprintf(out, "{\"id\": %s, \"version\": \"1.20\", \"hash\": \"%x\"}\n", id, sum)
		if n >= referenceFiles {
			continue
		}
		containerJSON, err := json.Marshal(&c)
		if err != nil {
			fail("%s: %v", rec.ID, err)
		}
		r := &recorder{Hash32: fnv.New32a()}
		hashutil.DeepHashObject(r, containerJSON)
		if uint64(r.Sum32()) != sum {
			fail("%s: recorded text hashes to %x, HashContainer gave %x", rec.ID, r.Sum32(), sum)
		}
		write := func(rel string, data []byte) {
			if err := os.WriteFile(filepath.Join(outDir, rel), data, 0o644); err != nil {
				fail("%v", err)
			}
		}
		write(filepath.Join("spew/1.20", rec.ID+".txt"), r.text.Bytes())
		write(filepath.Join("json/1.20", rec.ID+".json"), containerJSON)
	}
	if err := in.Err(); err != nil {
		fail("%v", err)
	}
}
