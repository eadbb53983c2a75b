package main

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
)

type memState interface {
	SetMachineState(state.NUMANodeMap)
	SetMemoryBlocks(podUID string, containerName string, blocks []state.Block)
}

func init() {
	writers["memory-static"] = func(dir string) error {
		s, err := newMemState(dir, "Static")
		if err != nil {
			return err
		}
		const gib = 1 << 30
		s.SetMachineState(state.NUMANodeMap{
			0: &state.NUMANodeState{
				NumberOfAssignments: 1,
				MemoryMap: map[v1.ResourceName]*state.MemoryTable{
					v1.ResourceMemory: {TotalMemSize: 16 * gib, SystemReserved: gib, Allocatable: 15 * gib, Reserved: gib, Free: 14 * gib},
				},
				Cells: []int{0},
			},
		})
		s.SetMemoryBlocks("11111111-2222-3333-4444-555555555555", "app",
			[]state.Block{{NUMAAffinity: []int{0}, Type: v1.ResourceMemory, Size: gib}})
		setPodMemoryBlocks(s, "66666666-7777-8888-9999-000000000000",
			[]state.Block{{NUMAAffinity: []int{0}, Type: v1.ResourceMemory, Size: 2 * gib}})
		return nil
	}
	writers["memory-none"] = func(dir string) error {
		_, err := newMemState(dir, "None")
		return err
	}
	readers["memory_manager_state"] = func(dir, policy string) error {
		_, err := newMemState(dir, policy)
		return err
	}
}
