//go:build !cpupod

package main

import "k8s.io/utils/cpuset"

// setPodCPUSet: versions before 1.36 have no pod-level CPU sets.
func setPodCPUSet(cpuState, string, cpuset.CPUSet) {}
