//go:build dra130

package main

import (
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra/state"
)

// 1.30: the DRA state {version, entries, checksum} of the v1alpha2 API.
func init() {
	writers["dra"] = func(dir string) error {
		s, err := state.NewCheckpointState(dir, "dra_manager_state")
		if err != nil {
			return err
		}
		return s.Store(state.ClaimInfoStateList{{
			DriverName: "gpu.example.com",
			ClassName:  "gpu",
			ClaimUID:   "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
			ClaimName:  "gpu-claim",
			Namespace:  "default",
			PodUIDs:    sets.New("11111111-2222-3333-4444-555555555555"),
		}})
	}
	readers["dra_manager_state"] = func(dir, _ string) error {
		s, err := state.NewCheckpointState(dir, "dra_manager_state")
		if err != nil {
			return err
		}
		_, err = s.GetOrCreate()
		return err
	}
}
