// Package state transcribes the CPU manager checkpoint of kubelets up to v1.17 (format V1):
// kubernetes v1.17.0 pkg/kubelet/cm/cpumanager/state/checkpoint.go. Entries map container
// IDs to CPU sets. VerifyChecksum accepts a zero checksum, as v1.20.2's V1 and V2 still do.
// File: /var/lib/kubelet/cpu_manager_state.
package state

import (
	"encoding/json"

	"rehash/ckpt/checksum"
)

// CPUManagerCheckpoint is state.CPUManagerCheckpoint (v1.17).
type CPUManagerCheckpoint struct {
	PolicyName    string            `json:"policyName"`
	DefaultCPUSet string            `json:"defaultCpuSet"`
	Entries       map[string]string `json:"entries,omitempty"`
	Checksum      checksum.Checksum `json:"checksum"`
}

// NewCPUManagerCheckpoint is its constructor.
func NewCPUManagerCheckpoint() *CPUManagerCheckpoint {
	return &CPUManagerCheckpoint{Entries: make(map[string]string)}
}

// MarshalCheckpoint is its MarshalCheckpoint.
func (cp *CPUManagerCheckpoint) MarshalCheckpoint() ([]byte, error) {
	cp.Checksum = 0
	cp.Checksum = checksum.New(cp)
	return json.Marshal(*cp)
}

// Read is GetCheckpoint on a fresh checkpoint (restoreState).
func Read(blob []byte) (checksum.Checksum, error) {
	cp := NewCPUManagerCheckpoint()
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
