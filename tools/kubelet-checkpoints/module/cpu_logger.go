//go:build cpulogger

package main

import (
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
)

func newCPUState(dir, policy string) (cpuState, error) {
	return state.NewCheckpointState(klog.Background(), dir, "cpu_manager_state", policy, noContainers)
}
