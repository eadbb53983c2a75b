// Package state transcribes the in-place resize allocation checkpoint of kubelets v1.27 to
// v1.31: pkg/kubelet/status/state/checkpoint.go (PodResourceAllocationCheckpoint, its
// constructor as shown replaced in PR #126620). File: /var/lib/kubelet/pod_status_manager_state,
// read when the InPlacePodVerticalScaling gate is on.
package state

import (
	"encoding/json"

	"rehash/ckpt/checksum"
	v1 "rehash/ckpt/v1"
)

// PodResourceAllocationCheckpoint is state.PodResourceAllocationCheckpoint.
type PodResourceAllocationCheckpoint struct {
	AllocationEntries   map[string]map[string]v1.ResourceList `json:"allocationEntries,omitempty"`
	ResizeStatusEntries map[string]v1.PodResizeStatus         `json:"resizeStatusEntries,omitempty"`
	Checksum            checksum.Checksum                     `json:"checksum"`
}

// NewPodResourceAllocationCheckpoint is its constructor.
func NewPodResourceAllocationCheckpoint() *PodResourceAllocationCheckpoint {
	return &PodResourceAllocationCheckpoint{
		AllocationEntries:   make(map[string]map[string]v1.ResourceList),
		ResizeStatusEntries: make(map[string]v1.PodResizeStatus),
	}
}

// MarshalCheckpoint is its MarshalCheckpoint.
func (prc *PodResourceAllocationCheckpoint) MarshalCheckpoint() ([]byte, error) {
	prc.Checksum = 0
	prc.Checksum = checksum.New(prc)
	return json.Marshal(*prc)
}

// Read is GetCheckpoint on a fresh checkpoint, as stateCheckpoint.restoreState does.
func Read(blob []byte) (checksum.Checksum, error) {
	prc := NewPodResourceAllocationCheckpoint()
	if err := json.Unmarshal(blob, prc); err != nil {
		return 0, err
	}
	ck := prc.Checksum
	prc.Checksum = 0
	computed := checksum.New(prc)
	err := ck.Verify(prc)
	prc.Checksum = ck
	return computed, err
}
