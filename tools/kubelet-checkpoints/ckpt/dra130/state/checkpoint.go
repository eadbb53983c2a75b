// Package state transcribes the v1.30 DRA manager checkpoint: kubernetes v1.30.0
// pkg/kubelet/cm/dra/state/checkpoint.go and state_checkpoint.go (ClaimInfoState, the
// WithoutResourceHandles fallback of VerifyChecksum). File: /var/lib/kubelet/dra_manager_state.
package state

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	"rehash/ckpt/checksum"
	"rehash/ckpt/sets"
	"rehash/ckpt/types"
	"rehash/ckpt/v1alpha2"
)

const checkpointVersion = "v1"

// ClaimInfoState is state.ClaimInfoState (v1.30.0).
type ClaimInfoState struct {
	DriverName      string
	ClassName       string
	ClaimUID        types.UID
	ClaimName       string
	Namespace       string
	PodUIDs         sets.Set[string]
	ResourceHandles []v1alpha2.ResourceHandle
	CDIDevices      map[string][]string
}

// ClaimInfoStateWithoutResourceHandles is the v1.27/v1.28 shape kept for VerifyChecksum.
type ClaimInfoStateWithoutResourceHandles struct {
	DriverName string
	ClassName  string
	ClaimUID   types.UID
	ClaimName  string
	Namespace  string
	PodUIDs    sets.Set[string]
	CDIDevices map[string][]string
}

// DRAManagerCheckpoint is state.DRAManagerCheckpoint.
type DRAManagerCheckpoint struct {
	Version  string             `json:"version"`
	Entries  ClaimInfoStateList `json:"entries,omitempty"`
	Checksum checksum.Checksum  `json:"checksum"`
}

// DRAManagerCheckpointWithoutResourceHandles is its old shape.
type DRAManagerCheckpointWithoutResourceHandles struct {
	Version  string                                   `json:"version"`
	Entries  ClaimInfoStateListWithoutResourceHandles `json:"entries,omitempty"`
	Checksum checksum.Checksum                        `json:"checksum"`
}

// ClaimInfoStateList is state.ClaimInfoStateList.
type ClaimInfoStateList []ClaimInfoState

// ClaimInfoStateListWithoutResourceHandles is its old shape.
type ClaimInfoStateListWithoutResourceHandles []ClaimInfoStateWithoutResourceHandles

// NewDRAManagerCheckpoint is the constructor both writing and reading start from.
func NewDRAManagerCheckpoint() *DRAManagerCheckpoint {
	return &DRAManagerCheckpoint{Version: checkpointVersion, Entries: ClaimInfoStateList{}}
}

// MarshalCheckpoint is DRAManagerCheckpoint.MarshalCheckpoint.
func (dc *DRAManagerCheckpoint) MarshalCheckpoint() ([]byte, error) {
	dc.Checksum = 0
	dc.Checksum = checksum.New(dc)
	return json.Marshal(*dc)
}

// Read is GetCheckpoint (json.Unmarshal, then VerifyChecksum) on a NewDRAManagerCheckpoint, as
// stateCheckpoint.GetOrCreate does; it also returns the checksum the last path tried computed.
func Read(blob []byte) (checksum.Checksum, error) {
	dc := NewDRAManagerCheckpoint()
	if err := json.Unmarshal(blob, dc); err != nil {
		return 0, err
	}
	ck := dc.Checksum
	dc.Checksum = 0
	computed := checksum.New(dc)
	err := ck.Verify(dc)
	if err == checksum.ErrCorruptCheckpoint {
		computed, err = verifyChecksumWithoutResourceHandles(dc, ck)
	}
	dc.Checksum = ck
	return computed, err
}

func verifyChecksumWithoutResourceHandles(dc *DRAManagerCheckpoint, checkSum checksum.Checksum) (checksum.Checksum, error) {
	entries := ClaimInfoStateListWithoutResourceHandles{}
	for _, entry := range dc.Entries {
		entries = append(entries, ClaimInfoStateWithoutResourceHandles{
			DriverName: entry.DriverName,
			ClassName:  entry.ClassName,
			ClaimUID:   entry.ClaimUID,
			ClaimName:  entry.ClaimName,
			Namespace:  entry.Namespace,
			PodUIDs:    entry.PodUIDs,
			CDIDevices: entry.CDIDevices,
		})
	}
	oldcheckpoint := &DRAManagerCheckpointWithoutResourceHandles{
		Version:  checkpointVersion,
		Entries:  entries,
		Checksum: 0,
	}
	object := checksum.Printer.Sprintf("%#v", oldcheckpoint)
	object = strings.Replace(object, "DRAManagerCheckpointWithoutResourceHandles", "DRAManagerCheckpoint", 1)
	object = strings.Replace(object, "ClaimInfoStateListWithoutResourceHandles", "ClaimInfoStateList", 1)
	hash := fnv.New32a()
	fmt.Fprintf(hash, "%v", object)
	computed := checksum.Checksum(hash.Sum32())
	if checkSum != computed {
		return computed, checksum.ErrCorruptCheckpoint
	}
	return computed, nil
}

// MarshalWithoutResourceHandles writes entries of the old shape under the names the old
// kubelets used (the text verifyChecksumWithoutResourceHandles rebuilds).
func MarshalWithoutResourceHandles(entries ClaimInfoStateListWithoutResourceHandles) ([]byte, error) {
	old := &DRAManagerCheckpointWithoutResourceHandles{Version: checkpointVersion, Entries: entries}
	object := checksum.Printer.Sprintf("%#v", old)
	object = strings.Replace(object, "DRAManagerCheckpointWithoutResourceHandles", "DRAManagerCheckpoint", 1)
	object = strings.Replace(object, "ClaimInfoStateListWithoutResourceHandles", "ClaimInfoStateList", 1)
	hash := fnv.New32a()
	fmt.Fprintf(hash, "%v", object)
	old.Checksum = checksum.Checksum(hash.Sum32())
	return json.Marshal(*old)
}
