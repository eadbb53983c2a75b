// Package v1 transcribes the k8s.io/api/core/v1 types a pod status checkpoint holds
// (ResourceName, ResourceList, PodResizeStatus: unchanged v1.27.0 .. v1.32.0) and the allocation
// checkpoints of v1.33+ (ResourceRequirements, ResourceClaim).
package v1

import "k8s.io/apimachinery/pkg/api/resource"

// ResourceName is v1.ResourceName.
type ResourceName string

// ResourceList is v1.ResourceList.
type ResourceList map[ResourceName]resource.Quantity

// PodResizeStatus is v1.PodResizeStatus.
type PodResizeStatus string

// ResourceClaim is v1.ResourceClaim (v1.31+: Name, Request).
type ResourceClaim struct {
	Name    string `json:"name"`
	Request string `json:"request,omitempty"`
}

// ResourceRequirements is v1.ResourceRequirements.
type ResourceRequirements struct {
	Limits   ResourceList    `json:"limits,omitempty"`
	Requests ResourceList    `json:"requests,omitempty"`
	Claims   []ResourceClaim `json:"claims,omitempty"`
}
