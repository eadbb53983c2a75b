//go:build status && !statusreq

package main

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/status/state"
)

// 1.27-1.31 keep the allocated requests as a ResourceList.
func setStatusAllocation(s state.State, pod, container string, requests v1.ResourceList) error {
	return s.SetContainerResourceAllocation(pod, container, requests)
}
