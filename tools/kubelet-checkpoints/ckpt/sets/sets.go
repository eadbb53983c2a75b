// Package sets mirrors k8s.io/apimachinery/pkg/util/sets (Set[T] since v1.26): only the type
// names matter here, because go-spew prints them into the checksummed text.
package sets

// Empty is sets.Empty.
type Empty struct{}

// Set is sets.Set[T].
type Set[T comparable] map[T]Empty
