// Package state transcribes the CPU manager checkpoint of kubelets from v1.18 (formats V1 and
// V2, read in that order): kubernetes v1.20.2 pkg/kubelet/cm/cpumanager/state/checkpoint.go and
// state_checkpoint.go restoreState (Debian 12's kubernetes source package). V2 is a type alias
// of CPUManagerCheckpoint, so go-spew prints that name; V1's checksum is taken over its text
// with the name rewritten to the pre-1.18 one (PR #86689).
package state

import (
	"encoding/json"
	"strings"

	"rehash/ckpt/checksum"
)

// CPUManagerCheckpoint is state.CPUManagerCheckpoint (= CPUManagerCheckpointV2).
type CPUManagerCheckpoint struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	Checksum      checksum.Checksum            `json:"checksum"`
}

// CPUManagerCheckpointV1 is state.CPUManagerCheckpointV1.
type CPUManagerCheckpointV1 struct {
	PolicyName    string            `json:"policyName"`
	DefaultCPUSet string            `json:"defaultCpuSet"`
	Entries       map[string]string `json:"entries,omitempty"`
	Checksum      checksum.Checksum `json:"checksum"`
}

// CPUManagerCheckpointV2 is the alias.
type CPUManagerCheckpointV2 = CPUManagerCheckpoint

// NewV2 is newCPUManagerCheckpointV2.
func NewV2() *CPUManagerCheckpointV2 {
	return &CPUManagerCheckpointV2{Entries: make(map[string]map[string]string)}
}

// MarshalCheckpoint is V2's MarshalCheckpoint.
func (cp *CPUManagerCheckpointV2) MarshalCheckpoint() ([]byte, error) {
	cp.Checksum = 0
	cp.Checksum = checksum.New(cp)
	return json.Marshal(*cp)
}

func readV1(blob []byte) (checksum.Checksum, error) {
	cp := &CPUManagerCheckpointV1{Entries: make(map[string]string)}
	if err := json.Unmarshal(blob, cp); err != nil {
		return 0, err
	}
	if cp.Checksum == 0 {
		return 0, nil
	}
	ck := cp.Checksum
	cp.Checksum = 0
	object := checksum.Printer.Sprintf("%#v", cp)
	object = strings.Replace(object, "CPUManagerCheckpointV1", "CPUManagerCheckpoint", 1)
	cp.Checksum = ck
	computed := checksum.OfText(object)
	if ck != computed {
		return computed, checksum.ErrCorruptCheckpoint
	}
	return computed, nil
}

func readV2(blob []byte) (checksum.Checksum, error) {
	cp := NewV2()
	if err := json.Unmarshal(blob, cp); err != nil {
		return 0, err
	}
	if cp.Checksum == 0 {
		return 0, nil
	}
	ck := cp.Checksum
	cp.Checksum = 0
	computed := checksum.New(cp)
	err := ck.Verify(cp)
	cp.Checksum = ck
	return computed, err
}

// Read is restoreState's order: V1, and V2 when V1 fails. The checksum returned is the one of
// the path that decided.
func Read(blob []byte) (checksum.Checksum, error) {
	if c, err := readV1(blob); err == nil {
		return c, nil
	}
	return readV2(blob)
}
