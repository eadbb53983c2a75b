//go:build cpupod

package main

import (
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/cpuset"
)

// setPodCPUSet records a pod-level exclusive CPU set (PodLevelResourceManagers, 1.36+); the
// state keeps it in the checkpoint only with that gate enabled.
func setPodCPUSet(s cpuState, podUID string, cset cpuset.CPUSet) {
	// the kubelet assigns pod-level resources only with the gate on (the in-memory state has
	// no pod map otherwise)
	if !utilfeature.DefaultFeatureGate.Enabled(features.PodLevelResourceManagers) {
		return
	}
	s.(interface {
		SetPodCPUSet(string, cpuset.CPUSet)
	}).SetPodCPUSet(podUID, cset)
}
