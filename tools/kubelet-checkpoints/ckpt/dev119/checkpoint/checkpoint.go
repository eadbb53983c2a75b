// Package checkpoint transcribes the device manager checkpoint of kubelets up to v1.19:
// kubernetes v1.19.0 pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go (DeviceIDs a plain
// list; the same shape as v1.23's checkpointv1.go PodDevicesEntryV1).
// File: /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint.
package checkpoint

import (
	"encoding/json"

	"rehash/ckpt/checksum"
)

// PodDevicesEntry is checkpoint.PodDevicesEntry (v1.19).
type PodDevicesEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     []string
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

// New is checkpoint.New.
func New(devEntries []PodDevicesEntry, devices map[string][]string) *Data {
	return &Data{Data: checkpointData{PodDeviceEntries: devEntries, RegisteredDevices: devices}}
}

// MarshalCheckpoint is Data.MarshalCheckpoint.
func (cp *Data) MarshalCheckpoint() ([]byte, error) {
	cp.Checksum = checksum.New(cp.Data)
	return json.Marshal(*cp)
}

// Read is readCheckpoint: GetCheckpoint on New(empty list, empty map).
func Read(blob []byte) (checksum.Checksum, error) {
	cp := New(make([]PodDevicesEntry, 0), make(map[string][]string))
	if err := json.Unmarshal(blob, cp); err != nil {
		return 0, err
	}
	computed := checksum.New(cp.Data)
	return computed, cp.Checksum.Verify(cp.Data)
}
