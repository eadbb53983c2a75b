// kubelet-checkpoints-module writes checkpoint files with the real state code of one kubelet
// version (k8s.io/kubernetes at that tag, from the Go module proxy) and judges files with the
// same code the kubelet runs when it starts. run.sh builds it once per version and crosses every
// writer with every reader; the Rust crate kubeletstate must reach the same verdicts.
//
// Usage:
//
//	kubelet-checkpoints-module [-gates G] write CASE DIR   write CASE's file(s) into DIR
//	kubelet-checkpoints-module [-gates G] read KIND POLICY DIR
//	    load DIR/<KIND's file> as the kubelet does; prints {"verdict": "accepted"} or
//	    {"verdict": "rejected", "error": "..."} (exit 0 either way)
//	kubelet-checkpoints-module cases   the cases this version can write, one a line
//
// G: feature gates as the kubelet's --feature-gates takes them (e.g.
// PodLevelResourceManagers=true); a gate this version does not know is an error (run.sh gives
// only known gates). The adapters (files with build tags) absorb the API differences between
// versions; run.sh picks the tags from the version's source.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
)

// writers: case name -> the function that writes it into a directory. Each adapter registers
// the cases its version can write.
var writers = map[string]func(dir string) error{}

// readers: kind (the file's name) -> the function that loads it as the kubelet does.
var readers = map[string]func(dir, policy string) error{}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "kubelet-checkpoints-module: "+format+"\n", args...)
	os.Exit(2)
}

func init() {
	// The device manager's checkpoint API is the same in every version this tool builds
	// (1.30+): checkpoint.New and the checkpoint manager.
	writers["device"] = func(dir string) error {
		m, err := checkpointmanager.NewCheckpointManager(dir)
		if err != nil {
			return err
		}
		ids := checkpoint.NewDevicesPerNUMA()
		ids[0] = []string{"dev-0", "dev-1"}
		cp := checkpoint.New([]checkpoint.PodDevicesEntry{{
			PodUID:        "11111111-2222-3333-4444-555555555555",
			ContainerName: "app",
			ResourceName:  "example.com/gpu",
			DeviceIDs:     ids,
			AllocResp:     []byte("\x12\x05hello"),
		}}, map[string][]string{"example.com/gpu": {"dev-0", "dev-1", "dev-2"}})
		return m.CreateCheckpoint("kubelet_internal_checkpoint", cp)
	}
	readers["kubelet_internal_checkpoint"] = func(dir, _ string) error {
		m, err := checkpointmanager.NewCheckpointManager(dir)
		if err != nil {
			return err
		}
		return m.GetCheckpoint("kubelet_internal_checkpoint", checkpoint.New(nil, nil))
	}
}

func main() {
	gates := flag.String("gates", "", "feature gates (Name=true,...)")
	flag.Parse()
	if *gates != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(*gates); err != nil {
			fail("feature gates %q: %v", *gates, err)
		}
	}
	args := flag.Args()
	if len(args) == 0 {
		fail("usage: write CASE DIR | read KIND POLICY DIR | cases")
	}
	switch args[0] {
	case "cases":
		names := make([]string, 0, len(writers))
		for n := range writers {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Println(n)
		}
	case "write":
		if len(args) != 3 {
			fail("usage: write CASE DIR")
		}
		w, ok := writers[args[1]]
		if !ok {
			fail("this version writes no case %q", args[1])
		}
		if err := os.MkdirAll(args[2], 0o755); err != nil {
			fail("%v", err)
		}
		if err := w(args[2]); err != nil {
			fail("write %s: %v", args[1], err)
		}
	case "read":
		if len(args) != 4 {
			fail("usage: read KIND POLICY DIR")
		}
		r, ok := readers[args[1]]
		if !ok {
			// the version has no such manager: the caller records "not read"
			out(map[string]string{"verdict": "not_read"})
			return
		}
		if _, err := os.Stat(filepath.Join(args[3], args[1])); err != nil {
			fail("%v", err)
		}
		if err := r(args[3], args[2]); err != nil {
			out(map[string]string{"verdict": "rejected", "error": err.Error()})
			return
		}
		out(map[string]string{"verdict": "accepted"})
	default:
		fail("unknown command %q", args[0])
	}
}

func out(v interface{}) {
	b, err := json.Marshal(v)
	if err != nil {
		fail("%v", err)
	}
	fmt.Println(string(b))
}
