// Copyright 2026 The kubelet-rehash authors.
// SPDX-License-Identifier: Apache-2.0

// Package sortorder is the one part of vbom.ml/util that Kubernetes 1.15-1.19 use:
// NaturalLess, with which `kubectl get --sort-by` orders string fields
// (pkg/kubectl/cmd/get/sorter.go's isLess, k8s.io/kubectl/pkg/cmd/get/sorter.go from 1.17).
// Written from that behaviour (see natural_test.go), not from the original's source.
package sortorder

import "strings"

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// NaturalLess reports whether a sorts before b in natural order, so that "pod-2" < "pod-10".
//
// Each string is read as alternating runs: text (no ASCII digit, maybe empty), then a number
// (ASCII digits), then text again, and so on. The runs are compared in turn, text with text
// and number with number:
//   - text as Go compares strings, byte by byte, a prefix first; so where one string has a
//     number and the other more text, the number comes first ("a1" < "a-1", "a1" < "ab");
//   - numbers by value, of any length (no overflow); two of the same value but with a
//     different number of leading zeros are decided there, fewer zeros first ("2" < "02");
//   - a string that ends first sorts first.
//
// Only ASCII digits are digits.
func NaturalLess(a, b string) bool {
	for {
		ta, ra := run(a, false)
		tb, rb := run(b, false)
		if ta != tb {
			return ta < tb
		}
		na, ra := run(ra, true)
		nb, rb := run(rb, true)
		if na != nb {
			return numberLess(na, nb)
		}
		if ra == "" || rb == "" {
			return rb != ""
		}
		a, b = ra, rb
	}
}

// run splits s after its leading run of digits (digits true) or of anything else
func run(s string, digits bool) (string, string) {
	i := 0
	for i < len(s) && isDigit(s[i]) == digits {
		i++
	}
	return s[:i], s[i:]
}

// numberLess orders two different runs of digits (either may be empty: that string ended):
// by value, then fewer leading zeros first
func numberLess(a, b string) bool {
	va, vb := strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(va) != len(vb) {
		return len(va) < len(vb) // more significant digits: bigger
	}
	if va != vb {
		return va < vb // as many digits: digit by digit
	}
	return len(a) < len(b) // the same value: fewer zeros (or none: the string ended)
}
