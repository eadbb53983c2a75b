// bbolt-check runs Go bbolt's own consistency check (tx.Check) on bolt files, so the tests can
// prove that every meta.db our Rust writer produced is one bbolt itself accepts, independent of
// our own reimplementation of those rules.
//
//	bbolt-check FILE...
//
// Each file is opened read-only (shared flock, as containerd's readers do), checked, and then
// walked through bbolt's cursor API: every bucket, every key. For each file it prints either
//
//	ok FILE txid=N pages=P keys=K buckets=B digest=HEX
//
// or one "error FILE: ..." line per problem.
//
// The digest is FNV-1a 64 over every entry bbolt read, depth first in key order: the bucket
// path (u32 count, then u32 length + bytes per key), the key (u32 length + bytes), then 'b' +
// u64 sequence for a nested bucket or 'v' + u32 length + bytes for a value, integers
// little-endian. boltfile::testing::dump_digest computes the same over our reader's dump, so
// the tests compare what the two readers see, not only that both are content.
//
// Exit status: 0 when every file passes; 1 when tx.Check reported a problem or the walk
// failed; 2 on usage errors or a file bbolt cannot open. bbolt panics on some damaged files (it
// trusts page ids); Go exits 2 then as well, with the panic on stderr: a failure too.
package main

import (
	"encoding/binary"
	"fmt"
	"hash"
	"hash/fnv"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

type walker struct {
	keys, buckets int
	h             hash.Hash64
}

func (w *walker) put(b []byte) {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(b)))
	w.h.Write(n[:])
	w.h.Write(b)
}

// walk visits every key of b and of its nested buckets, a nested bucket's key before its
// content (the order of the Rust side's dump).
func (w *walker) walk(b *bolt.Bucket, path [][]byte) error {
	if len(path) > 64 {
		return fmt.Errorf("buckets nested deeper than 64")
	}
	return b.ForEach(func(k, v []byte) error {
		w.keys++
		var n [8]byte
		binary.LittleEndian.PutUint32(n[:4], uint32(len(path)))
		w.h.Write(n[:4])
		for _, p := range path {
			w.put(p)
		}
		w.put(k)
		var child *bolt.Bucket
		if v == nil {
			child = b.Bucket(k)
		}
		if child == nil {
			w.h.Write([]byte{'v'})
			w.put(v)
			return nil
		}
		w.buckets++
		w.h.Write([]byte{'b'})
		binary.LittleEndian.PutUint64(n[:], child.Sequence())
		w.h.Write(n[:])
		sub := append(append([][]byte{}, path...), append([]byte{}, k...))
		return w.walk(child, sub)
	})
}

func checkFile(path string) int {
	db, err := bolt.Open(path, 0, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		fmt.Printf("error %s: open: %v\n", path, err)
		return 2
	}
	defer db.Close()
	status := 0
	err = db.View(func(tx *bolt.Tx) error {
		for e := range tx.Check() {
			fmt.Printf("error %s: %v\n", path, e)
			status = 1
		}
		if status != 0 {
			return nil
		}
		w := walker{h: fnv.New64a()}
		if err := w.walk(tx.Cursor().Bucket(), nil); err != nil {
			return err
		}
		fmt.Printf("ok %s txid=%d pages=%d keys=%d buckets=%d digest=%016x\n",
			path, tx.ID(), tx.Size()/int64(db.Info().PageSize), w.keys, w.buckets, w.h.Sum64())
		return nil
	})
	if err != nil {
		fmt.Printf("error %s: walk: %v\n", path, err)
		status = 1
	}
	return status
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bbolt-check FILE...")
		os.Exit(2)
	}
	worst := 0
	for _, p := range os.Args[1:] {
		if s := checkFile(p); s > worst {
			worst = s
		}
	}
	os.Exit(worst)
}
