// Package checkpoint transcribes the DRA manager checkpoint envelope that replaced the v1
// format (kubernetes PR #126303, first released in v1.31.0): pkg/kubelet/cm/dra/checkpoint/
// checkpoint.go. Its Data is the JSON of the claim states; the checksum is CRC-32 (IEEE) of
// those bytes. A v1.30 file decodes into it with Data empty, so its stored checksum is
// compared with crc32("") = 0: that is kubernetes#127653.
package checkpoint

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
)

// Checkpoint is checkpoint.Checkpoint.
type Checkpoint struct {
	Data     string
	Checksum uint32
}

// New is NewCheckpoint over already serialized checkpoint data.
func New(data []byte) *Checkpoint {
	return &Checkpoint{Data: string(data), Checksum: crc32.ChecksumIEEE(data)}
}

// Read is UnmarshalCheckpoint (json.Unmarshal, then VerifyChecksum); it returns the checksum
// it computed.
func Read(blob []byte) (uint64, error) {
	cp := &Checkpoint{}
	if err := json.Unmarshal(blob, cp); err != nil {
		return 0, err
	}
	expected := crc32.ChecksumIEEE([]byte(cp.Data))
	if expected != cp.Checksum {
		return uint64(expected), fmt.Errorf("checkpoint is corrupted: actual checksum %d, expected %d", cp.Checksum, expected)
	}
	return uint64(expected), nil
}
