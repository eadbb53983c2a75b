//go:build withoutresources

// Compiled in (run.sh: -tags withoutresources) only for the versions whose
// pkg/kubelet/container has HashContainerWithoutResources (1.27-1.30).
package main

import kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"

func init() { hashWithoutResources = kubecontainer.HashContainerWithoutResources }
