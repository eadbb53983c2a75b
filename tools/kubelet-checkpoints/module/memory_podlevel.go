//go:build mempod

package main

import (
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
)

// setPodMemoryBlocks records pod-level memory blocks (PodLevelResourceManagers, 1.36+).
func setPodMemoryBlocks(s memState, podUID string, blocks []state.Block) {
	// the kubelet assigns pod-level resources only with the gate on (the in-memory state has
	// no pod map otherwise)
	if !utilfeature.DefaultFeatureGate.Enabled(features.PodLevelResourceManagers) {
		return
	}
	s.(interface {
		SetPodMemoryBlocks(string, []state.Block)
	}).SetPodMemoryBlocks(podUID, blocks)
}
