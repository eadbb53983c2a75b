//go:build memlogger

package main

import (
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
)

func newMemState(dir, policy string) (memState, error) {
	return state.NewCheckpointState(klog.Background(), dir, "memory_manager_state", policy)
}
