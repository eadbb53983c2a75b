//go:build alloc

package main

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// allocated_pods_state and actuated_pods_state (allocation manager, 1.33+): the same state
// type under two names.
func init() {
	req := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("250m"),
		v1.ResourceMemory: resource.MustParse("64Mi"),
	}
	for kase, name := range map[string]string{"allocated": "allocated_pods_state", "actuated": "actuated_pods_state"} {
		name := name
		writers[kase] = func(dir string) error {
			s, err := newAllocState(dir, name)
			if err != nil {
				return err
			}
			return setAllocation(s, "11111111-2222-3333-4444-555555555555", "app",
				v1.ResourceRequirements{Requests: req, Limits: req})
		}
		readers[name] = func(dir, _ string) error {
			_, err := newAllocState(dir, name)
			return err
		}
	}
}
