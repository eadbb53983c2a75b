package main

import (
	"fmt"
	"hash/fnv"
	"os"

	"github.com/Mirantis/cri-dockerd/config"
	"github.com/Mirantis/cri-dockerd/core"
	"github.com/Mirantis/cri-dockerd/spewcheck/dockershim"
	"github.com/davecgh/go-spew/spew"
)

func sum(v interface{}) (string, uint32) {
	p := spew.ConfigState{Indent: " ", SortKeys: true, DisableMethods: true, SpewKeys: true}
	s := p.Sprintf("%#v", v)
	h := fnv.New32a()
	h.Write([]byte(s))
	return s, h.Sum32()
}

func main() {
	tcp := config.Protocol("TCP")
	cp, hp := int32(80), int32(8080)
	udp := config.Protocol("UDP")
	cp2, hp2 := int32(53), int32(0)
	for _, d := range []core.CheckpointData{{}, {HostNetwork: true}, {PortMappings: []*config.PortMapping{{Protocol: &tcp, ContainerPort: &cp, HostPort: &hp, HostIP: "1.2.3.4"}}}, {HostNetwork: true, PortMappings: []*config.PortMapping{{Protocol: &tcp, ContainerPort: &cp, HostPort: &hp}, {Protocol: &udp, ContainerPort: &cp2, HostPort: &hp2}, {ContainerPort: &cp}}}} {
		s, h := sum(d)
		fmt.Fprintf(os.Stdout, "core %d %q\n", h, s)
	}
	dtcp := dockershim.Protocol("TCP")
	dudp := dockershim.Protocol("UDP")
	cp2, hp2 = int32(53), int32(0)
	for _, d := range []dockershim.CheckpointData{{}, {HostNetwork: true}, {PortMappings: []*dockershim.PortMapping{{Protocol: &dtcp, ContainerPort: &cp, HostPort: &hp, HostIP: "1.2.3.4"}}}, {HostNetwork: true, PortMappings: []*dockershim.PortMapping{{Protocol: &dtcp, ContainerPort: &cp, HostPort: &hp}, {Protocol: &dudp, ContainerPort: &cp2, HostPort: &hp2}, {ContainerPort: &cp}}}} {
		s, h := sum(d)
		fmt.Fprintf(os.Stdout, "dockershim %d %q\n", h, s)
	}
}
