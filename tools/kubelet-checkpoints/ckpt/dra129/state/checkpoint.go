// Package state writes a DRA manager checkpoint the way v1.29 did: the v1.30 structs of
// ../../dra130/state with v1.29's ResourceHandle (kubernetes#123552 quotes the text v1.30
// hashes; v1.29's differs only by the missing StructuredData field).
package state

import (
	"encoding/json"

	"rehash/ckpt/checksum"
	"rehash/ckpt/sets"
	"rehash/ckpt/types"
	v1alpha2 "rehash/ckpt/v1alpha2v129"
)

// ClaimInfoState is state.ClaimInfoState of v1.29.
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

// ClaimInfoStateList is state.ClaimInfoStateList.
type ClaimInfoStateList []ClaimInfoState

// DRAManagerCheckpoint is state.DRAManagerCheckpoint.
type DRAManagerCheckpoint struct {
	Version  string             `json:"version"`
	Entries  ClaimInfoStateList `json:"entries,omitempty"`
	Checksum checksum.Checksum  `json:"checksum"`
}

// MarshalCheckpoint is DRAManagerCheckpoint.MarshalCheckpoint.
func (dc *DRAManagerCheckpoint) MarshalCheckpoint() ([]byte, error) {
	dc.Checksum = 0
	dc.Checksum = checksum.New(dc)
	return json.Marshal(*dc)
}
