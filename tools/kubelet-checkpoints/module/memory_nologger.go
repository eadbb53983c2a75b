//go:build !memlogger

package main

import "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"

func newMemState(dir, policy string) (memState, error) {
	return state.NewCheckpointState(dir, "memory_manager_state", policy)
}
