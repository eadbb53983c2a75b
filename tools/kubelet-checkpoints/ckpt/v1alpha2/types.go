// Package v1alpha2 transcribes the part of k8s.io/api/resource/v1alpha2 (v1.30.0,
// staging/src/k8s.io/api/resource/v1alpha2/types.go) that a v1.30 DRA checkpoint holds.
// StructuredResourceHandle is kept to its type name: the fixtures never set it, and the Rust
// engine reports a set one as undetermined.
package v1alpha2

// ResourceHandle is v1alpha2.ResourceHandle (v1.30.0).
type ResourceHandle struct {
	DriverName     string                    `json:"driverName,omitempty"`
	Data           string                    `json:"data,omitempty"`
	StructuredData *StructuredResourceHandle `json:"structuredData,omitempty"`
}

// StructuredResourceHandle stands for v1alpha2.StructuredResourceHandle (fields omitted, see above).
type StructuredResourceHandle struct {
	NodeName string `json:"nodeName,omitempty"`
}
