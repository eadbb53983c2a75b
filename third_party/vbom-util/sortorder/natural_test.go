// Copyright 2026 The kubelet-rehash authors.
// SPDX-License-Identifier: Apache-2.0

package sortorder

import (
	"fmt"
	"math/big"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"
)

func sorted(in ...string) []string {
	out := append([]string(nil), in...)
	sort.SliceStable(out, func(i, j int) bool { return NaturalLess(out[i], out[j]) })
	return out
}

func TestPairs(t *testing.T) {
	for _, c := range []struct {
		a, b string
		why  string
	}{
		{"abc2", "abc12", "numbers by value"},
		{"pod-2", "pod-10", "a name's number by value"},
		{"web-9-x", "web-10-a", "the number decides before the text after it"},
		{"a1b", "a10", "by value, where bytewise 'b' > '0' would say otherwise"},
		{"x18446744073709551615", "x18446744073709551616", "past uint64: no overflow"},
		{"x99999999999999999999", "x100000000000000000000", "more digits is bigger"},
		{"2", "02", "the same value: fewer leading zeros first"},
		{"0", "00", "zero with fewer zeros first"},
		{"a2c", "a02b", "leading zeros decide at the number, not by what follows"},
		{"a02", "a3", "leading zeros do not count toward the value"},
		{"", "a", "the empty string first"},
		{"", "0", "the empty string first, before a number too"},
		{"a", "a1", "a prefix first"},
		{"abc", "abcd", "a prefix first"},
		{"a", "b", "text bytewise"},
		{"B", "a", "text bytewise: upper case before lower case"},
		{"a1", "a-1", "a number before more text: the text runs \"a\" < \"a-\" (bytewise '-' < '1' does not decide)"},
		{"x1", "x 1", "a number before more text, even a space"},
		{"20", "..0", "a number before text, at the start too"},
		{"445-a00", ".0-b15", "a number before text, at the start too"},
		{"a1", "aa", "a number before more text"},
		{"a9", "a:", "a number before more text"},
		{"a-b", "a-c", "text bytewise"},
		{"a-", "a-b", "text: a prefix first"},
		{"a1-", "a1b", "text after a number, bytewise"},
		{"a1", "a1b", "the string that ends first"},
		{"a01", "a01b", "the string that ends first"},
		{"z", "\u00e9", "bytewise, not by rune or locale: UTF-8 0xc3 > 'z'"},
		{"a10", "a\u0663", "only ASCII digits are numbers: as a number three would come first; as text 0xd9 > '1'"},
		{"1.9.0", "1.10.0", "versions, part by part"},
		{"v1.16.15", "v1.17.0", "versions"},
	} {
		if !NaturalLess(c.a, c.b) {
			t.Errorf("NaturalLess(%q, %q) = false, want true (%s)", c.a, c.b, c.why)
		}
		if NaturalLess(c.b, c.a) {
			t.Errorf("NaturalLess(%q, %q) = true, want false (%s)", c.b, c.a, c.why)
		}
	}
	for _, s := range []string{"", "a", "0", "007", "a01b", "\u00e9"} {
		if NaturalLess(s, s) {
			t.Errorf("NaturalLess(%q, %q) = true: a string is not less than itself", s, s)
		}
	}
}

// The cases Kubernetes' own tests of the callers give NaturalLess: sorter_test.go of
// pkg/kubectl/cmd/get (1.15, 1.16) and k8s.io/kubectl/pkg/cmd/get (1.17-1.19).
func TestKubectlSorterCases(t *testing.T) {
	// TestSortingPrinter: "in-order-already", "reverse-order", "v1.List in order",
	// "v1.List in reverse", all by {.metadata.name}
	for _, in := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "b", "a"}} {
		if got := strings.Join(sorted(in...), ","); got != "a,b,c" {
			t.Errorf("names %v sorted: %s, want a,b,c", in, got)
		}
	}
	// TestRuntimeSortLess: items b, c, a; Less(0, 1) true, Less(1, 2) false
	if !NaturalLess("b", "c") || NaturalLess("c", "a") {
		t.Errorf("TestRuntimeSortLess: want b < c and not c < a")
	}
	// "random-order-timestamp" through the table sorter: the rows are unstructured, so
	// {.metadata.creationTimestamp} is metav1.Time's JSON, RFC 3339 in UTC, and is compared
	// as a string (metav1.Unix(300, 0), (100, 0), (200, 0))
	ts := func(sec int64) string { return time.Unix(sec, 0).UTC().Format(time.RFC3339) }
	got := strings.Join(sorted(ts(300), ts(100), ts(200)), ",")
	if want := strings.Join([]string{ts(100), ts(200), ts(300)}, ","); got != want {
		t.Errorf("timestamps sorted: %s, want %s", got, want)
	}
	// and any two RFC 3339 times of the same width, in time order
	r := rand.New(rand.NewSource(1))
	for n := 0; n < 2000; n++ {
		x, y := r.Int63n(1<<34), r.Int63n(1<<34)
		if NaturalLess(ts(x), ts(y)) != (x < y) {
			t.Fatalf("NaturalLess(%s, %s) != %d < %d", ts(x), ts(y), x, y)
		}
	}
}

func TestNumbersByValue(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	num := func() *big.Int { return new(big.Int).Rand(r, new(big.Int).Lsh(big.NewInt(1), uint(r.Intn(90)))) }
	for n := 0; n < 5000; n++ {
		x, y := num(), num()
		a, b := fmt.Sprintf("node-%s.x", x), fmt.Sprintf("node-%s.x", y)
		if NaturalLess(a, b) != (x.Cmp(y) < 0) {
			t.Fatalf("NaturalLess(%s, %s) = %v", a, b, NaturalLess(a, b))
		}
	}
}

// sort.Sort needs a strict weak order; this one is total: of two different strings exactly
// one is less, and it is transitive
func TestTotalOrder(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	const alphabet = "0019a-b"
	var set []string
	for n := 0; n < 80; n++ {
		var s strings.Builder
		for k := r.Intn(6); k > 0; k-- {
			s.WriteByte(alphabet[r.Intn(len(alphabet))])
		}
		set = append(set, s.String())
	}
	for _, a := range set {
		for _, b := range set {
			ab, ba := NaturalLess(a, b), NaturalLess(b, a)
			if (a == b && (ab || ba)) || (a != b && ab == ba) {
				t.Fatalf("%q, %q: less %v, greater %v", a, b, ab, ba)
			}
			for _, c := range set {
				if ab && NaturalLess(b, c) && !NaturalLess(a, c) {
					t.Fatalf("%q < %q < %q but not %q < %q", a, b, c, a, c)
				}
			}
		}
	}
}
