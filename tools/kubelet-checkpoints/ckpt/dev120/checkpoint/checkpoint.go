// Package checkpoint transcribes the device manager checkpoint of kubelets from v1.20:
// kubernetes v1.20.2 pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go (Debian 12's source
// package; DeviceIDs per NUMA node) and, for v1.23 and later, the fallback to the pre-1.20 shape
// in checkpointv1.go (PR #102882; cherry-picked into late v1.21/v1.22 patch releases).
package checkpoint

import (
	"encoding/json"
	"strings"

	"rehash/ckpt/checksum"
)

// DevicesPerNUMA is checkpoint.DevicesPerNUMA.
type DevicesPerNUMA map[int64][]string

// PodDevicesEntry is checkpoint.PodDevicesEntry.
type PodDevicesEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     DevicesPerNUMA
	AllocResp     []byte
}

type checkpointData struct {
	PodDeviceEntries  []PodDevicesEntry
	RegisteredDevices map[string][]string
}

// Data is checkpoint.Data.
type Data struct {
	Data     checkpointData
	Checksum checksum.Checksum
}

// PodDevicesEntryV1 is checkpointv1.go's PodDevicesEntryV1.
type PodDevicesEntryV1 struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     []string
	AllocResp     []byte
}

type checkpointDataV1 struct {
	PodDeviceEntries  []PodDevicesEntryV1
	RegisteredDevices map[string][]string
}

// DataV1 is checkpointv1.go's DataV1.
type DataV1 struct {
	Data     checkpointDataV1
	Checksum checksum.Checksum
}

// New is checkpoint.New.
func New(devEntries []PodDevicesEntry, devices map[string][]string) *Data {
	return &Data{Data: checkpointData{PodDeviceEntries: devEntries, RegisteredDevices: devices}}
}

// MarshalCheckpoint is Data.MarshalCheckpoint.
func (cp *Data) MarshalCheckpoint() ([]byte, error) {
	cp.Checksum = checksum.New(cp.Data)
	return json.Marshal(*cp)
}

// Read is v1.20's readCheckpoint.
func Read(blob []byte) (checksum.Checksum, error) {
	cp := New(make([]PodDevicesEntry, 0), make(map[string][]string))
	if err := json.Unmarshal(blob, cp); err != nil {
		return 0, err
	}
	computed := checksum.New(cp.Data)
	return computed, cp.Checksum.Verify(cp.Data)
}

// ReadWithV1Fallback is v1.23's readCheckpoint: the current shape, then the pre-1.20 one.
func ReadWithV1Fallback(blob []byte) (checksum.Checksum, error) {
	if c, err := Read(blob); err == nil {
		return c, nil
	}
	cp := &DataV1{Data: checkpointDataV1{PodDeviceEntries: make([]PodDevicesEntryV1, 0), RegisteredDevices: make(map[string][]string)}}
	if err := json.Unmarshal(blob, cp); err != nil {
		return 0, err
	}
	object := checksum.Printer.Sprintf("%#v", cp.Data)
	object = strings.Replace(object, "checkpointDataV1", "checkpointData", 1)
	object = strings.Replace(object, "PodDevicesEntryV1", "PodDevicesEntry", -1)
	computed := checksum.OfText(object)
	if cp.Checksum != computed {
		return computed, checksum.ErrCorruptCheckpoint
	}
	return computed, nil
}
