// quantity-diff prints, for each raw JSON token, what Go's resource.Quantity makes of it.
//
// Input (stdin): one token per line as lowercase hex (the first column of
// fixtures/quantity/go-differential.tsv; a tab and anything after it are ignored).
// Output (stdout): `<hex>\t<RehashDumpLine(token)>`, one line per input line, in order.
// Built and run by run.sh in GOPATH mode against Debian's sources; it needs no network.
package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	// Generated tokens reach a few hundred bytes; leave room for hand-picked long ones.
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	line := 0
	for in.Scan() {
		line++
		field := in.Text()
		if i := strings.IndexByte(field, '\t'); i >= 0 {
			field = field[:i]
		}
		token, err := hex.DecodeString(field)
		if err != nil {
			fmt.Fprintf(os.Stderr, "line %d: not hex: %v\n", line, err)
			os.Exit(2)
		}
		fmt.Fprintf(out, "%s\t%s\n", field, resource.RehashDumpLine(token))
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "reading stdin: %v\n", err)
		os.Exit(2)
	}
}
