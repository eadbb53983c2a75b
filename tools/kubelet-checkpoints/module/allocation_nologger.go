//go:build alloc && !alloclogger && !allocmask

package main

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/kubelet/allocation/state"
)

func newAllocState(dir, name string) (state.State, error) {
	return state.NewStateCheckpoint(dir, name)
}

func setAllocation(s state.State, pod, container string, r v1.ResourceRequirements) error {
	return s.SetContainerResources(types.UID(pod), container, r)
}
