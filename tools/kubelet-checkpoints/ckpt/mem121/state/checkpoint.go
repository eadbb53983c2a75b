// Package state transcribes the memory manager checkpoint of kubelets v1.21 to v1.35 (before
// PodLevelResourceManagers added PodEntries and the V1/V2 split): pkg/kubelet/cm/memorymanager/
// state/state.go (MemoryTable, NUMANodeState, NUMANodeMap, Block, ContainerMemoryAssignments)
// and checkpoint.go (MemoryManagerCheckpoint, its constructor, VerifyChecksum accepting a zero
// checksum), as the later MemoryManagerCheckpointV1 keeps them.
// File: /var/lib/kubelet/memory_manager_state.
package state

import (
	"encoding/json"

	"rehash/ckpt/checksum"
	v1 "rehash/ckpt/v1"
)

// MemoryTable is state.MemoryTable.
type MemoryTable struct {
	TotalMemSize   uint64 `json:"total"`
	SystemReserved uint64 `json:"systemReserved"`
	Allocatable    uint64 `json:"allocatable"`
	Reserved       uint64 `json:"reserved"`
	Free           uint64 `json:"free"`
}

// NUMANodeState is state.NUMANodeState.
type NUMANodeState struct {
	NumberOfAssignments int                              `json:"numberOfAssignments"`
	MemoryMap           map[v1.ResourceName]*MemoryTable `json:"memoryMap"`
	Cells               []int                            `json:"cells"`
}

// NUMANodeMap is state.NUMANodeMap.
type NUMANodeMap map[int]*NUMANodeState

// Block is state.Block.
type Block struct {
	NUMAAffinity []int           `json:"numaAffinity"`
	Type         v1.ResourceName `json:"type"`
	Size         uint64          `json:"size"`
}

// ContainerMemoryAssignments is state.ContainerMemoryAssignments.
type ContainerMemoryAssignments map[string]map[string][]Block

// MemoryManagerCheckpoint is state.MemoryManagerCheckpoint.
type MemoryManagerCheckpoint struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	Checksum     checksum.Checksum          `json:"checksum"`
}

// New is newMemoryManagerCheckpoint.
func New() *MemoryManagerCheckpoint {
	return &MemoryManagerCheckpoint{Entries: ContainerMemoryAssignments{}, MachineState: NUMANodeMap{}}
}

// MarshalCheckpoint is its MarshalCheckpoint.
func (mp *MemoryManagerCheckpoint) MarshalCheckpoint() ([]byte, error) {
	mp.Checksum = 0
	mp.Checksum = checksum.New(mp)
	return json.Marshal(*mp)
}

// Read is GetCheckpoint on a fresh checkpoint (stateCheckpoint.restoreState).
func Read(blob []byte) (checksum.Checksum, error) {
	mp := New()
	if err := json.Unmarshal(blob, mp); err != nil {
		return 0, err
	}
	if mp.Checksum == 0 {
		return 0, nil
	}
	ck := mp.Checksum
	mp.Checksum = 0
	computed := checksum.New(mp)
	err := ck.Verify(mp)
	mp.Checksum = ck
	return computed, err
}
