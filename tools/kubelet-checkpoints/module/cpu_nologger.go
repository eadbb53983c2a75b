//go:build !cpulogger

package main

import "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"

func newCPUState(dir, policy string) (cpuState, error) {
	return state.NewCheckpointState(dir, "cpu_manager_state", policy, noContainers)
}
