// Package v1alpha2 is k8s.io/api/resource/v1alpha2's ResourceHandle before StructuredData was
// added for v1.30 (kubernetes#123552: adding that field is what changed the checksummed text).
package v1alpha2

// ResourceHandle is v1alpha2.ResourceHandle of v1.29.
type ResourceHandle struct {
	DriverName string `json:"driverName,omitempty"`
	Data       string `json:"data,omitempty"`
}
