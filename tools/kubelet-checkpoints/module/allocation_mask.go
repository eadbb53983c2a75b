//go:build alloc && allocmask

package main

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/kubernetes/pkg/kubelet/allocation/state"
)

// 1.38: the state keeps whole pods (a mask function trims them; nil keeps them as they are)
// and writes the v2 checkpoint (a protobuf PodList beside the v1 entries).
func newAllocState(dir, name string) (state.State, error) {
	return state.NewStateCheckpoint(klog.Background(), dir, name, nil)
}

func setAllocation(s state.State, pod, container string, r v1.ResourceRequirements) error {
	return s.SetContainerResources(klog.Background(), types.UID(pod), container, podutil.Containers, r)
}
