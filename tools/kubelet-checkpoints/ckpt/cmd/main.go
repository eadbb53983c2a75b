// Command kubelet-checkpoints writes kubelet checkpoint files the way the named kubelet version
// writes them and checks each with the reading code of the other versions, all transcribed in
// ../ (each package cites its source tag and path). Output, for each case, in <out>/<case>/:
// the checkpoint file under its kubelet name and verdicts.json.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	alloc133 "rehash/ckpt/alloc133/state"
	"rehash/ckpt/checksum"
	cpu117 "rehash/ckpt/cpu117/state"
	cpu120 "rehash/ckpt/cpu120/state"
	dev119 "rehash/ckpt/dev119/checkpoint"
	dev120 "rehash/ckpt/dev120/checkpoint"
	dra129 "rehash/ckpt/dra129/state"
	dra130 "rehash/ckpt/dra130/state"
	dra131 "rehash/ckpt/dra131/checkpoint"
	mem121 "rehash/ckpt/mem121/state"
	"rehash/ckpt/sets"
	status131 "rehash/ckpt/status131/state"
	status132 "rehash/ckpt/status132/state"
	"rehash/ckpt/v1"
	"rehash/ckpt/v1alpha2"
	v1alpha2v129 "rehash/ckpt/v1alpha2v129"
)

type reader struct {
	// Target is the kubelet version whose code this is; the Rust engine must give the same
	// verdict for it.
	Target string
	Read   func([]byte) (uint64, error)
}

type verdict struct {
	Target           string `json:"target"`
	Verdict          string `json:"verdict"`
	Error            string `json:"error,omitempty"`
	ComputedChecksum uint64 `json:"computed_checksum"`
}

type caseOut struct {
	Case      string    `json:"case"`
	File      string    `json:"file"`
	WrittenBy string    `json:"written_by"`
	Verdicts  []verdict `json:"verdicts"`
}

func cs(f func([]byte) (checksum.Checksum, error)) func([]byte) (uint64, error) {
	return func(b []byte) (uint64, error) { c, err := f(b); return uint64(c), err }
}

var (
	draReaders        = []reader{{"1.30", cs(dra130.Read)}, {"1.31", dra131.Read}}
	statusReaders     = []reader{{"1.31", cs(status131.Read)}, {"1.32", cs(status132.Read)}}
	cpuReaders        = []reader{{"1.17", cs(cpu117.Read)}, {"1.18", cs(cpu120.Read)}}
	allocationReaders = []reader{{"1.33", cs(alloc133.Read)}}
	memoryReaders     = []reader{{"1.21", cs(mem121.Read)}}
	deviceReaders     = []reader{{"1.19", cs(dev119.Read)}, {"1.20", cs(dev120.Read)}, {"1.23", cs(dev120.ReadWithV1Fallback)}}
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func resources(text string) v1.ResourceList {
	// The kubelet's allocation entries are copies of the pod spec's resources, which the API
	// client decoded from their serialized form: parsed quantities, as here.
	var list v1.ResourceList
	if err := json.Unmarshal([]byte(text), &list); err != nil {
		panic(err)
	}
	return list
}

func dra130Claim() []byte {
	cp := dra130.NewDRAManagerCheckpoint()
	cp.Entries = dra130.ClaimInfoStateList{{
		DriverName: "gpu.example.com",
		ClassName:  "gpu",
		ClaimUID:   "5b0d1c7e-8f43-4b7a-9a55-0c2c7a8f1e21",
		ClaimName:  "gpu-claim",
		Namespace:  "default",
		PodUIDs:    sets.Set[string]{"a6f5e0f2-1d7c-4c38-8d0e-7d3f1e2b9c44": {}},
		ResourceHandles: []v1alpha2.ResourceHandle{{
			DriverName: "gpu.example.com",
			Data:       `{"devices":["gpu-0"]}`,
		}},
		CDIDevices: map[string][]string{"gpu.example.com": {"gpu.example.com/gpu=gpu-0"}},
	}}
	return must(cp.MarshalCheckpoint())
}

// dra128Claim writes a claim the way kubelets before ResourceHandles (v1.27, v1.28) did: the
// shape and type names that v1.30's verifyChecksumWithoutResourceHandles reproduces.
func dra128Claim() []byte {
	return must(dra130.MarshalWithoutResourceHandles(dra130.ClaimInfoStateListWithoutResourceHandles{{
		DriverName: "gpu.example.com",
		ClassName:  "gpu",
		ClaimUID:   "5b0d1c7e-8f43-4b7a-9a55-0c2c7a8f1e21",
		ClaimName:  "gpu-claim",
		Namespace:  "default",
		PodUIDs:    sets.Set[string]{"a6f5e0f2-1d7c-4c38-8d0e-7d3f1e2b9c44": {}},
		CDIDevices: map[string][]string{"gpu.example.com": {"gpu.example.com/gpu=gpu-0"}},
	}}))
}

func dra129Claim() []byte {
	cp := &dra129.DRAManagerCheckpoint{Version: "v1", Entries: dra129.ClaimInfoStateList{{
		DriverName: "gpu.example.com",
		ClassName:  "gpu",
		ClaimUID:   "5b0d1c7e-8f43-4b7a-9a55-0c2c7a8f1e21",
		ClaimName:  "gpu-claim",
		Namespace:  "default",
		PodUIDs:    sets.Set[string]{"a6f5e0f2-1d7c-4c38-8d0e-7d3f1e2b9c44": {}},
		ResourceHandles: []v1alpha2v129.ResourceHandle{{
			DriverName: "gpu.example.com",
			Data:       `{"devices":["gpu-0"]}`,
		}},
		CDIDevices: map[string][]string{"gpu.example.com": {"gpu.example.com/gpu=gpu-0"}},
	}}}
	return must(cp.MarshalCheckpoint())
}

func dra130Empty() []byte {
	return must(dra130.NewDRAManagerCheckpoint().MarshalCheckpoint())
}

// The v1.31 claim state (pkg/kubelet/cm/dra/state/state.go, v1.31.0) only matters as the bytes
// of Data: the envelope's checksum covers those bytes, not a Go value.
type device131 struct {
	PoolName     string
	DeviceName   string
	RequestNames []string
	CDIDeviceIDs []string
}
type driverState131 struct{ Devices []device131 }
type claimInfoState131 struct {
	ClaimUID    string
	ClaimName   string
	Namespace   string
	PodUIDs     sets.Set[string]
	DriverState map[string]driverState131
}
type checkpointData131 struct {
	Kind       string `json:"kind,omitempty"`
	APIVersion string `json:"apiVersion,omitempty"`
	Entries    []claimInfoState131
}

func dra131Claim() []byte {
	data := must(json.Marshal(checkpointData131{
		Kind:       "DRACheckpoint",
		APIVersion: "checkpoint.dra.kubelet.k8s.io/v1",
		Entries: []claimInfoState131{{
			ClaimUID:  "5b0d1c7e-8f43-4b7a-9a55-0c2c7a8f1e21",
			ClaimName: "gpu-claim",
			Namespace: "default",
			PodUIDs:   sets.Set[string]{"a6f5e0f2-1d7c-4c38-8d0e-7d3f1e2b9c44": {}},
			DriverState: map[string]driverState131{"gpu.example.com": {Devices: []device131{{
				PoolName: "node-1", DeviceName: "gpu-0", RequestNames: []string{"gpu"},
				CDIDeviceIDs: []string{"gpu.example.com/gpu=gpu-0"},
			}}}},
		}},
	}))
	return must(json.Marshal(dra131.New(data)))
}

func status131Resized() []byte {
	cp := status131.NewPodResourceAllocationCheckpoint()
	cp.AllocationEntries["a6f5e0f2-1d7c-4c38-8d0e-7d3f1e2b9c44"] = map[string]v1.ResourceList{
		"app":     resources(`{"cpu":"500m","memory":"1Gi"}`),
		"sidecar": resources(`{"cpu":"100m","memory":"128Mi"}`),
	}
	cp.ResizeStatusEntries["a6f5e0f2-1d7c-4c38-8d0e-7d3f1e2b9c44"] = "InProgress"
	return must(cp.MarshalCheckpoint())
}

// A quantity whose serialized form is not canonical ("1.5G" marshals as "1500M") decodes into
// other internal fields than the value that was hashed: the v1.31 kubelet rejects its own file
// (PR #126620 fixed that in v1.32 by hashing the serialized data instead).
func status131NonCanonical() []byte {
	cp := status131.NewPodResourceAllocationCheckpoint()
	cp.AllocationEntries["a6f5e0f2-1d7c-4c38-8d0e-7d3f1e2b9c44"] = map[string]v1.ResourceList{
		"app": resources(`{"cpu":"500m","ephemeral-storage":"1.5G"}`),
	}
	return must(cp.MarshalCheckpoint())
}

func status131Empty() []byte {
	return must(status131.NewPodResourceAllocationCheckpoint().MarshalCheckpoint())
}

func status132Resized() []byte {
	cp := must(status132.NewCheckpoint(&status132.PodResourceAllocationInfo{
		AllocationEntries: map[string]map[string]v1.ResourceRequirements{
			"a6f5e0f2-1d7c-4c38-8d0e-7d3f1e2b9c44": {"app": {
				Requests: resources(`{"cpu":"500m","memory":"1Gi"}`),
				Limits:   resources(`{"cpu":"1","memory":"1Gi"}`),
			}},
		},
	}))
	return must(json.Marshal(cp))
}

func cpu117Static() []byte {
	cp := cpu117.NewCPUManagerCheckpoint()
	cp.PolicyName = "static"
	cp.DefaultCPUSet = "0-1,4-7"
	cp.Entries["3f1c2a8e9b7d6c5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e"] = "2-3"
	return must(cp.MarshalCheckpoint())
}

func cpu118Static() []byte {
	cp := cpu120.NewV2()
	cp.PolicyName = "static"
	cp.DefaultCPUSet = "0-1,4-7"
	cp.Entries["a6f5e0f2-1d7c-4c38-8d0e-7d3f1e2b9c44"] = map[string]string{"app": "2-3"}
	return must(cp.MarshalCheckpoint())
}

func cpu118None() []byte {
	cp := cpu120.NewV2()
	cp.PolicyName = "none"
	return must(cp.MarshalCheckpoint())
}

func device119() []byte {
	cp := dev119.New([]dev119.PodDevicesEntry{{
		PodUID: "a6f5e0f2-1d7c-4c38-8d0e-7d3f1e2b9c44", ContainerName: "app",
		ResourceName: "example.com/nic", DeviceIDs: []string{"nic-1", "nic-0"},
		AllocResp: []byte("\x12\x0a\x0a\x04NIC0\x12\x02on"),
	}}, map[string][]string{"example.com/nic": {"nic-0", "nic-1", "nic-2"}})
	return must(cp.MarshalCheckpoint())
}

func device120() []byte {
	cp := dev120.New([]dev120.PodDevicesEntry{{
		PodUID: "a6f5e0f2-1d7c-4c38-8d0e-7d3f1e2b9c44", ContainerName: "app",
		ResourceName: "example.com/nic", DeviceIDs: dev120.DevicesPerNUMA{1: {"nic-2"}, 0: {"nic-1", "nic-0"}},
		AllocResp: []byte("\x12\x0a\x0a\x04NIC0\x12\x02on"),
	}}, map[string][]string{"example.com/nic": {"nic-0", "nic-1", "nic-2"}})
	return must(cp.MarshalCheckpoint())
}

func device119Empty() []byte {
	return must(dev119.New(nil, map[string][]string{}).MarshalCheckpoint())
}

func memory121Static() []byte {
	cp := mem121.New()
	cp.PolicyName = "Static"
	const gi = 1 << 30
	// Node IDs past 9 check that go-spew sorts int keys numerically (10 after 2).
	for _, node := range []int{0, 2, 10} {
		cp.MachineState[node] = &mem121.NUMANodeState{
			MemoryMap: map[v1.ResourceName]*mem121.MemoryTable{
				"memory":        {TotalMemSize: 64 * gi, SystemReserved: gi, Allocatable: 63 * gi, Reserved: 0, Free: 63 * gi},
				"hugepages-1Gi": {TotalMemSize: 4 * gi, Allocatable: 4 * gi, Free: 4 * gi},
			},
			Cells: []int{node},
		}
	}
	cp.MachineState[0].NumberOfAssignments = 2
	cp.MachineState[0].MemoryMap["memory"].Reserved = 2 * gi
	cp.MachineState[0].MemoryMap["memory"].Free = 61 * gi
	cp.MachineState[0].MemoryMap["hugepages-1Gi"].Reserved = gi
	cp.MachineState[0].MemoryMap["hugepages-1Gi"].Free = 3 * gi
	cp.Entries["a6f5e0f2-1d7c-4c38-8d0e-7d3f1e2b9c44"] = map[string][]mem121.Block{
		"app": {{NUMAAffinity: []int{0}, Type: "memory", Size: 2 * gi}, {NUMAAffinity: []int{0}, Type: "hugepages-1Gi", Size: gi}},
	}
	return must(cp.MarshalCheckpoint())
}

func memory121None() []byte {
	cp := mem121.New()
	cp.PolicyName = "None"
	return must(cp.MarshalCheckpoint())
}

// edited is a file another case writes, edited as a person or another tool might: these cases
// pin how encoding/json treats member names, unknown and repeated members, null and base64.
func edited(base func() []byte, edits ...[2]string) func() []byte {
	return func() []byte {
		text := string(base())
		for _, e := range edits {
			if !strings.Contains(text, e[0]) {
				panic(fmt.Sprintf("edit %q not found", e[0]))
			}
			text = strings.Replace(text, e[0], e[1], 1)
		}
		return []byte(text)
	}
}

func allocated133() []byte {
	cp := must(alloc133.NewCheckpoint(&alloc133.PodResourceCheckpointInfo{Entries: alloc133.PodResourceInfoMap{
		"a6f5e0f2-1d7c-4c38-8d0e-7d3f1e2b9c44": {ContainerResources: map[string]v1.ResourceRequirements{
			"app": {
				Requests: resources(`{"cpu":"500m","memory":"1Gi"}`),
				Limits:   resources(`{"memory":"2Gi"}`),
			},
		}},
	}}))
	return must(json.Marshal(cp))
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kubelet-checkpoints OUTDIR")
		os.Exit(2)
	}
	out := os.Args[1]
	cases := []struct {
		name, file, writtenBy string
		write                 func() []byte
		readers               []reader
	}{
		{"dra-1.30-claim", "dra_manager_state", "1.30", dra130Claim, draReaders},
		{"dra-1.28-claim", "dra_manager_state", "1.28", dra128Claim, draReaders},
		{"dra-1.29-claim", "dra_manager_state", "1.29", dra129Claim, draReaders},
		{"dra-1.30-empty", "dra_manager_state", "1.30", dra130Empty, draReaders},
		{"dra-1.31-claim", "dra_manager_state", "1.31", dra131Claim, draReaders},
		{"status-1.31-resized", "pod_status_manager_state", "1.31", status131Resized, statusReaders},
		// Members match fields case-insensitively; unknown members are dropped.
		{"cpu-1.18-static-json-names", "cpu_manager_state", "1.18", edited(cpu118Static,
			[2]string{`{"policyName"`, `{"unknownMember":{"a":[1,2.5,null]},"POLICYNAME"`},
			[2]string{`"defaultCpuSet"`, `"DefaultCPUSet"`},
			// U+212A KELVIN SIGN folds to k: encoding/json matches it too.
			[2]string{`"checksum"`, "\"chec\u212asum\""}), cpuReaders},
		// A null list leaves a nil slice: v1.30's first checksum differs, its fallback does not.
		{"dra-1.30-null-entries", "dra_manager_state", "1.30", edited(dra130Empty,
			[2]string{`{"version":"v1",`, `{"version":"v1","entries":null,`}), draReaders},
		// A repeated map member adds to the map decoded so far.
		{"status-1.31-repeated-member", "pod_status_manager_state", "1.31", edited(status131Resized,
			[2]string{`"resizeStatusEntries"`, `"allocationEntries":{"b0c1d2e3-0000-4000-8000-000000000001":{"app":{"cpu":"1"}}},"resizeStatusEntries"`}), statusReaders},
		// Quantities as JSON numbers go through Quantity.UnmarshalJSON too.
		{"status-1.31-number-quantities", "pod_status_manager_state", "1.31", edited(status131Resized,
			[2]string{`"cpu":"500m"`, `"cpu":0.5`}), statusReaders},
		// encoding/json's base64 skips \r and \n.
		{"device-1.20-base64-newline", "device-plugins/kubelet_internal_checkpoint", "1.20", edited(device120,
			[2]string{`"AllocResp":"EgoKBE5J`, `"AllocResp":"EgoK\r\nBE5J`}), deviceReaders},
		{"status-1.31-noncanonical", "pod_status_manager_state", "1.31", status131NonCanonical, statusReaders},
		{"status-1.31-empty", "pod_status_manager_state", "1.31", status131Empty, statusReaders},
		{"status-1.32-resized", "pod_status_manager_state", "1.32", status132Resized, statusReaders},
		{"cpu-1.17-static", "cpu_manager_state", "1.17", cpu117Static, cpuReaders},
		{"cpu-1.18-static", "cpu_manager_state", "1.18", cpu118Static, cpuReaders},
		{"cpu-1.18-none", "cpu_manager_state", "1.18", cpu118None, cpuReaders},
		{"allocated-1.33", "allocated_pods_state", "1.33", allocated133, allocationReaders},
		// Data that is not the allocation JSON fails after the checksum matched.
		{"allocated-1.33-data-not-json", "allocated_pods_state", "1.33", func() []byte {
			cp := &alloc133.Checkpoint{Data: "not json"}
			cp.Checksum = checksum.New(cp.Data)
			return must(json.Marshal(cp))
		}, allocationReaders},
		{"actuated-1.33-empty", "actuated_pods_state", "1.33", func() []byte {
			return must(json.Marshal(must(alloc133.NewCheckpoint(&alloc133.PodResourceCheckpointInfo{}))))
		}, allocationReaders},
		{"memory-1.21-static", "memory_manager_state", "1.21", memory121Static, memoryReaders},
		{"memory-1.21-none", "memory_manager_state", "1.21", memory121None, memoryReaders},
		{"device-1.19", "device-plugins/kubelet_internal_checkpoint", "1.19", device119, deviceReaders},
		{"device-1.19-empty", "device-plugins/kubelet_internal_checkpoint", "1.19", device119Empty, deviceReaders},
		{"device-1.20", "device-plugins/kubelet_internal_checkpoint", "1.20", device120, deviceReaders},
	}
	for _, c := range cases {
		blob := c.write()
		dir := filepath.Join(out, c.name)
		path := filepath.Join(dir, c.file)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			panic(err)
		}
		if err := os.WriteFile(path, blob, 0o600); err != nil {
			panic(err)
		}
		result := caseOut{Case: c.name, File: c.file, WrittenBy: c.writtenBy}
		for _, r := range c.readers {
			computed, err := r.Read(blob)
			v := verdict{Target: r.Target, Verdict: "accepted", ComputedChecksum: computed}
			if err != nil {
				v.Verdict = "rejected"
				v.Error = err.Error()
			}
			result.Verdicts = append(result.Verdicts, v)
		}
		text := must(json.MarshalIndent(result, "", "  "))
		if err := os.WriteFile(filepath.Join(dir, "verdicts.json"), append(text, '\n'), 0o644); err != nil {
			panic(err)
		}
	}
}
