//go:build status && statusreq

package main

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/status/state"
)

// 1.32 keeps the allocated requests and limits (ResourceRequirements).
func setStatusAllocation(s state.State, pod, container string, requests v1.ResourceList) error {
	return s.SetContainerResourceAllocation(pod, container, v1.ResourceRequirements{Requests: requests, Limits: requests})
}
