// Package checksum transcribes pkg/kubelet/checkpointmanager/checksum/checksum.go (identical
// from v1.10 to at least v1.32; v1.20.2 read in Debian's source package) and the hasher of
// pkg/util/hash (later k8s.io/apimachinery/pkg/util/dump.ForHash, same go-spew output for %#v).
package checksum

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/davecgh/go-spew/spew"
)

// Checksum is checksum.Checksum.
type Checksum uint64

// ErrCorruptCheckpoint is errors.ErrCorruptCheckpoint's text.
var ErrCorruptCheckpoint = errors.New("checkpoint is corrupted")

// Printer is DeepHashObject's go-spew configuration.
var Printer = spew.ConfigState{Indent: " ", SortKeys: true, DisableMethods: true, SpewKeys: true}

// DeepHashObject is pkg/util/hash.DeepHashObject.
func DeepHashObject(hasher hash.Hash, objectToWrite interface{}) {
	hasher.Reset()
	Printer.Fprintf(hasher, "%#v", objectToWrite)
}

// New is checksum.New.
func New(data interface{}) Checksum {
	h := fnv.New32a()
	DeepHashObject(h, data)
	return Checksum(h.Sum32())
}

// Verify is Checksum.Verify.
func (cs Checksum) Verify(data interface{}) error {
	if cs != New(data) {
		return ErrCorruptCheckpoint
	}
	return nil
}

// OfText is the FNV-32a of a text printed with "%v" (the legacy-name paths of the CPU and
// device managers hash a rewritten spew string that way).
func OfText(text string) Checksum {
	h := fnv.New32a()
	Printer.Fprintf(h, "%v", text)
	return Checksum(h.Sum32())
}

// Text is the %#v text New hashes (for the fixtures' explanation).
func Text(data interface{}) string { return fmt.Sprint(Printer.Sprintf("%#v", data)) }
