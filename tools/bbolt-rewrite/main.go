// bbolt-rewrite is the reference for scripts/bench-node.sh: Go bbolt rewriting the same
// container hashes in the same meta.db as `kubelet-rehash patch`, the way containerd >= 1.7
// opens the file (NoFreelistSync), in one db.Update transaction with bbolt's own fsyncs.
//
//	bbolt-rewrite META.DB HASHES
//
// HASHES has one line per container: `ID HASH [HASH_WITHOUT_RESOURCES]`. For each, the
// extension io.cri-containerd.container.metadata of v1/<ns>/containers/ID is read, its
// protobuf Any split by hand (type_url, value), the annotation values replaced by splicing the
// JSON bytes (no decode and re-encode: the cheapest correct rewrite, so the reference is not
// slowed by work a careful tool would skip), the Any re-encoded and Put.
//
// Prints one JSON line to stdout: {"open_ms":..,"tx_ms":..,"close_ms":..,"total_ms":..,
// "rewritten":N,"size_before":B,"size_after":A}. Exit 1 on any error.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

const (
	ext       = "io.cri-containerd.container.metadata"
	hashKey   = "io.kubernetes.container.hash"
	hwrKey    = "io.kubernetes.container.hashWithoutResources"
	fieldURL  = 0x0a
	fieldData = 0x12
)

type target struct{ hash, hwr string }

func fail(f string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "bbolt-rewrite: "+f+"\n", a...)
	os.Exit(1)
}

// field reads one length-delimited protobuf field with tag `tag` at b[0:].
func field(b []byte, tag byte) (val, rest []byte, err error) {
	if len(b) == 0 || b[0] != tag {
		return nil, nil, fmt.Errorf("expected field tag %#x", tag)
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || uint64(len(b)-1-k) < n {
		return nil, nil, fmt.Errorf("bad length")
	}
	s := 1 + k
	return b[s : s+int(n)], b[s+int(n):], nil
}

func putField(out []byte, tag byte, v []byte) []byte {
	out = append(out, tag)
	out = binary.AppendUvarint(out, uint64(len(v)))
	return append(out, v...)
}

// splice replaces the string value of `"key":"..."` in doc.
func splice(doc []byte, key, val string) ([]byte, error) {
	pat := []byte(`"` + key + `":"`)
	i := bytes.Index(doc, pat)
	if i < 0 {
		return nil, fmt.Errorf("no %s", key)
	}
	s := i + len(pat)
	e := bytes.IndexByte(doc[s:], '"')
	if e < 0 {
		return nil, fmt.Errorf("unterminated %s", key)
	}
	out := make([]byte, 0, len(doc)+len(val))
	out = append(out, doc[:s]...)
	out = append(out, val...)
	return append(out, doc[s+e:]...), nil
}

func rewrite(raw []byte, t target) ([]byte, error) {
	url, rest, err := field(raw, fieldURL)
	if err != nil {
		return nil, err
	}
	doc, rest, err := field(rest, fieldData)
	if err != nil || len(rest) != 0 {
		return nil, fmt.Errorf("not a two-field Any: %v", err)
	}
	if doc, err = splice(doc, hashKey, t.hash); err != nil {
		return nil, err
	}
	if t.hwr != "" {
		if doc, err = splice(doc, hwrKey, t.hwr); err != nil {
			return nil, err
		}
	}
	out := make([]byte, 0, len(raw)+16)
	out = putField(out, fieldURL, url)
	return putField(out, fieldData, doc), nil
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: bbolt-rewrite META.DB HASHES")
		os.Exit(2)
	}
	targets := map[string]target{}
	hf, err := os.Open(os.Args[2])
	if err != nil {
		fail("%v", err)
	}
	sc := bufio.NewScanner(hf)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch len(f) {
		case 2:
			targets[f[0]] = target{hash: f[1]}
		case 3:
			targets[f[0]] = target{hash: f[1], hwr: f[2]}
		case 0:
		default:
			fail("bad line %q", sc.Text())
		}
	}
	hf.Close()
	st, err := os.Stat(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	t0 := time.Now()
	db, err := bolt.Open(os.Args[1], 0o600, &bolt.Options{Timeout: time.Second, NoFreelistSync: true})
	if err != nil {
		fail("open: %v", err)
	}
	t1 := time.Now()
	n := 0
	err = db.Update(func(tx *bolt.Tx) error {
		v1 := tx.Bucket([]byte("v1"))
		if v1 == nil {
			return fmt.Errorf("no bucket v1")
		}
		return v1.ForEach(func(ns, v []byte) error {
			if v != nil {
				return nil
			}
			ctrs := v1.Bucket(ns).Bucket([]byte("containers"))
			if ctrs == nil {
				return nil
			}
			for id, t := range targets {
				c := ctrs.Bucket([]byte(id))
				if c == nil {
					continue
				}
				exts := c.Bucket([]byte("extensions"))
				if exts == nil {
					return fmt.Errorf("%s: no extensions", id)
				}
				nv, err := rewrite(exts.Get([]byte(ext)), t)
				if err != nil {
					return fmt.Errorf("%s: %v", id, err)
				}
				if err := exts.Put([]byte(ext), nv); err != nil {
					return err
				}
				n++
			}
			return nil
		})
	})
	if err != nil {
		fail("update: %v", err)
	}
	t2 := time.Now()
	if err := db.Close(); err != nil {
		fail("close: %v", err)
	}
	t3 := time.Now()
	if n != len(targets) {
		fail("rewrote %d of %d containers", n, len(targets))
	}
	after, err := os.Stat(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	fmt.Printf("{\"open_ms\":%.1f,\"tx_ms\":%.1f,\"close_ms\":%.1f,\"total_ms\":%.1f,\"rewritten\":%d,\"size_before\":%d,\"size_after\":%d}\n",
		ms(t1.Sub(t0)), ms(t2.Sub(t1)), ms(t3.Sub(t2)), ms(t3.Sub(t0)), n, st.Size(), after.Size())
}
