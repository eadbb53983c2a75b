// This file is ours, not apimachinery's: run.sh places it next to the unmodified
// pkg/api/resource sources of Debian's kubernetes source package, so it can read the
// unexported fields (i, d, s) that decide how a Quantity is spewed into the struct-era hash.

package resource

import "fmt"

// RehashDumpLine decodes one raw JSON token into a fresh Quantity exactly as encoding/json
// would (UnmarshalJSON) and describes the result in the format of
// fixtures/quantity/go-differential.tsv (after the tab).
func RehashDumpLine(token []byte) string {
	var q Quantity
	if err := q.UnmarshalJSON(token); err != nil {
		return "ERR " + err.Error()
	}
	d := "nil"
	if q.d.Dec != nil {
		unscaled := q.d.Dec.UnscaledBig()
		words := "nil"
		// go-spew tells a nil slice from an empty one, so the dump keeps that difference:
		// Bits() of a big.Int that was never given a value is nil.
		if bits := unscaled.Bits(); bits != nil {
			words = fmt.Sprint(bits)
		}
		d = fmt.Sprintf("%t,%s,%d", unscaled.Sign() < 0, words, q.d.Dec.Scale())
	}
	j, err := q.MarshalJSON()
	if err != nil {
		return "MARSHAL-ERR " + err.Error()
	}
	// String() returns the cached s when there is one; clearing it on a copy shows the
	// canonical form the kubelet's JSON encoder falls back to.
	canonical := q
	canonical.s = ""
	return fmt.Sprintf("i=%d,%d d=%s s=%q f=%s j=%s str=%s",
		q.i.value, q.i.scale, d, q.s, q.Format, j, canonical.String())
}
