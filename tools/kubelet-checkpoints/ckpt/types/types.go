// Package types mirrors k8s.io/apimachinery/pkg/types.UID.
package types

// UID is types.UID.
type UID string
