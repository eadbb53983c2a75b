// Package state transcribes the allocation manager checkpoints of kubelets from v1.33 (PR
// #130599 split pod_status_manager_state into allocated_pods_state and actuated_pods_state):
// pkg/kubelet/allocation/state/checkpoint.go (Checkpoint, NewCheckpoint, VerifyChecksum,
// GetPodResourceCheckpointInfo) and state_checkpoint.go restoreState, which starts from an
// empty Checkpoint and, once the checksum matches, decodes Data. PodResourceInfo is reduced to
// ContainerResources, the field every version from v1.33 has (decoding drops the others).
package state

import (
	"encoding/json"
	"fmt"

	"rehash/ckpt/checksum"
	"rehash/ckpt/types"
	v1 "rehash/ckpt/v1"
)

// PodResourceInfo is state.PodResourceInfo (its v1.33 field).
type PodResourceInfo struct {
	ContainerResources map[string]v1.ResourceRequirements
}

// PodResourceInfoMap is state.PodResourceInfoMap.
type PodResourceInfoMap map[types.UID]PodResourceInfo

// PodResourceCheckpointInfo is state.PodResourceCheckpointInfo.
type PodResourceCheckpointInfo struct {
	Entries PodResourceInfoMap `json:"entries,omitempty"`
}

// Checkpoint is state.Checkpoint.
type Checkpoint struct {
	Data     string            `json:"data"`
	Checksum checksum.Checksum `json:"checksum"`
}

// NewCheckpoint is state.NewCheckpoint.
func NewCheckpoint(allocations *PodResourceCheckpointInfo) (*Checkpoint, error) {
	serialized, err := json.Marshal(allocations)
	if err != nil {
		return nil, err
	}
	cp := &Checkpoint{Data: string(serialized)}
	cp.Checksum = checksum.New(cp.Data)
	return cp, nil
}

// Read is restoreState: GetCheckpoint on &Checkpoint{}, then GetPodResourceCheckpointInfo.
func Read(blob []byte) (checksum.Checksum, error) {
	cp := &Checkpoint{}
	if err := json.Unmarshal(blob, cp); err != nil {
		return 0, err
	}
	computed := checksum.New(cp.Data)
	if err := cp.Checksum.Verify(cp.Data); err != nil {
		return computed, err
	}
	var data PodResourceCheckpointInfo
	if err := json.Unmarshal([]byte(cp.Data), &data); err != nil {
		return computed, fmt.Errorf("failed to get pod resource information: %w", err)
	}
	return computed, nil
}
