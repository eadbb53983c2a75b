// Package state transcribes the v1.32 pod status checkpoint (PR #126620): kubernetes v1.32.0
// pkg/kubelet/status/state/checkpoint.go. The checksum covers only the Data string, so a v1.31
// file (no "data" member) keeps the constructor's Data, json.Marshal of a nil pointer
// ("null"), and is checked as checksum.New("null").
package state

import (
	"encoding/json"
	"fmt"

	"rehash/ckpt/checksum"
	v1 "rehash/ckpt/v1"
)

// PodResourceAllocationInfo is state.PodResourceAllocationInfo: requests and limits per
// container (v1.ResourceRequirements), no resize status. (An earlier transcription had the
// ResourceList and resizeStatusEntries of a pre-release draft; the module code of v1.32.0 and
// v1.32.13, run by ../../module, showed the released shape.)
type PodResourceAllocationInfo struct {
	AllocationEntries map[string]map[string]v1.ResourceRequirements `json:"allocationEntries,omitempty"`
}

// Checkpoint is state.Checkpoint.
type Checkpoint struct {
	Data     string            `json:"data"`
	Checksum checksum.Checksum `json:"checksum"`
}

// NewCheckpoint is state.NewCheckpoint.
func NewCheckpoint(data *PodResourceAllocationInfo) (*Checkpoint, error) {
	praData, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	cp := &Checkpoint{Data: string(praData)}
	cp.Checksum = checksum.New(cp.Data)
	return cp, nil
}

// Read is GetCheckpoint on NewCheckpoint(nil), as restoreState does.
func Read(blob []byte) (checksum.Checksum, error) {
	cp, err := NewCheckpoint(nil)
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(blob, cp); err != nil {
		return 0, err
	}
	computed := checksum.New(cp.Data)
	if err := cp.Checksum.Verify(cp.Data); err != nil {
		return computed, err
	}
	// restoreState's GetPodResourceAllocationInfo.
	var data PodResourceAllocationInfo
	if err := json.Unmarshal([]byte(cp.Data), &data); err != nil {
		return computed, fmt.Errorf("failed to get pod resource allocation info: %w", err)
	}
	return computed, nil
}
