//go:build dra131

package main

import (
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra/state"
)

// 1.31+: the DRA checkpoint {Data, Checksum} of the structured-parameters API.
func init() {
	writers["dra"] = func(dir string) error {
		c, err := state.NewCheckpointer(dir, "dra_manager_state")
		if err != nil {
			return err
		}
		cp, err := state.NewCheckpoint(state.ClaimInfoStateList{{
			ClaimUID:  "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
			ClaimName: "gpu-claim",
			Namespace: "default",
			PodUIDs:   sets.New("11111111-2222-3333-4444-555555555555"),
			DriverState: map[string]state.DriverState{"gpu.example.com": {Devices: []state.Device{{
				PoolName: "node-1", DeviceName: "gpu-0", RequestNames: []string{"gpu"},
				CDIDeviceIDs: []string{"example.com/gpu=gpu-0"},
			}}}},
		}})
		if err != nil {
			return err
		}
		return c.Store(cp)
	}
	readers["dra_manager_state"] = func(dir, _ string) error {
		c, err := state.NewCheckpointer(dir, "dra_manager_state")
		if err != nil {
			return err
		}
		_, err = c.GetOrCreate()
		return err
	}
}
