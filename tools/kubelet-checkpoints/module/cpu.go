package main

import (
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/utils/cpuset"
)

// cpuState is what every version's CPU manager state offers the writers.
type cpuState interface {
	SetDefaultCPUSet(cpuset.CPUSet)
	SetCPUSet(podUID string, containerName string, cset cpuset.CPUSet)
}

func init() {
	writers["cpu-static"] = func(dir string) error {
		s, err := newCPUState(dir, "static")
		if err != nil {
			return err
		}
		s.SetDefaultCPUSet(cpuset.New(0, 1, 6, 7))
		s.SetCPUSet("11111111-2222-3333-4444-555555555555", "app", cpuset.New(2, 3))
		s.SetCPUSet("11111111-2222-3333-4444-555555555555", "sidecar", cpuset.New(4, 5))
		setPodCPUSet(s, "66666666-7777-8888-9999-000000000000", cpuset.New(8, 9))
		return nil
	}
	writers["cpu-none"] = func(dir string) error {
		_, err := newCPUState(dir, "none")
		return err
	}
	readers["cpu_manager_state"] = func(dir, policy string) error {
		_, err := newCPUState(dir, policy)
		return err
	}
}

var noContainers = containermap.NewContainerMap()
