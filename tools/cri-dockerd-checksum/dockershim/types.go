package dockershim

type Protocol string
type PortMapping struct {
	Protocol      *Protocol `json:"protocol,omitempty"`
	ContainerPort *int32    `json:"container_port,omitempty"`
	HostPort      *int32    `json:"host_port,omitempty"`
	HostIP        string    `json:"host_ip,omitempty"`
}
type CheckpointData struct {
	PortMappings []*PortMapping `json:"port_mappings,omitempty"`
	HostNetwork  bool           `json:"host_network,omitempty"`
}
