// Package v1 transcribes the k8s.io/api/core/v1 types a pod status checkpoint holds
// (ResourceName, ResourceList, PodResizeStatus: unchanged v1.27.0 .. v1.32.0).
package v1

import "k8s.io/apimachinery/pkg/api/resource"

// ResourceName is v1.ResourceName.
type ResourceName string

// ResourceList is v1.ResourceList.
type ResourceList map[ResourceName]resource.Quantity

// PodResizeStatus is v1.PodResizeStatus.
type PodResizeStatus string
