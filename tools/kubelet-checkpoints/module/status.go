//go:build status

package main

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/kubernetes/pkg/kubelet/status/state"
)

// pod_status_manager_state (in-place resize allocations, 1.27-1.32).
func init() {
	writers["status"] = func(dir string) error {
		s, err := state.NewStateCheckpoint(dir, "pod_status_manager_state")
		if err != nil {
			return err
		}
		return setStatusAllocation(s, "11111111-2222-3333-4444-555555555555", "app", v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse("250m"),
			v1.ResourceMemory: resource.MustParse("64Mi"),
		})
	}
	readers["pod_status_manager_state"] = func(dir, _ string) error {
		_, err := state.NewStateCheckpoint(dir, "pod_status_manager_state")
		return err
	}
}
